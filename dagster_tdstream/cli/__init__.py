"""The ``tdstream`` command line (click).

Owns argument parsing, output formats and turning errors into one line
(``error at line L, column C: …``; ``--debug`` adds the traceback). Commands call the
session and the testing harness; no SQL semantics live here.
"""
