"""Bulk window derivation inside Spark: FILL_HISTORY and recalculation of event-time triggers.

Owns running the trigger state machines over a whole table in one Spark job: the trigger
table's snapshot is grouped by the stream's PARTITION BY columns and each group's rows go
through ``triggers.replay`` — the same code the sensor runs incrementally, so the bulk and the
incremental path cannot disagree on a window. Spark does the per-row work where it can:
INTERVAL's runs (one per group and window) and the islands of STATE_WINDOW (runs of rows in
one state) and SESSION (runs of rows within the gap) are found by Spark and replayed here;
COUNT windows (row numbers) and EVENT windows (the rows that open and close them) are built
here from the few rows Spark marks, with the state machines' own open/close rules, and held to
the replay by tests; PRE_FILTER is applied by Spark first. SLIDING time points replay row by
row in an Arrow UDF on the executors. The job
returns what fired plus each group's final state, which becomes the checkpoint the sensor
continues from. Reads only; writing the outputs is ``run.py``'s and ``output.py``'s.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property, reduce
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import QueryError
from ..sql import ast
from ..sql.intervals import IntervalSpec
from ..sql.timeunits import resolve_timezone
from ..sql.translate import SourceTable, TranslationContext, row_condition, row_expression
from ..sql.walk import walk
from ..storage.registry import StreamDefinition
from ..storage.spark_read import spark_type, table_frame
from ..storage.types import arrow_type
from ..storage.warehouse import Warehouse
from ..triggers.engine import WINDOW_CLOSE, WINDOW_OPEN, Fired, GroupState, WindowTrigger
from ..triggers.plan import Trigger, stream_admission, stream_trigger
from ..triggers.replay import (
    Admission,
    EventTimeTrigger,
    TriggerState,
    bucket_changes,
    columns_read,
    fast_interval,
    interval_history,
    island_changes,
    replay,
    session_changes,
)
from ..triggers.rows import CountTrigger, EventTrigger, RowChange, RowState, SessionTrigger, StateTrigger
from ..triggers.tick import group_expr_value, group_identities, queue_record

_STATE = "__STATE__"  # the UDF's row carrying a group's final state rather than a trigger
_OUTPUT_SCHEMA = "group_key string, event string, wstart long, wend long, row_count long, detail string"
_ALL = "__all"  # the single group of a stream without PARTITION BY
_STATE_VALUE = "__state_value"  # a STATE_WINDOW expression's value, a column of the rows
LOCAL_ROWS = 200_000  # trigger tables up to this size are derived in this process
DRIVER_ISLANDS = 1_000_000  # STATE_WINDOW / SESSION islands up to this many are replayed in this process


@dataclass(frozen=True)
class Derived:
    triggers: list[dict[str, Any]]  # queue rows, each with a run-local ``id``
    states: dict[str, dict[str, Any]]  # group key → final trigger state (checkpoint form), one per group


# a group's windows as (event, start, end, rows, detail as JSON), and the state it leaves
Windows = list[tuple[str, int, int, int, str]]
# one group's rows, as the derivation hands them over (rows, runs, islands, marked rows), in;
# its windows and final state out: run in this process, or wrapped as the executors' UDF
GroupReplay = Callable[[pa.Table], tuple[Windows, TriggerState]]


def _windows(fired: list[Fired]) -> Windows:
    # most triggers carry no detail: "{}" without encoding it
    return [
        (f.event, f.start, f.end, f.row_count, json.dumps(f.detail, default=str) if f.detail else "{}") for f in fired
    ]


def _as_udf(replay_group: GroupReplay, group_columns: tuple[str, ...]) -> Callable[[pa.Table], pa.Table]:
    """The Arrow UDF the executors run: a group's windows, then its final state, as rows."""

    def per_group(data: pa.Table) -> pa.Table:
        windows, state = replay_group(data)
        rows = [*windows, (_STATE, 0, 0, 0, json.dumps(state.to_json(), default=str))]
        columns = [list(column) for column in zip(*rows, strict=True)]
        key = [_group_key(data, group_columns)] * len(rows)
        return pa.table([key, *columns], schema=_ARROW_OUTPUT)

    return per_group


def group_column_sql(stream: StreamDefinition, source: SourceTable, ctx: TranslationContext) -> list[str]:
    """Each group column over the trigger table's rows aliased ``d``: the column, or a legacy
    PARTITION BY expression rendered as the queries render it, cast to the type the trigger
    task gives its value (``tick.group_expr_value``: one group, one key on both sides)."""
    columns = []
    for name in stream.group_columns:
        if name in stream.group_exprs:
            spark = spark_type(arrow_type(stream.group_expr_type(name))).simpleString()
            columns.append(f"CAST({row_expression(source, stream.group_exprs[name], ctx).sql} AS {spark})")
        else:
            columns.append("d.tbname" if name == "tbname" else f"d.`{name}`")
    return columns


def _group_key(data: pa.Table, group_columns: tuple[str, ...]) -> str:
    values = [data.column(c)[0].as_py() for c in group_columns] if data.num_rows else []
    return json.dumps(values, default=str)


def _derived_here(
    warehouse: Warehouse, stream: StreamDefinition, data: pa.Table, columns: Sequence[str], replay_group: GroupReplay
) -> Derived:
    """Each group of ``data`` replayed in this process, its windows and state straight into
    queue rows and checkpoint states (not through the UDF's rows and back: that round trip
    was 1.5 s of the derivation's 3.6 s at 166,000 INTERVAL windows)."""
    outcomes = []
    for part in _group_slices(data, columns) if columns else [data]:
        windows, state = replay_group(part)
        outcomes.append((_group_key(part, stream.group_columns), windows, state.to_json()))
    return _queued(warehouse, stream, outcomes)


def _queued(
    warehouse: Warehouse, stream: StreamDefinition, outcomes: Sequence[tuple[str, Windows, dict[str, Any]]]
) -> Derived:
    """Each group's (key, windows, final state in checkpoint form) as queue rows, numbered in
    order, and the states by group key."""
    fired_at = time.time_ns()
    identities = group_identities(warehouse, stream, [json.loads(key) for key, _, _ in outcomes])
    triggers: list[dict[str, Any]] = []
    for (key, windows, _), identity in zip(outcomes, identities, strict=True):
        for event, start, end, rows, detail in windows:
            record = queue_record(event, start, end, rows, key, detail, identity, -1, fired_at)
            record["id"] = len(triggers)
            triggers.append(record)
    return Derived(triggers, {key: state for key, _, state in outcomes})


