"""Notification messages: events packed into TDengine's message envelope.

Owns the envelope — ``messageId`` (unique), ``timestamp`` (ms), ``streams[]`` of
``{streamName, events[]}`` — and the packing rule: events in the order given, consecutive
events of one stream in one ``streams`` entry, several streams per message, each message at
most ``max_bytes`` of UTF-8 JSON (TDengine's ``streamNotifyMessageSize``). An event larger
than the bound alone travels alone. Sends nothing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MESSAGE_BYTES = 8 * 1024 * 1024  # TDengine's streamNotifyMessageSize default (8192 KB)


@dataclass(frozen=True)
class Message:
    text: str
    indices: tuple[int, ...]  # which of the packed events it carries


def pack(events: Sequence[tuple[str, str]], max_bytes: int = DEFAULT_MESSAGE_BYTES) -> list[Message]:
    """``events`` are (stream name, event JSON text) pairs."""
    messages: list[Message] = []
    current: list[tuple[int, str, str]] = []
    size = 0
    for index, (stream, event) in enumerate(events):
        cost = len(event.encode()) + 1
        if current and current[-1][1] != stream:
            cost += _entry_overhead(stream)
        if current and size + cost > max_bytes:
            messages.append(_envelope(current))
            current, size = [], 0
        if not current:
            size = _header_bytes() + _entry_overhead(stream) + len(event.encode())
        else:
            size += cost
        current.append((index, stream, event))
    if current:
        messages.append(_envelope(current))
    return messages


def _header_bytes() -> int:
    return len(json.dumps({"messageId": uuid.uuid4().hex, "timestamp": int(time.time() * 1000), "streams": []}))


def _entry_overhead(stream: str) -> int:
    return len(json.dumps({"streamName": stream, "events": []}).encode()) + 1


def _envelope(items: list[tuple[int, str, str]]) -> Message:
    entries: list[str] = []
    run: list[str] = []
    previous: str | None = None
    for _, stream, event in items:
        if previous is not None and stream != previous:
            entries.append(_entry(previous, run))
            run = []
        run.append(event)
        previous = stream
    assert previous is not None
    entries.append(_entry(previous, run))
    header = f'{{"messageId":{json.dumps(uuid.uuid4().hex)},"timestamp":{int(time.time() * 1000)},"streams":['
    return Message(header + ",".join(entries) + "]}", tuple(i for i, _, _ in items))


def _entry(stream: str, events: list[str]) -> str:
    return f'{{"streamName":{json.dumps(stream)},"events":[' + ",".join(events) + "]}"
