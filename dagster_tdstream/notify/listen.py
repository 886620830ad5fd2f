"""A WebSocket receiver for notifications (``tdstream listen``): prints what streams send.

Owns a small server on one host and port that accepts any path, hands each text message to a
callback, and stops after a number of messages or seconds if asked. For watching a demo and
for tests; a production receiver is the user's own application.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve


def listen(
    host: str,
    port: int,
    on_message: Callable[[str], None],
    *,
    count: int | None = None,
    seconds: float | None = None,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """Serve until ``count`` messages arrived or ``seconds`` passed (or forever); return how
    many messages arrived."""
    received = 0
    lock = threading.Lock()

    def handler(connection: ServerConnection) -> None:
        nonlocal received
        try:
            for message in connection:
                text = message if isinstance(message, str) else message.decode("utf-8", "replace")
                with lock:
                    on_message(text)
                    received += 1
                    if count is not None and received >= count:
                        threading.Thread(target=server.shutdown, daemon=True).start()
        except ConnectionClosed:
            pass

    with serve(handler, host, port) as server:
        timer = threading.Timer(seconds, server.shutdown) if seconds is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        if on_ready is not None:
            on_ready()
        try:
            server.serve_forever()
        finally:
            if timer is not None:
                timer.cancel()
    return received
