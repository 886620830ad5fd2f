"""Query windows: INTERVAL arithmetic (fixed and calendar), FILL's grid of windows, and the
row windows (SESSION, STATE_WINDOW, EVENT_WINDOW, COUNT_WINDOW) described as views the
trigger engine labels (``RowWindowPlan``; run by ``compute/query.py``).
"""

from __future__ import annotations

import itertools

from .. import ast
from ..constants import INT64_MAX, INT64_MIN
from ..intervals import CalendarIntervalSpec, IntervalSpec
from ..limits import MAX_FILL_WINDOWS
from ..rowwindows import STATE_VALUE, QueryRowWindow, counted_value, end_flag, start_flag
from ..timeunits import DAY_NANOS, PRECISIONS, TimeValueError
from .functions import NUMERIC
from .render import Renderer
from .scope import (
    OutputColumn,
    RowWindowPlan,
    Scope,
    TranslationContext,
    query_error,
)
from .sources import data_relation, trigger_rows


def filled_windows(
    select: ast.Select,
    window: ast.IntervalWindow,
    scope: Scope,
    parts: list[str],
    items: list[tuple[str, str, OutputColumn]],
    kinds: list[str],
    partition_sql: list[str],
    render: Renderer,
) -> str:
    """INTERVAL … FILL: every window of the queried range (see the grid below), the windows
    without rows filled — NULL/NULL_F with NULL, VALUE/VALUE_F with the given constants (in
    the order of the filled columns), PREV/NEXT with the nearest earlier/later window's
    value, LINEAR by interpolating numbers between them over the window starts.
    Window pseudo-columns and partition keys are not filled: they come from the window grid."""
    assert window.fill is not None
    mode = window.fill.mode.removesuffix("_F")
    if mode == "NEAR":
        raise query_error(
            "FILL(NEAR) fills INTERP's points; windows fill with NONE, NULL, VALUE, PREV, NEXT or LINEAR", select
        )
    if select.having is not None:
        raise query_error("FILL with HAVING is not supported yet", select)
    stream = render.ctx.stream
    if stream is not None and (select.order_by or select.limit is not None or select.offset is not None):
        raise query_error("FILL with ORDER BY or LIMIT in a stream's query is not supported yet", select)
    keys = [f"__p{i}" for i in range(len(partition_sql))]
    inner_select = ", ".join([*(f"{sql} AS {k}" for sql, k in zip(partition_sql, keys, strict=True)), "d.__qw AS __w"])
    inner = parts[0].replace(" FROM ", f", {inner_select} FROM ", 1) + " " + " ".join(parts[1:])
    key_list = "".join(f"{k}, " for k in keys)
    # the grid spans the WHERE's time range where it has one (TDengine fills the queried
    # range) — in a stream's query over an INTERVAL trigger, the trigger's window — else each
    # partition's first and last window with data; constants sit inside min/max because the
    # bounds query aggregates, partitioned or not
    low, high = render.query_bounds()
    if window.interval.is_calendar:  # a grid of month indices, each mapped to its start
        if stream is not None:
            raise query_error("FILL over calendar INTERVAL windows in a stream's query is not supported yet", select)
        if window.offset is not None or (window.sliding is not None and window.sliding != window.interval):
            raise query_error(
                "FILL over calendar INTERVAL windows needs SLIDING equal to the INTERVAL and no offset", select
            )
        step = window.interval.months
        first = f"min({render.calendar.month_index(f'{low}L' if low != INT64_MIN else '__w')})"
        first = f"({first} - pmod({first}, {step}))"
        last = f"max({render.calendar.month_index(f'{high}L' if high != INT64_MAX else '__w')})"
    else:
        step = render.duration(window.sliding or window.interval, select)
        spec = interval_spec(window, scope, select, render)
        first = f"min({spec.first_start(low)}L)" if low != INT64_MIN else "min(__w)"
        last = f"max({spec.floor(high)}L)" if high != INT64_MAX else "max(__w)"
        if stream is not None and stream.window_label is not None:
            inner = inner.replace(" FROM ", ", __trig._twstart AS __tws, __trig._twend AS __twe FROM ", 1)
            first = f"min({spec.floor_sql(f'__tws - {spec.interval}')} + {spec.sliding})"
            last = f"max({spec.floor_sql('__twe - 1')})"
    group_by = f" GROUP BY {', '.join(keys)}" if keys else ""
    bounds = f"SELECT {key_list}{first} AS __lo, {last} AS __hi FROM __agg{group_by}"
    # a grid beyond MAX_FILL_WINDOWS fails the query with a message instead of exhausting
    # the shared Spark server's memory (a stray row years away from the others would)
    too_many = (
        f"raise_error('FILL would produce more than {MAX_FILL_WINDOWS} windows in one group: "
        "narrow the time range with WHERE ts >= ... AND ts < ...')"
    )
    sequence = (
        f"CASE WHEN (__hi - __lo) / CAST({step} AS BIGINT) >= {MAX_FILL_WINDOWS} THEN {too_many} "
        f"ELSE sequence(__lo, __hi, CAST({step} AS BIGINT)) END"
    )
    grid = f"SELECT {key_list}explode({sequence}) AS __w FROM ({bounds}) __b"
    if window.interval.is_calendar:
        grid = f"SELECT {key_list}{render.calendar.month_start('__w')} AS __w FROM ({grid}) __m"
    # the grid left-joined to the aggregated windows, each column filled by the mode
    on = " AND ".join([*(f"g.{k} <=> a.{k}" for k in keys), "g.__w = a.__w"])
    pseudo = {"d.__qw": "g.__w", **{v: v.replace("d.__qw", "g.__w") for v in scope.window_sql.values()}}
    filled_columns = [i for i, (sql, _, _) in enumerate(items) if sql not in pseudo and sql not in partition_sql]
    values = list(window.fill.values)
    if mode == "VALUE" and len(values) != len(filled_columns):
        raise query_error(
            f"FILL(VALUE, …) needs {len(filled_columns)} value(s), one per filled column; got {len(values)}", select
        )
    order = f"PARTITION BY {', '.join('g.' + k for k in keys) or 'NULL'} ORDER BY g.__w"
    columns = []
    for i, (sql, alias, _) in enumerate(items):
        if sql in pseudo:
            columns.append(f"{pseudo[sql]} AS {alias}")
            continue
        if sql.startswith("__trig."):  # a placeholder: the trigger's, in every window of it
            columns.append(f"first(a.{alias}, true) OVER (PARTITION BY g.__p0) AS {alias}")
            continue
        if sql in partition_sql:
            columns.append(f"g.{keys[partition_sql.index(sql)]} AS {alias}")
            continue
        value = f"a.{alias}"
        if mode == "VALUE":
            constant = render.expr(values[filled_columns.index(i)]).sql
            value = f"CASE WHEN a.__w IS NULL THEN {constant} ELSE a.{alias} END"
        elif mode == "PREV":
            value = f"last(a.{alias}, true) OVER ({order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
        elif mode == "NEXT":
            value = f"first(a.{alias}, true) OVER ({order} ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)"
        elif mode == "LINEAR" and kinds[i] in NUMERIC:
            before = f"{order} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
            after = f"{order} ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING"
            prev_v, next_v = f"last(a.{alias}, true) OVER ({before})", f"first(a.{alias}, true) OVER ({after})"
            prev_w = f"last(CASE WHEN a.{alias} IS NOT NULL THEN g.__w END, true) OVER ({before})"
            next_w = f"first(CASE WHEN a.{alias} IS NOT NULL THEN g.__w END, true) OVER ({after})"
            value = (
                f"CASE WHEN a.{alias} IS NOT NULL THEN a.{alias} WHEN {prev_w} IS NULL OR {next_w} IS NULL THEN NULL "
                f"ELSE {prev_v} + ({next_v} - {prev_v}) * (g.__w - {prev_w}) / ({next_w} - {prev_w}) END"
            )
            if kinds[i] == "int":  # an integer column stays integer (the interpolation truncated)
                value = f"CAST({value} AS BIGINT)"
        columns.append(f"{value} AS {alias}")
    if stream is not None:
        columns.append("g.__p0 AS __tid")
    ordering = ", ".join([*(f"g.{k}" for k in keys), "g.__w"])
    if select.order_by:  # ORDER BY the filled output: by name, position or the selected expression
        ordering = selected_order(select, items, render, "FILL")
    sql = f"WITH __agg AS ({inner}) SELECT {', '.join(columns)} FROM ({grid}) g LEFT JOIN __agg a ON {on} "
    sql += f"ORDER BY {ordering}"
    if select.limit is not None:
        sql += f" LIMIT {select.limit}"
    if select.offset is not None:
        sql += f" OFFSET {select.offset}"
    return sql


