"""INTERP: columns' values at points in time. ``RANGE(start, end) EVERY(d)`` (or ``RANGE(t)``)
names the points; at each, a row at that very time gives its value, otherwise FILL derives one
from the neighbouring rows — PREV, NEXT, NEAR (the closer; the earlier on a tie), LINEAR
(between the two), NULL, VALUE — or (NONE) the point is left out. Owns the INTERP query plan
and its pseudo-columns (``_irowts``, ``_isfilled``, ``_irowts_origin``); must not touch the
window plans (``windows``) or the renderer's functions.
"""

from __future__ import annotations

from ...errors import WriteRejectedError
from .. import ast
from ..constants import ConstantContext, evaluate
from ..limits import MAX_FILL_WINDOWS
from ..timeunits import PRECISIONS
from ..walk import interp_calls, walk
from .functions import NUMERIC
from .render import Renderer, replacement_key
from .scope import (
    OutputColumn,
    Scope,
    TranslationContext,
    Typed,
    data_references,
    output_name,
    query_error,
    quote_ident,
)
from .sources import data_relation
from .windows import selected_order

_FILLS = "FILL(NONE | NULL | VALUE, … | PREV | NEXT | NEAR | LINEAR)"
_NEIGHBOUR_FILLS = ("PREV", "NEXT", "NEAR")
_UP_TO_HERE = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
_FROM_HERE = "ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING"


