"""The warehouse's writer: one long-lived process that group-commits the small writes of many
client processes, sent to it over a local socket (``tdstream writer start``).

Owns the socket protocol (client and server side) and the server's grouping. A request is
one physical table's checked rows, or one statement's text with its session's state, which
the committer thread prepares with the ``statements`` it was given
(``families/writer_insert.py``) or answers ``not_taken`` — the client then runs it, and a
rejected statement's error is the client's own. The committer takes every request queued
meanwhile and commits each table's requests as one write (one Delta commit, one WAL offset)
through ``Warehouse.commit_group``, under the table's write lock like any other writer, and
answers each request once the commit is durable: acknowledged means committed (the catalog's
record of the keys follows, and is caught up from the log after a crash). Each commit lists its
requests' ids in its commit info (``tdstream.group``), so a client whose writer died before
answering finds in the log whether its rows were committed and otherwise writes them itself.

Why a process: group commit among the clients themselves (``groupcommit.py``) pays per
statement for a staged file, its rename, the leader's reading it back and the waiter's
polling, and every client process keeps its own catalog and Delta state warm; 8 clients on 2
cores were CPU-bound near 380 statements/s. Here a request is one send and one blocking
receive. The socket is in Linux's abstract namespace, named after the warehouse's folder and
catalog: nothing to clean up after a crash, and a second writer of the same warehouse cannot
bind it; it has no file permissions, so the writer serves only processes of its own user.
Local warehouses only (the table locks are local). Must not decide how rows are written (the
warehouse does) nor parse SQL.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import socket
import struct
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.ipc as ipc

from ..errors import CatalogError, TDStreamError
from ..faults import failpoint
from .groupcommit import MAX_GROUP
from .intents import StagedTable

if TYPE_CHECKING:
    from .warehouse import Warehouse

WRITER_ENV = "TDSTREAM_WRITER"  # "off": never send writes to a writer, even one running
RETRY_SECONDS = 1.0  # a client without a writer looks for one again after this
LINGER_SECONDS = 0.010  # how long a group waits at most for the writing clients' next requests
WRITING_SECONDS = 0.05  # a client that wrote this recently is writing (its next request is near)
WRITER_MAX_BYTES = 64 << 20  # larger writes commit themselves (the frame's length is 32 bits, too)
REPLY_SECONDS = 120.0  # as long as a writer waits for a table's lock (writelock.WAIT_SECONDS)
_HEADER = struct.Struct("!II")  # the JSON part's length, the Arrow part's length


# a statement sent as text, with its session's state (``WriterClient.statement``) → the one
# physical table's rows it writes and the rows it affects, or None: the client runs it itself
Statements = Callable[[dict[str, Any]], "tuple[StagedTable, pa.Table, int] | None"]


class WriterLost(Exception):
    """The writer went away after a request was sent and before it answered."""


def address(root: Path, metadata_url: str) -> bytes:
    """The abstract socket name of the writer of the warehouse at ``root`` with this catalog."""
    digest = hashlib.sha256(f"{root.resolve()}\0{metadata_url}".encode()).hexdigest()[:32]
    return f"\0tdstream-writer-{digest}".encode()


def _send(sock: socket.socket, header: dict[str, Any], body: bytes = b"") -> None:
    text = json.dumps(header).encode()
    sock.sendall(_HEADER.pack(len(text), len(body)) + text + body)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionResetError("the other side closed the connection")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _receive(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    text_size, body_size = _HEADER.unpack(_receive_exactly(sock, _HEADER.size))
    header = json.loads(_receive_exactly(sock, text_size))
    return header, _receive_exactly(sock, body_size) if body_size else b""


def _arrow_bytes(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, rows.schema) as stream:
        stream.write_table(rows)
    return sink.getvalue().to_pybytes()


def request(name: bytes, header: dict[str, Any], timeout: float = 5.0) -> dict[str, Any] | None:
    """One request on a connection of its own (status, stop); None when no writer listens or
    it refuses this process."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(name)
            _send(sock, header)
            return _receive(sock)[0]
        except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError, FileNotFoundError):
            return None


def new_request_id() -> str:
    """A request's id, unique across processes, listed in the commit that writes it."""
    return f"w{time.time_ns():020d}-{uuid.uuid4().hex}"