def selected_order(
    select: ast.Select, items: list[tuple[str, str, OutputColumn]], render: Renderer, beside: str
) -> str:
    """ORDER BY over a plan's output columns (FILL's grid, INTERP's points): each entry names a
    selected column by its name, its position or the same expression; ``beside`` names the
    clause in the error."""
    by_name = {col.name.lower(): alias for _, alias, col in items}
    by_sql = {sql: alias for sql, alias, _ in items}
    ordering = []
    for entry in select.order_by:
        expr = entry.expr
        if isinstance(expr, ast.Column) and expr.table is None and expr.name.lower() in by_name:
            target = by_name[expr.name.lower()]
        elif isinstance(expr, ast.Literal) and expr.kind == "int" and 1 <= int(str(expr.value)) <= len(items):
            target = items[int(str(expr.value)) - 1][1]
        else:
            rendered = render.expr(expr).sql
            if rendered not in by_sql:
                raise query_error(
                    f"ORDER BY beside {beside} names a selected column (by name, position or the same expression)",
                    expr,
                )
            target = by_sql[rendered]
        ordering.append(target + (" DESC" if entry.descending else " ASC"))
    return ", ".join(ordering)


_ROW_WINDOW_VIEWS = itertools.count()  # view names unique in the process's Spark session


_ROW_WINDOW_NAMES = {
    ast.SessionWindow: "SESSION",
    ast.StateWindow: "STATE_WINDOW",
    ast.EventWindow: "EVENT_WINDOW",
    ast.CountWindow: "COUNT_WINDOW",
}


