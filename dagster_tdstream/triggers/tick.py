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
from functools import partial
from typing import Any

import pyarrow as pa

from ..sql import ast
from ..sql.timeunits import PRECISIONS
from ..storage import vfeed, written
from ..storage.catalog import TableInfo
from ..storage.registry import StreamDefinition
from ..storage.types import arrow_type
from ..storage.warehouse import Warehouse
from . import conditions
from .engine import RECALC, WINDOW_CLOSE, WINDOW_INVALIDATION, Change, Fired, TriggerTableMissingError, WindowTrigger
from .period import PERIOD_TICK, PeriodState, PeriodTrigger
from .plan import stream_admission, stream_trigger
from .replay import replay
from .rows import RowChange, RowState, RowWindowTrigger

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
    return group_identities(warehouse, stream, [values])[0]


def group_identities(
    warehouse: Warehouse,
    stream: StreamDefinition,
    groups: list[list[Any]],
    find: Callable[[str], TableInfo | None] | None = None,
) -> list[int]:
    """``group_identity`` of many groups, the child tables looked up in one catalog read
    (``find``: where one group's child table is looked up, a tick's own lookups)."""
    table = stream.trigger_table
    if "tbname" not in stream.group_columns or table is None:
        return [group_hash(values) for values in groups]
    position = stream.group_columns.index("tbname")
    if table.kind != "super":
        return [table.uid for _ in groups]
    if len(groups) == 1:
        found = (find or partial(warehouse.find_table, table.db))(groups[0][position])
        uids = {found.name: found.uid} if found is not None else {}
    else:
        uids = warehouse.catalog.child_uids(table.db, table.name)
    return [uids[values[position]] if values[position] in uids else group_hash(values) for values in groups]


def first_unread(stream: StreamDefinition, last_offset: int | None) -> int:
    """The first WAL offset a stream has not processed: the one after its last, or (nothing
    processed yet) the first it owns, recorded at CREATE."""
    return stream.info.start_offset if last_offset is None else last_offset + 1


def first_launch(stream: StreamDefinition) -> int | None:
    """When (ns) a stream that waits after CREATE (``FIRST_LAUNCH_DELAY``: 2.x continuous
    queries) may first compute; None for every other stream."""
    delay = stream.stmt.option(ast.FIRST_LAUNCH_DELAY)
    if delay is None or delay.duration is None:
        return None
    return stream.info.created_at * 10**6 + delay.duration.nanos


def ends_at(stream: StreamDefinition) -> int | None:
    """When (ns of processing time) a stream with an end time (``END_TIME``: 2.x continuous
    queries bounded from above) has fired every window it ever will: the end of the last
    window holding its last time, as its windows close by the clock. None for other streams."""
    end = stream.stmt.option(ast.END_TIME)
    if end is None or end.start is None:
        return None
    trigger = stream_trigger(stream)
    assert isinstance(trigger, WindowTrigger)  # continuous queries are INTERVAL streams
    last = int(end.start.value)  # type: ignore[call-overload]
    return trigger.spec.end(trigger.spec.floor(last)) * PRECISIONS[stream.precision]


