"""Keeping tables fast for months: compaction, vacuum and the database's KEEP.

Owns the maintenance of one physical table, under its write lock, and when it runs on its own
(after every ``COMPACT_EVERY``-th version a write commits; ``COMPACT DATABASE`` and ``TRIM
DATABASE`` run it on demand):

- **KEEP** (TDengine trims expired data by whole data files): files whose newest key is older
  than now − KEEP leave the table in one commit whose removes say ``dataChange: false`` — the
  change feed, the trigger engine and subscriptions do not see them as deletes, so a stream's
  results and a TSMA's states stay as they are.
- **Compaction**: the small files merged into one, sorted by key, in a commit that changes no
  data either — files under 64 KiB at every run, files under 1 MiB once 8 of them exist (only
  small files are rewritten, unlike delta-rs's OPTIMIZE, which re-packs every file under
  100 MB at each run).
- **Vacuum**: deletes a file only when the current snapshot does not hold it, no log entry from
  the oldest version a reader still needs onwards names it (a stream's checkpoint or queued
  triggers: the change feed of later versions reads the files those versions added or
  removed), and it is older than the retention (``TDSTREAM_VACUUM_RETENTION_HOURS``, default
  Delta's 168 h, which also covers subscriptions, whose progress only their clients hold).
  The log entries of versions before both the last checkpoint and that oldest version go too,
  under the same retention: delta-rs lists the whole log to refresh a snapshot.

Each maintenance commit carries no keys, and a catalog that accounted for the version before it
accounts for it after. Must not decide what a stream reads: it only asks where streams are.
"""

from __future__ import annotations

import functools
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.dataset as pads
from deltalake import Schema

from ..sql.timeunits import parse_duration
from .append import commit_actions, last_checkpoint, log_lines, recent_rows, write_data_file
from .delta import MARKS_KEY, is_local, local_path
from .snapshot import max_value

if TYPE_CHECKING:
    from .warehouse import Warehouse

COMPACT_EVERY = 50  # versions between automatic maintenance runs of a table
VACUUM_EVERY = 1000  # versions between automatic vacuums (a multiple of COMPACT_EVERY)
SMALL_FILE_BYTES = 64 << 10  # files below this are merged at every compaction
MEDIUM_FILE_BYTES = 1 << 20  # files below this are merged once MEDIUM_FILES of them exist
MEDIUM_FILES = 8
RETENTION_ENV = "TDSTREAM_VACUUM_RETENTION_HOURS"
_PER_MS = {"ms": 1, "us": 1_000, "ns": 1_000_000}
DEFAULT_RETENTION_HOURS = 168.0


@dataclass(frozen=True)
class Maintained:
    """What one maintenance run did to a table."""

    files_trimmed: int = 0
    files_compacted: int = 0
    files_vacuumed: int = 0
    log_entries_expired: int = 0


def maintain_after(warehouse: Warehouse, db: str, storage: str, version: int) -> None:
    """What is due after a write committed ``version`` (the caller holds the table's lock):
    trimming and compaction every ``COMPACT_EVERY`` versions, vacuum every ``VACUUM_EVERY``
    (it lists the table's folder, which holds every file of the retention period)."""
    if version > 0 and version % COMPACT_EVERY == 0:
        maintain(warehouse, db, storage, locked=True, vacuum=version % VACUUM_EVERY == 0)


def maintain(
    warehouse: Warehouse,
    db: str,
    storage: str,
    *,
    locked: bool = False,
    trim_only: bool = False,
    vacuum: bool = True,
) -> Maintained:
    """Trim, compact and vacuum one physical table (``locked``: the caller holds its lock;
    ``trim_only``: KEEP only, as TRIM DATABASE)."""
    if not is_local(warehouse.delta.uri(db, storage)):
        return Maintained()  # object stores: the files are the store's to manage
    if not locked:
        with warehouse.locks.hold([(db, storage)]):
            return maintain(warehouse, db, storage, locked=True, trim_only=trim_only, vacuum=vacuum)
    trimmed = _accounted(warehouse, db, storage, lambda: _trim(warehouse, db, storage))
    if trim_only:
        return Maintained(trimmed)
    compacted = _accounted(warehouse, db, storage, lambda: _compact(warehouse, db, storage))
    files, entries = _vacuum(warehouse, db, storage) if vacuum else (0, 0)
    return Maintained(trimmed, compacted, files, entries)


