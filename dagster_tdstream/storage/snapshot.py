"""A local Delta table's state as its log says, replayed here, and the checkpoints written from it.

Owns reading a local table's last checkpoint and the log entries after it into a ``Snapshot``
(the live files' add actions, the removes still within the table's tombstone retention,
metaData, protocol, app transactions, domain metadata), kept per table in this process and
advanced by reading only the entries added since; and writing a version's checkpoint (one
Parquet file in the schema delta-rs writes, then ``_last_checkpoint``). Why: delta-rs brings a
handle up to date at ~0.4 ms per new log entry, and a table fed by small commits has an entry
per commit. Compaction (every 50 versions) and the checkpoint (every 100) paid that on the
writes' behalf, 1.1 ms of a one-row INSERT's 4 ms; a JSON entry read here costs ~30 µs.
Queries, the change feed and object stores stay with delta-rs (``delta.py``). Must not commit
versions (``append.py``) nor decide what maintenance does (``maintenance.py``).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import CatalogError
from .append import checkpoint_hint, fsync_path, last_checkpoint, log_lines

_STRINGS = pa.map_(pa.string(), pa.string())
_SETTINGS = pa.map_(pa.string(), pa.field("value", pa.string(), nullable=False))  # values never null
_DELETION_VECTOR = pa.struct(
    [
        pa.field("storageType", pa.string(), nullable=False),
        pa.field("pathOrInlineDv", pa.string(), nullable=False),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32(), nullable=False),
        pa.field("cardinality", pa.int64(), nullable=False),
    ]
)
_NAMES = pa.list_(pa.field("element", pa.string(), nullable=False))
# the checkpoint's columns as delta-rs 1.x writes them (delta-kernel's schema); a reader takes
# each row's one non-null column as that row's action
CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field(
            "add",
            pa.struct(
                [
                    pa.field("path", pa.string(), nullable=False),
                    pa.field("partitionValues", _STRINGS, nullable=False),
                    pa.field("size", pa.int64(), nullable=False),
                    pa.field("modificationTime", pa.int64(), nullable=False),
                    pa.field("dataChange", pa.bool_(), nullable=False),
                    pa.field("stats", pa.string()),
                    pa.field("tags", _STRINGS),
                    pa.field("deletionVector", _DELETION_VECTOR),
                    pa.field("baseRowId", pa.int64()),
                    pa.field("defaultRowCommitVersion", pa.int64()),
                    pa.field("clusteringProvider", pa.string()),
                ]
            ),
        ),
        pa.field(
            "remove",
            pa.struct(
                [
                    pa.field("path", pa.string(), nullable=False),
                    pa.field("deletionTimestamp", pa.int64()),
                    pa.field("dataChange", pa.bool_(), nullable=False),
                    pa.field("extendedFileMetadata", pa.bool_()),
                    pa.field("partitionValues", _STRINGS),
                    pa.field("size", pa.int64()),
                    pa.field("stats", pa.string()),
                    pa.field("tags", _STRINGS),
                    pa.field("deletionVector", _DELETION_VECTOR),
                    pa.field("baseRowId", pa.int64()),
                    pa.field("defaultRowCommitVersion", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "metaData",
            pa.struct(
                [
                    pa.field("id", pa.string(), nullable=False),
                    pa.field("name", pa.string()),
                    pa.field("description", pa.string()),
                    pa.field(
                        "format",
                        pa.struct(
                            [
                                pa.field("provider", pa.string(), nullable=False),
                                pa.field("options", _SETTINGS, nullable=False),
                            ]
                        ),
                        nullable=False,
                    ),
                    pa.field("schemaString", pa.string(), nullable=False),
                    pa.field("partitionColumns", _NAMES, nullable=False),
                    pa.field("createdTime", pa.int64()),
                    pa.field("configuration", _SETTINGS, nullable=False),
                ]
            ),
        ),
        pa.field(
            "protocol",
            pa.struct(
                [
                    pa.field("minReaderVersion", pa.int32(), nullable=False),
                    pa.field("minWriterVersion", pa.int32(), nullable=False),
                    pa.field("readerFeatures", _NAMES),
                    pa.field("writerFeatures", _NAMES),
                ]
            ),
        ),
        pa.field(
            "txn",
            pa.struct(
                [
                    pa.field("appId", pa.string(), nullable=False),
                    pa.field("version", pa.int64(), nullable=False),
                    pa.field("lastUpdated", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "domainMetadata",
            pa.struct(
                [
                    pa.field("domain", pa.string(), nullable=False),
                    pa.field("configuration", pa.string(), nullable=False),
                    pa.field("removed", pa.bool_(), nullable=False),
                ]
            ),
        ),
        pa.field(  # v2 checkpoints' pointers to more files: none in a checkpoint written here
            "sidecar",
            pa.struct(
                [
                    pa.field("path", pa.string(), nullable=False),
                    pa.field("sizeInBytes", pa.int64(), nullable=False),
                    pa.field("modificationTime", pa.int64(), nullable=False),
                    pa.field("tags", _STRINGS),
                ]
            ),
        ),
    ]
)
# map-typed fields: a checkpoint gives them as (key, value) pairs, a log entry as an object
_MAP_FIELDS = {
    "add": ("partitionValues", "tags"),
    "remove": ("partitionValues", "tags"),
    "metaData": ("configuration",),
}
_RETENTION = re.compile(r"interval\s+(\d+)\s+(second|minute|hour|day|week)s?", re.IGNORECASE)
_UNIT_MS = {"second": 1_000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}
_DEFAULT_RETENTION_MS = _UNIT_MS["week"]  # Delta's default delta.deletedFileRetentionDuration


@dataclass(frozen=True)
class Snapshot:
    """A table at ``version``: its live files (path as in the log → add action), the removes
    a checkpoint still carries, and its table-wide actions. Never changed once built."""

    version: int
    files: Mapping[str, dict[str, Any]]
    tombstones: Mapping[str, dict[str, Any]]
    metadata: dict[str, Any]
    protocol: dict[str, Any]
    transactions: Mapping[str, dict[str, Any]]
    domains: Mapping[str, dict[str, Any]]


_CACHE: dict[Path, tuple[str, Snapshot]] = {}
_CACHE_LOCK = threading.Lock()


def newest(table: Path, identity: str) -> Snapshot:
    """The table's newest snapshot; ``identity`` is its incarnation's id (a table dropped and
    created again under the same folder is replayed anew)."""
    with _CACHE_LOCK:
        cached = _CACHE.get(table)
        base = cached[1] if cached is not None and cached[0] == identity else None
        snapshot = _advanced(table, base)
        _CACHE[table] = (identity, snapshot)
        return snapshot


def _advanced(table: Path, base: Snapshot | None) -> Snapshot:
    if base is None:
        return _replayed(table)
    state: _State | None = None  # copied from ``base`` only when an entry follows it
    version = base.version
    while (lines := log_lines(table, version + 1)) is not None:
        if state is None:
            state = _State.of(base)
        state.apply_lines(lines)
        version += 1
    if (last_checkpoint(table) or -1) > version:  # the entries after ``base`` were expired
        return _replayed(table)
    return base if state is None else state.snapshot(version)


def _replayed(table: Path) -> Snapshot:
    """From the last checkpoint (or version 0) on."""
    state = _State.empty()
    hint = checkpoint_hint(table)
    version = -1
    if hint is not None:
        # one file, or the parts of a multi-part checkpoint (Spark writes those for big tables);
        # the entries before it may be gone, so without all of it the files it lists are unknown
        version, expected = hint
        parts = sorted((table / "_delta_log").glob(f"{version:020}.checkpoint.*parquet"))
        if len(parts) != expected:
            raise CatalogError(
                f"the checkpoint of version {version} that {table}/_delta_log/_last_checkpoint names has "
                f"{len(parts)} of its {expected} file(s): the table's snapshot cannot be read"
            )
        for part in parts:
            for row in pq.read_table(part).to_pylist():
                if row.get("sidecar") is not None:  # a v2 checkpoint: a reader feature no table here has
                    raise CatalogError(f"the checkpoint {part} refers to sidecar files, which are not read here")
                for kind, action in row.items():
                    if action is not None and kind in _State.KINDS:
                        state.apply(kind, _from_checkpoint(kind, action))
    while (lines := log_lines(table, version + 1)) is not None:
        state.apply_lines(lines)
        version += 1
    if version < 0 or not state.metadata:
        raise CatalogError(f"the Delta table at {table} has no log to read")
    return state.snapshot(version)


def _from_checkpoint(kind: str, action: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint row's action as the log entry would give it: maps as objects, absent
    fields left out."""
    out = {key: value for key, value in action.items() if value is not None}
    for key in _MAP_FIELDS.get(kind, ()):
        if key in out:
            out[key] = dict(out[key])
    if kind == "metaData" and "format" in out:
        out["format"] = {**out["format"], "options": dict(out["format"].get("options") or [])}
    return out


