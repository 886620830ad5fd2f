"""A FILL_HISTORY run of fixed INTERVAL windows in one scan of the trigger table.

Owns the history run's fused plan. Deriving the windows (``bulk.derive_windows``) and
computing the query over them each scan the whole table: Spark groups it by group and window
for the runs the state machine replays, then again for the query's aggregates. When the query
is computed aggregate-first on its group and window (``sql/translate/batch``) and each row
lies in exactly one window, both are one grouping: one Spark job computes each (group,
window)'s aggregates with its rows' run (first row, last row, rows), kept in Spark's cache;
the runs come here and the state machine derives the closed windows and each group's state
from them (``bulk.interval_windows``, as the two-scan path does); the query then joins those
triggers to the cached aggregates (``run.compute_triggers`` with the prepared query). Where
the plan does not apply, ``history_scan`` gives None and the run derives, then queries.
Reads only; the run writes.
"""

from __future__ import annotations

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
from ..triggers.engine import WindowTrigger
from ..triggers.plan import stream_admission, stream_trigger
from . import bulk
from .bulk import Derived, interval_windows
from .run import PreparedQuery, reads_tags, stream_scope, uses
from .udf import function_lookup

PLAN = "one scan"  # the run's metadata names the plan that computed the history


@dataclass(frozen=True)
class HistoryScan:
    derived: Derived  # the closed windows as queue rows, each group's state
    prepared: PreparedQuery  # the query over them, its data side computed


def _fusable(stream: StreamDefinition, stored: int | None) -> bool:
    """Whether one grouping serves the windows and the query: fixed INTERVAL windows a row
    belongs to one of, the trigger's rows all rows of the table (no FILL_HISTORY start, no
    legacy rows of its own, no PARTITION BY expression), a query that counts no rows of its
    own (``_twrownum`` is the trigger's count); a table small enough to derive in this process
    (``bulk.LOCAL_ROWS``) is left to that."""
    trigger, table, query = stream_trigger(stream), stream.trigger_table, stream.stmt.query
    if query is None or table is None or stored is None or stored <= bulk.LOCAL_ROWS:
        return False
    if not isinstance(trigger, WindowTrigger) or not isinstance(trigger.spec, IntervalSpec):
        return False
    if trigger.spec.sliding != trigger.spec.interval or stream.group_exprs or written.kept_for(stream, table):
        return False
    return stream_admission(stream).history_start is None and not uses(query, "_twrownum")


def _runs_keys(stream: StreamDefinition, plans: tuple[KeyAggregates, ...]) -> dict[str, str] | None:
    """The plan's key columns holding the stream's group values (``__k<i>`` → group column),
    when the query's one data side is grouped by exactly the group and the window over the
    trigger's rows; None otherwise."""
    if len(plans) != 1 or plans[0].narrowed:
        return None
    groups = {f"__g{i}": name for i, name in enumerate(stream.group_columns, start=1)}
    keys = plans[0].keys
    if sorted(keys) != sorted([*groups, "_twstart"]):
        return None
    return {f"__k{i}": groups[key] for i, key in enumerate(keys) if key != "_twstart"}


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
    table, query = stream.trigger_table, stream.stmt.query
    if not _fusable(stream, warehouse.stored_rows(table, version) if table else None):
        yield None
        return
    assert table is not None and query is not None
    views = SparkViews(spark, warehouse, stream.db)
    cached = None
    try:
        rows = table_frame(spark, warehouse, table, version, tags=reads_tags(stream))
        trows_view = views.register(rows, "history")
        trigger_source = views.table(table)
        triggers_view, aggregates_view = views.fresh_view(), views.fresh_view()
        scope = stream_scope(stream, triggers_view, trigger_source, trows_view, aggregates_view)
        ctx = TranslationContext(
            views.resolve, timezone, clock(), stream=scope, functions=function_lookup(warehouse, spark)
        )
        translated = translate_select(query, ctx)
        keys = _runs_keys(stream, translated.key_aggregates)
        if keys is None:
            yield None
            return
        # computed once, by the runs' read below; the query's join reads the cache
        cached = views.sql(translated.key_aggregates[0].sql).cache()
        views.register_as(cached, aggregates_view)
        columns = [*(f"`{key}` AS `{name}`" for key, name in keys.items()), "__first", "__last", "__rows"]
        runs = cached.selectExpr(*columns).toArrow()
        prepared = PreparedQuery(views, trigger_source, trows_view, translated, triggers_view)
        yield HistoryScan(interval_windows(warehouse, stream, runs), prepared)
    finally:
        if cached is not None:
            cached.unpersist()
        views.close()
