"""A FILL_HISTORY run in one scan of the trigger table: fixed INTERVAL, STATE, SESSION, COUNT, EVENT.

Owns the history run's fused plan. Deriving the windows (``bulk.derive_windows``) and
computing the query over them each read the whole table: Spark groups it into runs (INTERVAL:
per group and window), islands (STATE_WINDOW, SESSION: runs of rows in one state or within
the gap), blocks (COUNT_WINDOW) or marks the rows opening and closing EVENT windows, for the
state machine to replay, then the query's plan reads it again. When the query is computed
aggregate-first on its group and window (``sql/translate/batch``) and each window is one run,
island, block or labelled span of rows, both are one grouping: one Spark job computes each
one's aggregates with its first row, last row and rows, kept in Spark's cache; those come
here and the state machine derives the windows and each group's state from them, as the
two-scan path does (``bulk.interval_windows``, ``bulk.island_windows``); the query then joins
those triggers to the cached aggregates (``run.compute_triggers`` with the prepared query).
Fixed INTERVAL windows go further where nothing needs a trigger of its own: their output is
computed beside their runs in that one job (``window_job.py``), no windows handed over.
Where the plan does not apply, ``history_scan`` gives None and the run derives, then queries.
Reads only; the run writes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from ..sql.intervals import IntervalSpec
from ..sql.translate import KeyAggregates, SourceTable, TranslatedQuery, TranslationContext, translate_select
from ..storage import written
from ..storage.registry import StreamDefinition
from ..storage.spark_read import SparkViews, live_child_names, live_children, table_frame
from ..storage.warehouse import Warehouse
from ..triggers.engine import WINDOW_CLOSE, WindowTrigger
from ..triggers.plan import Trigger, stream_admission, stream_trigger
from ..triggers.replay import columns_read
from ..triggers.rows import CountTrigger, EventTrigger, SessionTrigger, StateTrigger
from . import bulk, window_job
from .bulk import (
    Derived,
    count_rows,
    event_measures,
    event_rows,
    interval_windows,
    island_rows,
    island_windows,
    pre_filtered,
    several_tables,
    state_column,
)
from .run import (
    PreparedQuery,
    RunOutcome,
    compute_triggers,
    group_bounds,
    range_triggers,
    reads_tags,
    stream_scope,
    triggers_for_range,
    uses,
)
from .udf import function_lookup
from .window_job import WindowResults, range_results, window_results, write_window_results

PLAN = "one scan"  # the run's metadata names the plan that computed the history
ONE_JOB = "one Spark job"  # … fixed INTERVAL windows' output with their runs (``window_job.py``)
TWO_STEPS = "derive, then query"  # … where neither applies
_ISLAND = "__island"  # a row's island number (``bulk.island_rows``), the window label of islands
_VALUE = "__value"  # a STATE_WINDOW island's state
_TIMESTAMPS = "__timestamps"  # a SESSION island's distinct timestamps, in a group of several tables


@dataclass(frozen=True)
class HistoryScan:
    derived: Derived  # the closed windows as queue rows, each group's state
    prepared: PreparedQuery | None  # the query over them, its data side computed
    # or, for fixed INTERVAL windows, their output already computed (``window_job.py``):
    # no queue rows then, the states only
    windows: WindowResults | None = None


def _fusable(stream: StreamDefinition, trigger: Trigger, stored: int | None) -> bool:
    """Whether one grouping serves the windows and the query: the trigger's rows are all rows
    of the table (no FILL_HISTORY start, no legacy rows of its own, no PARTITION BY
    expression), the query counts no rows of its own (``_twrownum`` is the trigger's count),
    and a window is one run or island — fixed INTERVAL windows a row belongs to one of, or
    STATE_WINDOW, EVENT_WINDOW and COUNT_WINDOW without SLIDING or counted columns (over
    groups of one table each: no two rows share a timestamp, so a window's rows are its
    island's) and SESSION (over groups of one table or of several tables sharing tags),
    closing only (an open window has no end to bound its rows); a table small enough to
    derive in this process (``bulk.LOCAL_ROWS``) is left to that."""
    table, query = stream.trigger_table, stream.stmt.query
    if query is None or table is None or stored is None or stored <= bulk.LOCAL_ROWS:
        return False
    if stream.group_exprs or written.kept_for(stream, table) or uses(query, "_twrownum"):
        return False
    if stream_admission(stream).history_start is not None:
        return False
    if isinstance(trigger, WindowTrigger):
        return isinstance(trigger.spec, IntervalSpec) and trigger.spec.sliding == trigger.spec.interval
    if not isinstance(trigger, StateTrigger | SessionTrigger | CountTrigger | EventTrigger):
        return False
    if trigger.events != (WINDOW_CLOSE,):
        return False
    if isinstance(trigger, CountTrigger):
        return trigger.slide == trigger.size and not trigger.columns
    # STATE, EVENT and COUNT windows of a super table are per child table; a SESSION of a
    # group of several is its island too (rows sharing a timestamp are within any gap),
    # but not of a whole super table (its one group would be one Spark partition)
    return table.kind != "super" or bool(stream.group_columns)


def _trigger_rows(
    spark: Any,
    warehouse: Warehouse,
    stream: StreamDefinition,
    version: int | None,
    key_range: tuple[int, int] | None = None,
) -> tuple[Any, bool]:
    """The trigger table's rows the scan groups (as of WAL offset ``version``, those whose
    primary timestamp lies in ``key_range``), with the tags the query or the trigger reads;
    and whether a dropped child table's rows are still among them, to be left out after the
    grouping."""
    table, trigger = stream.trigger_table, stream_trigger(stream)
    assert table is not None
    # the query's tags, and those the trigger's own conditions name
    tags = reads_tags(stream) or any(t.name in columns_read(trigger, stream_admission(stream)) for t in table.tags)
    # grouped by tbname, a dropped child's rows are groups of their own: they are left
    # out of the grouping's result (``live_children``; Spark tests each row all the same,
    # the filter pushed below the grouping) or of the windows collected (``window_job``)
    late_children = table.kind == "super" and "tbname" in stream.group_columns and not tags
    rows = table_frame(spark, warehouse, table, version, key_range, tags=tags, children=not late_children)
    return rows, late_children


def _translated(
    views: SparkViews,
    stream: StreamDefinition,
    rows: Any,
    scope_changes: dict[str, Any],
    timezone: ZoneInfo,
    clock: Callable[[], int],
) -> tuple[TranslatedQuery, str, SourceTable, tuple[str, str]]:
    """The stream's query translated with ``rows`` as ``%%trows``: the translation, the rows'
    view, the trigger table's source, and the names it gave the triggers view and the data
    side's view."""
    assert stream.trigger_table is not None and stream.stmt.query is not None
    trows_view = views.register(rows, "history")
    trigger_source = views.table(stream.trigger_table)
    named = (views.fresh_view(), views.fresh_view())
    scope = stream_scope(stream, named[0], trigger_source, trows_view, named[1])
    ctx = TranslationContext(
        views.resolve,
        timezone,
        clock(),
        stream=dataclasses.replace(scope, **scope_changes),
        functions=function_lookup(views.warehouse, views.spark),
    )
    return translate_select(stream.stmt.query, ctx), trows_view, trigger_source, named


@contextmanager
def range_scan(
    spark: Any,
    warehouse: Warehouse,
    stream: StreamDefinition,
    window_range: tuple[int, int],
    *,
    timezone: ZoneInfo,
    clock: Callable[[], int] = time.time_ns,
) -> Iterator[HistoryScan | None]:
    """A recalculation (a partition range, RECALCULATE) of the windows starting in
    ``window_range`` in the history's one scan. Fixed INTERVAL windows in one Spark job: the
    windows' output computed with their runs over the range's rows, which of them closed
    decided by each group's first and last row in the table (``window_job.range_results``).
    Islands, blocks and EVENT windows depend on every row before them: the whole history's
    scan, the range's closed windows handed over as queue rows with the query prepared over
    it. None where the plan does not apply: the run derives the range's windows, then
    queries them."""
    table, trigger = stream.trigger_table, stream_trigger(stream)
    if table is None or not _fusable(stream, trigger, warehouse.stored_rows(table)):
        yield None
        return
    if not isinstance(trigger, WindowTrigger):
        with history_scan(spark, warehouse, stream, None, timezone=timezone, clock=clock) as scan:
            if scan is None or scan.prepared is None:
                yield None
                return
            kept = range_triggers(scan.derived.triggers, *window_range)
            yield HistoryScan(Derived(kept, {}), scan.prepared)
        return
    views = SparkViews(spark, warehouse, stream.db)
    try:
        reach = trigger.spec.reach  # the rows of the windows starting in the range, and a little more
        key_range = (window_range[0] - reach, window_range[1] + reach)
        rows, late_children = _trigger_rows(spark, warehouse, stream, None, key_range)
        translated, _, _, named = _translated(views, stream, rows, {}, timezone, clock)
        if _keys(stream, translated.key_aggregates) is None or not window_job.applies(stream, translated):
            yield None
            return
        live = live_child_names(warehouse, table) if late_children else None
        stored = warehouse.key_bounds(table)  # Delta statistics, no scan
        start, end = window_range
        # every row in a window of the range (a backfill of everything): each group's first
        # and last row the trigger sees are its runs', no scan of the table for them
        spec = trigger.spec
        covered = stored is not None and spec.floor(stored[0]) >= start and spec.floor(stored[1]) < end
        bounds = None if covered else group_bounds(views, stream)
        windows = range_results(views, stream, translated, named, window_range, bounds, live=live, clock=clock)
        yield None if windows is None else HistoryScan(Derived([], {}), None, windows)
    finally:
        views.close()


def recalculate(
    spark: Any, warehouse: Warehouse, stream: StreamDefinition, window_range: tuple[int, int], *, timezone: ZoneInfo
) -> tuple[RunOutcome, list[dict[str, Any]], str]:
    """A recalculation of the windows starting in ``window_range``, replacing the output
    there in one commit: in the history's scan where it applies (``range_scan``), else
    derived, then queried. The outcome, the windows computed as queue rows (none when
    computed with their runs) and the plan's name."""
    with range_scan(spark, warehouse, stream, window_range, timezone=timezone) as scan:
        if scan is None:
            triggers = triggers_for_range(spark, warehouse, stream, *window_range)
            outcome = compute_triggers(
                spark, warehouse, stream, triggers, timezone=timezone, replace_range=window_range
            )
            return outcome, triggers, TWO_STEPS
        if scan.windows is not None:  # fixed INTERVAL windows: computed with their runs
            return write_window_results(warehouse, stream, scan.windows, replace_range=window_range), [], ONE_JOB
        triggers = scan.derived.triggers  # queried over the history scan's aggregates
        outcome = compute_triggers(
            spark, warehouse, stream, triggers, timezone=timezone, replace_range=window_range, prepared=scan.prepared
        )
        return outcome, triggers, PLAN


def _labelled(stream: StreamDefinition, trigger: Trigger, rows: Any, pk: str) -> tuple[Any, dict[str, str], Trigger]:
    """The rows (those PRE_FILTER admits), each labelled with its island, block or window
    (``__island``); what the replay needs of each beside its first row, last row and rows,
    as aggregates over its rows aliased ``d``, by name; and the trigger that replays them
    (STATE_WINDOW's over its state column: ``bulk.state_column``)."""
    groups = [*stream.group_columns] or ["tbname"]
    if isinstance(trigger, CountTrigger):
        return count_rows(rows, groups, pk, trigger), {}, trigger
    if isinstance(trigger, EventTrigger):
        return event_rows(stream, rows, groups, pk, trigger), event_measures(trigger, pk), trigger
    if isinstance(trigger, StateTrigger):
        rows, trigger = state_column(stream, rows, trigger)
        measures = {_VALUE: f"first(d.`{trigger.column}`, true)"}
        return island_rows(rows, groups, pk, trigger), measures, trigger
    assert isinstance(trigger, SessionTrigger)
    # a timestamp several child tables of the group share is one row to the trigger
    measures = {_TIMESTAMPS: f"count(DISTINCT d.`{pk}`)"} if several_tables(stream) else {}
    return island_rows(rows, groups, pk, trigger), measures, trigger


def _keys(stream: StreamDefinition, plans: tuple[KeyAggregates, ...]) -> tuple[dict[str, str], str] | None:
    """The plan's key columns holding the stream's group values (``__k<i>`` → group column)
    and the one holding the window label, when the query's one data side is grouped by
    exactly the group and the window over the trigger's rows; None otherwise."""
    if len(plans) != 1 or plans[0].narrowed:
        return None
    groups = {f"__g{i}": name for i, name in enumerate(stream.group_columns, start=1)}
    keys = plans[0].keys
    if sorted(keys) != sorted([*groups, "_twstart"]):
        return None
    label = f"__k{keys.index('_twstart')}"
    return {f"__k{i}": groups[key] for i, key in enumerate(keys) if key != "_twstart"}, label


@contextmanager
def history_scan(
    spark: Any,
    warehouse: Warehouse,
    stream: StreamDefinition,
    version: int | None,
    *,
    timezone: ZoneInfo,
    clock: Callable[[], int] = time.time_ns,
) -> Iterator[HistoryScan | None]:
    """The history as of WAL offset ``version`` (None: the table as it stands) in one scan
    (see the module), or None where the plan does not apply. The cached aggregates and the
    views stay until the block ends."""
    table, query, trigger = stream.trigger_table, stream.stmt.query, stream_trigger(stream)
    if not _fusable(stream, trigger, warehouse.stored_rows(table, version) if table else None):
        yield None
        return
    assert table is not None and query is not None
    views = SparkViews(spark, warehouse, stream.db)
    cached = None
    try:
        rows, late_children = _trigger_rows(spark, warehouse, stream, version)
        scope_changes: dict[str, Any] = {}
        measures: dict[str, str] = {}
        if not isinstance(trigger, WindowTrigger):
            # each row labelled with its window: the query groups by it as by window
            rows, measures, trigger = _labelled(stream, trigger, pre_filtered(stream, rows), table.primary_key)
            scope_changes["window_label"] = lambda _: _ISLAND
            scope_changes["aggregates_measures"] = tuple(f"{sql} AS {name}" for name, sql in measures.items())
        translated, trows_view, trigger_source, named = _translated(views, stream, rows, scope_changes, timezone, clock)
        triggers_view, aggregates_view = named
        keys = _keys(stream, translated.key_aggregates)
        if keys is None:
            yield None
            return
        group_keys, label = keys
        if window_job.applies(stream, translated):  # fixed INTERVAL windows that only close
            # the rows come here, where a dropped child's are left out: a filter on the
            # grouping key in Spark is pushed below the grouping, to every row (1.8 s of 50 M)
            live = live_child_names(warehouse, table) if late_children else None
            windows = window_results(views, stream, translated, named, live=live, clock=clock)
            if windows is not None:
                yield HistoryScan(Derived([], windows.states), None, windows)
                return
        aggregates = views.sql(translated.key_aggregates[0].sql)
        if late_children:
            tbname = next(key for key, name in group_keys.items() if name == "tbname")
            aggregates = live_children(spark, warehouse, table, aggregates, tbname)
        # computed once, by the runs' read below; the query's join reads the cache
        cached = aggregates.cache()
        runs = [*(f"`{key}` AS `{name}`" for key, name in group_keys.items()), "__first", "__last", "__rows"]
        if isinstance(trigger, WindowTrigger):
            views.register_as(cached, aggregates_view)
            derived = interval_windows(warehouse, stream, cached.selectExpr(*runs).toArrow())
        else:
            # an island's trigger starts at its first row: the join meets it there (rows
            # outside any EVENT window have no label and meet no trigger)
            columns = [f"__first AS {label}" if c == label else f"`{c}`" for c in cached.columns]
            views.register_as(cached.where(f"{label} IS NOT NULL").selectExpr(*columns), aggregates_view)
            outside = f"{label} IS NULL AS __outside"
            if _TIMESTAMPS in measures:  # the rows the trigger counts
                runs[runs.index("__rows")] = f"{_TIMESTAMPS} AS __rows"
            islands = cached.selectExpr(*runs, *measures, outside).limit(bulk.DRIVER_ISLANDS + 1).toArrow()
            if islands.num_rows > bulk.DRIVER_ISLANDS:
                # a state changing on nearly every row: the derivation replays its islands in
                # the executors instead of bringing them here
                yield None
                return
            derived = island_windows(warehouse, stream, trigger, islands)
        yield HistoryScan(derived, PreparedQuery(views, trigger_source, trows_view, translated, triggers_view))
    finally:
        if cached is not None:
            cached.unpersist()
        views.close()