class _State:
    """A snapshot being replayed."""

    KINDS = ("add", "remove", "metaData", "protocol", "txn", "domainMetadata")

    def __init__(
        self,
        files: dict[str, dict[str, Any]],
        tombstones: dict[str, dict[str, Any]],
        metadata: dict[str, Any],
        protocol: dict[str, Any],
        transactions: dict[str, dict[str, Any]],
        domains: dict[str, dict[str, Any]],
    ) -> None:
        self.files, self.tombstones = files, tombstones
        self.metadata, self.protocol = metadata, protocol
        self.transactions, self.domains = transactions, domains

    @classmethod
    def empty(cls) -> _State:
        return cls({}, {}, {}, {}, {}, {})

    @classmethod
    def of(cls, base: Snapshot) -> _State:
        return cls(
            dict(base.files),
            dict(base.tombstones),
            base.metadata,
            base.protocol,
            dict(base.transactions),
            dict(base.domains),
        )

    def apply_lines(self, lines: list[str]) -> None:
        for line in lines:
            if not line.strip():
                continue
            for kind, action in json.loads(line).items():
                if kind in self.KINDS:
                    self.apply(kind, action)

    def apply(self, kind: str, action: dict[str, Any]) -> None:
        if kind == "add":
            self.files[action["path"]] = action
            self.tombstones.pop(action["path"], None)
        elif kind == "remove":
            self.files.pop(action["path"], None)
            self.tombstones[action["path"]] = action
        elif kind == "metaData":
            self.metadata = action
        elif kind == "protocol":
            self.protocol = action
        elif kind == "txn":
            self.transactions[action["appId"]] = action
        else:
            self.domains[action["domain"]] = action

    def snapshot(self, version: int) -> Snapshot:
        # removes past the retention leave memory as they leave the next checkpoint: a table
        # compacted every 50 versions would otherwise hold every file it ever had
        oldest = time.time_ns() // 1_000_000 - retention_ms(self.metadata)
        kept = {path: r for path, r in self.tombstones.items() if r.get("deletionTimestamp", oldest) >= oldest}
        return Snapshot(version, self.files, kept, self.metadata, self.protocol, self.transactions, self.domains)


