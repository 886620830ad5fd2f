"""A FILL_HISTORY run in one scan of the trigger table: fixed INTERVAL, STATE_WINDOW, SESSION.

Owns the history run's fused plan. Deriving the windows (``bulk.derive_windows``) and
computing the query over them each read the whole table: Spark groups it into runs (INTERVAL:
per group and window) or islands (STATE_WINDOW, SESSION: runs of rows in one state or within
the gap) for the state machine to replay, then the query's plan reads it again. When the query
is computed aggregate-first on its group and window (``sql/translate/batch``) and each window
is one such run or island, both are one grouping: one Spark job computes each run's or
island's aggregates with its first row, last row and rows, kept in Spark's cache; those come
here and the state machine derives the windows and each group's state from them, as the
two-scan path does (``bulk.interval_windows``, ``bulk.island_windows``); the query then joins
those triggers to the cached aggregates (``run.compute_triggers`` with the prepared query).
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
from ..sql.translate import KeyAggregates, TranslationContext, translate_select
from ..storage import written
from ..storage.registry import StreamDefinition
from ..storage.spark_read import SparkViews, table_frame
from ..storage.warehouse import Warehouse
from ..triggers.engine import WINDOW_CLOSE, WindowTrigger
from ..triggers.plan import Trigger, stream_admission, stream_trigger
from ..triggers.rows import SessionTrigger, StateTrigger
from . import bulk
from .bulk import Derived, interval_windows, island_rows, island_windows, pre_filtered
from .run import PreparedQuery, reads_tags, stream_scope, uses
from .udf import function_lookup

PLAN = "one scan"  # the run's metadata names the plan that computed the history
_ISLAND = "__island"  # a row's island number (``bulk.island_rows``), the window label of islands
_VALUE = "__value"  # a STATE_WINDOW island's state


@dataclass(frozen=True)
class HistoryScan:
    derived: Derived  # the closed windows as queue rows, each group's state
    prepared: PreparedQuery  # the query over them, its data side computed


def _fusable(stream: StreamDefinition, trigger: Trigger, stored: int | None) -> bool:
    """Whether one grouping serves the windows and the query: the trigger's rows are all rows
    of the table (no FILL_HISTORY start, no legacy rows of its own, no PARTITION BY
    expression), the query counts no rows of its own (``_twrownum`` is the trigger's count),
    and a window is one run or island — fixed INTERVAL windows a row belongs to one of, or
    STATE_WINDOW over a column and SESSION over groups of one table each (no two rows share
    a timestamp, so a window's rows are its island's), closing only (an open window has no
    end to bound its rows); a table small enough to derive in this process
    (``bulk.LOCAL_ROWS``) is left to that."""
    table, query = stream.trigger_table, stream.stmt.query
    if query is None or table is None or stored is None or stored <= bulk.LOCAL_ROWS:
        return False
    if stream.group_exprs or written.kept_for(stream, table) or uses(query, "_twrownum"):
        return False
    if stream_admission(stream).history_start is not None:
        return False
    if isinstance(trigger, WindowTrigger):
        return isinstance(trigger.spec, IntervalSpec) and trigger.spec.sliding == trigger.spec.interval
    if isinstance(trigger, StateTrigger | SessionTrigger) and trigger.events == (WINDOW_CLOSE,):
        one_table = table.kind != "super" or "tbname" in stream.group_columns
        return one_table and not (isinstance(trigger, StateTrigger) and trigger.expr is not None)
    return False


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
    version: int,
    *,
    timezone: ZoneInfo,
    clock: Callable[[], int] = time.time_ns,
) -> Iterator[HistoryScan | None]:
    """The history as of WAL offset ``version`` in one scan (see the module), or None where
    the plan does not apply. The cached aggregates and the views stay until the block ends."""
    table, query, trigger = stream.trigger_table, stream.stmt.query, stream_trigger(stream)
    if not _fusable(stream, trigger, warehouse.stored_rows(table, version) if table else None):
        yield None
        return
    assert table is not None and query is not None
    views = SparkViews(spark, warehouse, stream.db)
    cached = None
    try:
        rows = table_frame(spark, warehouse, table, version, tags=reads_tags(stream))
        scope_changes: dict[str, Any] = {}
        if isinstance(trigger, StateTrigger | SessionTrigger):
            # each row labelled with its island: the query groups by island as by window
            rows = island_rows(
                pre_filtered(stream, rows), [*stream.group_columns] or ["tbname"], table.primary_key, trigger
            )
            scope_changes["window_label"] = lambda _: _ISLAND
            if isinstance(trigger, StateTrigger):
                scope_changes["aggregates_measures"] = (f"first(d.`{trigger.column}`, true) AS {_VALUE}",)
        trows_view = views.register(rows, "history")
        trigger_source = views.table(table)
        triggers_view, aggregates_view = views.fresh_view(), views.fresh_view()
        scope = stream_scope(stream, triggers_view, trigger_source, trows_view, aggregates_view)
        ctx = TranslationContext(
            views.resolve,
            timezone,
            clock(),
            stream=dataclasses.replace(scope, **scope_changes),
            functions=function_lookup(warehouse, spark),
        )
        translated = translate_select(query, ctx)
        keys = _keys(stream, translated.key_aggregates)
        if keys is None:
            yield None
            return
        group_keys, label = keys
        # computed once, by the runs' read below; the query's join reads the cache
        cached = views.sql(translated.key_aggregates[0].sql).cache()
        runs = [*(f"`{key}` AS `{name}`" for key, name in group_keys.items()), "__first", "__last", "__rows"]
        if isinstance(trigger, WindowTrigger):
            views.register_as(cached, aggregates_view)
            derived = interval_windows(warehouse, stream, cached.selectExpr(*runs).toArrow())
        else:
            # an island's trigger starts at its first row: the join meets it there
            columns = [f"__first AS {label}" if c == label else f"`{c}`" for c in cached.columns]
            views.register_as(cached.selectExpr(*columns), aggregates_view)
            value = [_VALUE] if isinstance(trigger, StateTrigger) else []
            islands = cached.selectExpr(*runs, *value).limit(bulk.DRIVER_ISLANDS + 1).toArrow()
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
