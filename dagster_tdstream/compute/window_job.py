"""A fixed INTERVAL history as one Spark job: every window's output computed beside its run.

Owns ``window_results`` and ``write_window_results``. The one-scan plan (``history.py``)
hands its windows over as queue rows, one per window, builds the triggers view from them and
joins it back to the cached aggregates: at 166,000 windows, 2.3 s of Python and round trips
around 1 s of Spark work. A fixed INTERVAL window (SLIDING equal to INTERVAL) that only
closes, with rows, is exactly one row of the aggregate-first plan's data side (grouped by
the group and the window); its trigger's columns are functions of that row (``_twstart``
its window key, ``_twend`` one INTERVAL on, ``%%tbname`` its group's), computed beside it in
a lateral projection Spark folds into the row, so the query's output is a projection of the
row with no join. One job returns every window's output with its run. Which windows closed
and what each group keeps open are ``bulk.FixedClosing``'s array arithmetic, the rule the
queue rows follow too; the closed windows' rows are written in one commit. A window
without rows that fires (no IGNORE_NODATA_TRIGGER) has no data row: those few are replayed
and queried as triggers, over an empty data side.

Where a query needs a trigger of its own (its group id, a notification of the history,
FILL, FORCE_OUTPUT), ``applies`` says no and the history takes the one-scan plan. Reads
through Spark and writes the output; the checkpoint is the run's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..faults import failpoint
from ..sql import ast
from ..sql.translate import OutputColumn, TranslatedQuery
from ..storage.registry import StreamDefinition
from ..storage.spark_read import SparkViews
from ..storage.warehouse import Warehouse
from ..triggers.engine import WINDOW_CLOSE, WindowTrigger
from ..triggers.plan import stream_trigger
from ..triggers.replay import fast_interval
from ..triggers.tick import group_identities, queue_record
from .bulk import fixed_closing, range_closing
from .output import Group, group_of, write_results
from .query import run_query
from .run import RunOutcome, query_source_types, triggers_rows, uses

_KEPT = "__kept"  # whether HAVING keeps a window's output row


@dataclass(frozen=True)
class WindowResults:
    columns: tuple[OutputColumn, ...]
    data: pa.Table  # the closed windows' output rows (the query's columns), by group and window
    row_groups: list[Group]  # each row's group
    windows: int  # closed windows (a row HAVING drops is a window computed all the same)
    first_start: int | None  # the first closed window's start
    states: dict[str, dict[str, Any]]  # group key → final trigger state (checkpoint form)
    source_types: dict[str, ast.DataType]  # the source columns' types, naming a new output's


def applies(stream: StreamDefinition, translated: TranslatedQuery) -> bool:
    """Whether the windows only close (no WINDOW_OPEN, no processing-time close; a history
    fires no MAX_DELAY) and nothing of the history needs a trigger of its own: a table to
    write, no notification of the history, no FILL or FORCE_OUTPUT, no group id in the
    query, and the query one projection of its aggregate-first plan."""
    stmt = stream.stmt
    if not fast_interval(stream_trigger(stream)):
        return False
    if stream.output is None or stmt.query is None or stmt.option("CALC_NOTIFY_ONLY") is not None:
        return False
    if stmt.option(ast.LEGACY_FILL) is not None or stmt.option("FORCE_OUTPUT") is not None:
        return False
    note = stmt.notification
    if note is not None and "NOTIFY_HISTORY" in note.options:
        return False
    if translated.parameters or translated.row_windows or len(translated.key_aggregates) != 1:
        return False
    return bool(translated.key_aggregates[0].select) and not uses(stmt.query, "_tgrpid")


def _trigger_columns(stream: StreamDefinition, trigger: WindowTrigger, keys: tuple[str, ...], now: int) -> str:
    """The triggers view's columns (``run.triggers_rows``) of a window, over its data row ``d``."""
    window = f"d.__k{keys.index('_twstart')}"
    interval = trigger.spec.interval  # type: ignore[union-attr]
    columns = {name: "CAST(NULL AS BIGINT)" for name in ("__tid", "_tgrpid", "_tprev_localtime", "_tnext_localtime")}
    columns |= {name: "CAST(NULL AS BIGINT)" for name in ("_tcurrent_ts", "_tprev_ts", "_tnext_ts")}
    columns |= {key: f"d.__k{i}" for i, key in enumerate(keys)}  # the window and the group values
    columns |= {
        "_twend": f"{window} + {interval}",
        "_twduration": f"CAST({interval} AS BIGINT)",
        "_twrownum": "d.__rows",
        "_tlocaltime": f"CAST({now} AS BIGINT)",
        "__tbname": "CAST(NULL AS STRING)",
    }
    if "tbname" in stream.group_columns:
        tbname = keys.index(f"__g{stream.group_columns.index('tbname') + 1}")
        columns["__tbname"] = f"CAST(d.__k{tbname} AS STRING)"
    return ", ".join(f"{sql} AS `{name}`" for name, sql in columns.items())


