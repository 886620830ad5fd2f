"""Time-series functions and multi-row selectors (diff, csum, mavg, derivative, statecount,
stateduration, top, bottom, tail, unique, sample): window functions per partition in time
order, and which rows each keeps.
"""

from __future__ import annotations

from .. import ast
from ..timeunits import PRECISIONS
from .functions import NUMERIC, SERIES_FUNCTIONS
from .render import Renderer
from .scope import OutputColumn, Scope, TranslationContext, Typed, output_name, query_error
from .sources import data_relation, trigger_rows


def series_query(
    select: ast.Select, scope: Scope, render: Renderer, ctx: TranslationContext
) -> tuple[str, list[OutputColumn], Scope]:
    """Queries with time-series functions or multi-row selectors: one output row per input
    row that the function keeps, in time order per partition (what each keeps and computes:
    ``_series_function``, ``_row_selector``, and ``docs/sql-support.md``)."""
    stream = ctx.stream
    if stream is not None and (select.limit is not None or select.offset is not None):
        raise query_error("LIMIT/OFFSET beside time-series functions in a stream's query is not supported yet", select)
    if select.window is not None or select.group_by or select.having is not None or select.distinct:
        raise query_error(
            "time-series functions and multi-row selectors (diff, csum, top, …) cannot be combined "
            "with windows, GROUP BY, HAVING or DISTINCT",
            select,
        )
    if scope.pk is None or scope.base is None:
        raise query_error(
            "time-series functions and multi-row selectors need a table with a timestamp primary key", select
        )
    names = {i.expr.name for i in select.items if isinstance(i.expr, ast.Func) and i.expr.name in SERIES_FUNCTIONS}
    if len(names) > 1:
        raise query_error(f"{' and '.join(sorted(names))} cannot be mixed in one query", select)
    partition = [render.expr(e).sql for e in select.partition_by]
    if stream is not None:  # each trigger's rows are a series of their own
        partition.insert(0, "__trig.__tid")
    over = f"PARTITION BY {', '.join(partition) or 'NULL'} ORDER BY {scope.pk}"
    items: list[tuple[str, str, OutputColumn]] = []
    keep: list[str] = []
    drop_when_all_null: list[str] = []
    for item in select.items:
        alias = f"__c{len(items)}"
        name = output_name(item)
        expr = item.expr
        if not (isinstance(expr, ast.Func) and expr.name in SERIES_FUNCTIONS):
            if isinstance(expr, ast.Star):
                raise query_error(
                    "* cannot be selected beside time-series functions and multi-row selectors; name the columns", expr
                )
            typed = render.expr(expr)
            if typed.aggregate:
                raise query_error(
                    "aggregates cannot be selected beside time-series functions and multi-row selectors", expr
                )
            items.append((typed.sql, alias, OutputColumn(name, typed.kind == "ts", typed.kind)))
            continue
        sql, condition, all_null = _series_function(expr, render, over, partition)
        items.append((sql, alias, OutputColumn(name, False, "other")))
        keep += [condition] if condition else []
        drop_when_all_null += [sql] if all_null else []
    where = render.condition(select.where) if select.where is not None else None
    # each distinct expression once: Spark plans a window beside hundreds of aliases of one
    # column in time that grows much faster than the list (200 copies: 13 s for 20 rows)
    first_alias: dict[str, str] = {}
    for sql, alias, _ in items:
        first_alias.setdefault(sql, alias)
    select_list = ", ".join(f"{sql} AS {alias}" for sql, alias in first_alias.items())
    keys = "".join(f", {p} AS __p{i}" for i, p in enumerate(partition))
    # a kept row's conditions use the row and window functions: evaluated in the inner query
    flags = "".join(f", ({condition}) AS __k{i}" for i, condition in enumerate(keep))
    relation = data_relation(scope)
    if stream is not None:  # the trigger's rows only
        relation = trigger_rows(scope, stream)
        keys += ", __trig.__tid AS __tid"
    inner = f"SELECT {select_list}{keys}{flags}, {scope.pk} AS __ts FROM {relation}" + (
        f" WHERE {where}" if where else ""
    )
    conditions = [f"__k{i}" for i in range(len(keep))]
    if drop_when_all_null:
        kept = dict.fromkeys(first_alias[sql] for sql in drop_when_all_null)
        conditions.append("(" + " OR ".join(f"{a} IS NOT NULL" for a in kept) + ")")
    order = [f"__p{i}" for i in range(len(partition))] + ["__ts"]
    if select.order_by:
        raise query_error(
            "ORDER BY beside time-series functions and multi-row selectors is not supported yet "
            "(rows come in time order)",
            select,
        )
    outputs = [f"{first_alias[sql]} AS {alias}" for sql, alias, _ in items] + (["__tid"] if stream is not None else [])
    sql = f"SELECT {', '.join(outputs)} FROM ({inner}) __series"
    if conditions:
        sql += " WHERE " + " AND ".join(f"({c})" for c in conditions)
    sql += " ORDER BY " + ", ".join(order)
    if select.limit is not None:
        sql += f" LIMIT {select.limit}"
    if select.offset is not None:
        sql += f" OFFSET {select.offset}"
    return sql, [col for _, _, col in items], scope