def advance_stream(
    warehouse: Warehouse,
    stream: StreamDefinition,
    last_offset: int | None,
    *,
    max_offsets: int = 50,
    clock: Callable[[], int] = time.time_ns,
    tick_at: int | None = None,
) -> TickResult:
    """Process at most ``max_offsets`` WAL offsets after ``last_offset`` (None: the stream has
    processed nothing yet) and queue the triggers they fire. ``tick_at`` (ns): a PERIOD
    schedule's evaluation of that tick (without it, PERIOD ticks run on the ``clock`` timer)."""
    trigger = stream_trigger(stream)
    skipped = _skip_untreated(warehouse, stream, last_offset)
    if skipped is not None:
        return skipped
    if isinstance(trigger, PeriodTrigger):
        return _advance_period(warehouse, stream, trigger, last_offset, clock, tick_at)
    table = stream.trigger_table
    if table is None:
        raise TriggerTableMissingError(f"its trigger table {stream.trigger_missing} was dropped: nothing to read")
    catalog = warehouse.catalog
    first = first_unread(stream, last_offset)
    current = vfeed.newest_version(warehouse, table)
    clock_close = isinstance(trigger, WindowTrigger) and trigger.clock_close
    stream_close = isinstance(trigger, WindowTrigger) and trigger.stream_close
    if current < first and trigger.max_delay is None and not clock_close and not stream_close:
        return TickResult(first - 1, first, 0, catalog.count_pending(stream.key), 0)
    # with MAX_DELAY (or windows closed by the clock) a tick without new WAL records still
    # checks open windows' delays (or ends)
    end = max(first - 1, min(current, first + max_offsets - 1))
    saved = catalog.load_checkpoint(stream.key, first - 1) if last_offset is not None else None
    state_type = type(trigger.new_state())
    states: dict[str, Any] = {key: state_type.from_json(value) for key, value in (saved or {}).items()}
    feed = (
        warehouse.delta.change_feed(table.db, table.storage_name, first, end)
        if end >= first
        else pa.table({"_change_type": pa.array([], pa.string())})
    )
    rows = _GroupedRows(warehouse, stream, table)
    fired_at = clock()
    queued: list[dict[str, Any]] = []
    dropped: list[tuple[str, int]] = []  # rows expired per their own table (``table_expiry``)
    grouped = rows.group(feed)
    expired = stream.stmt.option("EXPIRED_TIME")
    expiry = expired.duration.in_precision(stream.precision) if expired and expired.duration else None
    for group_key, (values, group_id, changes) in grouped.items():
        state = states.setdefault(group_key, state_type())
        if expiry is not None:
            changes = _unexpired(changes, state.max_ts, expiry)
        if isinstance(trigger, WindowTrigger):
            # (the child table only where expiry is judged per table: otherwise the group's)
            tables = [c.values.get("tbname") if trigger.per_table else None for c in changes]
            moves = [Change(c.ts, c.kind, table=t) for c, t in zip(changes, tables, strict=True)]
            fired = trigger.advance(state, moves, fired_at)
            dropped += state.expired
        else:
            fired = trigger.advance(state, changes, fired_at)
            if isinstance(trigger, RowWindowTrigger) and state.late_from is not None:
                # rows out of time order: re-derive this group's windows from the table, before
                # and after this tick's records, so windows that vanished are invalidated too
                before, after = rows.all_rows(values, first - 1), rows.all_rows(values, end)
                state, fired = _rederive(trigger, before, after, state.late_from)
                states[group_key] = state
        queued += [queue_row(f, values, group_id, end, fired_at) for f in fired]
    now = fired_at // PRECISIONS[stream.precision]
    # the legacy CONTINUOUS_WINDOW_CLOSE: the newest event time of any group closes every group's windows
    newest = max((s.max_ts for s in states.values() if s.max_ts is not None), default=None) if stream_close else None
    for group_key, state in states.items():
        delayed = trigger.delayed(state, fired_at)  # type: ignore[arg-type]
        if clock_close:
            delayed += trigger.clock_closed(state, now)  # type: ignore[union-attr,arg-type]
        if newest is not None:
            delayed += trigger.stream_closed(state, newest)  # type: ignore[union-attr,arg-type]
        if delayed:
            values = json.loads(group_key)
            group_id = rows.identity(values)
            queued += [queue_row(f, values, group_id, end, fired_at) for f in delayed]
    if written.kept_for(stream, table) and end >= first:
        written.keep(warehouse, stream, table, feed, dropped, end)  # before the checkpoint: replays add nothing
    catalog.save_checkpoint(stream.key, end, {key: state.to_json() for key, state in states.items()})
    added = catalog.enqueue_triggers(stream.key, queued)
    return TickResult(end, first, added, catalog.count_pending(stream.key), feed.num_rows)


def _skip_untreated(warehouse: Warehouse, stream: StreamDefinition, last_offset: int | None) -> TickResult | None:
    """START STREAM … IGNORE UNTREATED: the offsets written while the stream was stopped are
    passed over — the trigger state is carried to the offset before the resume point, and the
    caller's next step reads from there. None when there is nothing to skip."""
    resume = stream.info.resume_from
    first = stream.info.start_offset if last_offset is None else last_offset + 1
    if resume is None or resume <= first:
        return None
    catalog = warehouse.catalog
    saved = catalog.load_checkpoint(stream.key, last_offset) if last_offset is not None else None
    catalog.save_checkpoint(stream.key, resume - 1, saved or {})
    return TickResult(resume - 1, first, 0, catalog.count_pending(stream.key), 0)


