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
queue rows follow too; the closed windows' rows are written in one commit.

Where a group's closed span has a window without rows that fires (no IGNORE_NODATA_TRIGGER),
or a query needs a trigger of its own (its group id, a notification of the history, FILL),
``window_results`` gives None and the history takes the one-scan plan. Reads through Spark
and writes the output; the checkpoint is the run's.
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
from ..triggers.engine import WindowTrigger
from ..triggers.plan import stream_trigger
from ..triggers.replay import fast_interval
from ..triggers.tick import group_identities
from .bulk import fixed_closing
from .output import Group, write_results
from .run import RunOutcome, query_source_types, uses

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
    """Whether the windows only close (no WINDOW_OPEN, MAX_DELAY or clock) and nothing of the
    history needs a trigger of its own: a table to write, no notification of the history, no
    FILL or FORCE_OUTPUT, no group id in the query, and the query one projection of its
    aggregate-first plan."""
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
    """The triggers view's columns (``run._triggers_rows``) of a window, over its data row ``d``."""
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


def window_results(
    views: SparkViews,
    stream: StreamDefinition,
    translated: TranslatedQuery,
    aggregates_view: str,
    *,
    clock: Callable[[], int] = time.time_ns,
) -> WindowResults | None:
    """Every window's output and run from ``aggregates_view`` (the plan's data side) in one
    job, the closed windows' rows and each group's state; None where a group's closed span
    has a window without rows that fires."""
    trigger = stream_trigger(stream)
    assert isinstance(trigger, WindowTrigger)
    plan = translated.key_aggregates[0]
    groups = [key for key in plan.keys if key != "_twstart"]  # __g1 … in PARTITION BY order
    runs = [f"d.__k{plan.keys.index(key)} AS `{key}`" for key in groups] + ["d.__first", "d.__last", "d.__rows"]
    # HAVING drops an output row, not the run: which windows close and stay open needs them all
    kept = f"coalesce(({plan.having}), false)" if plan.having else "true"
    sql = (
        f"SELECT {', '.join(plan.select)}, {', '.join(runs)}, {kept} AS {_KEPT} FROM `{aggregates_view}` d, "
        f"LATERAL (SELECT {_trigger_columns(stream, trigger, plan.keys, clock())}) __trig"
    )
    found = fixed_closing(trigger, views.sql(sql).toArrow(), groups)
    if found is None or not found.complete.all():
        return None
    rows, heads = found.runs, found.heads
    written = pa.array(found.closing) if not plan.having else pc.and_(pa.array(found.closing), rows.column(_KEPT))
    per_group = np.add.reduceat(written.to_numpy(zero_copy_only=False).astype(np.int64), heads) if len(heads) else heads
    firsts = rows.select(groups).take(pa.array(heads)).to_pylist() if groups else [{} for _ in heads]
    values = [[row[key] for key in groups] for row in firsts]
    identities = group_identities(views.warehouse, stream, values)
    row_groups = []
    states = {}
    ends = [*heads.tolist()[1:], rows.num_rows]
    closed = np.add.reduceat(found.closing.astype(np.int64), heads) if len(heads) else heads
    for g, (head, end) in enumerate(zip(heads.tolist(), ends, strict=True)):
        group = Group(tuple(values[g]), identities[g])
        row_groups += [group] * int(per_group[g])
        states[json.dumps(values[g], default=str)] = found.state(g, head, end, head + int(closed[g])).to_json()
    starts = found.starts[found.closing]
    return WindowResults(
        translated.columns,
        rows.select([f"__c{i}" for i in range(len(translated.columns))]).filter(written),
        row_groups,
        len(starts),
        int(starts.min()) if len(starts) else None,
        states,
        query_source_types(views, stream),
    )


def write_window_results(warehouse: Warehouse, stream: StreamDefinition, results: WindowResults) -> RunOutcome:
    """The closed windows' rows written to the output table, in one commit."""
    failpoint("before-output-commit")
    outcome = write_results(warehouse, stream, results.columns, results.data, results.row_groups, results.source_types)
    failpoint("after-output-commit")
    return RunOutcome(results.windows, results.windows, outcome.rows, outcome.version, None, outcome.tables)