def _interval_runs(trigger: WindowTrigger) -> GroupReplay:
    """INTERVAL: one group's row runs (``replay.bucket_changes``) in, its windows and state out."""
    fast = fast_interval(trigger)

    def replay_group(data: pa.Table) -> tuple[Windows, TriggerState]:
        runs = zip(*(data.column(c).to_pylist() for c in ("__first", "__last", "__rows")), strict=True)
        if fast:  # windows that only close, without detail: no Fired built for them
            closed, state = interval_history(trigger, runs)
            return [(WINDOW_CLOSE, start, end, rows, "{}") for start, end, rows in closed], state
        fired, state = replay(trigger, bucket_changes(runs))
        return _windows(fired), state

    return replay_group


def interval_windows(warehouse: Warehouse, stream: StreamDefinition, runs: pa.Table) -> Derived:
    """Every group's INTERVAL windows and final state from its runs as Spark finds them — the
    stream's group columns, ``__first``, ``__last``, ``__rows``, a row per group and window
    (``compute/history.py`` has them with the query's aggregates) — replayed here, or for
    fixed windows that only close, computed for all groups at once (``fixed_interval_outcomes``)."""
    trigger = stream_trigger(stream)
    assert isinstance(trigger, WindowTrigger)
    runs, names = _grouped(stream, runs)
    return _interval_derived(warehouse, stream, trigger, runs, names)


def _grouped(stream: StreamDefinition, data: pa.Table) -> tuple[pa.Table, list[str]]:
    """``data`` with the columns its groups are told apart by: the group columns, or for a
    stream without PARTITION BY one column of its own (the single group)."""
    return _grouped_by(data, list(stream.group_columns))


def _interval_derived(
    warehouse: Warehouse, stream: StreamDefinition, trigger: WindowTrigger, runs: pa.Table, names: list[str]
) -> Derived:
    outcomes = fixed_interval_outcomes(trigger, runs, names, stream.group_columns)
    if outcomes is None:
        return _derived_here(warehouse, stream, runs, names, _interval_runs(trigger))
    return _queued(warehouse, stream, outcomes)


