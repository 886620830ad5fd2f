"""Delivery of the notification outbox over WebSocket, with TDengine's failure policies.

Owns sending (websocket-client; ``ws://`` and ``wss://``, certificates verified unless told
otherwise), what counts as delivered (every message written and the receiver's answer to our
close frame read — a receiver that closes first or drops the connection has not taken the
batch, which is sent again with the same triggerIds), the order (per URL in outbox order; a
notification waiting for its retry holds back the ones behind it), and the policies: by
default bounded attempts with back-off, then the rest are dropped, logged and counted on the
stream; with ``ON_FAILURE_PAUSE`` nothing is dropped, the stream is paused (no new runs) and
resumed once its outbox is empty. Must not compute or write tables.
"""

from __future__ import annotations

import logging
import select
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import websocket

from ..faults import failpoint
from ..storage.catalog import Notification
from ..storage.registry import StreamDefinition, load_stream
from ..storage.warehouse import Warehouse
from .messages import DEFAULT_MESSAGE_BYTES, pack

log = logging.getLogger("dagster_tdstream.notify")

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_FRAME_BYTES = 256 * 1024
MAX_BACKOFF_MS = 60_000


class DeliveryError(Exception):
    """A batch did not reach its receiver; the message says why."""


@dataclass(frozen=True)
class DeliverySettings:
    message_bytes: int = DEFAULT_MESSAGE_BYTES
    timeout_seconds: float = 10.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS  # default policy: then the notifications are dropped
    ca_file: str | None = None  # wss:// trust store; the system's by default
    verify_tls: bool = True
    backoff_ms: int = 1000  # the first retry's delay; it doubles per attempt, up to a minute
    frame_bytes: int = DEFAULT_FRAME_BYTES  # TDengine's streamNotifyFrameSize: larger messages are fragmented


@dataclass
class DeliveryReport:
    sent: int = 0
    failed: int = 0
    dropped: int = 0
    errors: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"{self.sent} notification(s) sent"]
        if self.failed:
            parts.append(f"{self.failed} to retry")
        if self.dropped:
            parts.append(f"{self.dropped} dropped")
        if self.paused:
            parts.append("paused " + ", ".join(self.paused))
        if self.resumed:
            parts.append("resumed " + ", ".join(self.resumed))
        return "; ".join(parts) + "".join(f"\n{e}" for e in self.errors)


Sender = Callable[[str, list[str], DeliverySettings], None]


def deliver(
    warehouse: Warehouse,
    settings: DeliverySettings | None = None,
    *,
    streams: Iterable[str] | None = None,
    now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    send: Sender | None = None,
) -> DeliveryReport:
    """Send what is due in the outbox (of ``streams``, or all) and apply the failure policy."""
    settings = settings or DeliverySettings()
    send = send or send_messages
    report = DeliveryReport()
    pending = warehouse.catalog.due_notifications(now_ms(), streams)
    by_url: dict[str, list[Notification]] = {}
    for n in pending:
        by_url.setdefault(n.url, []).append(n)
    definitions: dict[str, StreamDefinition | None] = {}
    for url, queued in by_url.items():
        batch = []
        for n in queued:
            if not n.due:
                break  # its back-off holds back everything behind it: order is kept
            batch.append(n)
        now = now_ms()
        lease_end = now + int(settings.timeout_seconds * 1000) * (2 + len(batch)) + 60_000
        held = warehouse.catalog.claim_notifications([n.id for n in batch if n.id is not None], now, lease_end)
        batch = batch[: len(held)]
        if not batch:
            continue
        names = {n.stream: _stream(warehouse, definitions, n.stream) for n in batch}
        messages = pack([(_short(n.stream), n.event) for n in batch], settings.message_bytes)
        try:
            send(url, [m.text for m in messages], settings)
            failpoint("notification-sent")
        except DeliveryError as exc:
            _failed(warehouse, batch, names, str(exc), settings, now_ms(), report)
            continue
        warehouse.catalog.mark_notifications([n.id for n in batch if n.id is not None], "sent")
        report.sent += len(batch)
    for key, stream in definitions.items():
        if stream is not None and stream.info.paused and not warehouse.catalog.count_notifications(key, "pending"):
            warehouse.catalog.set_stream_paused(key, None)
            report.resumed.append(key)
            log.info("stream %s resumed: its notifications were delivered", key)
    return report


def _stream(warehouse: Warehouse, cache: dict[str, StreamDefinition | None], key: str) -> StreamDefinition | None:
    if key not in cache:
        try:
            cache[key] = load_stream(warehouse, key)
        except Exception:  # dropped meanwhile: its outbox rows went with it
            cache[key] = None
    return cache[key]


