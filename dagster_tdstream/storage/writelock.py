"""One writer at a time per physical table, across threads and processes.

Owns the write lock of a local warehouse's Delta tables: an exclusive ``flock`` on
``<warehouse>/.locks/<db>.<table>.lock``, taken by every write that decides from the stored
keys whether rows are new (INSERT, a stream's output, DELETE). Without it two writers of one
child table could both see a timestamp as new and both append it. The kernel releases the
lock of a killed process, so a crash never leaves a table locked; a live holder is waited for
a bounded time. Object stores have no such lock: there a table must have one writer at a time
(stated in the README). Must not know what is written under it.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

from ..errors import CatalogError
from .delta import path_segment

WAIT_SECONDS = 120.0  # a merge of a large batch can hold a table this long on 2 cores


class WriteLocks:
    def __init__(self, root: Path | None) -> None:
        """``root``: the local warehouse folder, or None for an object store (no locking)."""
        self.folder = None if root is None else root / ".locks"

    @contextmanager
    def hold(self, tables: Iterable[tuple[str, str]]) -> Iterator[None]:
        """Hold the locks of ``(db, table)`` pairs, taken in sorted order so that two writers
        of the same tables cannot wait for each other."""
        if self.folder is None:
            yield
            return
        self.folder.mkdir(exist_ok=True)
        with ExitStack() as stack:
            for db, table in sorted(set(tables)):
                stack.enter_context(self._one(db, table))
            yield

    def hold_if_free(self, db: str, table: str) -> AbstractContextManager[bool]:
        """Hold one table's lock if nobody holds it now (yields True), else yield False at once
        (a writer then stages its rows for group commit instead of waiting idle)."""
        return self.hold_unless(db, table, lambda: True)

    @contextmanager
    def hold_unless(self, db: str, table: str, done: Callable[[], bool]) -> Iterator[bool]:
        """Wait for one table's lock, asking ``done`` between attempts: yields True holding the
        lock, or False (not holding it) as soon as ``done()`` is true — a group commit's waiter
        whose rows another writer committed leaves without taking the lock in its turn."""
        if self.folder is None:
            yield True
            return
        self.folder.mkdir(exist_ok=True)
        with self._one(db, table, done) as held:
            yield held

    @contextmanager
    def _one(self, db: str, table: str, done: Callable[[], bool] | None = None) -> Iterator[bool]:
        """One table's lock, waited for (bounded) until it is free or ``done()``; yields
        whether it is held."""
        assert self.folder is not None
        fd = os.open(self.folder / f"{path_segment(db)}.{path_segment(table)}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + WAIT_SECONDS
            # short naps: a holder keeps a table for milliseconds, and a waiter that slept 50 ms
            # cut 8 concurrent writers to 32 statements/s in all
            delay = 0.0002
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if done is not None and done():
                        yield False
                        return
                    if time.monotonic() > deadline:
                        raise CatalogError(
                            f"table {db}.{table} is being written by another process for over "
                            f"{WAIT_SECONDS:.0f} s: try again"
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.002)
            yield True
        finally:
            os.close(fd)  # closing the descriptor releases the lock