def interp_query(
    select: ast.Select, scope: Scope, render: Renderer, ctx: TranslationContext
) -> tuple[str, list[OutputColumn], Scope]:
    clause, calls = select.interp, interp_calls(select)
    stream = ctx.stream
    if (stream is not None) != (clause is not None and clause.trigger_point is not None):
        # only a legacy INTERP stream's equivalent query computes its triggers' points
        raise query_error("INTERP is not computed in a 3.3.7 stream's query (TDengine does not support it)", select)
    if clause is None:
        raise query_error(f"INTERP needs RANGE(start, end) EVERY(interval) {_FILLS} after FROM and WHERE", calls[0])
    if not calls:
        raise query_error("RANGE, EVERY and FILL here are INTERP's clause: select INTERP(column)", clause)
    for present, what in (
        (select.window is not None, "a window clause"),
        (bool(select.group_by), "GROUP BY"),
        (select.having is not None, "HAVING"),
        (select.distinct, "DISTINCT"),
        (select.slimit is not None or select.soffset is not None, "SLIMIT/SOFFSET"),
    ):
        if present:
            raise query_error(f"INTERP cannot be combined with {what}", select)
    if scope.pk is None or scope.base is None:
        raise query_error("INTERP needs a table with a timestamp primary key", select)
    fill = clause.fill or ast.Fill("NONE")  # without FILL only the points a row is at
    mode = fill.mode.removesuffix("_F")
    if mode == "VALUE" and len(fill.values) != len(calls):
        raise query_error(f"FILL(VALUE, …) needs {len(calls)} value(s), one per INTERP; got {len(fill.values)}", clause)

    if stream is None:
        keys = [render.expr(e).sql for e in select.partition_by]
    else:  # the trigger's group: its rows are the ones interpolated
        keys = [scope.columns[name][0] for name in stream.group_columns]
    values, ignore_nulls, kinds = [], [], []
    for call in calls:
        sql, kind, ignore = _argument(call, render)
        values.append(sql)
        kinds.append(kind)
        ignore_nulls.append(ignore)
    key_list = "".join(f"__p{j}, " for j in range(len(keys)))
    data = ", ".join(
        [
            *(f"{k} AS __p{j}" for j, k in enumerate(keys)),
            f"{scope.pk} AS __t",
            *(f"{v} AS __v{i}" for i, v in enumerate(values)),
        ]
    )
    where = f" WHERE {render.condition(select.where)}" if select.where is not None else ""
    nulls = "".join(f", NULL AS __v{i}" for i in range(len(calls)))
    if stream is None:
        # each group's points, the group known from its rows (no rows: no points)
        groups = f"SELECT DISTINCT {key_list.rstrip(', ')} FROM __d" if keys else "SELECT 1 AS __one FROM __d LIMIT 1"
        points = _points(clause, scope, render)
        grid = (
            f"SELECT {key_list}__w AS __t{nulls}, 1 AS __g, NULL AS __tid FROM ({groups}) __k CROSS JOIN ({points}) __s"
        )
    else:  # one point per trigger, in its group: a SLIDING point, or a PERIOD tick (ns)
        group = "".join(f"__trig.__g{j + 1} AS __p{j}, " for j in range(len(keys)))
        point = f"__trig.{clause.trigger_point}"
        if clause.trigger_point == "_tlocaltime":
            point = f"{point} DIV {PRECISIONS[scope.precision]}"
        triggers = f"{quote_ident(stream.triggers_view)} __trig"
        grid = f"SELECT {group}{point} AS __t{nulls}, 1 AS __g, __trig.__tid AS __tid FROM {triggers}"
    rows = f"SELECT {key_list}__t, {', '.join(f'__v{i}' for i in range(len(calls)))}, 0 AS __g, NULL AS __tid FROM __d"
    # a point sorts after a row at its time: the last row up to it is that row when there is one
    order = f"PARTITION BY {', '.join(f'__p{j}' for j in range(len(keys))) or 'NULL'} ORDER BY __t, __g"
    neighbours = []
    for i, ignore in enumerate(ignore_nulls):
        kept = f"__g = 0 AND __v{i} IS NOT NULL" if ignore else "__g = 0"
        row = f"CASE WHEN {kept} THEN named_struct('t', __t, 'v', __v{i}) END"
        neighbours.append(f"last({row}, true) OVER ({order} {_UP_TO_HERE}) AS __b{i}")
        neighbours.append(f"first({row}, true) OVER ({order} {_FROM_HERE}) AS __a{i}")
    point_columns, has = [], []
    for i in range(len(calls)):
        value, origin, present = _filled(i, mode, kinds[i], clause, render)
        point_columns += [f"{value} AS __r{i}", f"{origin} AS __o{i}", f"coalesce(__b{i}.t = __t, false) AS __x{i}"]
        point_columns += [f"__b{i} IS NOT NULL AS __hb{i}", f"__a{i} IS NOT NULL AS __ha{i}"]
        has.append(present)
    points_sql = (
        f"WITH __d AS (SELECT {data} FROM {data_relation(scope)}{where}), "
        f"__u AS ({rows} UNION ALL {grid}), "
        f"__n AS (SELECT __u.*, {', '.join(neighbours)} FROM __u) "
        f"SELECT {key_list}__t AS __w, __tid, {', '.join(point_columns)} FROM __n WHERE __g = 1"
    )

    partitions = select.partition_by if stream is None else [ast.Column(name) for name in stream.group_columns]
    render.replaced = {
        **{replacement_key(call): Typed(f"__r{i}", kinds[i]) for i, call in enumerate(calls)},
        **{replacement_key(e): Typed(f"__p{j}", render.expr(e).kind) for j, e in enumerate(partitions)},
        ast.Column("_irowts"): Typed("__w", "ts"),
        ast.Column("_isfilled"): Typed("NOT __x0", "bool"),
        ast.Column("_irowts_origin"): Typed("__o0", "ts"),
    }
    try:
        items = []
        for item in select.items:
            if isinstance(item.expr, ast.Star):
                raise query_error("* cannot be selected beside INTERP; name the columns", item.expr)
            if mode not in _NEIGHBOUR_FILLS and any(
                isinstance(n, ast.Column) and n.name.lower() == "_irowts_origin" for n in walk(item.expr)
            ):
                raise query_error("_irowts_origin is selected with FILL(PREV), FILL(NEXT) or FILL(NEAR)", item.expr)
            typed = render.expr(item.expr)
            if typed.aggregate or data_references(typed.sql):
                raise query_error(
                    "beside INTERP a query selects _irowts, _isfilled, INTERP(…), constants and its PARTITION BY keys",
                    item.expr,
                )
            items.append(
                (typed.sql, f"__c{len(items)}", OutputColumn(output_name(item), typed.kind == "ts", typed.kind))
            )
        ordering = (
            selected_order(select, items, render, "INTERP")
            if select.order_by
            else ", ".join([*(f"__p{j}" for j in range(len(keys))), "__w"])  # each group's points in time order
        )
    finally:
        render.replaced = {}
    select_list = ", ".join(f"{sql} AS {alias}" for sql, alias, _ in items)
    present = " OR ".join(has)
    if stream is not None:  # each point is its trigger's result (the query's rows carry __tid)
        return (
            f"SELECT {select_list}, __tid FROM ({points_sql}) __i WHERE {present} ORDER BY __tid",
            [column for _, _, column in items],
            scope,
        )
    if select.limit is None and select.offset is None:
        return (
            f"SELECT {select_list} FROM ({points_sql}) __i WHERE {present} ORDER BY {ordering}",
            [column for _, _, column in items],
            scope,
        )
    # LIMIT/OFFSET count each group's points, as TDengine limits each partition's rows
    first = (select.offset or 0) + 1
    bound = f"__rn >= {first}" + (f" AND __rn <= {first + select.limit - 1}" if select.limit is not None else "")
    partition = f"PARTITION BY {', '.join(f'__p{j}' for j in range(len(keys)))} " if keys else ""
    selected = f"SELECT {select_list}, {key_list}__w FROM ({points_sql}) __i WHERE {present}"
    ranked = f"SELECT *, row_number() OVER ({partition}ORDER BY {ordering}) AS __rn FROM ({selected}) __s"
    outer = ", ".join(alias for _, alias, _ in items)
    return (
        f"SELECT {outer} FROM ({ranked}) __l WHERE {bound} ORDER BY {ordering}",
        [column for _, _, column in items],
        scope,
    )