def _short(key: str) -> str:
    return key.partition(".")[2]


def pauses_on_failure(stream: StreamDefinition | None) -> bool:
    note = stream.stmt.notification if stream is not None else None
    return note is not None and "ON_FAILURE_PAUSE" in note.options


def _failed(
    warehouse: Warehouse,
    batch: list[Notification],
    streams: dict[str, StreamDefinition | None],
    error: str,
    settings: DeliverySettings,
    now: int,
    report: DeliveryReport,
) -> None:
    report.errors.append(error)
    retry, drop = [], []
    for n in batch:
        if pauses_on_failure(streams[n.stream]) or n.attempts + 1 < settings.max_attempts:
            retry.append(n)
        else:
            drop.append(n)
    for n in retry:
        backoff = min(MAX_BACKOFF_MS, settings.backoff_ms * 2**n.attempts)
        ids = [n.id] if n.id is not None else []
        warehouse.catalog.mark_notifications(ids, "pending", error=error, retry_at=now + backoff)
    if drop:
        warehouse.catalog.mark_notifications([n.id for n in drop if n.id is not None], "dropped", error=error)
        log.warning("dropped %d notification(s) after %d attempts: %s", len(drop), settings.max_attempts, error)
    report.failed += len(retry)
    report.dropped += len(drop)
    for key, stream in streams.items():
        if pauses_on_failure(stream) and stream is not None:
            warehouse.catalog.set_stream_paused(key, f"notification delivery failed (retrying): {error}")
            if key not in report.paused:
                report.paused.append(key)


def send_messages(url: str, messages: list[str], settings: DeliverySettings) -> None:
    """Open one connection to ``url``, send every message, and close with a handshake; raise
    DeliveryError unless all of it went through."""
    scheme = urlparse(url).scheme.lower()
    if scheme not in ("ws", "wss"):
        raise DeliveryError(f"cannot deliver to {url}: notifications go over WebSocket only (ws:// or wss://)")
    options: dict[str, Any] = {}
    if scheme == "wss":
        options["sslopt"] = (
            {"cert_reqs": ssl.CERT_REQUIRED, **({"ca_certs": settings.ca_file} if settings.ca_file else {})}
            if settings.verify_tls
            else {"cert_reqs": ssl.CERT_NONE, "check_hostname": False}
        )
    try:
        connection = websocket.create_connection(url, timeout=settings.timeout_seconds, **options)
    except (OSError, websocket.WebSocketException, ValueError) as exc:
        raise DeliveryError(f"cannot connect to {url}: {_reason(exc)}") from None
    try:
        for text in messages:
            if _closed_by_peer(connection):
                raise DeliveryError(f"{url} closed the connection before every message was sent")
            _send_framed(connection, text.encode(), settings.frame_bytes)
        connection.send_close(websocket.STATUS_NORMAL)
        opcode, data = connection.recv_data(control_frame=True)
        if opcode != websocket.ABNF.OPCODE_CLOSE:
            raise DeliveryError(f"{url} did not answer the close handshake")
        code = int.from_bytes(data[:2], "big") if len(data) >= 2 else websocket.STATUS_NORMAL
        if code != websocket.STATUS_NORMAL:
            raise DeliveryError(f"{url} closed with status {code}")
    except (OSError, websocket.WebSocketException) as exc:
        raise DeliveryError(f"sending to {url} failed: {_reason(exc)}") from None
    finally:
        connection.shutdown()


def _send_framed(connection: websocket.WebSocket, payload: bytes, frame_bytes: int) -> None:
    """One text message in frames of at most ``frame_bytes``: a text frame, then continuation
    frames, the last one final (the receiver reassembles the message)."""
    chunks = [payload[i : i + frame_bytes] for i in range(0, len(payload), frame_bytes)] or [b""]
    for index, chunk in enumerate(chunks):
        opcode = websocket.ABNF.OPCODE_TEXT if index == 0 else websocket.ABNF.OPCODE_CONT
        connection.send_frame(websocket.ABNF.create_frame(chunk, opcode, fin=int(index == len(chunks) - 1)))


def _closed_by_peer(connection: websocket.WebSocket) -> bool:
    """Whether the receiver closed (it sends nothing else but pings) since we connected.
    Plain sockets only: on TLS a readable socket may hold session tickets, not frames; there
    the close handshake at the end tells."""
    sock = connection.sock
    if sock is None:
        return True
    if isinstance(sock, ssl.SSLSocket):
        return False
    while select.select([sock], [], [], 0)[0]:
        opcode, data = connection.recv_data(control_frame=True)
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            return True
        if opcode == websocket.ABNF.OPCODE_PING:
            connection.pong(data)
    return False


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__