def _advance_period(
    warehouse: Warehouse,
    stream: StreamDefinition,
    trigger: PeriodTrigger,
    last_offset: int | None,
    clock: Callable[[], int],
    tick_at: int | None,
) -> TickResult:
    """PERIOD ticks: on processing time, one trigger per group and tick, consuming the
    trigger table's WAL written since the previous tick (``%%trows``). Ticks that fire together
    (missed while the timer was late) cannot tell when a row was written: its rows go to the
    latest of them, the earlier ones see none."""
    catalog = warehouse.catalog
    table = stream.trigger_table
    if stream.trigger_missing is not None:
        raise TriggerTableMissingError(f"its trigger table {stream.trigger_missing} was dropped: nothing to read")
    first = stream.info.start_offset if last_offset is None else last_offset + 1
    saved = catalog.load_checkpoint(stream.key, first - 1) if last_offset is not None else None
    state = PeriodState.from_json(saved) if saved else PeriodState()
    now = clock()
    if tick_at is not None:
        fired = trigger.at(state, tick_at)
        ticks = [] if fired is None else [fired]
    else:
        ticks = trigger.due(state, now)
    end = first - 1
    queued: list[dict[str, Any]] = []
    if ticks:
        counts: dict[str, tuple[list[Any], int]] = {}
        if table is not None:
            end = max(end, vfeed.newest_version(warehouse, table))
            feed = warehouse.delta.change_feed(table.db, table.storage_name, first, end) if end >= first else None
            grouped = _GroupedRows(warehouse, stream, table).group(feed) if feed is not None else {}
            for key, (values, _, changes) in grouped.items():
                counts[key] = (values, sum(c.kind != "delete" for c in changes))
                if values not in state.groups:
                    state.groups.append(values)
            groups = [g for g in state.groups if not trigger.ignore_nodata or json.dumps(g, default=str) in counts]
        else:
            groups = [[]]
        per = PRECISIONS[stream.precision]
        identities = [(values, group_identity(warehouse, stream, values)) for values in groups]
        # a tick's neighbours on the grid: the ticks fired beside it, the grid only at the ends
        before = [trigger.spec.before(ticks[0]), *ticks[:-1]]
        after = [*ticks[1:], state.next_tick]
        for tick, prev, following in zip(ticks, before, after, strict=True):
            latest = tick == ticks[-1]
            detail = {"period": True, "local": tick, "prev": prev, "next": following}
            detail.update({"from": first, "to": end} if latest else {"from": first, "to": first - 1})
            for values, group_id in identities:
                count = counts.get(json.dumps(values, default=str), (values, 0))[1] if latest else 0
                if trigger.ignore_nodata and not count and table is not None:
                    continue
                fired = Fired(PERIOD_TICK, tick // per, tick // per, count, detail)
                queued.append(queue_row(fired, values, group_id, end, now))
    catalog.save_checkpoint(stream.key, end, state.to_json())
    added = catalog.enqueue_triggers(stream.key, queued)
    return TickResult(end, first, added, catalog.count_pending(stream.key), 0)


def _unexpired(changes: list[RowChange], newest: int | None, expiry: int) -> list[RowChange]:
    """EXPIRED_TIME: a row older than the group's newest event time less the limit never
    triggers (manual recalculation still covers it)."""
    kept = []
    for change in changes:
        if newest is not None and change.ts < newest - expiry:
            continue
        kept.append(change)
        if change.kind != "delete":
            newest = change.ts if newest is None else max(newest, change.ts)
    return kept


def queue_row(fired: Fired, values: list[Any], group_id: int, offset: int, fired_at: int) -> dict[str, Any]:
    """A fired trigger as a queue row (also the shape recalculation hands to a run)."""
    values_json, detail_json = json.dumps(values, default=str), json.dumps(fired.detail, default=str)
    return queue_record(
        fired.event, fired.start, fired.end, fired.row_count, values_json, detail_json, group_id, offset, fired_at
    )


def queue_record(
    event: str, start: int, end: int, row_count: int, values_json: str, detail_json: str, group_id: int,
    offset: int, fired_at: int,
) -> dict[str, Any]:  # fmt: skip
    """``queue_row`` of a fired window, with the group values and the detail already JSON
    (bulk paths carry them so from Spark: no decoding and encoding again per trigger)."""
    return {
        "trigger_id": f"{group_id}:{start}",
        "event": event,
        "group_id": group_id,
        "group_values": values_json,
        "wstart": start,
        "wend": end,
        "row_count": row_count,
        "detail": detail_json,
        "offset": offset,
        "fired_at": fired_at,
    }


def _rederive(
    trigger: RowWindowTrigger, before: list[RowChange], after: list[RowChange], late_from: int
) -> tuple[RowState, list[Fired]]:
    """Replay the group's rows in time order from a fresh state, as they were before the tick
    and as they are after it; this replaces what the tick's records fired incrementally (that
    ran on the state before the late rows). Recomputed: closed windows that end at or after the late row
    (their rows may have changed) and any window that differs from before (a late row can
    pull an earlier session in). Invalidated: windows that existed before but not any more (a
    late row can merge two sessions or split a state window)."""
    fired, state = replay(trigger, after)
    assert isinstance(state, RowState)
    new = [f for f in fired if f.event == WINDOW_CLOSE]
    old_fired, old_state = replay(trigger, before)
    assert isinstance(old_state, RowState)
    old = [f for f in old_fired if f.event == WINDOW_CLOSE]
    unchanged = {(f.start, f.end, f.row_count) for f in old}
    starts = {f.start for f in new}
    written = list(old)
    if trigger.at_once and trigger.max_delay is not None:
        # the legacy AT_ONCE wrote the open windows too (a COUNT_WINDOW's every window not yet
        # full): gone if nothing starts there now
        written += [Fired(WINDOW_CLOSE, f.start, f.end, f.row_count, {}) for f in trigger.open_windows(old_state)]
        starts |= {f.start for f in trigger.open_windows(state)}
    gone = [Fired(WINDOW_INVALIDATION, f.start, f.end, f.row_count, f.detail) for f in written if f.start not in starts]
    old_starts = {f.start for f in old}
    recalculated = [
        Fired(RECALC if f.start in old_starts else WINDOW_CLOSE, f.start, f.end, f.row_count, f.detail)
        for f in new
        if f.end >= late_from or (f.start, f.end, f.row_count) not in unchanged
    ]
    return state, gone + recalculated


def group_expr_value(stream: StreamDefinition, name: str, values: dict[str, Any]) -> Any:
    """A legacy PARTITION BY expression's value for a row, typed as Spark casts it where rows
    meet their group (``bulk.group_column_sql``), so a group has one key on both sides."""
    value = conditions.value(stream.group_exprs[name], values)
    if value is None:
        return None
    arrow = arrow_type(stream.group_expr_type(name))
    if pa.types.is_floating(arrow):
        return float(value)
    if pa.types.is_integer(arrow):
        return int(value)
    return str(value) if pa.types.is_string(arrow) and not isinstance(value, str) else value


class _GroupedRows:
    """Trigger-table rows as the engine sees them: per group, with column, tag and tbname
    values, PRE_FILTER applied."""

    def __init__(self, warehouse: Warehouse, stream: StreamDefinition, table: TableInfo) -> None:
        self.warehouse = warehouse
        self.stream = stream
        self.table = table
        self.admission = stream_admission(stream)
        self._children: dict[str, TableInfo | None] = {}
        self._snapshots: dict[int, dict[str, tuple[list[Any], list[RowChange]]]] = {}
        # the values a row's own update cannot change: its child table's name and tags
        self._fixed = {"tbname", *(t.name for t in table.tags)}

    def _table_of(self, tbname: str) -> TableInfo | None:
        if tbname not in self._children:
            table = self.table
            same = table.kind != "super" and tbname == table.name
            self._children[tbname] = table if same else self._member(self.warehouse.find_table(table.db, tbname))
        return self._children[tbname]

    def _member(self, child: TableInfo | None) -> TableInfo | None:
        """The child table, when its rows are the stream's: TDengine's stream over a virtual
        super table keeps the child tables it started with (one created later is ignored)."""
        later = child is not None and self.table.virtual and child.created_at > self.stream.info.created_at
        return None if later else child

    def _known(self, tbnames: set[str]) -> None:
        """Look up the child tables a feed names in one catalog read (a tick of a super table
        with a thousand child tables read them one query each)."""
        missing = tbnames - self._children.keys() - {self.table.name}
        if self.table.kind == "super" and missing:
            found = self.warehouse.catalog.child_tables_named(self.table.db, self.table.name, missing)
            self._children.update({name: self._member(found.get(name)) for name in missing})

    def identity(self, group_values: list[Any]) -> int:
        """``group_identity``, the child table taken from this feed's lookups."""
        return group_identities(self.warehouse, self.stream, [group_values], find=self._table_of)[0]

    def _values(self, record: dict[str, Any], tbname: str) -> dict[str, Any]:
        source = self._table_of(tbname)
        values = {c.name: record.get(c.name) for c in self.table.columns}
        values.update({t.name: None for t in self.table.tags})  # a tag added since: NULL until set
        if source is not None:
            values.update(source.tag_values)
        values["tbname"] = tbname
        for name in self.stream.group_exprs:  # a legacy PARTITION BY expression
            values[name] = group_expr_value(self.stream, name, values)
        return values

    def _group_values(self, values: dict[str, Any]) -> list[Any]:
        return [values.get(column) for column in self.stream.group_columns]

    def group(self, feed: pa.Table) -> dict[str, tuple[list[Any], int, list[RowChange]]]:
        """WAL records per group, in commit order and time order inside a commit: group key →
        (group values, group id, changes)."""
        groups: dict[str, tuple[list[Any], int, list[RowChange]]] = {}
        if feed.num_rows == 0:
            return groups
        pk = self.table.primary_key
        records = feed.to_pylist()
        # a row's update pre-image before its post-image, whatever order the feed gives
        records.sort(key=lambda r: (r["_commit_version"], r[pk], r["_change_type"] != "update_preimage"))
        # an update is compared with the row before it when the row's own values decide its
        # group (PARTITION BY a column) or whether it enters the trigger (PRE_FILTER): a row
        # that leaves a group or the filter is a delete there, one that joins is an insert
        by_value = self.admission.pre_filter is not None or any(c not in self._fixed for c in self.stream.group_columns)
        before: dict[tuple[Any, ...], tuple[str, list[Any], dict[str, Any]]] = {}

        def add(key: str, group_values: list[Any], change: RowChange) -> None:
            if key not in groups:
                groups[key] = (group_values, self.identity(group_values), [])
            groups[key][2].append(change)

        self._known({record.get("tbname") or self.table.name for record in records})

        for record in records:
            tbname = record.get("tbname") or self.table.name
            if self.table.kind == "child" and tbname != self.table.name:
                continue
            if self.table.kind == "super" and self._table_of(tbname) is None:
                # a child table dropped since: its rows went with it (a delete commit follows),
                # its tags are gone, and it is no group any more
                continue
            if by_value and record["_change_type"] == "update_preimage":
                values = self._values(record, tbname)
                old = self._group_values(values)
                before[(record["_commit_version"], tbname, record[pk])] = (json.dumps(old, default=str), old, values)
                continue
            kind = _CHANGE_KINDS.get(record["_change_type"])
            if kind is None:
                continue
            values = self._values(record, tbname)
            group_values = self._group_values(values)
            key = json.dumps(group_values, default=str)
            admitted = kind == "delete" or self.admission.admits(record[pk], values)
            old = before.pop((record["_commit_version"], tbname, record[pk]), None) if kind == "update" else None
            if old is not None:
                was_admitted = self.admission.admits(record[pk], old[2])
                if was_admitted and (old[0] != key or not admitted):
                    add(old[0], old[1], RowChange(record[pk], "delete", old[2]))  # left the group
                if admitted and (old[0] != key or not was_admitted):
                    kind = "insert"  # new to this group
            if admitted:
                add(key, group_values, RowChange(record[pk], kind, values))
        return groups

    def all_groups(self, version: int) -> dict[str, tuple[list[Any], list[RowChange]]]:
        """Every group's rows in the table as of WAL offset ``version``, in time order (for
        re-derivation); read once per version and tick."""
        if version in self._snapshots:
            return self._snapshots[version]
        data = self.warehouse.read_table(self.table, version).to_pylist() if version >= 0 else []
        pk = self.table.primary_key
        groups: dict[str, tuple[list[Any], list[RowChange]]] = {}
        self._known({record.get("tbname") or self.table.name for record in data})
        for record in sorted(data, key=lambda r: r[pk]):
            tbname = record.get("tbname") or self.table.name
            if self.table.kind == "super" and self._table_of(tbname) is None:
                continue  # a child table dropped since, or not one of the stream's
            values = self._values(record, tbname)
            if not self.admission.admits(record[pk], values):
                continue
            group_values = self._group_values(values)
            key = json.dumps(group_values, default=str)
            groups.setdefault(key, (group_values, []))[1].append(RowChange(record[pk], "insert", values))
        self._snapshots[version] = groups
        return groups

    def all_rows(self, group_values: list[Any], version: int) -> list[RowChange]:
        found = self.all_groups(version).get(json.dumps(group_values, default=str))
        return found[1] if found else []


def rows_in_offsets(
    warehouse: Warehouse, stream: StreamDefinition, first: int, last: int
) -> dict[str, list[dict[str, Any]]]:
    """Per group key, the rows written in WAL offsets [first, last] (inserts and updates),
    with column, tag and tbname values: what a PERIOD tick's %%trows hold."""
    table = stream.trigger_table
    if table is None or last < first:
        return {}
    feed = warehouse.delta.change_feed(table.db, table.storage_name, first, last)
    grouped = _GroupedRows(warehouse, stream, table).group(feed)
    return {key: [c.values for c in changes if c.kind != "delete"] for key, (_, _, changes) in grouped.items()}