def retention_ms(metadata: dict[str, Any]) -> int:
    """How long removed files stay in checkpoints (``delta.deletedFileRetentionDuration``)."""
    setting = (metadata.get("configuration") or {}).get("delta.deletedFileRetentionDuration")
    found = _RETENTION.fullmatch(setting.strip()) if setting else None
    return int(found.group(1)) * _UNIT_MS[found.group(2).lower()] if found else _DEFAULT_RETENTION_MS


def max_value(add: dict[str, Any], column: str) -> Any:
    """The newest value of ``column`` in an add action's statistics; None without them."""
    stats = add.get("stats")
    return json.loads(stats).get("maxValues", {}).get(column) if stats else None


def write_checkpoint(table: Path, snapshot: Snapshot) -> None:
    """Write ``snapshot``'s checkpoint and point ``_last_checkpoint`` at it, unless it already
    points at a later one. Each file is written aside, fsynced and renamed into place: a
    reader sees a whole checkpoint or none, and two processes writing the same version
    write the same actions."""
    rows: list[dict[str, Any]] = [
        {"protocol": snapshot.protocol},
        {"metaData": snapshot.metadata},
        *({"txn": txn} for txn in snapshot.transactions.values()),
        *({"domainMetadata": domain} for domain in snapshot.domains.values()),
        *({"add": add} for add in snapshot.files.values()),
        *({"remove": remove} for remove in snapshot.tombstones.values()),
    ]
    log = table / "_delta_log"
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA), sink, compression="snappy")
    encoded = sink.getvalue().to_pybytes()
    _replace(_checkpoint_path(table, snapshot.version), encoded)
    files = len(snapshot.files)
    pointer = {"version": snapshot.version, "size": len(rows), "sizeInBytes": len(encoded), "numOfAddFiles": files}
    if (last_checkpoint(table) or -1) < snapshot.version:
        _replace(log / "_last_checkpoint", json.dumps(pointer, separators=(",", ":")).encode())
    fsync_path(log, directory=True)


def _replace(target: Path, data: bytes) -> None:
    """``target`` holds ``data``, written aside, fsynced and renamed over it (the caller
    fsyncs the folder)."""
    staged = target.parent / f".tdstream-{uuid.uuid4()}.{target.name}.tmp"
    try:
        with open(staged, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(staged, target)
    finally:
        staged.unlink(missing_ok=True)


def _checkpoint_path(table: Path, version: int) -> Path:
    return table / "_delta_log" / f"{version:020}.checkpoint.parquet"