def _points(clause: ast.Interp, scope: Scope, render: Renderer) -> str:
    """The points as a one-column relation ``__w``: RANGE's start, every EVERY, up to its end."""
    if clause.start is None:
        raise query_error("a query's INTERP needs RANGE(start, end) EVERY(interval) or RANGE(point)", clause)
    if clause.end is not None and clause.every is None:
        raise query_error("RANGE(start, end) needs EVERY(interval): the distance between the points", clause)
    if clause.end is None and clause.every is not None:
        raise query_error("RANGE(point) names one point: EVERY goes with RANGE(start, end)", clause)
    constants = ConstantContext(scope.precision, render.ctx.timezone, render.now * PRECISIONS[scope.precision])
    bounds = []
    for expr in (clause.start, clause.end if clause.end is not None else clause.start):
        try:
            value = evaluate(expr, constants, timestamp=True)
        except WriteRejectedError as exc:
            raise query_error(f"RANGE takes timestamps: {exc.message}", expr) from None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise query_error(f"RANGE takes timestamps, got {value!r}", expr)
        bounds.append(int(value))
    low, high = bounds
    if low > high:
        raise query_error("RANGE(start, end) needs start <= end", clause)
    step = render.duration(clause.every, clause) if clause.every is not None else 1
    if step <= 0:
        raise query_error("EVERY needs a positive interval", clause)
    if (high - low) // step >= MAX_FILL_WINDOWS:
        raise query_error(f"INTERP would compute over {MAX_FILL_WINDOWS:,} points: narrow RANGE or widen EVERY", clause)
    return f"SELECT explode(sequence({low}L, {high}L, {step}L)) AS __w"


def _argument(call: ast.Func, render: Renderer) -> tuple[str, str, bool]:
    """INTERP(expr [, ignore_null_values]): the value's SQL, its kind, and whether NULLs are skipped."""
    if not 1 <= len(call.args) <= 2:
        raise query_error(
            f"INTERP takes a column and ignore_null_values (0 or 1), got {len(call.args)} argument(s)", call
        )
    typed = render.expr(call.args[0])
    if typed.aggregate:
        raise query_error("INTERP takes a column or an expression of columns, not an aggregate", call.args[0])
    if typed.kind not in NUMERIC and typed.kind != "bool":
        raise query_error(f"INTERP needs a number column, got a {typed.kind} value", call.args[0])
    ignore = False
    if len(call.args) == 2:
        flag = call.args[1]
        if not (isinstance(flag, ast.Literal) and flag.kind == "int" and flag.value in (0, 1)):
            raise query_error("INTERP's ignore_null_values is 0 or 1", flag)
        ignore = flag.value == 1
    return typed.sql, typed.kind, ignore


def _filled(i: int, mode: str, kind: str, clause: ast.Interp, render: Renderer) -> tuple[str, str, str]:
    """Point i's value, the time of the row it came from, and whether the point has a value."""
    before, after, exact = f"__b{i}", f"__a{i}", f"coalesce(__b{i}.t = __t, false)"
    if mode == "NONE":
        return f"CASE WHEN {exact} THEN {before}.v END", f"CASE WHEN {exact} THEN __t END", f"__x{i}"
    if mode == "NULL":
        return f"CASE WHEN {exact} THEN {before}.v END", f"CASE WHEN {exact} THEN __t END", "TRUE"
    if mode == "VALUE":
        assert clause.fill is not None  # VALUE is a FILL's
        constant = render.expr(clause.fill.values[i]).sql
        return f"CASE WHEN {exact} THEN {before}.v ELSE {constant} END", f"CASE WHEN {exact} THEN __t END", "TRUE"
    if mode == "PREV":
        return f"{before}.v", f"{before}.t", f"__hb{i}"
    if mode == "NEXT":
        chosen = f"CASE WHEN {exact} THEN {before} ELSE {after} END"
        return f"({chosen}).v", f"({chosen}).t", f"(__x{i} OR __ha{i})"
    if mode == "NEAR":
        chosen = (
            f"CASE WHEN {before} IS NULL THEN {after} WHEN {after} IS NULL OR {exact} THEN {before} "
            f"WHEN __t - {before}.t <= {after}.t - __t THEN {before} ELSE {after} END"
        )
        return f"({chosen}).v", f"({chosen}).t", f"(__hb{i} OR __ha{i})"
    assert mode == "LINEAR"
    if kind not in NUMERIC:
        raise query_error("FILL(LINEAR) interpolates numbers", clause)
    line = f"{before}.v + ({after}.v - {before}.v) * (__t - {before}.t) / ({after}.t - {before}.t)"
    value = f"CASE WHEN {exact} THEN {before}.v WHEN {after} IS NULL THEN NULL ELSE {line} END"
    if kind == "int":  # an integer column stays integer (the interpolation truncated)
        value = f"CAST({value} AS BIGINT)"
    return value, f"CASE WHEN {exact} THEN __t END", f"(__x{i} OR (__hb{i} AND __ha{i}))"