def label_row_windows(
    select: ast.Select, window: QueryRowWindow, scope: Scope, render: Renderer, ctx: TranslationContext
) -> None:
    """SESSION, STATE_WINDOW, EVENT_WINDOW, COUNT_WINDOW: the query reads a view of its rows
    labelled with their windows (``RowWindowPlan``), computed as TDengine does over the rows
    the WHERE keeps, per partition, in time order; ``_wstart``/``_wend`` are a window's first
    and last row times."""
    kind = _ROW_WINDOW_NAMES[type(window)]
    if scope.pk is None or scope.base is None:
        raise query_error(f"{kind} needs a table with a timestamp primary key", select)
    values: list[tuple[str, str]] = []  # (column the trigger reads, its SQL)
    gap = true_for = None
    if isinstance(window, ast.SessionWindow):
        if render.expr(window.column).sql != scope.pk:
            raise query_error("SESSION's first argument is the table's primary timestamp column", window.column)
        if not isinstance(window.gap, ast.DurationLiteral) or window.gap.duration.is_calendar:
            raise query_error("SESSION's gap is a duration such as 10s or 5m", window.gap)
        gap = render.duration(window.gap.duration, window.gap)
        if gap <= 0:
            raise query_error(f"SESSION's gap {window.gap.duration} is finer than the database precision", window.gap)
    elif isinstance(window, ast.StateWindow):
        state = render.expr(window.expr)
        if state.kind not in ("int", "bool", "string") or state.aggregate:
            raise query_error(
                f"STATE_WINDOW needs an integer, boolean or string value, got a {state.kind} value", window.expr
            )
        values.append((STATE_VALUE, state.sql))
    elif isinstance(window, ast.EventWindow):
        values += [(start_flag(i), render.condition(c)) for i, c in enumerate(window.start)]
        values += [(end_flag(i), render.condition(c)) for i, c in enumerate(window.end)]
    else:
        if window.count < 2 or not 1 <= (window.sliding or window.count) <= window.count:
            raise query_error("COUNT_WINDOW takes a row count of at least 2 and a sliding from 1 to that count", select)
        values += [(counted_value(i), render.expr(column).sql) for i, column in enumerate(window.columns)]
    if isinstance(window, ast.StateWindow | ast.EventWindow) and window.true_for is not None:
        true_for = render.duration(window.true_for, select)
    keys = [(render.expr(e).sql, f"__p{i}") for i, e in enumerate(select.partition_by)]
    relation = data_relation(scope)
    stream = ctx.stream
    if stream is not None:  # windows within each trigger's rows: the trigger is a partition key
        relation = trigger_rows(scope, stream)
        keys.insert(0, ("__trig.__tid", "__tid"))
        scope.trigger_join = ["d.__tid = __trig.__tid"]
    computed = [f"{scope.pk} AS __ts", *(f"{sql} AS {name}" for sql, name in keys)]
    computed += [f"{sql} AS {name}" for name, sql in values]
    source = f"SELECT d.*, {', '.join(computed)} FROM {relation}"
    if select.where is not None:
        source += f" WHERE {render.condition(select.where)}"
    view = f"__rw_{next(_ROW_WINDOW_VIEWS)}"
    names = tuple(name for name, _ in values)
    ctx.row_windows.append(RowWindowPlan(view, source, tuple(k for _, k in keys), window, names, gap, true_for))
    scope.base, scope.labelled, scope.window = view, True, window
    scope.window_sql = {"_wstart": "d.__qw", "_wend": "d.__qwe", "_wduration": "(d.__qwe - d.__qw)"}