def _collected(
    views: SparkViews,
    stream: StreamDefinition,
    translated: TranslatedQuery,
    live: list[str] | None,
    now: int,
    window_range: tuple[int, int] | None = None,
) -> tuple[pa.Table, list[str]]:
    """Every window's output row with its run (``__first``, ``__last``, ``__rows``) and
    HAVING's verdict, from the plan's data side in one job (its query inlined: no view
    registered, a round trip less); only windows starting in ``window_range`` when given. And
    the group columns (``__g1`` …, in PARTITION BY order)."""
    trigger = stream_trigger(stream)
    assert isinstance(trigger, WindowTrigger)
    plan = translated.key_aggregates[0]
    groups = [key for key in plan.keys if key != "_twstart"]  # __g1 … in PARTITION BY order
    runs = [f"d.__k{plan.keys.index(key)} AS `{key}`" for key in groups] + ["d.__first", "d.__last", "d.__rows"]
    # HAVING drops an output row, not the run: which windows close and stay open needs them all
    kept = f"coalesce(({plan.having}), false)" if plan.having else "true"
    data = f"({plan.sql})"
    if window_range is not None:  # a filter on the grouping key: Spark applies it to the rows
        label = f"__k{plan.keys.index('_twstart')}"
        data = f"(SELECT * FROM {data} WHERE {label} >= {window_range[0]} AND {label} < {window_range[1]})"
    sql = (
        f"SELECT {', '.join(plan.select)}, {', '.join(runs)}, {kept} AS {_KEPT} FROM {data} d, "
        f"LATERAL (SELECT {_trigger_columns(stream, trigger, plan.keys, now)}) __trig"
    )
    collected = views.sql(sql).toArrow()
    if live is not None:
        tbname = f"__g{stream.group_columns.index('tbname') + 1}"
        collected = collected.filter(pc.is_in(collected.column(tbname), value_set=pa.array(live, pa.string())))
    return collected, groups


def window_results(
    views: SparkViews,
    stream: StreamDefinition,
    translated: TranslatedQuery,
    views_named: tuple[str, str],
    *,
    live: list[str] | None = None,
    clock: Callable[[], int] = time.time_ns,
) -> WindowResults | None:
    """Every closed window's output and each group's state, from one job (``_collected``).
    ``views_named``: the names the translation gave the triggers view and the data side's
    view; ``live``: the child tables whose windows are kept (grouped by tbname: a dropped
    child's rows may outlive it). A group whose closed span has windows without rows that
    fire (no IGNORE_NODATA_TRIGGER) is replayed here (``interval_history``, few runs) and
    those windows' rows come from the query itself over an empty data side: what it computes
    for a window without rows."""
    trigger = stream_trigger(stream)
    now = clock()
    collected, groups = _collected(views, stream, translated, live, now)
    found = fixed_closing(trigger, collected, groups)
    if found is None:
        return None
    heads = found.heads
    values = _group_values(found.runs, heads, groups)
    states: dict[str, dict[str, Any]] = {}
    empty: list[tuple[list[Any], list[tuple[int, int]]]] = []  # windows without rows that fire
    for g, group_values in enumerate(values):
        replayed, state = found.group(g)
        states[json.dumps(group_values, default=str)] = state.to_json()
        none = [(start, stop) for start, stop, count in replayed or () if count == 0]
        if none:
            empty.append((group_values, none))
    closed = (found.runs, heads, found.starts, found.closing)
    return _results(views, stream, translated, views_named, closed, values, empty, now, states)


def range_results(
    views: SparkViews,
    stream: StreamDefinition,
    translated: TranslatedQuery,
    views_named: tuple[str, str],
    window_range: tuple[int, int],
    bounds: pa.Table | None,
    *,
    live: list[str] | None = None,
    clock: Callable[[], int] = time.time_ns,
) -> WindowResults | None:
    """A recalculation's closed windows starting in ``window_range`` and their output, from
    one job (``_collected`` over the range), as ``run.triggers_for_range`` decides them: by
    each group's first and last row in the table (``bounds``, ``run.group_bounds``; None when
    every row lies in a window of the range: its runs' first and last); None
    where that rule is not array arithmetic (``bulk.range_closing``). No state: the stream's
    checkpoint is not a recalculation's."""
    trigger = stream_trigger(stream)
    now = clock()
    collected, groups = _collected(views, stream, translated, live, now, window_range)
    found = range_closing(trigger, collected, groups, bounds, window_range)
    if found is None:
        return None
    heads = found.heads
    values = _group_values(found.runs, heads, groups)
    interval = trigger.spec.interval  # type: ignore[union-attr]
    empty = [(list(key), [(start, start + interval) for start in starts]) for key, starts in found.empty]
    closed = (found.runs, heads, found.starts, found.closing)
    return _results(views, stream, translated, views_named, closed, values, empty, now, {})


