"""Group commit: concurrent small writes of one table combined into one Delta commit.

Owns the spool of a local warehouse's tables (``<warehouse>/.spool/<db>.<table>/``). A writer
that finds the table's write lock taken does not wait idle: it stages its rows there (an Arrow
file renamed into place; not fsynced — a staged request is not acknowledged yet, and the commit
that writes it makes its rows durable) and then waits for the lock. Whoever holds the lock next
commits every staged request of the table together with its own rows in one commit — one WAL
offset — and leaves each request an outcome file (the version, or the error); a waiter that
gets the lock and finds its request settled returns that outcome, so "acknowledged" still
means "committed and durable". A request is settled only after its commit and catalog record;
a leader killed in between leaves requests whose ids the next leader finds in the commit
info (``tdstream.group``) and settles without writing them again. Rows were checked before
they were staged: a rejected statement never reaches the spool. Must not decide how rows are
written: the warehouse does, for the whole group.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from .delta import path_segment

SPOOL = ".spool"
GROUP_KEY = "tdstream.group"  # commit info: the spooled requests a commit wrote
MAX_GROUP = 512  # requests per commit: bounds one commit's size and a waiter's wait
STALE_OUTCOME_SECONDS = 3600  # outcomes whose waiter died are removed after this
SWEEP_EVERY_SECONDS = 60.0  # how often a process looks for them (not on every commit)


@dataclass(frozen=True)
class Request:
    id: str
    path: Path
    after: int  # the table's newest version when the request was staged

    def rows(self) -> pa.Table:
        return ipc.open_stream(self.path.read_bytes()).read_all()


class GroupCommit:
    def __init__(self, root: Path | None) -> None:
        """``root``: the local warehouse folder, or None for an object store (no spool)."""
        self.folder = None if root is None else root / SPOOL
        self._swept_at = -SWEEP_EVERY_SECONDS

    @property
    def enabled(self) -> bool:
        return self.folder is not None

    def _table_folder(self, db: str, storage: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{path_segment(db)}.{path_segment(storage)}"

    def submit(self, db: str, storage: str, rows: pa.Table, after: int) -> Request:
        folder = self._table_folder(db, storage)
        folder.mkdir(parents=True, exist_ok=True)
        request_id = f"{time.time_ns():020d}-{uuid.uuid4().hex}"
        staging = folder / f".{request_id}.tmp"
        sink = pa.BufferOutputStream()  # the stream format: a reader needs no footer or seeks
        with ipc.new_stream(sink, rows.schema) as writer:
            writer.write_table(rows)
        staging.write_bytes(sink.getvalue().to_pybytes())
        path = folder / f"{request_id}.{after}.arrow"
        os.rename(staging, path)
        return Request(request_id, path, after)

    def waiting(self, db: str, storage: str) -> list[Request]:
        """The table's staged requests in the order they were staged (at most ``MAX_GROUP``)."""
        if self.folder is None:
            return []
        folder = self._table_folder(db, storage)
        try:
            names = sorted(name for name in os.listdir(folder) if name.endswith(".arrow"))
        except FileNotFoundError:
            return []
        requests = []
        for name in names[:MAX_GROUP]:
            request_id, after, _ = name.split(".")
            requests.append(Request(request_id, folder / name, int(after)))
        return requests

    def outcome(self, request: Request) -> dict[str, object] | None:
        """The settled outcome of a request (its outcome file is removed), or None while it is
        staged. A committed request's file was renamed to ``<id>.<version>.<merged>.done``; a
        failed one's replaced by ``<id>.done`` holding the error."""
        if request.path.exists():  # one stat per poll while the request waits
            return None
        for name in os.listdir(request.path.parent):
            if not (name.startswith(f"{request.id}.") and name.endswith(".done")):
                continue
            done = request.path.with_name(name)
            parts = name.split(".")
            outcome: dict[str, object]
            if len(parts) == 4:
                outcome = {"version": int(parts[1]), "merged": parts[2] == "1"}
            else:
                outcome = json.loads(done.read_text())
            done.unlink(missing_ok=True)
            return outcome
        return None

    def settle(self, requests: list[Request], outcome: dict[str, object]) -> None:
        """Give each request its outcome and remove it from the spool: a committed request's
        file is renamed to name its version (one rename per request, under the leader's lock),
        a failed one's replaced by its error."""
        for request in requests:
            if "error" in outcome:
                done = request.path.with_name(f"{request.id}.done")
                staging = done.with_name(f".{request.id}.done.tmp")
                staging.write_text(json.dumps(outcome))
                os.rename(staging, done)
                request.path.unlink(missing_ok=True)
                continue
            merged = 1 if outcome["merged"] else 0
            with contextlib.suppress(FileNotFoundError):  # settled already, from the log, by another leader
                os.rename(request.path, request.path.with_name(f"{request.id}.{outcome['version']}.{merged}.done"))
        if requests and time.monotonic() - self._swept_at > SWEEP_EVERY_SECONDS:
            self._swept_at = time.monotonic()
            self._sweep(requests[0].path.parent)

    def _sweep(self, folder: Path) -> None:
        """Outcomes nobody came for (their waiter died) and abandoned staging files."""
        cutoff = time.time() - STALE_OUTCOME_SECONDS
        for path in folder.iterdir():
            if path.suffix not in (".done", ".tmp"):
                continue
            try:
                stale = path.stat().st_mtime < cutoff
            except FileNotFoundError:  # renamed into place or collected by its waiter meanwhile
                continue
            if stale:
                path.unlink(missing_ok=True)