class WriterClient:
    """A process's connection to its warehouse's writer, opened when a writer is running."""

    def __init__(self, root: Path | None, metadata_url: str) -> None:
        """``root``: the local warehouse folder, or None for an object store (no writer)."""
        off = os.environ.get(WRITER_ENV, "").lower() == "off"
        self.name = None if root is None or off else address(root, metadata_url)
        self._sock: socket.socket | None = None
        self._pid = os.getpid()
        self._looked_at = -RETRY_SECONDS
        # one request at a time on the connection: threads of a process share its warehouse
        self._turn = threading.Lock()

    def connected(self) -> bool:
        """Whether a writer takes this process's writes (looked for at most once a second)."""
        if self._sock is not None and self._pid != os.getpid():
            # a forked child's copy of its parent's connection: answers would go to either
            self._sock.close()
            self._sock = None
            self._looked_at = -RETRY_SECONDS
        if self._sock is not None:
            return True
        if self.name is None or time.monotonic() - self._looked_at < RETRY_SECONDS:
            return False
        self._looked_at = time.monotonic()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.name)
        except OSError:  # nobody listens: the process writes itself
            sock.close()
            return False
        sock.settimeout(REPLY_SECONDS)
        self._sock, self._pid = sock, os.getpid()
        return True

    def write(self, target: StagedTable, rows: pa.Table) -> dict[str, Any]:
        """Send one table's checked rows; returns the writer's answer (``version`` and
        ``merged``; ``error``; or ``declined``: write them yourself). Raises ``WriterLost``
        (naming the request's id) when the writer went away before answering: the rows may
        or may not be committed."""
        request_id = new_request_id()
        return self._exchange({"op": "write", "id": request_id, "target": asdict(target)}, _arrow_bytes(rows))

    def statement(self, request_id: str, state: dict[str, Any]) -> dict[str, Any]:
        """Send an INSERT statement's text with its session's ``state`` for the writer to run
        (``WriterServer``'s ``statements``); returns its answer (``version``, ``merged`` and
        ``affected``; ``error``; ``declined``; or ``not_taken``: run it yourself). Raises
        ``WriterLost`` as ``write`` does."""
        return self._exchange({**state, "op": "statement", "id": request_id}, b"")

    def _exchange(self, header: dict[str, Any], body: bytes) -> dict[str, Any]:
        try:
            with self._turn:
                if self._sock is None:  # another thread's request lost the writer meanwhile
                    raise ConnectionResetError("the writer went away")
                _send(self._sock, header, body)
                answer, _ = _receive(self._sock)
        except OSError as exc:
            self.close()
            self._looked_at = time.monotonic()
            raise WriterLost(header["id"]) from exc
        if "declined" in answer:  # the writer is stopping: later writes do not ask it again
            self.close()
        return answer

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _same_user(conn: socket.socket) -> bool:
    """Whether the connecting process runs as this one's user: an abstract socket has no file
    permissions, so without this any local user could write through the writer (a refused
    client writes itself)."""
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid == os.getuid()


@dataclass
class _Request:
    id: str
    target: StagedTable | None  # a statement's: once the committer has prepared it
    rows: pa.Table | None
    conn: socket.socket  # where the committer sends the answer
    statement: dict[str, Any] | None = None  # a statement sent as text, with its session's state
    affected: int = 0  # a statement's rows, as its result reports them
    done: threading.Event = field(default_factory=threading.Event)  # set once it is sent