def _series_function(expr: ast.Func, render: Renderer, over: str, partition: list[str]) -> tuple[str, str | None, bool]:
    """(the value's SQL, the condition for its row to be output, whether an all-NULL row of
    such values is dropped) for one time-series function or multi-row selector. diff is the
    value minus the nearest earlier non-NULL value (ignore_option 0/1: the first row has no
    output; 1/3: a negative difference is NULL; 2/3: rows whose differences are all NULL are
    dropped); csum the running sum of the non-NULL values (a NULL row has no output); mavg(expr,
    k) the mean of the last k non-NULL values (the first k-1 have no output)."""
    name = expr.name
    if not expr.args:
        raise query_error(f"{name}() needs a column", expr)
    arg = render.expr(expr.args[0])
    if arg.aggregate:
        raise query_error(f"{name}() cannot contain an aggregate", expr.args[0])
    if name in ("top", "bottom", "tail", "unique", "sample"):
        return _row_selector(expr, arg, render, partition)
    if name in ("statecount", "stateduration"):
        return _state_run(expr, arg, render, partition), None, False
    value = f"CAST({arg.sql} AS INT)" if arg.kind == "bool" else arg.sql
    allowed = ("int", "float", "ts", "bool") if name == "diff" else NUMERIC
    if arg.kind not in allowed:
        raise query_error(f"{name}() needs a numeric column, got a {arg.kind} value", expr.args[0])
    cast = "DOUBLE" if arg.kind == "float" else "BIGINT"
    if name == "diff":
        option = 0
        if len(expr.args) == 2:
            node = expr.args[1]
            if not (isinstance(node, ast.Literal) and node.kind == "int" and node.value in (0, 1, 2, 3)):
                raise query_error("diff()'s ignore_option is 0, 1, 2 or 3", node)
            option = int(node.value)  # type: ignore[call-overload]
        elif len(expr.args) > 2:
            raise query_error("diff() takes a column and an optional ignore_option", expr)
        previous = f"last({value}, true) OVER ({over} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)"
        difference = f"CAST({value} - {previous} AS {cast})"
        if option in (1, 3):  # a negative difference counts as NULL
            difference = f"CASE WHEN {value} - {previous} < 0 THEN NULL ELSE {difference} END"
        if option in (0, 1):
            return difference, f"row_number() OVER ({over}) > 1", False
        return difference, None, True
    if name == "derivative":
        # (value - previous non-NULL value) per time_interval of the time between them
        if len(expr.args) != 3 or not isinstance(expr.args[1], ast.DurationLiteral):
            raise query_error("derivative() takes a column, a time interval (at least 1s) and 0 or 1", expr)
        step = render.time_unit(expr, 1)
        if step * PRECISIONS[render.scope.precision] < 10**9:  # PRECISIONS: ns per unit
            raise query_error("derivative()'s time interval is at least 1s", expr.args[1])
        flag = expr.args[2]
        if not (isinstance(flag, ast.Literal) and flag.value in (0, 1)):
            raise query_error("derivative()'s ignore_negative is 0 or 1", flag)
        pk = render.scope.pk
        before = f"{over} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
        previous = f"last({value}, true) OVER ({before})"
        previous_ts = f"last(CASE WHEN {value} IS NOT NULL THEN {pk} END, true) OVER ({before})"
        rate = f"CAST({value} - {previous} AS DOUBLE) * {step} / ({pk} - {previous_ts})"
        keep = f"{value} IS NOT NULL AND {previous} IS NOT NULL" + (f" AND {rate} >= 0" if flag.value == 1 else "")
        return rate, keep, False
    if name == "csum":
        if len(expr.args) != 1:
            raise query_error("csum() takes one column", expr)
        running = f"CAST(sum({value}) OVER ({over} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS {cast})"
        return running, f"{value} IS NOT NULL", False
    # mavg(expr, k): the non-NULL values form their own partition, so k counts only them
    if len(expr.args) != 2 or not (isinstance(expr.args[1], ast.Literal) and expr.args[1].kind == "int"):
        raise query_error("mavg() takes a column and a constant number of rows k (1 to 1000)", expr)
    k = int(expr.args[1].value)  # type: ignore[call-overload]
    if not 1 <= k <= 1000:
        raise query_error("mavg()'s k is from 1 to 1000", expr.args[1])
    frame = over.replace("PARTITION BY ", f"PARTITION BY ({value} IS NULL), ", 1)
    frame += f" ROWS BETWEEN {k - 1} PRECEDING AND CURRENT ROW"
    average = f"CAST(avg({value}) OVER ({frame}) AS DOUBLE)"
    return average, f"{value} IS NOT NULL AND count({value}) OVER ({frame}) >= {k}", False


_STATE_OPERATORS = {"LT": "<", "GT": ">", "LE": "<=", "GE": ">=", "NE": "<>", "EQ": "="}