@dataclass(frozen=True)
class FixedClosing:
    """Which of a stream's runs (one row per group and fixed window: the group columns,
    ``__first``, ``__last``, ``__rows``) lie in closed windows, for all groups at once. Rows in
    order never land in a closed window, so a group's closed windows are those starting at or
    before the last one its newest row (less the watermark) closes, found with array
    arithmetic instead of a Python step per run (0.8 s of 166,000 windows' history here)."""

    trigger: WindowTrigger
    runs: pa.Table  # sorted by group, then by window
    heads: np.ndarray  # each group's first run in ``runs``
    sizes: np.ndarray  # each group's runs
    starts: np.ndarray  # each run's window start
    closing: np.ndarray  # whether each run's window is closed
    newest: np.ndarray  # each group's newest row
    last: np.ndarray  # each group's last closed window start (below its first when none is)
    earliest: np.ndarray  # each group's first window start

    @cached_property
    def closed(self) -> np.ndarray:
        """Per group: its closed windows with rows (the first of its runs)."""
        return np.add.reduceat(self.closing.astype(np.int64), self.heads) if len(self.heads) else self.heads

    @cached_property
    def complete(self) -> np.ndarray:
        """Per group: whether its closed windows are all windows with rows — IGNORE_NODATA_TRIGGER,
        or no window of its closed span without rows (such a window fires too)."""
        if self.trigger.ignore_nodata:
            return np.ones(len(self.heads), dtype=bool)
        sliding = self.trigger.spec.sliding  # type: ignore[union-attr]
        spanned = np.where(self.last >= self.earliest, (self.last - self.earliest) // sliding + 1, 0)
        return self.closed == spanned

    def group(self, g: int) -> tuple[list[tuple[int, int, int]] | None, GroupState]:
        """Group ``g``'s final state, and — where its closed span has windows without rows —
        its closed windows as (start, end, rows), replayed by ``interval_history`` over its
        runs; None for a complete group, whose closed windows are its first ``closed[g]``
        runs."""
        head = int(self.heads[g])
        end = head + int(self.sizes[g])
        if not self.complete[g]:
            runs = (self.runs.column(name)[head:end].to_pylist() for name in ("__first", "__last", "__rows"))
            windows, replayed = interval_history(self.trigger, zip(*runs, strict=True))
            return windows, replayed
        shut = head + int(self.closed[g])
        spec = self.trigger.spec
        state = GroupState(max_ts=int(self.newest[g]))
        last, earliest = int(self.last[g]), int(self.earliest[g])
        state.next_close = last + spec.sliding if last >= earliest else earliest  # type: ignore[union-attr]
        rows = self.runs.column("__rows")[shut:end].to_pylist()
        state.counts = dict(zip(self.starts[shut:end].tolist(), rows, strict=True))  # the open windows
        if self.trigger.max_delay is not None:  # their delay counts from the replay's clock, 0
            state.opened_at = dict.fromkeys(state.counts, 0)
        return None, state


@dataclass(frozen=True)
class _FixedRuns:
    """Runs of fixed windows (one row per group and window) sorted by group, then window."""

    trigger: WindowTrigger
    spec: IntervalSpec
    runs: pa.Table
    heads: np.ndarray  # each group's first run
    sizes: np.ndarray  # each group's runs
    starts: np.ndarray  # each run's window start
    group: np.ndarray  # each run's group number

    def newest(self) -> np.ndarray:
        """Each group's newest row among its runs."""
        if not len(self.heads):
            return np.zeros(0, np.int64)
        return np.maximum.reduceat(self.runs.column("__last").to_numpy(), self.heads)

    def last_closed(self, newest: np.ndarray) -> np.ndarray:
        """Per group, the last window start its newest row (less the watermark) closes:
        ``spec.last_closed`` over an array."""
        progress = newest - self.trigger.watermark - self.spec.interval
        return progress - (progress - self.spec.offset) % self.spec.sliding


def _fixed_runs(trigger: Trigger, runs: pa.Table, names: Sequence[str]) -> _FixedRuns | None:
    """``runs`` (groups told apart by ``names``) as ``_FixedRuns`` for fixed windows a row
    lies in one of (SLIDING equal to INTERVAL) that fire WINDOW_CLOSE only; None where the
    trigger is not of that kind or two runs share a window."""
    if not isinstance(trigger, WindowTrigger) or not fast_interval(trigger):
        return None
    spec = trigger.spec
    if not isinstance(spec, IntervalSpec) or spec.sliding != spec.interval:
        return None
    runs, names = _grouped_by(runs, list(names))
    runs, heads, sizes = _group_spans(runs, names, "__first")
    first = runs.column("__first").to_numpy()
    starts = first - (first - spec.offset) % spec.sliding  # each run's one window
    group = np.repeat(np.arange(len(heads)), sizes)
    if np.any((starts[1:] == starts[:-1]) & (group[1:] == group[:-1])):
        return None  # two runs of one window: not the grouping this counts on
    return _FixedRuns(trigger, spec, runs, heads, sizes, starts, group)


def fixed_closing(trigger: Trigger, runs: pa.Table, names: Sequence[str]) -> FixedClosing | None:
    """``FixedClosing`` of ``runs`` (groups told apart by ``names``) for fixed windows a row
    lies in one of (SLIDING equal to INTERVAL) that fire WINDOW_CLOSE only; None where the
    trigger is not of that kind or two runs share a window."""
    fixed = _fixed_runs(trigger, runs, names)
    if fixed is None:
        return None
    newest = fixed.newest()
    last = fixed.last_closed(newest)
    closing = fixed.starts <= last[fixed.group]
    starts = fixed.starts
    return FixedClosing(
        fixed.trigger, fixed.runs, fixed.heads, fixed.sizes, starts, closing, newest, last, starts[fixed.heads]
    )


@dataclass(frozen=True)
class RangeClosing:
    """Which runs of a recalculated range (one row per group and fixed window starting in
    [start, end): the group columns, ``__first``, ``__last``, ``__rows``) lie in closed
    windows, and the closed windows without rows that fire, decided as
    ``run.triggers_for_range`` decides them: by each group's first and last row in the whole
    table (``bounds``), not the range's."""

    runs: pa.Table  # sorted by group, then by window
    heads: np.ndarray  # each group's first run in ``runs``
    starts: np.ndarray  # each run's window start
    closing: np.ndarray  # whether each run's window is closed
    empty: list[tuple[tuple[Any, ...], list[int]]]  # (group values, window starts) without rows that fire


def range_closing(
    trigger: Trigger, runs: pa.Table, names: Sequence[str], bounds: pa.Table | None, window_range: tuple[int, int]
) -> RangeClosing | None:
    """``RangeClosing`` of ``runs`` (groups told apart by ``names``; ``bounds``: each group's
    values with ``lo`` and ``hi``, None when the runs hold every row) for fixed windows that
    fire WINDOW_CLOSE only, each group closing its own (no MAX_DELAY, no stream-wide close);
    None where the trigger is not of that kind or two runs share a window."""
    if isinstance(trigger, WindowTrigger) and (trigger.max_delay is not None or trigger.stream_close):
        return None
    fixed = _fixed_runs(trigger, runs, names)
    if fixed is None:
        return None
    spec, heads, starts = fixed.spec, fixed.heads, fixed.starts
    found = {
        tuple(row[n] for n in names): (row["lo"], row["hi"])
        for row in (bounds.to_pylist() if bounds is not None else [])
        if row["hi"] is not None
    }
    heading = fixed.runs.select(list(names)).take(pa.array(heads)).to_pylist() if names else [{} for _ in heads]
    values = [tuple(row[n] for n in names) for row in heading]
    lowest = fixed.runs.column("__first").to_numpy()[heads].tolist()
    for key, low, high in zip(values, lowest, fixed.newest().tolist(), strict=True):
        # a run read after the bounds may be newer still
        lo, hi = found.get(key, (low, high))
        found[key] = (min(lo, low), max(hi, high))
    last = fixed.last_closed(np.array([found[key][1] for key in values], dtype=np.int64))
    closing = starts <= last[fixed.group]
    empty: list[tuple[tuple[Any, ...], list[int]]] = []
    if not fixed.trigger.ignore_nodata:  # every window a group has passed fires, rows or not
        start, end = window_range
        spans = dict(zip(values, zip(heads.tolist(), fixed.sizes.tolist(), strict=True), strict=True))
        for key, (lo, high) in found.items():
            opened = max(spec.first_start(lo), spec.after(spec.floor(start - 1)))
            top = min(spec.last_closed(high - fixed.trigger.watermark), end - 1)
            head, size = spans.get(key, (0, 0))
            present = starts[head : head + size][closing[head : head + size]]
            if top >= opened and (top - opened) // spec.sliding + 1 != len(present):
                have = set(present.tolist())
                empty.append((key, [s for s in spec.between(opened, top) if s not in have]))
    return RangeClosing(fixed.runs, heads, starts, closing, empty)


def fixed_interval_outcomes(
    trigger: WindowTrigger, runs: pa.Table, names: Sequence[str], group_columns: Sequence[str]
) -> list[tuple[str, Windows, dict[str, Any]]] | None:
    """``replay.interval_history`` of every group of ``runs`` at once (``FixedClosing``): each
    group's (key, closed windows, final state), groups in order of their values. None where
    the trigger is not of that kind (``tests/test_history.py`` holds the two equal)."""
    found = fixed_closing(trigger, runs, names)
    if found is None:
        return None
    interval = trigger.spec.interval  # type: ignore[union-attr]
    starts_list, rows_list = found.starts.tolist(), found.runs.column("__rows").to_pylist()
    outcomes = []
    for g, head in enumerate(found.heads.tolist()):
        key = json.dumps([found.runs.column(c)[head].as_py() for c in group_columns], default=str)
        replayed, state = found.group(g)
        if replayed is None:  # the group's first closed[g] runs, each its window
            shut = head + int(found.closed[g])
            pairs = zip(starts_list[head:shut], rows_list[head:shut], strict=True)
            replayed = [(start, start + interval, rows) for start, rows in pairs]
        outcomes.append((key, [(WINDOW_CLOSE, s, e, n, "{}") for s, e, n in replayed], state.to_json()))
    return outcomes


def _group_slices(data: pa.Table, columns: Sequence[str]) -> list[pa.Table]:
    """Each group's rows of ``data``, one slice per group. Sorted by group once, each group's
    rows are one slice (taking each group's rows out of the whole table cost a pass over it
    per group: 2.4 s for the 833,000 runs of 1,000 groups in 50 M rows)."""
    data, starts, counts = _group_spans(data, columns)
    return [data.slice(start, count) for start, count in zip(starts.tolist(), counts.tolist(), strict=True)]


def _group_spans(data: pa.Table, columns: Sequence[str], *then: str) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """``data`` sorted by group (then by the columns ``then``), and each group's first row and
    row count in it, groups in order."""
    keys = [*columns, *then]
    data = data.take(pc.sort_indices(data.select(keys), [(c, "ascending") for c in keys]))
    indexed = data.select(list(columns)).append_column("__row", pa.array(np.arange(data.num_rows, dtype=np.int64)))
    spans = indexed.group_by(list(columns), use_threads=False).aggregate([("__row", "min"), ("__row", "count")])
    order = np.argsort(spans.column("__row_min").to_numpy())
    return data, spans.column("__row_min").to_numpy()[order], spans.column("__row_count").to_numpy()[order]


def time_ordered(data: pa.Table, ts_column: str, read: Sequence[str]) -> tuple[pa.Table, list[RowChange]]:
    """A group's rows sorted by time — ties between child tables broken by name, a stable
    rule — and as the RowChanges a trigger replays, carrying the values it reads."""
    data = data.sort_by(
        [(ts_column, "ascending"), *([("tbname", "ascending")] if "tbname" in data.column_names else [])]
    )
    stamps = data.column(ts_column).to_pylist()
    if read:  # column-wise conversion, then one small dict per row of what is read
        columns = [data.column(n).to_pylist() for n in read]
        records = [dict(zip(read, row, strict=True)) for row in zip(*columns, strict=True)]
    else:  # INTERVAL, SESSION, SLIDING without PRE_FILTER read no values: no dicts at all
        records = [{}] * len(stamps)
    return data, [RowChange(ts, "insert", values) for ts, values in zip(stamps, records, strict=True)]


def _group_windows(trigger: EventTimeTrigger, admission: Admission, primary_key: str) -> GroupReplay:
    """One group's rows in, replayed row by row; its windows and final state out."""

    read = sorted(columns_read(trigger, admission))

    def replay_group(data: pa.Table) -> tuple[Windows, TriggerState]:
        _, changes = time_ordered(data, primary_key, read)
        rows = [change for change in changes if admission.admits(change.ts, change.values)]
        fired, state = replay(trigger, rows)
        return _windows(fired), state

    return replay_group


_ARROW_OUTPUT = pa.schema(
    [
        ("group_key", pa.string()), ("event", pa.string()), ("wstart", pa.int64()),
        ("wend", pa.int64()), ("row_count", pa.int64()), ("detail", pa.string()),
    ]
)  # fmt: skip


def derive_windows(
    spark: Any,
    warehouse: Warehouse,
    stream: StreamDefinition,
    *,
    version: int | None = None,
    local_rows: int = LOCAL_ROWS,
) -> Derived:
    """Every group's windows from the trigger table's data (as of WAL offset ``version``, or
    now) in one Spark job — in this process for a table of at most ``local_rows`` rows —
    with each group's final trigger state."""
    table = stream.trigger_table
    if table is None:
        raise QueryError(
            f"stream {stream.key} cannot derive windows: its trigger table {stream.trigger_missing} was dropped"
        )
    trigger = stream_trigger(stream)
    local = _local_windows(warehouse, stream, trigger, version, local_rows)
    if local is not None:
        return local
    from pyspark.sql import functions as F

    admission = stream_admission(stream)
    # only what the trigger, PRE_FILTER and grouping read is read (and travels to the UDF)
    needed = {table.primary_key, "tbname", *stream.group_columns, *columns_read(trigger, admission)}  # type: ignore[arg-type]
    needed |= {n.name.lower() for e in stream.group_exprs.values() for n in walk(e) if isinstance(n, ast.Column)}
    frame = table_frame(spark, warehouse, table, version, tags=any(t.name in needed for t in table.tags))
    if admission.history_start is not None:  # pruned in Spark
        frame = frame.where(F.col(table.primary_key) >= admission.history_start)
        admission = Admission(None, admission.pre_filter)
    frame = frame.select(*[name for name in frame.columns if name in needed])
    source, ctx = _row_scope(stream)
    if admission.pre_filter is not None:
        # the rows PRE_FILTER keeps are all the trigger sees (the replay drops the others
        # whole), filtered by Spark as the run's query filters them: every path below applies
        frame = pre_filtered(stream, frame)
        admission = Admission(None, None)
    if stream.group_exprs:  # a legacy PARTITION BY expression: computed as queries compute it
        sql = dict(zip(stream.group_columns, group_column_sql(stream, source, ctx), strict=True))
        frame = frame.alias("d").select("*", *[F.expr(sql[name]).alias(name) for name in stream.group_exprs])
    if isinstance(trigger, StateTrigger):
        frame, trigger = state_column(stream, frame, trigger)
    names = list(stream.group_columns) or [_ALL]
    if not stream.group_columns:
        frame = frame.withColumn(_ALL, F.lit(0))
    columns = [F.col(f"`{name}`") for name in names]
    if isinstance(trigger, WindowTrigger):
        # INTERVAL: Spark counts the rows of each run sharing its windows; the state machine
        # replays runs, not rows (same windows and state: ``replay.bucket_changes``)
        pk = f"`{table.primary_key}`"
        buckets = [F.expr(sql).alias(f"__bucket{i}") for i, sql in enumerate(trigger.spec.bucket_sql(pk))]
        runs = frame.groupBy(*columns, *buckets).agg(
            F.min(table.primary_key).alias("__first"),
            F.max(table.primary_key).alias("__last"),
            F.count(F.lit(1)).alias("__rows"),
        )
        # a run per (group, window) at most: few enough to replay here, which spares the
        # job a shuffle by group and Spark's Python workers (seconds to start on a cold server)
        return _interval_derived(warehouse, stream, trigger, runs.toArrow(), names)
    if isinstance(trigger, StateTrigger | SessionTrigger):
        # STATE_WINDOW and SESSION: Spark finds the islands (gaps and islands: rows in one
        # state, rows within the gap of each other); the state machine replays two changes per
        # island (same windows: ``replay.island_changes``, ``replay.session_changes``)
        if isinstance(trigger, StateTrigger):
            # (on a super table it is partitioned by tbname: a group's rows never share a timestamp)
            islands = _state_islands(frame, names, table.primary_key, trigger.column)
        else:
            # a group of one table has one row per timestamp: its rows need no distinct count
            islands = _sessions(frame, names, table.primary_key, trigger.gap, distinct=several_tables(stream))
        replay_group = _group_islands(trigger)
        # few islands (a state or session lasting many rows, as they do) are replayed here,
        # sparing the job Spark's Python workers (seconds whatever the size); one changing on
        # nearly every row gives as many islands as rows: replayed on the executors instead
        few = islands.limit(DRIVER_ISLANDS + 1).toArrow()
        if few.num_rows <= DRIVER_ISLANDS:
            return _derived_here(warehouse, stream, few, names, replay_group)
        udf = _as_udf(replay_group, stream.group_columns)
        return _derived(warehouse, stream, islands.groupBy(*columns).applyInArrow(udf, _OUTPUT_SCHEMA).toArrow())
    if isinstance(trigger, CountTrigger):
        # COUNT_WINDOW: windows are row numbers (a table has one row per timestamp, and a
        # COUNT trigger on a super table is partitioned by tbname): Spark numbers the counted
        # rows and picks each window's first and last; the state is the tail
        rows = _count_windows(frame, names, table.primary_key, trigger).toArrow()
        return _derived_here(warehouse, stream, rows, names, _group_counts(trigger))
    if isinstance(trigger, EventTrigger):
        # EVENT_WINDOW: the rows that open and close windows, found in one ordered pass
        edges = _event_edges(frame.alias("d"), names, table.primary_key, trigger, _conditions(stream, trigger))
        edges = edges.toArrow()
        return _derived_here(warehouse, stream, edges, names, _group_events(trigger))
    # SLIDING time points: each group replayed row by row in the executors
    replay_rows = _group_windows(trigger, admission, table.primary_key)  # type: ignore[arg-type]
    udf = _as_udf(replay_rows, stream.group_columns)
    return _derived(warehouse, stream, frame.groupBy(*columns).applyInArrow(udf, _OUTPUT_SCHEMA).toArrow())


def state_column(stream: StreamDefinition, frame: Any, trigger: StateTrigger) -> tuple[Any, StateTrigger]:
    """The rows of ``frame`` and a STATE_WINDOW trigger over a column of them: for
    STATE_WINDOW(expression), the state is computed as queries compute it into a column of
    its own, which the trigger then reads."""
    if trigger.expr is None:
        return frame, trigger
    from pyspark.sql import functions as F

    source, ctx = _row_scope(stream)
    state = row_expression(source, trigger.expr, ctx).sql
    frame = frame.alias("d").select("*", F.expr(state).alias(_STATE_VALUE))
    return frame, replace(trigger, column=_STATE_VALUE, expr=None)


def several_tables(stream: StreamDefinition) -> bool:
    """Whether a group of the stream can hold rows of several child tables (its trigger table
    is a super table not grouped by tbname), which may share a timestamp."""
    table = stream.trigger_table
    return table is not None and table.kind == "super" and "tbname" not in stream.group_columns


def _row_scope(stream: StreamDefinition) -> tuple[SourceTable, TranslationContext]:
    """The trigger table's rows aliased ``d``, as conditions and expressions over them render."""
    table = stream.trigger_table
    assert table is not None
    source = SourceTable(f"{table.db}.{table.name}", "d", table.kind, table.columns, table.tags, stream.precision)
    return source, TranslationContext(lambda name: source, resolve_timezone(stream.info.timezone))


def pre_filter_sql(stream: StreamDefinition) -> str | None:
    """PRE_FILTER as Spark SQL over the trigger table's rows aliased ``d``; None without one."""
    pre_filter = stream_admission(stream).pre_filter
    if pre_filter is None:
        return None
    source, ctx = _row_scope(stream)
    return row_condition(source, pre_filter, ctx)


def pre_filtered(stream: StreamDefinition, frame: Any) -> Any:
    """The rows of ``frame`` (the trigger table's) PRE_FILTER admits, as the run's query
    filters them; all of them without PRE_FILTER."""
    condition = pre_filter_sql(stream)
    if condition is None:
        return frame
    from pyspark.sql import functions as F

    return frame.alias("d").where(F.expr(condition))


def _conditions(stream: StreamDefinition, trigger: EventTrigger) -> list[list[str]]:
    """EVENT_WINDOW's start and end conditions over the trigger table's rows aliased ``d``."""
    source, ctx = _row_scope(stream)
    return [[row_condition(source, c, ctx) for c in side] for side in (trigger.starts, trigger.ends)]


def _first_holding(side: list[str]) -> Any:
    """The index of the first of the conditions ``side`` that is true for a row, NULL for none."""
    from pyspark.sql import functions as F

    if not side:
        return F.lit(None).cast("int")
    return F.expr("CASE " + " ".join(f"WHEN {c} THEN {i}" for i, c in enumerate(side)) + " END")


def _event_edges(frame: Any, groups: list[str], pk: str, trigger: EventTrigger, conditions: list[list[str]]) -> Any:
    """EVENT_WINDOW in one ordered pass. With END WITH a window opens at a row meeting a start
    condition and closes at the first row from there meeting an end condition, so a row opens
    a window when no start row came since the last end row before it, and a row meeting an end
    condition closes one when a start row came since then (it is a member). Without, a window
    is a run of rows a start condition holds for, closed by the first row none holds for. Only
    those rows (their condition index, the condition columns' values, their row number, which
    counts a window's members, the row before) and each group's newest row come back."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    ts = F.col(f"`{pk}`")
    keys = [F.col(f"`{g}`") for g in groups]
    rows = frame.select(
        *keys, ts.alias("__ts"), _first_holding(conditions[0]).alias("__s"), _first_holding(conditions[1]).alias("__e"),
        *(F.col(f"`{c}`") for c in trigger.condition_columns),
    )  # fmt: skip
    order = Window.partitionBy(*keys).orderBy("__ts")
    holds = F.col("__s").isNotNull()
    if trigger.ends:
        before = order.rowsBetween(Window.unboundedPreceding, -1)
        start_ts, end_ts = F.when(holds, F.col("__ts")), F.when(F.col("__e").isNotNull(), F.col("__ts"))
        # the newest start and end rows before this one: a window is open before it when a
        # start row came after the last end row
        last_start, last_end = (
            F.last(start_ts, ignorenulls=True).over(before),
            F.last(end_ts, ignorenulls=True).over(before),
        )
        open_before = last_start.isNotNull() & (last_end.isNull() | (last_start > last_end))
        opens, closes = holds & ~open_before, F.col("__e").isNotNull() & (open_before | holds)
    else:  # a window lasts while a start condition holds: a run of such rows
        held_before = F.lag("__s").over(order).isNotNull()
        opens, closes = holds & ~held_before, ~holds & held_before
    rows = rows.select(
        "*",
        opens.alias("__opens"),
        closes.alias("__closes"),
        F.row_number().over(order).alias("__rn"),
        F.max("__ts").over(Window.partitionBy(*keys)).alias("__newest"),
        F.lag("__ts").over(order).alias("__previous"),
    )
    return rows.where(F.col("__opens") | F.col("__closes") | (F.col("__ts") == F.col("__newest")))


def event_rows(stream: StreamDefinition, frame: Any, groups: list[str], pk: str, trigger: EventTrigger) -> Any:
    """The rows of groups of one table each, each with the number of the EVENT_WINDOW it is a
    member of (``__island``, NULL outside any) and the index of the first start (``__s``) and
    end (``__e``) condition it meets, in one sort as ``_event_edges``. With END WITH, the end
    rows cut a group into segments, each ending at its end row; a segment's window opens at
    its first start row (closed before it: the end row before closed any window) and lasts to
    the segment's end, so a row is a member when a start row came since the last end row
    before it, and its window is numbered by the end rows before it. Without, a window is a
    run of rows a start condition holds for, numbered by the runs begun up to it. A history
    scan groups them by window with its query's aggregates (``compute/history.py``)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    starts, ends = _conditions(stream, trigger)
    ts = F.col(f"`{pk}`")
    order = Window.partitionBy(*[F.col(f"`{g}`") for g in groups]).orderBy(ts)
    upto, before = order.rowsBetween(Window.unboundedPreceding, 0), order.rowsBetween(Window.unboundedPreceding, -1)
    rows = frame.alias("d").select("*", _first_holding(starts).alias("__s"), _first_holding(ends).alias("__e"))
    holds, ending = F.col("__s").isNotNull(), F.col("__e").isNotNull()
    if trigger.ends:
        started = F.last(F.when(holds, ts), ignorenulls=True).over(upto)
        ended = F.last(F.when(ending, ts), ignorenulls=True).over(before)
        member = started.isNotNull() & (ended.isNull() | (started > ended))
        return rows.withColumn("__island", F.when(member, F.count(F.when(ending, 1)).over(before)))
    rows = rows.withColumn("__opens", F.when(holds & F.lag("__s").over(order).isNull(), 1).otherwise(0))
    return rows.withColumn("__island", F.when(holds, F.sum("__opens").over(upto)))


def event_measures(trigger: EventTrigger, pk: str) -> dict[str, str]:
    """What an EVENT window's replay needs beside its first row, last row and rows, as
    aggregates over its members (``event_rows``, aliased ``d``): the start condition its
    first row met, the end condition its last row met and the condition columns' values
    there (the closing row's, which its trigger names)."""
    ts = f"d.`{pk}`"
    closing = {f"__close_{i}": f"max_by(d.`{name}`, {ts})" for i, name in enumerate(trigger.condition_columns)}
    return {"__open_index": f"min_by(d.__s, {ts})", "__close_index": f"max_by(d.__e, {ts})", **closing}


def _group_event_windows(trigger: EventTrigger) -> GroupReplay:
    """EVENT_WINDOW by window (``event_rows``, ``event_measures``): one group's windows in
    — and its rows outside any (``__outside``), which move its event time — its triggers and
    the state ``_group_events`` leaves out. A window with END WITH closed when its last row
    met an end condition; without, when a row followed it (one no start condition holds for)."""
    names = trigger.condition_columns

    def replay_group(data: pa.Table) -> tuple[Windows, TriggerState]:
        state, fired = RowState(max_ts=pc.max(data.column("__last")).as_py()), []
        data = data.filter(pc.invert(data.column("__outside"))).sort_by("__first")
        read = ("__first", "__last", "__rows", "__open_index", "__close_index")
        windows = zip(*(data.column(c).to_pylist() for c in read), strict=True)
        values = [data.column(f"__close_{i}").to_pylist() for i in range(len(names))]
        for i, (first, last, rows, opened, closed) in enumerate(windows):
            trigger.open(state, RowChange(first, "insert", {}), opened, fired, {})
            state.last, state.count = last, rows
            if trigger.ends and closed is not None:
                fields = {name: column[i] for name, column in zip(names, values, strict=True)}
                trigger.close(state, fired, {"conditionIndex": closed, "fieldValue": fields})
            elif not trigger.ends and last < state.max_ts:
                trigger.close(state, fired, {"conditionIndex": state.key})
        return _windows(fired), state

    return replay_group


def _group_events(trigger: EventTrigger) -> GroupReplay:
    """EVENT_WINDOW: one group's opening, closing and newest rows in, its triggers and
    the state the row replay leaves (held to it by ``tests/test_history.py``) out: a window's
    members are the rows from its opening row to its closing one (TRUE_FOR applied), the last
    window open when no row closed it."""
    names = trigger.condition_columns

    def replay_group(data: pa.Table) -> tuple[Windows, TriggerState]:
        data = data.sort_by("__ts")
        names_read = ("__ts", "__s", "__e", "__opens", "__closes", "__rn", "__previous")
        columns = {c: data.column(c).to_pylist() for c in names_read}
        values = [data.column(n).to_pylist() for n in names]
        state, fired, opened_rn = RowState(), [], 0
        state.max_ts = data.column("__newest")[0].as_py()
        # the trigger's own open and close (WINDOW_OPEN, TRUE_FOR, the state they leave)
        for i, ts in enumerate(columns["__ts"]):
            fields = {name: column[i] for name, column in zip(names, values, strict=True)}
            if not trigger.ends and columns["__closes"][i]:
                # the first row no start condition holds for closes the run before it
                state.last, state.count = columns["__previous"][i], columns["__rn"][i] - opened_rn
                trigger.close(state, fired, {"conditionIndex": state.key})
                continue
            if columns["__opens"][i]:
                index, opened_rn = columns["__s"][i], columns["__rn"][i]
                detail = {"conditionIndex": index, "fieldValue": fields}
                trigger.open(state, RowChange(ts, "insert", {}), index, fired, detail)
            if state.open:  # the newest row, an open window's last member so far; or its closing row
                state.last, state.count = ts, columns["__rn"][i] - opened_rn + 1
            if columns["__closes"][i]:
                trigger.close(state, fired, {"conditionIndex": columns["__e"][i], "fieldValue": fields})
        return _windows(fired), state

    return replay_group


def _count_windows(frame: Any, groups: list[str], pk: str, trigger: CountTrigger) -> Any:
    """COUNT_WINDOW's windows by row numbers, in one pass over the rows: each counted row's
    number in its group (a running count), the group's count and newest row; kept are the
    rows a window starts at (counted row k·slide) or ends at (k·slide + size − 1), the last
    ``size`` counted rows (the state's ``recent``) and the newest row, counted or not (the
    trigger's event time)."""
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    ts = F.col(f"`{pk}`")
    size, slide = trigger.size, trigger.slide
    counts = F.lit(True)
    if trigger.columns:  # only rows with a value in a listed column count
        counts = reduce(operator.or_, (F.col(f"`{c}`").isNotNull() for c in trigger.columns))
    keys = [F.col(f"`{g}`") for g in groups]
    one = F.when(counts, 1).otherwise(0)
    running = Window.partitionBy(*keys).orderBy(ts).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = Window.partitionBy(*keys)
    marked = frame.select(
        *keys,
        ts.alias("__ts"),
        counts.alias("__counted"),
        (F.sum(one).over(running) - 1).alias("__rn"),
        F.sum(one).over(whole).alias("__total"),
        F.max(ts).over(whole).alias("__newest"),
    )
    rn = F.col("__rn")
    starts = rn % slide == 0
    ends = (rn >= size - 1) & ((rn - (size - 1)) % slide == 0)
    # the rows the state keeps: a tumbling window's open block, else the last ``size``
    tail = rn >= F.col("__total") - (F.col("__total") % size if trigger.tumbling else F.lit(size))
    return marked.where((F.col("__counted") & (starts | ends | tail)) | (F.col("__ts") == F.col("__newest")))


def _group_counts(trigger: CountTrigger) -> GroupReplay:
    """COUNT_WINDOW: one group's marked rows in, its triggers and the state the row replay
    leaves (held to it by ``tests/test_history.py``) out."""
    size, slide, opens = trigger.size, trigger.slide, WINDOW_OPEN in trigger.events

    def replay_group(data: pa.Table) -> tuple[Windows, TriggerState]:
        names = ("__ts", "__counted", "__rn", "__total", "__newest")
        stamps, counted, numbers, totals, newest = (data.column(c).to_pylist() for c in names)
        at = {rn: stamp for stamp, rn, c in zip(stamps, numbers, counted, strict=True) if c}
        total = totals[0]
        fired = []
        for rn in sorted(at):  # at one row the replay opens before it closes
            if opens and rn % slide == 0:
                fired.append(Fired(WINDOW_OPEN, at[rn], at[rn], 0, {}))
            if rn >= size - 1 and (rn - size + 1) % slide == 0:
                fired.append(Fired(WINDOW_CLOSE, at[rn - size + 1], at[rn], size, {}))
        recent = trigger.kept([at[rn] for rn in sorted(at) if rn >= total - size], total)
        state = RowState(max_ts=newest[0], counted=total, recent=recent)
        return _windows(fired), state

    return replay_group


def _islands(frame: Any, groups: list[str], pk: str, starts: Callable[[str], str], *measures: Any) -> Any:
    """Each group's islands of rows in time order, as (first, last, ``measures``…)."""
    from pyspark.sql import functions as F

    return (
        _numbered(frame, groups, pk, starts)
        .groupBy(*groups, "__island")
        .agg(F.min(F.col(f"`{pk}`")).alias("__first"), F.max(F.col(f"`{pk}`")).alias("__last"), *measures)
    )


def _numbered(frame: Any, groups: list[str], pk: str, starts: Callable[[str], str]) -> Any:
    """The rows, each with its island's number in its group (``__island``): an island starts
    at a row where ``starts`` (SQL given the window clause ``OVER (PARTITION BY groups ORDER
    BY pk``, to close) is 1, a running sum numbers them — two window functions over one sort,
    as a hand-written gaps-and-islands query."""
    from pyspark.sql import functions as F

    over = _in_order(groups, pk)
    frame = frame.withColumn("__start", F.expr(starts(over)))
    return frame.withColumn("__island", F.expr(f"sum(__start) {over} ROWS UNBOUNDED PRECEDING)"))


def _in_order(groups: list[str], pk: str) -> str:
    """The window clause over each group's rows in time order, left open for a frame."""
    return f"OVER (PARTITION BY {', '.join(f'`{g}`' for g in groups)} ORDER BY `{pk}`"


def _state_starts(column: str) -> Callable[[str], str]:
    """STATE_WINDOW: an island starts at a row whose state differs from the last state before
    it (``lag … IGNORE NULLS``); a NULL takes the state before it, as in the trigger."""
    state = f"`{column}`"

    def starts(over: str) -> str:
        changed = f"NOT ({state} <=> lag({state}) IGNORE NULLS {over}))"
        return f"CASE WHEN {state} IS NOT NULL AND {changed} THEN 1 ELSE 0 END"

    return starts


def _session_starts(pk: str, gap: int) -> Callable[[str], str]:
    """SESSION: a session starts where the time since the row before exceeds the gap."""
    ts = f"`{pk}`"

    def starts(over: str) -> str:
        return f"CASE WHEN coalesce({ts} - lag({ts}) {over}), {gap} + 1) > {gap} THEN 1 ELSE 0 END"

    return starts


def _state_islands(frame: Any, groups: list[str], pk: str, column: str) -> Any:
    """STATE_WINDOW's islands: maximal runs of rows whose state — a NULL taking the state
    before it, as in the trigger — stays the same, as (first, last, rows, state); the rows
    before a group's first state are one island with a NULL state (the trigger skips them,
    but they move its event time)."""
    from pyspark.sql import functions as F

    rows = F.count(F.lit(1)).alias("__rows")
    value = F.first(F.col(f"`{column}`"), ignorenulls=True).alias("__value")
    return _islands(frame, groups, pk, _state_starts(column), rows, value)


def _sessions(frame: Any, groups: list[str], pk: str, gap: int, *, distinct: bool) -> Any:
    """SESSION's islands: maximal runs of rows each within ``gap`` of the one before, as
    (first, last, distinct timestamps: a timestamp several child tables of the group share
    counts once, as in the trigger). ``distinct``: whether the group's rows can share a
    timestamp (a distinct count is an aggregation of its own in Spark: it doubled the
    derivation's time)."""
    from pyspark.sql import functions as F

    rows = F.countDistinct(F.col(f"`{pk}`")) if distinct else F.count(F.lit(1))
    return _islands(frame, groups, pk, _session_starts(pk, gap), rows.alias("__rows"))


def island_rows(frame: Any, groups: list[str], pk: str, trigger: StateTrigger | SessionTrigger) -> Any:
    """The rows of groups of one table each (no two rows share a timestamp), each with the
    number of its STATE_WINDOW or SESSION island (``__island``), as ``_state_islands`` and
    ``_sessions`` number them: a history scan groups them by island with its query's
    aggregates (``compute/history.py``)."""
    if isinstance(trigger, StateTrigger):
        return _numbered(frame, groups, pk, _state_starts(trigger.column))
    return _numbered(frame, groups, pk, _session_starts(pk, trigger.gap))


def count_rows(frame: Any, groups: list[str], pk: str, trigger: CountTrigger) -> Any:
    """The rows of groups of one table each, each with the number of its COUNT_WINDOW block
    (``__island``) — windows of ``size`` rows that neither overlap nor skip (SLIDING equal
    to the size, every row counted): row k of a group lies in block k DIV size. A history
    scan groups them by block with its query's aggregates (``compute/history.py``)."""
    from pyspark.sql import functions as F

    return frame.withColumn("__island", F.expr(f"(row_number() {_in_order(groups, pk)}) - 1) DIV {trigger.size}"))


def _grouped_by(data: pa.Table, group_columns: list[str]) -> tuple[pa.Table, list[str]]:
    """``data`` and the columns its groups are told apart by (``_grouped``'s, by name)."""
    if group_columns:
        return data, group_columns
    return data.append_column(_ALL, pa.array([0] * data.num_rows, pa.int64())), [_ALL]


def island_windows(
    warehouse: Warehouse,
    stream: StreamDefinition,
    trigger: StateTrigger | SessionTrigger | CountTrigger | EventTrigger,
    islands: pa.Table,
) -> Derived:
    """Every group's windows and final state from its islands (the stream's group columns,
    ``__first``, ``__last``, ``__rows``, and STATE's ``__value``), COUNT_WINDOW's blocks
    (``count_rows``) or EVENT_WINDOW's windows (``event_rows``, ``event_measures``), replayed
    here."""
    islands, names = _grouped(stream, islands)
    if isinstance(trigger, CountTrigger):
        replay_group = _group_blocks(trigger)
    elif isinstance(trigger, EventTrigger):
        replay_group = _group_event_windows(trigger)
    else:
        replay_group = _group_islands(trigger)
    return _derived_here(warehouse, stream, islands, names, replay_group)


def _group_blocks(trigger: CountTrigger) -> GroupReplay:
    """COUNT_WINDOW in blocks (``count_rows``): one group's blocks in, its windows — the full
    blocks, in order — and the state ``_group_counts`` leaves out: a block not yet full is
    the open one, whose first and newest rows the state keeps (``CountTrigger.kept``)."""

    def replay_group(data: pa.Table) -> tuple[Windows, TriggerState]:
        data = data.sort_by("__first")
        first, last, rows = (data.column(c).to_pylist() for c in ("__first", "__last", "__rows"))
        windows = [
            (WINDOW_CLOSE, start, end, n, "{}")
            for start, end, n in zip(first, last, rows, strict=True)
            if n == trigger.size
        ]
        counted = sum(rows)
        state = RowState(max_ts=max(last), counted=counted, recent=trigger.kept([first[-1], last[-1]], counted))
        return windows, state

    return replay_group


def _group_islands(trigger: StateTrigger | SessionTrigger) -> GroupReplay:
    """STATE_WINDOW or SESSION: one group's islands in, its windows and state out."""

    def replay_group(data: pa.Table) -> tuple[Windows, TriggerState]:
        first, last, rows = (data.column(c).to_pylist() for c in ("__first", "__last", "__rows"))
        if isinstance(trigger, StateTrigger):
            states = zip(first, last, rows, data.column("__value").to_pylist(), strict=True)
            changes = island_changes(states, trigger.column)
        else:
            changes = session_changes(zip(first, last, rows, strict=True))
        fired, state = replay(trigger, changes)
        return _windows(fired), state

    return replay_group


def _local_windows(
    warehouse: Warehouse, stream: StreamDefinition, trigger: Any, version: int | None, limit: int
) -> Derived | None:
    """A trigger table of at most ``limit`` rows derived in this process, each group
    through the same function the Spark UDF runs (a Spark job with a Python UDF costs
    seconds of scheduling and worker start whatever its size); None for larger tables."""
    table = stream.trigger_table
    assert table is not None
    stored = warehouse.stored_rows(table, version)
    if stored is None or stored > limit:
        return None
    data = warehouse.read_table(table, version) if stored else None
    if data is None or data.num_rows == 0:
        return Derived([], {})
    if "tbname" not in data.column_names:
        data = data.append_column("tbname", pa.array([table.name] * data.num_rows, pa.string()))
    admission = stream_admission(stream)
    if admission.history_start is not None:
        data = data.filter(pc.greater_equal(data[table.primary_key], admission.history_start))
    replay_rows = _group_windows(trigger, admission, table.primary_key)
    columns = list(stream.group_columns)
    if stream.group_exprs:  # a legacy PARTITION BY expression, per row as the trigger task computes it
        records = data.to_pylist()
        for name in stream.group_exprs:
            data = data.append_column(name, pa.array([group_expr_value(stream, name, row) for row in records]))
    return _derived_here(warehouse, stream, data, columns, replay_rows)


def _derived(warehouse: Warehouse, stream: StreamDefinition, result: pa.Table) -> Derived:
    """The executors' UDF rows (each group's windows, then its state) as queue rows and
    group states; the group values and the detail are JSON already, carried as they are."""
    names = ("group_key", "event", "wstart", "wend", "row_count", "detail")
    windows: dict[str, Windows] = {}
    states: dict[str, dict[str, Any]] = {}
    for key, event, start, end, rows, detail in zip(*(result.column(n).to_pylist() for n in names), strict=True):
        if event == _STATE:
            states[key] = json.loads(detail)
        else:
            windows.setdefault(key, []).append((event, start, end, rows, detail))
    return _queued(warehouse, stream, [(key, windows.get(key, []), state) for key, state in states.items()])
