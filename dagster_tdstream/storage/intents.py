"""Statements that write several physical tables: all of them, even across a crash.

Owns the write intent of a statement touching more than one Delta table of a local warehouse
(an INSERT into two super tables, a super and a normal table): before its first commit, each
table's rows are staged as Parquet under ``<warehouse>/.pending/<id>/`` with a manifest
(written last, renamed into place: an intent without a manifest was never begun), and every
commit of the statement names the intent in its commit info. Once all are committed the
folder goes. If the writer dies in between, the next writer or process that opens the
warehouse rolls the statement forward: under the tables' locks, each table whose log has no
commit naming the intent since the statement began gets the staged rows, written as any
write. Delta has no multi-table transaction; this makes the statement all-or-nothing once
recovered, never half. Must not decide how rows are written: the warehouse does.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .append import fsync_path
from .delta import path_segment

PENDING = ".pending"
WRITE_KEY = "tdstream.write"  # commit info: the intent a commit belongs to
ABANDONED_SECONDS = 3600  # a staging folder this old belongs to a writer that died staging


@dataclass(frozen=True)
class StagedTable:
    db: str
    storage: str
    after: int  # the table's newest version when the statement began
    is_super: bool
    primary_key: str
    name: str  # a normal table's own name (its marks' key)

    @property
    def file_name(self) -> str:
        """The file its staged rows are kept in."""
        return f"{path_segment(self.db)}.{path_segment(self.storage)}.parquet"


@dataclass(frozen=True)
class Intent:
    id: str
    folder: Path
    tables: tuple[StagedTable, ...]

    def rows(self, table: StagedTable) -> pa.Table:
        return pq.read_table(self.folder / table.file_name)


class Intents:
    def __init__(self, root: Path | None) -> None:
        """``root``: the local warehouse folder, or None for an object store (no intents)."""
        self.folder = None if root is None else root / PENDING

    def stage(self, tables: list[tuple[StagedTable, pa.Table]]) -> Intent | None:
        """Stage a statement's rows before its first commit (None on an object store)."""
        if self.folder is None:
            return None
        intent_id = str(uuid.uuid4())
        building = self.folder / f".{intent_id}"
        building.mkdir(parents=True)
        for table, rows in tables:
            pq.write_table(rows, building / table.file_name)
        manifest = [table.__dict__ for table, _ in tables]
        (building / "manifest.json").write_text(json.dumps(manifest))
        for file in building.iterdir():
            fsync_path(file)
        folder = self.folder / intent_id
        os.rename(building, folder)  # the intent exists from here on, whole
        fsync_path(self.folder, directory=True)
        return Intent(intent_id, folder, tuple(table for table, _ in tables))

    def finished(self, intent: Intent) -> None:
        shutil.rmtree(intent.folder, ignore_errors=True)

    def unfinished(self) -> list[Intent]:
        """Intents whose writer has not finished (or died), oldest first."""
        if self.folder is None or not self.folder.is_dir():
            return []
        found = []
        for folder in self.folder.iterdir():
            try:
                found.append((folder.stat().st_mtime, folder))
            except FileNotFoundError:  # its writer finished (or renamed it into place) meanwhile
                continue
        intents = []
        for mtime, folder in sorted(found):
            if folder.name.startswith("."):  # still staging, or staging never completed
                if time.time() - mtime > ABANDONED_SECONDS:
                    shutil.rmtree(folder, ignore_errors=True)  # nothing of it was committed
                continue
            try:
                manifest = json.loads((folder / "manifest.json").read_text())
            except FileNotFoundError:  # its writer finished meanwhile
                continue
            intents.append(Intent(folder.name, folder, tuple(StagedTable(**table) for table in manifest)))
        return intents
