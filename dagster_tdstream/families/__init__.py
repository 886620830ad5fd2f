"""Statement families beyond 3.3.7, executed for a session: each maps its statements onto the
one stream engine (the equivalent CREATE STREAM is built in ``sql/``) and owns only what
differs — what is created with it, how it is listed and stopped."""