def _state_run(expr: ast.Func, arg: Typed, render: Renderer, partition: list[str]) -> str:
    """statecount/stateduration: per row, how many rows (how long) the run of consecutive
    rows meeting ``expr oper value`` has lasted so far; -1 on a row that does not meet it;
    NULL on a NULL row, which neither extends nor breaks the run. A run is numbered by the
    rows not meeting the condition before it (a layer of its own: windows do not nest)."""
    name, scope = expr.name, render.scope
    duration = name == "stateduration"
    if not 3 <= len(expr.args) <= (4 if duration else 3):
        unit = " and an optional time unit" if duration else ""
        raise query_error(
            f"{name}() takes a column, an operator ('LT', 'GT', 'LE', 'GE', 'NE', 'EQ'), a value{unit}", expr
        )
    if arg.kind not in NUMERIC:
        raise query_error(f"{name}() needs a numeric column, got a {arg.kind} value", expr.args[0])
    oper = expr.args[1]
    if not (isinstance(oper, ast.Literal) and oper.kind == "string" and str(oper.value).upper() in _STATE_OPERATORS):
        raise query_error(f"{name}()'s operator is one of 'LT', 'GT', 'LE', 'GE', 'NE', 'EQ'", oper)
    bound = render.expr(expr.args[2])
    if bound.kind not in NUMERIC or not isinstance(expr.args[2], ast.Literal | ast.Unary):
        raise query_error(f"{name}()'s value is a numeric constant", expr.args[2])
    meets = f"({arg.sql} {_STATE_OPERATORS[str(oper.value).upper()]} {bound.sql})"
    by = ", ".join([*partition, f"({arg.sql} IS NULL)"])
    run = render.ctx.fresh("run")
    scope.layers.append(
        f"sum(CASE WHEN {meets} THEN 0 ELSE 1 END) OVER (PARTITION BY {by} ORDER BY {scope.pk} "
        f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS {run}"
    )
    within = f"PARTITION BY {by}, d.{run}"
    if duration:
        unit = render.time_unit(expr, 3) if len(expr.args) == 4 else 1
        so_far = f"({scope.pk} - min(CASE WHEN {meets} THEN {scope.pk} END) OVER ({within})) DIV {unit}"
    else:
        so_far = (
            f"sum(CASE WHEN {meets} THEN 1 ELSE 0 END) OVER ({within} ORDER BY {scope.pk} "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
        )
    return f"CASE WHEN {arg.sql} IS NULL THEN NULL WHEN {meets} THEN CAST({so_far} AS BIGINT) ELSE -1 END"


def _row_selector(expr: ast.Func, arg: Typed, render: Renderer, partition: list[str]) -> tuple[str, str, bool]:
    """top/bottom(expr, k): the k largest/smallest non-NULL values; tail(expr, k[, offset]):
    the last k rows after skipping the newest ``offset``; unique(expr): each value's first row;
    sample(expr, k): k rows at random. The rows come out in time order, with their columns."""
    name, pk = expr.name, render.scope.pk
    groups = ", ".join(partition) or "NULL"

    def constant(index: int, low: int, high: int, what: str) -> int:
        node = expr.args[index] if index < len(expr.args) else None
        if not (isinstance(node, ast.Literal) and node.kind == "int" and low <= int(node.value) <= high):  # type: ignore[call-overload]
            raise query_error(f"{name}()'s {what} is a constant from {low} to {high}", node or expr)
        return int(node.value)  # type: ignore[call-overload]

    if name == "unique":
        if len(expr.args) != 1:
            raise query_error("unique() takes one column", expr)
        return arg.sql, f"row_number() OVER (PARTITION BY {groups}, {arg.sql} ORDER BY {pk}) = 1", False
    if name == "tail":
        if len(expr.args) not in (2, 3):
            raise query_error("tail() takes a column, k (1 to 100) and an optional offset (0 to 100)", expr)
        k = constant(1, 1, 100, "k")
        offset = constant(2, 0, 100, "offset") if len(expr.args) == 3 else 0
        rank = f"row_number() OVER (PARTITION BY {groups} ORDER BY {pk} DESC)"
        return arg.sql, f"{rank} > {offset} AND {rank} <= {offset + k}", False
    if len(expr.args) != 2:
        raise query_error(f"{name}() takes a column and k", expr)
    if name == "sample":
        k = constant(1, 1, 1000, "k")
        return arg.sql, f"row_number() OVER (PARTITION BY {groups} ORDER BY rand()) <= {k}", False
    if arg.kind not in NUMERIC:
        raise query_error(f"{name}() needs a numeric column, got a {arg.kind} value", expr.args[0])
    k = constant(1, 1, 100, "k")
    direction = "DESC" if name == "top" else "ASC"
    rank = f"row_number() OVER (PARTITION BY {groups} ORDER BY {arg.sql} {direction} NULLS LAST, {pk})"
    return arg.sql, f"{arg.sql} IS NOT NULL AND {rank} <= {k}", False
