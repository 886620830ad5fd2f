"""A scenario's notification receiver and the checks on what it received: the WebSocket
logger TDengine's notify tests start (``{port}`` in a scenario's statements stands for its
port), and the rules those tests hold each message to.

Owns a loopback WebSocket server on a free port collecting every message, waiting until the
messages stop coming (bounded), the format checks (``messageId`` unique, ``timestamp``,
``streams[]`` of ``{streamName, events[]}``, the fields each event type carries, no event of
a type the stream did not subscribe to) and the windows a stream's events say were closed.
Runs no stream and no query.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

from websockets.sync.server import Server, ServerConnection, serve

from ..triggers.engine import WINDOW_CLOSE, WINDOW_INVALIDATION, WINDOW_OPEN

_EVENT_TYPES = {"window_open": WINDOW_OPEN, "window_close": WINDOW_CLOSE}
# the legacy (3.0–3.3.6) event names its window; 3.3.7's names its trigger
_LEGACY_WINDOW_TYPES = {"Time", "State", "Session", "Event", "Count"}
_COMMON = ("tableName", "eventType", "eventTime")


class NotificationFormatError(ValueError):
    """A message breaks a rule of TDengine's notification format."""


class NotificationLog:
    """Collects every text message sent to ``ws://127.0.0.1:{port}`` on any path."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._lock = threading.Lock()
        with socket.socket() as probe:  # a free port: the scenario's statements name it
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        # messages go up to TDengine's streamNotifyMessageSize (8 MB by default): no frame limit
        self._server: Server = serve(self._handle, "127.0.0.1", self.port, max_size=None)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _handle(self, connection: ServerConnection) -> None:
        for message in connection:
            with self._lock:
                self.messages.append(message if isinstance(message, str) else message.decode("utf-8", "replace"))

    def settled(self, quiet: float = 0.5, limit: float = 30.0) -> list[str]:
        """The messages once none has arrived for ``quiet`` seconds (at most ``limit``)."""
        deadline = time.monotonic() + limit
        seen = -1
        while time.monotonic() < deadline:
            with self._lock:
                count = len(self.messages)
            if count == seen:
                break
            seen = count
            time.sleep(quiet)
        with self._lock:
            return list(self.messages)

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)


def stream_events(
    messages: Iterable[str], stream: str, subscribed: Iterable[str], copies: int = 1
) -> list[dict[str, Any]]:
    """The events of ``stream`` in arrival order, every message checked against the format
    (``subscribed``: the stream's ON events, e.g. ``window_close``). ``copies``: how many of
    the stream's addresses are this logger (each gets every message: the same messageId
    arrives that many times, identical; any other repeat breaks its uniqueness)."""
    names = (e.strip("'\" ").lower() for e in subscribed)
    allowed = {_EVENT_TYPES[name] for name in names if name in _EVENT_TYPES}
    if WINDOW_CLOSE in allowed:
        allowed.add(WINDOW_INVALIDATION)  # TDengine sends it only to window_close subscribers
    seen: dict[str, tuple[str, int]] = {}  # messageId → (its text, times received)
    events = []
    for text in messages:
        message = json.loads(text)
        for key in ("messageId", "timestamp", "streams"):
            if key not in message:
                raise NotificationFormatError(f"a message has no {key}: {text[:200]}")
        first, times = seen.get(message["messageId"], (text, 0))
        if times >= copies or first != text:
            raise NotificationFormatError(f"messageId {message['messageId']} is not unique")
        seen[message["messageId"]] = (first, times + 1)
        if times:
            continue  # the copy another of the stream's addresses received
        for entry in message["streams"]:
            if "streamName" not in entry or "events" not in entry:
                raise NotificationFormatError(f"a streams entry lacks streamName or events: {json.dumps(entry)[:200]}")
            if entry["streamName"] != stream:
                continue
            for event in entry["events"]:
                _check_event(event, allowed, stream)
                events.append(event)
    return events


def _check_event(event: dict[str, Any], allowed: set[str], stream: str) -> None:
    legacy = "windowId" in event or "triggerId" not in event
    named = ("windowId", "windowType") if legacy else ("triggerId", "triggerType")
    missing = [key for key in (*_COMMON, *named) if key not in event]
    kind, window = event.get("eventType"), event.get(named[1])
    if kind not in allowed:
        raise NotificationFormatError(f"stream {stream} sent a {kind} event it did not subscribe to")
    if legacy and window not in _LEGACY_WINDOW_TYPES:
        raise NotificationFormatError(f"stream {stream} sent windowType {window!r}")
    needs = ["windowStart"] + (["windowEnd"] if kind != WINDOW_OPEN else [])
    if kind == WINDOW_OPEN:
        needs += {"State": ["prevState", "curState"], "Event": ["triggerCondition"]}.get(window, [])
    elif kind == WINDOW_CLOSE:
        needs += ["result", *{"State": ["curState", "nextState"], "Event": ["triggerCondition"]}.get(window, [])]
    missing += [key for key in needs if key not in event]
    if missing:
        raise NotificationFormatError(f"a {kind} event of stream {stream} lacks {', '.join(missing)}")


def closed_windows(events: Iterable[dict[str, Any]]) -> list[tuple[int, int, str]]:
    """(windowStart, windowEnd, tableName) of every window whose latest event closes it (a
    WINDOW_INVALIDATION after its close takes it back), by tableName and windowStart."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for event in events:
        if event["eventType"] in (WINDOW_CLOSE, WINDOW_INVALIDATION):
            latest[(event["tableName"], str(event.get("windowId", event.get("triggerId"))))] = event
    closed = [
        (int(e["windowStart"]), int(e["windowEnd"]), str(e["tableName"]))
        for e in latest.values()
        if e["eventType"] == WINDOW_CLOSE
    ]
    return sorted(closed, key=lambda w: (w[2], w[0]))