def _accounted(warehouse: Warehouse, db: str, storage: str, operation: object) -> int:
    """Run a data-preserving commit; the catalog's marks stay valid across it."""
    before = warehouse.delta.latest_version(db, storage)
    verified = warehouse.catalog.verified_version(db, storage)
    done = operation()  # type: ignore[operator]
    after = warehouse.delta.latest_version(db, storage)
    if after != before and verified == before:
        warehouse.catalog.record_writes(db, storage, {}, after)
    if after == before + 1:
        warehouse.keys_unchanged(db, storage, before, after)
    return int(done)


def keep_cutoff(options: dict[str, str], precision: str, now_ms: int) -> int | None:
    """The oldest key KEEP still holds, in the precision (its last value: TDengine's tiered
    KEEP a,b,c keeps data until the last); None without KEEP."""
    keep = options.get("KEEP")
    if not keep:
        return None
    duration = parse_duration(keep.split(",")[-1].strip())
    return now_ms * _PER_MS[precision] - duration.in_precision(precision)


def _trim(warehouse: Warehouse, db: str, storage: str) -> int:
    info = warehouse.database(db)
    cutoff = keep_cutoff(info.options, info.precision, time.time_ns() // 1_000_000)
    if cutoff is None:
        return 0
    table = warehouse.find_table(db, storage)
    if table is None:
        return 0
    pk = table.primary_key
    adds = warehouse.delta.snapshot(db, storage).files.values()
    expired = [a for a in adds if (newest := max_value(a, pk)) is not None and newest < cutoff]
    if not expired:
        return 0
    removes = _removed(expired)  # retention, not a delete a stream should recalculate for
    path = local_path(warehouse.delta.uri(db, storage))
    after = warehouse.delta.latest_version(db, storage)
    commit_actions(
        path,
        after,
        removes,
        {"operation": "DELETE", "operationParameters": {"predicate": f"KEEP: {pk} < {cutoff}"}, MARKS_KEY: "{}"},
    )
    return len(expired)


def _compact(warehouse: Warehouse, db: str, storage: str) -> int:
    """Merge the table's small files into one, sorted by the primary key (time locality keeps
    key-range pruning useful), in tiers so that little is rewritten: files under
    ``SMALL_FILE_BYTES`` at every run, those under ``MEDIUM_FILE_BYTES`` once ``MEDIUM_FILES``
    of them exist. delta-rs's OPTIMIZE re-packs every file under its 100 MB target, so a live
    table's growing compacted file was rewritten at each run."""
    snapshot = warehouse.delta.snapshot(db, storage)
    adds = snapshot.files.values()
    small = [a for a in adds if a["size"] < SMALL_FILE_BYTES]
    medium = [a for a in adds if SMALL_FILE_BYTES <= a["size"] < MEDIUM_FILE_BYTES]
    if len(medium) >= MEDIUM_FILES:
        small += medium
    if len(small) < 2:
        return 0
    path = local_path(warehouse.delta.uri(db, storage))
    rows = _files_rows([path / unquote(a["path"]) for a in small], _arrow_schema(snapshot.metadata["schemaString"]))
    table = warehouse.find_table(db, storage)
    if table is not None:
        rows = rows.sort_by([(table.primary_key, "ascending")])
    add = write_data_file(path, rows, data_change=False)
    removes = _removed(small)
    after = warehouse.delta.latest_version(db, storage)
    commit_actions(
        path, after, [{"add": add}, *removes], {"operation": "OPTIMIZE", "operationParameters": {}, MARKS_KEY: "{}"}
    )
    return len(small)


def _files_rows(files: list[Path], schema: pa.Schema) -> pa.Table:
    """The rows of data files in the table's schema: those this process wrote recently in
    that schema from memory, the others read (a read casts them to it)."""
    kept, unread = [], []
    for file in files:
        rows = recent_rows(file)
        if rows is not None and rows.schema.equals(schema):
            kept.append(rows)
        else:
            unread.append(str(file))
    if unread:
        kept.append(pads.dataset(unread, format="parquet", schema=schema).to_table())
    return pa.concat_tables(kept)


def _removed(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Remove actions for files (their add actions) that change no data: the change feed
    does not read them as deletes."""
    now = time.time_ns() // 1_000_000
    return [
        {
            "remove": {
                "path": a["path"],
                "deletionTimestamp": now,
                "dataChange": False,
                "extendedFileMetadata": True,
                "partitionValues": {},
                "size": a["size"],
            }
        }
        for a in files
    ]


def _vacuum(warehouse: Warehouse, db: str, storage: str) -> tuple[int, int]:
    """(data files deleted, log entries deleted)."""
    path = local_path(warehouse.delta.uri(db, storage))
    current = warehouse.delta.latest_version(db, storage)
    needed = min(_oldest_needed(warehouse, db, storage), current)
    verified = warehouse.catalog.verified_version(db, storage)
    older_than = time.time() - float(os.environ.get(RETENTION_ENV, DEFAULT_RETENTION_HOURS)) * 3600
    files = _vacuum_files(path, warehouse, db, storage, needed, current, older_than)
    # versions the catalog has not accounted for yet are read again by the next write
    return files, _expire_log(path, min(needed, verified + 1 if verified is not None else 0), older_than)


def _vacuum_files(
    path: Path, warehouse: Warehouse, db: str, storage: str, needed: int, current: int, older_than: float
) -> int:
    referenced = {unquote(p).rsplit("/", 1)[-1] for p in warehouse.delta.snapshot(db, storage).files}
    for version in range(needed, current + 1):
        lines = log_lines(path, version)
        if lines is None:
            return 0  # a log entry a reader may need is gone: delete nothing
        for line in lines:
            action = json.loads(line)
            for kind in ("add", "remove", "cdc"):
                if kind in action:
                    referenced.add(action[kind]["path"].rsplit("/", 1)[-1])
    deleted = 0
    for folder in (path, path / "_change_data"):
        if not folder.is_dir():
            continue
        for file in folder.iterdir():
            if not file.name.endswith(".parquet") or file.name in referenced:
                continue
            if file.stat().st_mtime < older_than:
                file.unlink(missing_ok=True)
                deleted += 1
    return deleted


def _expire_log(path: Path, needed: int, older_than: float) -> int:
    """Delete the log entries and checkpoints of versions before both the last checkpoint and
    ``needed``, written before ``older_than`` — Delta's log cleanup, bounded by the readers.

    Every refresh of a delta-rs snapshot lists all of ``_delta_log`` and stats each entry
    (21 ms at 20,000 versions, a second or more for a table fed for weeks), and a table keeps
    one entry per commit; readers rebuild a snapshot from the last checkpoint and the entries
    after it, and the change feed a stream or a subscription reads starts at ``needed`` or
    within the retention. Version 0 stays: its metaData names the table's incarnation
    (``delta._table_id``)."""
    log = path / "_delta_log"
    checkpoint = last_checkpoint(path)
    if checkpoint is None:
        return 0  # no checkpoint: every entry is still the snapshot's
    below = min(checkpoint, needed)
    deleted = 0
    for entry in os.scandir(log):
        digits = entry.name[:20]
        if len(entry.name) <= 20 or entry.name[20] != "." or not digits.isdigit():
            continue  # _last_checkpoint, a staged commit
        version = int(digits)
        if 0 < version < below and entry.stat().st_mtime < older_than:
            os.unlink(entry.path)
            deleted += 1
    return deleted


def _oldest_needed(warehouse: Warehouse, db: str, storage: str) -> int:
    """The oldest version of the table a stream still reads from (its checkpoint, or a queued
    trigger's offset); past the newest version when no stream reads it."""
    from .registry import load_streams

    oldest = 2**62
    for stream in load_streams(warehouse):
        table = stream.trigger_table
        if table is None or table.db != db or table.storage_name != storage:
            continue
        checkpoint = warehouse.catalog.latest_checkpoint_offset(stream.key)
        start = stream.info.start_offset if checkpoint is None else checkpoint
        pending = warehouse.catalog.oldest_pending_offset(stream.key)
        oldest = min(oldest, start, pending if pending is not None else start)
    return oldest


def table_files(path: Path) -> int:
    """How many data files a local table's folder holds (benchmarks and tests)."""
    return sum(1 for file in path.iterdir() if file.name.endswith(".parquet"))


@functools.lru_cache(maxsize=256)
def _arrow_schema(schema_string: str) -> pa.Schema:
    """A Delta schema (its JSON in metaData) as Arrow's, as delta-rs maps the types."""
    return pa.schema(Schema.from_json(schema_string).to_arrow())