def calendar_windows(select: ast.Select, window: ast.IntervalWindow, scope: Scope, render: Renderer) -> None:
    """INTERVAL in n / y: the windows of ``CalendarIntervalSpec`` on the session time zone's
    calendar — natural months and years counted from January 1970 (3n windows are quarters,
    1y calendar years) when SLIDING is calendar too or absent, a month-long window every
    fixed SLIDING from Unix time 0 otherwise (TDengine's INTERVAL(1n) SLIDING(1d)); a window
    ends its months after its start, so its length follows the calendar."""
    if window.sliding is not None and window.sliding.is_calendar and not window.interval.is_calendar:
        raise query_error(f"a calendar SLIDING ({window.sliding}) needs a calendar INTERVAL", select)
    if window.offset is not None and window.offset.is_calendar:
        raise query_error(f"INTERVAL offset {window.offset} must be a fixed duration, not months", select)
    try:
        spec = IntervalSpec.of_window(window, scope.precision, render.ctx.timezone.key)
    except TimeValueError as exc:
        raise query_error(str(exc), select) from None
    assert isinstance(spec, CalendarIntervalSpec) and scope.pk is not None
    longest = window.interval.months * 31 * DAY_NANOS // PRECISIONS[scope.precision]
    if spec.sliding_months > spec.months or spec.sliding > longest:
        raise query_error(f"SLIDING {window.sliding} must not be larger than INTERVAL {window.interval}", select)
    end = spec.end_sql("d.__qw")
    scope.window = window
    scope.window_sql = {
        "label": spec.label_sql(scope.pk.removeprefix("d.")),
        "_wstart": "d.__qw",
        "_wend": end,
        "_wduration": f"({end} - d.__qw)",
    }


def interval_spec(window: ast.IntervalWindow, scope: Scope, select: ast.Select, render: Renderer) -> IntervalSpec:
    """A fixed-length INTERVAL's geometry (calendar ones: ``calendar_windows``); days and weeks
    start at the session time zone's midnight."""
    try:
        spec = IntervalSpec.of_window(window, scope.precision, render.ctx.timezone.key)
    except TimeValueError as exc:
        raise query_error(str(exc), select) from None
    assert isinstance(spec, IntervalSpec)
    if spec.sliding > spec.interval:
        raise query_error(f"SLIDING {window.sliding} must not be larger than INTERVAL {window.interval}", select)
    return spec