def _group_values(runs: pa.Table, heads: np.ndarray, groups: list[str]) -> list[list[Any]]:
    """Each group's values (``groups``' columns), from its first run."""
    firsts = runs.select(groups).take(pa.array(heads)).to_pylist() if groups else [{} for _ in heads]
    return [[row[key] for key in groups] for row in firsts]


def _results(
    views: SparkViews,
    stream: StreamDefinition,
    translated: TranslatedQuery,
    views_named: tuple[str, str],
    closed: tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray],
    values: list[list[Any]],
    empty: list[tuple[list[Any], list[tuple[int, int]]]],
    now: int,
    states: dict[str, dict[str, Any]],
) -> WindowResults:
    """The closed windows' output rows (``closed``: the runs sorted by group, each group's
    first run, each run's window start and whether it closed; ``values``: each group's;
    HAVING's verdict applied) and those of ``empty``'s windows without rows (group values,
    (start, end) of each), with each row's group."""
    rows, heads, run_starts, closing = closed
    plan = translated.key_aggregates[0]
    written = pa.array(closing) if not plan.having else pc.and_(pa.array(closing), rows.column(_KEPT))
    per_group = np.add.reduceat(written.to_numpy(zero_copy_only=False).astype(np.int64), heads) if len(heads) else heads
    identities = group_identities(views.warehouse, stream, values + [v for v, _ in empty])
    row_groups: list[Group] = []
    for g, group_values in enumerate(values):
        row_groups += [Group(tuple(group_values), identities[g])] * int(per_group[g])
    data = rows.select([f"__c{i}" for i in range(len(translated.columns))]).filter(written)
    starts = run_starts[closing].tolist()
    queued = [
        queue_record(WINDOW_CLOSE, start, stop, 0, json.dumps(group_values, default=str), "{}", group_id, -1, now)
        for (group_values, windows), group_id in zip(empty, identities[len(values) :], strict=True)
        for start, stop in windows
    ]
    starts += [t["wstart"] for t in queued]
    if queued:
        empty_rows, empty_groups = _empty_windows(views, stream, translated, views_named, queued, now)
        data, row_groups = pa.concat_tables([data, empty_rows.cast(data.schema)]), row_groups + empty_groups
    return WindowResults(
        translated.columns,
        data,
        row_groups,
        len(starts),
        min(starts) if starts else None,
        states,
        query_source_types(views, stream),
    )


def _empty_windows(
    views: SparkViews,
    stream: StreamDefinition,
    translated: TranslatedQuery,
    views_named: tuple[str, str],
    empty: list[dict[str, Any]],
    now: int,
) -> tuple[pa.Table, list[Group]]:
    """The output rows of windows without rows, and their groups: the translated query over
    their triggers with the data side emptied (its LEFT JOIN meets no row: each aggregate as
    over no rows, count 0)."""
    triggers_view, aggregates_view = views_named
    for tid, trigger in enumerate(empty):
        trigger["id"] = tid
    views.register_rows(triggers_rows(stream, empty, lambda: now), "triggers", triggers_view)
    views.register_as(views.sql(f"SELECT * FROM ({translated.key_aggregates[0].sql}) LIMIT 0"), aggregates_view)
    result = run_query(views, translated)
    groups = [group_of(empty[tid]) for tid in result.column("__tid").to_pylist()]
    return result.drop_columns(["__tid"]), groups


def write_window_results(
    warehouse: Warehouse,
    stream: StreamDefinition,
    results: WindowResults,
    replace_range: tuple[int, int] | None = None,
) -> RunOutcome:
    """The closed windows' rows written to the output table, in one commit (a recalculated
    ``replace_range`` replacing the output rows there)."""
    failpoint("before-output-commit")
    outcome = write_results(
        warehouse,
        stream,
        results.columns,
        results.data,
        results.row_groups,
        results.source_types,
        replace_range=replace_range,
    )
    failpoint("after-output-commit")
    return RunOutcome(results.windows, results.windows, outcome.rows, outcome.version, None, outcome.tables)
