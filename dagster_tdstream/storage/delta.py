"""Delta Lake tables written with delta-rs: one per super table and per normal table.

Owns the physical layout (``<warehouse>/<db>/<table>``, names made safe as path segments),
creating tables with the change data feed enabled, appends (local ones through
``append.py``), primary-key upserts (MERGE), deletes by predicate, reading a snapshot, the
version (= WAL offset) and the change feed.
Each write is one Delta commit and carries, in its commit info, the newest key it wrote per
child table (``tdstream.marks``), so the catalog's copy of those marks can always be
rebuilt from the log. Must not decide *whether* to append or merge, nor know about child
tables and tags: ``warehouse.py`` does.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError

from ..errors import CatalogError
from .append import CHECKPOINT_INTERVAL, append_commit, commit_actions, last_checkpoint, log_entry_name, log_lines
from .snapshot import Snapshot, newest, write_checkpoint

# characters a back-quoted name may hold that a path segment must not: separators, Spark's
# glob characters (it reads paths as patterns), URL syntax, control characters, the escape
# character itself and a leading dot (hidden, or . and ..); every other name keeps the
# directory it always had
_UNSAFE = re.compile(r'[/\\*?\[\]{}:%~#"<>|\x00-\x1f]|^\.')


def path_segment(name: str) -> str:
    """A database or table name as one directory name: a name is a path segment as it is
    unless it holds an unsafe character, which becomes ``~`` and its UTF-8 bytes in hex
    (`a/b*` → ``a~2Fb~2A``), so different names never share a directory."""
    return _UNSAFE.sub(lambda m: "".join(f"~{b:02X}" for b in m.group().encode()), name)


CDF_CONFIG = {
    "delta.enableChangeDataFeed": "true",
    # checkpoints keep removed files (tombstones) this long only: compaction removes every small
    # file, so with the default week a 100,000-commit table's checkpoint (rewritten every 100
    # versions, read by every handle update) held megabytes of tombstones. Nothing here needs
    # them: vacuum (maintenance.py) decides from the log entries and the files' age
    "delta.deletedFileRetentionDuration": "interval 1 minutes",
}
STRING_STATS_LENGTH = 32
MARKS_KEY = "tdstream.marks"  # commit info: {table name: newest key written by this commit}


@functools.lru_cache(maxsize=4096)
def is_local(uri: str) -> bool:
    return urlparse(uri).scheme in ("", "file")


def local_path(uri: str) -> Path:
    return Path(_local_folder(uri))


@functools.lru_cache(maxsize=4096)
def _local_folder(uri: str) -> str:
    """A local table's folder as a string: every write asks for its log entries' names several
    times, and building them as ``Path``s was a tenth of a one-row INSERT's Python."""
    parsed = urlparse(uri)
    return parsed.path if parsed.scheme == "file" else uri


def _log_entry(uri: str, version: int) -> str:
    return f"{_local_folder(uri)}/_delta_log/{log_entry_name(version)}"


_TABLE_IDS: dict[str, tuple[tuple[int, int, int], str | None]] = {}  # path → (its stat, the id read)


def _table_id(uri: str) -> str | None:
    """The table's id from its first log entry (its metaData action): a table dropped and
    created again under the same name has another one. Read again only when the entry's file
    is another (inode, change time, size): every write asks, several times."""
    path = _log_entry(uri, 0)
    try:
        stat = os.stat(path)
        seen = (stat.st_ino, stat.st_ctime_ns, stat.st_size)
        cached = _TABLE_IDS.get(path)
        if cached is not None and cached[0] == seen:
            return cached[1]
        with open(path, encoding="utf-8") as entry:
            text = entry.read()
    except FileNotFoundError:
        return None
    identity = None
    for line in text.splitlines():
        if '"metaData"' in line:
            identity = str(json.loads(line)["metaData"].get("id"))
            break
    _TABLE_IDS[path] = (seen, identity)
    return identity