class WriterServer:
    """The writer: accepts connections, queues their requests, and commits them in groups."""

    def __init__(
        self,
        warehouse: Warehouse,
        root: Path,
        idle_seconds: float | None = None,
        statements: Statements | None = None,
    ) -> None:
        """``idle_seconds``: stop after this long without a connection or a request (None:
        run until stopped). The writer also stops when the warehouse's folder is removed.
        ``statements``: what the writer runs of the statements sent as text (none: each is
        answered ``not_taken``)."""
        self.warehouse = warehouse
        self.statements = statements
        self.root = root
        self.name = address(root, warehouse.catalog.url)
        self.idle_seconds = idle_seconds
        self._queue: queue.Queue[_Request] = queue.Queue()
        self._stopping = threading.Event()
        self.listening = threading.Event()  # set once the socket is bound
        self._lock = threading.Lock()  # guards the counters and the open connections
        self._connections = 0
        self._queued = 0  # requests received and not yet answered
        self._wrote_at: dict[int, float] = {}  # connection → when its last write was received
        self._last_activity = time.monotonic()
        self.started = time.time()
        self.requests = 0
        self.commits = 0
        self.statements_run = 0  # of the requests, the statements sent as text

    def serve(self) -> None:
        """Listen until stopped, idle or the warehouse is gone; every queued request is
        answered before it returns."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.name)
        except OSError as exc:
            listener.close()
            raise CatalogError(f"a writer already serves the warehouse {self.root} ({exc.strerror})") from None
        listener.listen(128)
        self.listening.set()
        listener.settimeout(0.5)  # wakes to check whether to stop
        committer = threading.Thread(target=self._commit_loop, name="tdstream-writer-commit", daemon=True)
        committer.start()
        try:
            while not self._stopping.is_set() and not self._should_stop():
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    continue
                if not _same_user(conn):
                    conn.close()
                    continue
                conn.settimeout(None)
                threading.Thread(target=self._connection, args=(conn,), daemon=True).start()
        finally:
            listener.close()  # no new connections; the name is free again
            self._stopping.set()
            committer.join()

    def stop(self) -> None:
        """Decline new requests, answer the queued ones, and leave ``serve``."""
        self._stopping.set()

    def _should_stop(self) -> bool:
        if not self.root.exists():
            return True
        with self._lock:
            idle = self._connections == 0 and time.monotonic() - self._last_activity
        return self.idle_seconds is not None and idle is not False and idle > self.idle_seconds

    def _connection(self, conn: socket.socket) -> None:
        with self._lock:
            self._connections += 1
        queued: _Request | None = None
        try:
            for header, body in self._received(conn):
                try:
                    answer = self._answer(header, body, conn)
                except (KeyError, TypeError, AttributeError, ValueError) as exc:  # not this package's client
                    _send(conn, {"error": f"malformed request: {type(exc).__name__}: {exc}"})
                    return
                if isinstance(answer, _Request):  # the committer answers it (a client sends one at a time)
                    queued = answer
                else:
                    _send(conn, answer)
        except OSError:  # the client went away; its request, if queued, is still committed
            pass
        finally:
            if queued is not None:  # the answer goes to this socket: its number must not be reused before
                queued.done.wait()
            conn.close()
            with self._lock:
                self._connections -= 1
                self._wrote_at.pop(id(conn), None)
                self._last_activity = time.monotonic()

    def _received(self, conn: socket.socket) -> Iterator[tuple[dict[str, Any], bytes]]:
        while True:
            try:
                yield _receive(conn)
            except (ConnectionResetError, ValueError):  # gone, or not speaking this protocol
                return

    def _answer(self, header: dict[str, Any], body: bytes, conn: socket.socket) -> dict[str, Any] | _Request:
        op = header.get("op")
        if op == "status":
            with self._lock:
                return {
                    "pid": os.getpid(),
                    "warehouse": str(self.root),
                    "started": self.started,
                    "requests": self.requests,
                    "commits": self.commits,
                    "statements": self.statements_run,
                    "connections": self._connections,
                    "queued": self._queued,
                }
        if op == "stop":
            self.stop()
            return {"stopping": True, "pid": os.getpid()}
        if op == "statement":  # prepared by the committer, in one thread: no interpreter lock passed around
            return self._queued_for_commit(_Request(str(header["id"]), None, None, conn, statement=header))
        if op != "write":
            return {"error": f"the writer does not take {op!r} requests"}
        target = StagedTable(**header["target"])
        return self._queued_for_commit(_Request(header["id"], target, ipc.open_stream(body).read_all(), conn))

    def _queued_for_commit(self, pending: _Request) -> dict[str, Any] | _Request:
        """Queue a request for the committer, which sends its answer; the answer to send now
        when the writer is stopping."""
        with self._lock:  # the committer leaves only with the queue empty and this flag set
            if self._stopping.is_set():
                return {"declined": "the writer is stopping"}
            self._queue.put(pending)
            self._queued += 1
            self._wrote_at[id(pending.conn)] = time.monotonic()
        return pending

    def _commit_loop(self) -> None:
        """Commit whatever is queued, one group per table, until stopping and drained."""
        while True:
            try:
                first = self._queue.get(timeout=0.2)
            except queue.Empty:
                with self._lock:
                    if self._stopping.is_set() and self._queue.empty():
                        return
                continue
            batch: list[_Request] = []
            self._take(batch, first)
            # every request queued meanwhile, and then a short wait for the other clients that
            # are writing: those answered by the last commit send their next statement a moment
            # later, and without the wait a group held the first few of them (groups of ~4
            # from 8 clients, ~500 commits for 2,400 statements; ~300 with the wait). A client
            # connected but not writing (its last write long ago) is not waited for.
            deadline = time.monotonic() + LINGER_SECONDS
            while True:
                try:
                    self._take(batch, self._queue.get_nowait())
                    continue
                except queue.Empty:
                    pass
                now = time.monotonic()
                with self._lock:
                    writing = sum(1 for at in self._wrote_at.values() if now - at < WRITING_SECONDS)
                waiting_for_more = len(batch) < writing
                remaining = deadline - time.monotonic()
                if not waiting_for_more or remaining <= 0:
                    break
                try:
                    self._take(batch, self._queue.get(timeout=remaining))
                except queue.Empty:
                    break
            by_table: dict[tuple[str, str], list[_Request]] = {}
            for pending in batch:
                assert pending.target is not None
                by_table.setdefault((pending.target.db, pending.target.storage), []).append(pending)
            for group in by_table.values():
                for start in range(0, len(group), MAX_GROUP):
                    self._commit(group[start : start + MAX_GROUP])

    def _take(self, batch: list[_Request], pending: _Request) -> None:
        """Add a request to the batch; a statement sent as text is prepared first, and
        answered ``not_taken`` at once when the writer does not run it (also when it is
        rejected: its client runs it and raises its error itself)."""
        if pending.statement is not None:
            try:
                taken = self.statements(pending.statement) if self.statements is not None else None
            except TDStreamError:
                taken = None
            except Exception:  # a fault of the writer's, not of the statement: logged, run by the client
                traceback.print_exc()
                taken = None
            if taken is None:
                self._answered([pending], {"not_taken": "the client runs this statement itself"})
                return
            pending.target, pending.rows, pending.affected = taken
        batch.append(pending)

    def _answered(self, requests: list[_Request], answer: dict[str, Any]) -> None:
        with self._lock:
            self._queued -= len(requests)
            self._last_activity = time.monotonic()
        # sent from here, not by each connection's thread: waking 8 threads to send 8 small
        # answers passed the interpreter lock around 8 more times a group
        for pending in requests:
            committed = pending.statement is not None and "version" in answer
            try:
                with contextlib.suppress(OSError):  # the client went away; what was committed stays so
                    _send(pending.conn, {**answer, "affected": pending.affected} if committed else answer)
            finally:  # its connection's thread closes the socket only after this
                pending.done.set()

    def _commit(self, group: list[_Request]) -> None:
        failpoint("writer-received")
        answered = False

        def committed(version: int, merged: bool) -> None:
            # answered as soon as the rows are durable: the catalog's record of their keys and
            # maintenance follow while the clients prepare their next statements (they were a
            # tenth of a group's commit, with every client waiting)
            nonlocal answered
            answered = True
            self._settled(group, {"version": version, "merged": merged})

        try:  # a group always has rows: commit_group commits them and calls ``committed``
            self.warehouse.commit_group(group[0].target, [(p.id, p.rows) for p in group], committed)
        except Exception as exc:
            if answered:  # committed and answered: the catalog catches up from the log
                traceback.print_exc()
            else:  # every request of the group gets the error; the writer goes on
                self._settled(group, {"error": f"{type(exc).__name__}: {exc}"})

    def _settled(self, group: list[_Request], answer: dict[str, Any]) -> None:
        with self._lock:
            self.requests += len(group)
            self.statements_run += sum(1 for pending in group if pending.statement is not None)
            self.commits += 1 if "version" in answer else 0
        self._answered(group, answer)
