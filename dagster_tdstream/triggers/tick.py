"""The trigger task: one bounded step over a stream's WAL.

Owns reading the trigger table's change feed since the last processed offset, grouping the
rows, advancing each group's window state (``engine.py``) and queueing what fired, then
checkpointing the state under the new offset. This is the one module of ``triggers/`` that
touches storage; it knows nothing of Dagster (the sensor calls ``advance_stream``).

Replays are safe: the state is loaded from the checkpoint of the offset the caller says it
processed last, and triggers are queued under (trigger id, event, offset), so a tick that
dies after writing but before its caller stored the new cursor computes and queues exactly
the same triggers again, which the queue ignores.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..storage.catalog import TableInfo
from ..storage.registry import StreamDefinition
from ..storage.warehouse import Warehouse
from .engine import Change, GroupState
from .plan import window_trigger_for

_CHANGE_KINDS = {"insert": "insert", "update_postimage": "update", "delete": "delete"}


@dataclass(frozen=True)
class TickResult:
    offset: int  # the last WAL offset processed (the new cursor)
    start_offset: int  # the first offset this tick read
    queued: int  # triggers added to the queue
    pending: int  # triggers waiting for a run after this tick
    rows: int  # WAL records read


def group_hash(values: list[Any]) -> int:
    digest = hashlib.blake2b(json.dumps(values, default=str).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & (2**63 - 1)


def group_identity(warehouse: Warehouse, stream: StreamDefinition, values: list[Any]) -> int:
    """A group's id (``_tgrpid``, the notification ``groupId``): the child table's uid when the
    stream groups by tbname, as TDengine reports it, otherwise a stable hash of the values."""
    table = stream.trigger_table
    if "tbname" in stream.group_columns and table is not None:
        name = values[stream.group_columns.index("tbname")]
        info = table if table.kind != "super" else warehouse.find_table(table.db, name)
        if info is not None:
            return info.uid
    return group_hash(values)


def advance_stream(
    warehouse: Warehouse,
    stream: StreamDefinition,
    last_offset: int | None,
    *,
    max_offsets: int = 50,
    clock: Callable[[], int] = time.time_ns,
) -> TickResult:
    """Process at most ``max_offsets`` WAL offsets after ``last_offset`` (None: the stream has
    processed nothing yet) and queue the triggers they fire."""
    trigger = window_trigger_for(stream.stmt, stream.precision)
    table = stream.trigger_table
    assert table is not None  # window triggers always have a trigger table
    catalog = warehouse.catalog
    first = stream.info.start_offset if last_offset is None else last_offset + 1
    current = warehouse.delta.version(table.db, table.storage_name)
    if current < first:
        return TickResult(first - 1, first, 0, catalog.count_pending(stream.key), 0)
    end = min(current, first + max_offsets - 1)
    saved = catalog.load_checkpoint(stream.key, first - 1) if last_offset is not None else None
    states = {key: GroupState.from_json(value) for key, value in (saved or {}).items()}
    feed = warehouse.delta.change_feed(table.db, table.storage_name, first, end)
    changes = _group_changes(warehouse, stream, table, feed)
    fired_at = clock()
    queued: list[dict[str, Any]] = []
    for group_key, (values, group_id, group_changes) in changes.items():
        state = states.setdefault(group_key, GroupState())
        for fired in trigger.advance(state, group_changes):
            queued.append(
                {
                    "trigger_id": f"{group_id}:{fired.start}",
                    "event": fired.event,
                    "group_id": group_id,
                    "group_values": json.dumps(values),
                    "wstart": fired.start,
                    "wend": fired.end,
                    "row_count": fired.row_count,
                    "offset": end,
                    "fired_at": fired_at,
                }
            )
    catalog.save_checkpoint(stream.key, end, {key: state.to_json() for key, state in states.items()})
    added = catalog.enqueue_triggers(stream.key, queued)
    return TickResult(end, first, added, catalog.count_pending(stream.key), feed.num_rows)


def _group_changes(
    warehouse: Warehouse, stream: StreamDefinition, table: TableInfo, feed: pa.Table
) -> dict[str, tuple[list[Any], int, list[Change]]]:
    """WAL records per group, in commit order and time order inside a commit: group key →
    (group values, group id, changes)."""
    if feed.num_rows == 0:
        return {}
    pk = table.primary_key
    names = feed.column("tbname").to_pylist() if "tbname" in feed.column_names else [table.name] * feed.num_rows
    stamps = feed.column(pk).to_pylist()
    kinds = feed.column("_change_type").to_pylist()
    versions = feed.column("_commit_version").to_pylist()
    children: dict[str, TableInfo | None] = {}

    def table_of(tbname: str) -> TableInfo | None:
        if tbname not in children:
            children[tbname] = (
                table if table.kind != "super" and tbname == table.name else warehouse.find_table(table.db, tbname)
            )
        return children[tbname]

    rows = sorted(
        (versions[i], stamps[i], i)
        for i in range(feed.num_rows)
        if kinds[i] in _CHANGE_KINDS and (table.kind != "child" or names[i] == table.name)
    )
    groups: dict[str, tuple[list[Any], int, list[Change]]] = {}
    for _, ts, i in rows:
        source = table_of(names[i])
        values: list[Any] = []
        for column in stream.group_columns:
            if column == "tbname":
                values.append(names[i])
            else:
                values.append(source.tag_values.get(column) if source is not None else None)
        key = json.dumps(values, default=str)
        if key not in groups:
            groups[key] = (values, group_identity(warehouse, stream, values), [])
        groups[key][2].append(Change(ts, _CHANGE_KINDS[kinds[i]]))
    return groups