class DeltaStore:
    """The Delta tables under one warehouse root."""

    def __init__(self, root: str, storage_options: dict[str, str] | None = None) -> None:
        self.root = root.rstrip("/")
        self.storage_options = storage_options
        self._handles = threading.local()  # delta-rs handles are not shared between threads
        self._latest: dict[str, tuple[str, int]] = {}  # uri → (table id, newest version seen)

    def uri(self, db: str, table: str) -> str:
        return f"{self.root}/{path_segment(db)}/{path_segment(table)}"

    def create(self, db: str, table: str, schema: pa.Schema) -> None:
        DeltaTable.create(
            self.uri(db, table),
            schema,
            mode="error",
            name=f"{db}.{table}",
            configuration=CDF_CONFIG,
            storage_options=self.storage_options,
        )

    def exists(self, db: str, table: str) -> bool:
        uri = self.uri(db, table)
        if is_local(uri):
            return _table_id(uri) is not None
        try:
            self.open(db, table)
        except TableNotFoundError:
            return False
        return True

    def open(self, db: str, table: str) -> DeltaTable:
        """A new handle on the table's newest snapshot (callers may move it to a version)."""
        return DeltaTable(self.uri(db, table), storage_options=self.storage_options)

    def current(self, db: str, table: str) -> DeltaTable:
        """The newest snapshot through a handle kept per thread and brought up to date by
        reading only the log entries added since, when there are any: opening a table replays
        its whole log, which was most of a small INSERT's time. Callers must not move it to a version.
        A table dropped and created again (by any process) has a new id in its first log
        entry, so a handle on the old one is never reused."""
        uri = self.uri(db, table)
        identity = _table_id(uri) if is_local(uri) else None
        if identity is None:  # no table, its first entries cleaned up, or an object store
            return self.open(db, table)
        handles: dict[str, tuple[str, DeltaTable]] = self._handles.__dict__.setdefault("tables", {})
        cached = handles.get(uri)
        if cached is not None and cached[0] == identity:
            handle = cached[1]
            # delta-rs looks for new entries by listing all of _delta_log (and a stat of each):
            # 21 ms at 20,000 versions, growing with the log, for every query and maintenance run
            # of a table fed by small commits; a stat of the next entry's name says whether to —
            # or a checkpoint past the handle, when maintenance expired the entries after it
            version = handle.version()
            if os.path.exists(_log_entry(uri, version + 1)) or (last_checkpoint(local_path(uri)) or 0) > version:
                handle.update_incremental()
            return handle
        dt = self.open(db, table)
        handles[uri] = (identity, dt)
        return dt

    def open_at(self, db: str, table: str, version: int) -> DeltaTable:
        """A new handle on the table as of ``version``."""
        return DeltaTable(self.uri(db, table), version=version, storage_options=self.storage_options)

    def version(self, db: str, table: str) -> int:
        """The newest version (= WAL offset); see ``latest_version``."""
        return self.latest_version(db, table)

    def identity(self, db: str, table: str) -> str | None:
        """The id of a local table's current incarnation (None for object stores): a table
        dropped and created again under its name has another."""
        uri = self.uri(db, table)
        return _table_id(uri) if is_local(uri) else None

    def latest_version(self, db: str, table: str) -> int:
        """The newest version, for a local table by looking for the log entries after the last
        one this process saw (a few ``stat`` calls instead of reading the log)."""
        uri = self.uri(db, table)
        identity = _table_id(uri) if is_local(uri) else None
        if identity is None:
            return self.current(db, table).version()
        known = self._latest.get(uri)
        version = known[1] if known is not None and known[0] == identity else self.current(db, table).version()
        while os.path.exists(_log_entry(uri, version + 1)):
            version += 1
        self._latest[uri] = (identity, version)
        return version

    def append(
        self, db: str, table: str, rows: pa.Table, marks: dict[str, int], extra: dict[str, str] | None = None
    ) -> int:
        """Append rows; ``extra``: more commit info (the write intent a commit belongs to)."""
        uri = self.uri(db, table)
        if not is_local(uri):
            dt = self.current(db, table)
            write_deltalake(dt, rows, mode="append", commit_properties=_marked(marks, extra))
            return dt.version()  # the handle follows its own commit
        after = self.latest_version(db, table)
        version = append_commit(local_path(uri), after, rows, _marks_metadata(marks, extra))
        self._latest[uri] = (self._latest[uri][0], version)
        if version % CHECKPOINT_INTERVAL == 0:  # readers replay the log from the last checkpoint
            write_checkpoint(local_path(uri), self.snapshot(db, table))
        return version

    def snapshot(self, db: str, table: str) -> Snapshot:
        """A local table's newest snapshot, replayed without delta-rs (``snapshot.py``)."""
        uri = self.uri(db, table)
        identity = _table_id(uri)
        if identity is None:
            raise CatalogError(f"table {db}.{table} has no Delta log at {uri}")
        return newest(local_path(uri), identity)

    def upsert(
        self,
        db: str,
        table: str,
        rows: pa.Table,
        keys: tuple[str, ...],
        marks: dict[str, int],
        delete_unmatched: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> int:
        """Insert rows; a row whose key exists replaces it (TDengine: the later write wins).
        ``delete_unmatched`` (a predicate on target ``t``) also removes, in the same commit,
        target rows it matches that the new rows do not replace."""
        predicate = " AND ".join(f't."{k}" = s."{k}"' for k in keys)
        dt = self.current(db, table)
        merger = (
            dt.merge(rows, predicate, source_alias="s", target_alias="t", commit_properties=_marked(marks, extra))
            .when_matched_update_all()
            .when_not_matched_insert_all()
        )
        if delete_unmatched is not None:
            merger = merger.when_not_matched_by_source_delete(delete_unmatched)
        merger.execute()
        return dt.version()

    def commit_info(self, db: str, table: str, version: int) -> dict[str, Any] | None:
        """A version's commit info (its custom metadata included); None when its log entry is
        gone (cleaned up after a checkpoint)."""
        uri = self.uri(db, table)
        if is_local(uri):
            lines = log_lines(local_path(uri), version)
            return None if lines is None else _commit_info(lines)
        newest = self.current(db, table).version()
        found = self.current(db, table).history(newest - version + 1)
        return next((dict(entry) for entry in found if entry.get("version") == version), None)

    def record(self, db: str, table: str, extra: dict[str, str]) -> int | None:
        """Commit ``extra`` as commit info without changing data (a local table; None on an
        object store, where delta-rs writes no empty commit): a reader that keeps its
        progress in the table's log records progress that wrote no rows."""
        uri = self.uri(db, table)
        if not is_local(uri):
            return None
        after = self.latest_version(db, table)
        version = commit_actions(local_path(uri), after, [], {"operation": "WRITE", **_marks_metadata({}, extra)})
        self._latest[uri] = (self._latest[uri][0], version)
        return version

    def commit_values(self, db: str, table: str, start: int, key: str) -> list[tuple[int, str]]:
        """(version, value) of every commit from version ``start`` on whose commit info has
        ``key`` (the write intent or the spooled requests it belongs to)."""
        path = local_path(self.uri(db, table))
        found = []
        for version in range(start, self.latest_version(db, table) + 1):
            info = _commit_info(log_lines(path, version) or [])
            if key in info:
                found.append((version, str(info[key])))
        return found

    def commit_listing(self, db: str, table: str, key: str, item: str, since_ms: int) -> int | None:
        """The version whose commit info lists ``item`` under ``key`` (comma-separated), looked
        for from the newest version back to the first one committed before ``since_ms``
        (epoch ms) or whose log entry is gone; None when none lists it."""
        path = local_path(self.uri(db, table))
        for version in range(self.latest_version(db, table), -1, -1):
            lines = log_lines(path, version)
            if lines is None:
                return None
            info = _commit_info(lines)
            if item in str(info.get(key, "")).split(","):
                return version
            if int(info.get("timestamp", 0)) < since_ms:
                return None
        return None

    def commit_marks(self, db: str, table: str, start: int, end: int) -> dict[str, int] | None:
        """The newest key per table name written by versions [start, end], from their commit
        info; None when one of them cannot tell (written by another tool, its log entry
        cleaned up, an object store): the caller must read the data instead."""
        uri = self.uri(db, table)
        if not is_local(uri):
            return None
        marks: dict[str, int] = {}
        for version in range(start, end + 1):
            lines = log_lines(local_path(uri), version)
            if lines is None:
                return None
            info = _commit_info(lines)
            if MARKS_KEY in info:
                for name, key in json.loads(info[MARKS_KEY]).items():
                    marks[name] = max(key, marks.get(name, key))
            elif any('"dataChange":true' in line for line in lines if line.startswith('{"add"')):
                return None  # new rows from a writer that did not say which keys
        return marks

    def delete(self, db: str, table: str, predicate: str) -> tuple[int, int]:
        """Delete matching rows; returns (rows deleted, version)."""
        dt = self.current(db, table)
        metrics = dt.delete(predicate, commit_properties=_marked({}))
        return int(metrics.get("num_deleted_rows", 0)), dt.version()

    def read(
        self,
        db: str,
        table: str,
        columns: list[str] | None = None,
        filters: list[tuple[str, str, object]] | None = None,
        version: int | None = None,
    ) -> pa.Table:
        dt = self._snapshot(db, table, version)
        if not is_local(self.uri(db, table)):
            return dt.to_pyarrow_table(columns=columns, filters=filters)
        # Local files are read by pyarrow itself: delta-rs's file system handler leaves its
        # threads running when the interpreter exits, and every process that read through it
        # aborted at exit ("terminate called without an active exception", delta-rs#2184)
        # — and, as delta-rs did, only the files whose statistics admit the filters are opened
        files = _pruned(dt, filters) if filters else dt.file_uris()
        dataset = pads.dataset(files, format="parquet", schema=pa.schema(dt.schema().to_arrow()))
        return dataset.to_table(columns=columns, filter=None if not filters else pq.filters_to_expression(filters))

    def file_uris(self, db: str, table: str) -> list[str]:
        """The Parquet files of the table's newest snapshot."""
        return self.current(db, table).file_uris()

    def files_and_rows(
        self,
        db: str,
        table: str,
        version: int | None = None,
        key_range: tuple[str, int, int] | None = None,
        equals: tuple[str, str] | None = None,
    ) -> tuple[list[str], int | None]:
        """The Parquet files of the table's snapshot (the newest, or as of ``version``) and how
        many rows they hold by their statistics (None when a file has no count). With
        ``key_range`` (column, low, high) only the files whose statistics say they may hold a
        value of that column in [low, high], with ``equals`` (column, text) only those that may
        hold that text there — a batch of a stream or a query of one child table reads the few
        files it needs, not every file the table ever got (Spark lists and opens each)."""
        dt = self._snapshot(db, table, version)
        files = _files_in_ranges(dt, _ranges(key_range, equals))
        actions = pa.table(dt.get_add_actions(flatten=True))
        if "num_records" not in actions.column_names:
            return files, None
        kept = {uri.rsplit("/", 1)[-1] for uri in files}
        paths, counts = actions.column("path").to_pylist(), actions.column("num_records").to_pylist()
        counts = [n for path, n in zip(paths, counts, strict=True) if path.rsplit("/", 1)[-1] in kept]
        return files, None if None in counts else sum(counts)

    def _snapshot(self, db: str, table: str, version: int | None) -> DeltaTable:
        return self.current(db, table) if version is None else self.open_at(db, table, version)

    def rows_in_range(self, db: str, table: str, key_range: tuple[str, int, int]) -> int:
        """How many rows the files that ``files_and_rows`` keeps for ``key_range`` hold, from
        their statistics (a file without a count counts as unknown: the caller's limit is
        exceeded)."""
        rows = self.files_and_rows(db, table, key_range=key_range)[1]
        return 2**63 - 1 if rows is None else rows

    def drop(self, db: str, table: str) -> None:
        uri = self.uri(db, table)
        if is_local(uri):
            shutil.rmtree(local_path(uri), ignore_errors=True)
        else:  # object stores: delta-rs has no drop; leave a clear failure rather than orphan files
            raise NotImplementedError(f"dropping tables on {urlparse(uri).scheme}:// is not supported")

    def drop_database(self, db: str) -> None:
        uri = f"{self.root}/{path_segment(db)}"
        if is_local(uri):
            shutil.rmtree(local_path(uri), ignore_errors=True)
        else:
            raise NotImplementedError(f"dropping databases on {urlparse(uri).scheme}:// is not supported")

    def change_feed(self, db: str, table: str, start: int, end: int | None = None) -> pa.Table:
        """Rows inserted, updated or deleted in versions [start, end] with ``_change_type``
        and ``_commit_version`` (the WAL records of those offsets)."""
        if is_local(self.uri(db, table)):
            appended = self._appended_rows(db, table, start, self.latest_version(db, table) if end is None else end)
            if appended is not None:
                return appended
        reader = self.current(db, table).load_cdf(starting_version=start, ending_version=end)
        return pa.table(reader)

    def _appended_rows(self, db: str, table: str, start: int, end: int) -> pa.Table | None:
        """The change feed of versions that only added rows (appends) or changed no data
        (compaction, KEEP), read straight from the files their log entries add; None when
        one of them did more (a MERGE or DELETE writes change-data files: delta-rs reads
        those). Bringing delta-rs's handle up to date replays the log since its last
        checkpoint, which was most of a live trigger tick on a table of many small commits."""
        path = local_path(self.uri(db, table))
        added: list[tuple[int, int, list[str]]] = []
        for version in range(start, end + 1):
            lines = log_lines(path, version)
            if lines is None:
                return None
            stamp, files = None, []
            for line in lines:
                action = json.loads(line)
                if "commitInfo" in action:
                    stamp = action["commitInfo"].get("timestamp")
                elif "add" in action:
                    if action["add"].get("dataChange", True):
                        files.append(unquote(action["add"]["path"]))
                elif "remove" in action:
                    if action["remove"].get("dataChange", True):
                        return None
                elif action.keys() & {"cdc", "metaData", "protocol"}:
                    return None
            if files:
                if stamp is None:
                    return None
                added.append((version, stamp, files))
        schema = pa.schema(self._handle(db, table).schema().to_arrow())
        parts = []
        for version, stamp, files in added:
            rows = pads.dataset([str(path / f) for f in files], format="parquet", schema=schema).to_table()
            count = rows.num_rows
            rows = rows.append_column("_change_type", pa.repeat(pa.scalar("insert", pa.string_view()), count))
            rows = rows.append_column("_commit_version", pa.repeat(pa.scalar(version, pa.uint64()), count))
            rows = rows.append_column("_commit_timestamp", pa.repeat(pa.scalar(stamp, pa.timestamp("ms")), count))
            parts.append(rows)
        if not parts:
            columns = [*schema, pa.field("_change_type", pa.string_view()), pa.field("_commit_version", pa.uint64())]
            return pa.schema([*columns, pa.field("_commit_timestamp", pa.timestamp("ms"))]).empty_table()
        return pa.concat_tables(parts)

    def _handle(self, db: str, table: str) -> DeltaTable:
        """This thread's handle as it is (for the schema: a version that changed it is never
        read from files directly)."""
        uri = self.uri(db, table)
        cached = self._handles.__dict__.get("tables", {}).get(uri)
        if cached is not None and cached[0] == _table_id(uri):
            return cached[1]
        return self.current(db, table)  # none yet, or the table was dropped and created again


def _commit_info(lines: list[str]) -> dict[str, Any]:
    """A log entry's commit info (empty when it has none)."""
    return next((json.loads(line)["commitInfo"] for line in lines if line.startswith('{"commitInfo"')), {})


def _marks_metadata(marks: dict[str, int], extra: dict[str, str] | None = None) -> dict[str, str]:
    return {MARKS_KEY: json.dumps(marks, separators=(",", ":")), **(extra or {})}


def _marked(marks: dict[str, int], extra: dict[str, str] | None = None) -> CommitProperties:
    return CommitProperties(custom_metadata=_marks_metadata(marks, extra))


def _integers(low: object, high: object) -> bool:
    return isinstance(low, int) and isinstance(high, int)


def _untruncated(low: object, high: object) -> bool:
    """String statistics to trust: writers may cut long values short (delta-rs keeps 32
    characters), and a cut maximum would exclude files that hold the value."""
    return isinstance(low, str) and isinstance(high, str) and len(low) < STRING_STATS_LENGTH > len(high)


def _may_hold(
    actions: pa.Table,
    column: str,
    keep: list[bool],
    usable: Callable[[Any, Any], bool],
    low: Any,
    high: Any,
) -> list[bool]:
    """``keep`` narrowed to the files whose [min, max] of ``column`` meets [low, high]; a file
    without usable statistics for the column may hold anything."""
    if f"min.{column}" not in actions.column_names or f"max.{column}" not in actions.column_names:
        return keep
    lows, highs = actions.column(f"min.{column}").to_pylist(), actions.column(f"max.{column}").to_pylist()
    return [
        k and (not usable(lo, hi) or ((high is None or lo <= high) and (low is None or hi >= low)))
        for k, lo, hi in zip(keep, lows, highs, strict=True)
    ]


_BOUNDS = {">=": "low", ">": "low", "<=": "high", "<": "high", "=": "both", "==": "both"}


def _pruned(dt: DeltaTable, filters: list[tuple[str, str, object]]) -> list[str]:
    """The files whose statistics admit every comparison of ``filters`` (an AND of
    (column, op, value)); other operators prune nothing."""
    ranges: list[tuple[str, Any, Any]] = []
    for column, op, value in filters:
        side = _BOUNDS.get(op)
        if side is None or not isinstance(value, int | str) or isinstance(value, bool):
            continue
        # a strict bound is kept inclusive: a file may only be kept too often, never dropped wrongly
        ranges.append((column, None if side == "high" else value, None if side == "low" else value))
    return _files_in_ranges(dt, ranges)


def _ranges(key_range: tuple[str, int, int] | None, equals: tuple[str, str] | None) -> list[tuple[str, Any, Any]]:
    """``files_and_rows``'s bounds as (column, low, high) ranges."""
    ranges: list[tuple[str, Any, Any]] = []
    if key_range is not None:
        ranges.append(key_range)
    if equals is not None:
        ranges.append((equals[0], equals[1], equals[1]))
    return ranges


def _files_in_ranges(dt: DeltaTable, ranges: list[tuple[str, Any, Any]]) -> list[str]:
    """The snapshot's files whose [min, max] of each column meets its [low, high] (None: open)."""
    files = dt.file_uris()
    if not ranges:
        return files
    actions = pa.table(dt.get_add_actions(flatten=True))
    keep = [True] * actions.num_rows
    for column, low, high in ranges:
        usable = _untruncated if isinstance(low if low is not None else high, str) else _integers
        keep = _may_hold(actions, column, keep, usable, low, high)
    kept = {path.rsplit("/", 1)[-1] for path, k in zip(actions.column("path").to_pylist(), keep, strict=True) if k}
    # file names are unique in a table (a UUID each): the URI's last part names its action
    return [uri for uri in files if uri.rsplit("/", 1)[-1] in kept]
