"""Translation of SELECT statements (see the package docstring): the select list, grouping,
companions, ORDER BY, LIMIT/SLIMIT; the other stages live beside it (``sources``,
``windows``, ``series``, ``batch``, ``render``).
"""

from __future__ import annotations

import dataclasses

from .. import ast
from ..walk import is_interp_query, walk
from .batch import aggregated_before_join, range_buckets
from .functions import AGGREGATES, SERIES_FUNCTIONS
from .interp import interp_query
from .render import Renderer
from .scope import (
    TRIGGER_NAMES,
    OutputColumn,
    Scope,
    TranslatedQuery,
    TranslationContext,
    data_references,
    output_name,
    query_error,
    quote_ident,
)
from .series import series_query
from .sources import data_relation, source_scope
from .windows import calendar_windows, filled_windows, interval_spec, label_row_windows


def translate_select(select: ast.Select, ctx: TranslationContext) -> TranslatedQuery:
    sql, columns, scope = translate(select, ctx)
    return TranslatedQuery(
        sql,
        tuple(columns),
        scope.precision,
        scope.tables,
        tuple(ctx.row_windows),
        tuple(ctx.parameters),
        tuple(ctx.key_aggregates),
    )


def translate(select: ast.Select, ctx: TranslationContext) -> tuple[str, list[OutputColumn], Scope]:
    scope = source_scope(select, ctx)
    select = _one_column_selectors(select, scope)
    stream = ctx.stream
    if (select.slimit is not None or select.soffset is not None) and stream is not None:
        raise query_error("SLIMIT/SOFFSET are not supported in a stream's query", select)
    if (select.slimit is not None or select.soffset is not None) and not (select.partition_by or select.group_by):
        raise query_error("SLIMIT/SOFFSET limit the groups of PARTITION BY or GROUP BY; this query has none", select)
    render = Renderer(scope, ctx)
    render.where = select.where
    if is_interp_query(select):
        return interp_query(select, scope, render, ctx)
    window = select.window
    if window is not None and any(isinstance(item.expr, ast.Star) for item in select.items):
        raise query_error("a window query selects aggregates, selectors and window pseudo-columns, not *", select)
    if window is not None and not isinstance(window, ast.IntervalWindow):
        label_row_windows(select, window, scope, render, ctx)
    elif window is not None and scope.pk is None:
        raise query_error("INTERVAL needs a table with a timestamp primary key", select)
    elif window is not None and (window.interval.is_calendar or (window.sliding and window.sliding.is_calendar)):
        calendar_windows(select, window, scope, render)
    elif window is not None:
        interval = render.duration(window.interval, select)
        scope.window = window
        scope.window_sql = {
            "label": interval_spec(window, scope, select, render).label_sql(scope.pk).replace("d.", ""),
            "_wstart": "d.__qw",
            "_wend": f"(d.__qw + {interval})",
            "_wduration": f"CAST({interval} AS BIGINT)",
        }
    series = [item for item in select.items if isinstance(item.expr, ast.Func) and item.expr.name in SERIES_FUNCTIONS]
    if series:
        return series_query(select, scope, render, ctx)
    # a row window's view has the WHERE applied: the windows are over the rows it keeps
    where_sql = render.condition(select.where) if select.where is not None and not scope.labelled else None
    group_keys: list[str] = [render.expr(e).sql for e in (*select.partition_by, *select.group_by)]
    scope.timeline, scope.row_filter = list(group_keys), where_sql
    if isinstance(window, ast.IntervalWindow):
        group_keys.append("d.__qw")
    elif window is not None:  # a row window: its number within the partition, and its bounds
        group_keys += ["d.__qid", "d.__qw", "d.__qwe"]

    items: list[tuple[str, str, OutputColumn]] = []  # (sql, internal alias, output column)
    kinds: list[str] = []
    for item in select.items:
        if isinstance(item.expr, ast.Star):
            side = f"{item.expr.table.lower()}." if item.expr.table else ""
            for name, key in scope.star:
                if side and "." in key and not key.startswith(side):
                    continue  # t.* in a join: that side's columns only
                expr, kind = scope.columns[key]
                items.append((expr, f"__c{len(items)}", OutputColumn(name, kind == "ts", kind)))
                kinds.append(kind)
            continue
        typed = render.expr(item.expr)
        name = output_name(item)
        items.append((typed.sql, f"__c{len(items)}", OutputColumn(name, typed.kind == "ts", typed.kind)))
        kinds.append(typed.kind)

    # rendered before the data relation is built: a HAVING's twa() adds neighbours to it
    having_sql = render.condition(select.having) if select.having is not None else None
    # PARTITION BY alone does not aggregate: without aggregates or a window it only orders rows
    is_aggregate = bool(select.group_by) or window is not None or render.saw_aggregate
    if is_aggregate:
        plain = list(items)
        items = _with_companions(select, items, group_keys, render)
        _check_grouped(select, plain, items, group_keys, ctx)
    select_list = ", ".join(f"{sql} AS {alias}" for sql, alias, _ in items)
    if stream is not None:
        select_list += ", __trig.__tid AS __tid"
        # the trigger's placeholders depend on __tid only; Spark still wants them grouped
        group_keys[:0] = (
            ["__trig.__tid", "__trig.__tbname"]
            + [f"__trig.{column}" for column, _ in dict.fromkeys(TRIGGER_NAMES.values())]
            + [f"__trig.__g{i}" for i in range(1, len(stream.group_columns) + 1)]
        )
    order = _order_by(select, scope, render, items, group_keys if is_aggregate else [], is_aggregate)
    if stream is not None and is_aggregate and scope.base is not None:
        # decided before the join-first plan is built: most batch queries take this one
        by_trigger = order if "__trig.__tid" in order else ["__trig.__tid", *order]
        early = aggregated_before_join(select, scope, render, items, where_sql, by_trigger, stream)
        if early is not None:
            return early, [col for _, _, col in items], scope
    if stream is not None:
        triggers = f"{quote_ident(stream.triggers_view)} __trig"
        if scope.base is None:
            relation, filter_sql = triggers, where_sql
        else:
            # the WHERE joins data to triggers: a trigger whose window holds no rows still
            # gets its row (count(*) = 0), as TDengine computes every fired trigger
            conditions = [*scope.trigger_join, *([where_sql] if where_sql else [])]
            # (a trigger in two buckets meets NULL data twice: harmless grouped, or filtered out)
            bucketed = (
                None if stream.force_output and not is_aggregate else range_buckets(select, scope, render, stream)
            )
            if bucketed is not None:
                triggers, bucket_match = bucketed
                conditions.append(bucket_match)
            on = " AND ".join(conditions) or "TRUE"
            relation, filter_sql = f"{triggers} LEFT JOIN {data_relation(scope)} ON {on}", None
            if not stream.force_output and not is_aggregate:
                filter_sql = "d.__m IS NOT NULL"  # rows only where the trigger matched data
    elif scope.base is None:
        relation, filter_sql = "(SELECT 1)", where_sql
    else:
        relation, filter_sql = data_relation(scope), where_sql

    parts = [f"SELECT {'DISTINCT ' if select.distinct else ''}{select_list} FROM {relation}"]
    if filter_sql:
        parts.append(f"WHERE {filter_sql}")
    if is_aggregate and group_keys:
        parts.append("GROUP BY " + ", ".join(group_keys))
    if having_sql is not None:
        parts.append("HAVING " + having_sql)
    if isinstance(window, ast.IntervalWindow) and window.fill is not None and window.fill.mode != "NONE":
        partition_sql = [render.expr(e).sql for e in select.partition_by]
        if stream is not None:  # each trigger's windows are filled on their own
            partition_sql.insert(0, "__trig.__tid")
        return (
            filled_windows(select, window, scope, parts, items, kinds, partition_sql, render),
            [c for _, _, c in items],
            scope,
        )
    sliced = select.slimit is not None or select.soffset is not None
    if (select.limit is not None or select.offset is not None) and not sliced and (stream or select.partition_by):
        # LIMIT/OFFSET apply per trigger and per partition (TDengine limits each partition's
        # rows): number the rows of each and keep a slice; a window function cannot see the
        # select list's aliases, so it orders by the expressions
        expressions = {alias: sql for sql, alias, _ in items}
        ranked = []
        for entry in order:
            head, _, tail = entry.partition(" ")
            ranked.append(f"{expressions.get(head, head)} {tail}".strip())
        keys = (["__trig.__tid"] if stream is not None else []) + [render.expr(e).sql for e in select.partition_by]
        ranking = f"row_number() OVER (PARTITION BY {', '.join(keys)} ORDER BY {', '.join(ranked) or '1'})"
        hidden = "".join(f", {key} AS __k{i}" for i, key in enumerate(keys))
        first = (select.offset or 0) + 1
        last = first + select.limit - 1 if select.limit is not None else None
        parts[0] = parts[0].replace(" FROM ", f", {ranking} AS __rn{hidden} FROM ", 1)
        bound = f"__rn >= {first}" + (f" AND __rn <= {last}" if last is not None else "")
        columns = ", ".join([alias for _, alias, _ in items] + (["__tid"] if stream is not None else []))
        ordering = ", ".join([*(f"__k{i}" for i in range(len(keys))), "__rn"])
        sql = f"SELECT {columns} FROM ({' '.join(parts)}) __ranked WHERE {bound} ORDER BY {ordering}"
        return sql, [col for _, _, col in items], scope
    if stream is not None and "__trig.__tid" not in order:
        order.insert(0, "__trig.__tid")
    if sliced:
        keys = [render.expr(e).sql for e in (*select.partition_by, *select.group_by)]
        return _group_slice(select, parts, items, order, keys), [col for _, _, col in items], scope
    if order:
        parts.append("ORDER BY " + ", ".join(order))
    if select.limit is not None:
        parts.append(f"LIMIT {select.limit}")
    if select.offset is not None:
        parts.append(f"OFFSET {select.offset}")
    return " ".join(parts), [col for _, _, col in items], scope


def _check_grouped(
    select: ast.Select,
    before: list[tuple[str, str, OutputColumn]],
    after: list[tuple[str, str, OutputColumn]],
    group_keys: list[str],
    ctx: TranslationContext,
) -> None:
    """In an aggregate query a select item reads the data only through aggregates, the
    grouping (PARTITION BY, GROUP BY, the window) or as the companion of one selector; anything
    else is rejected here, with its position, rather than failing in Spark."""
    grouped = {ref for key in group_keys for ref in data_references(key)}
    for index, ((sql, _, _), (now, _, _)) in enumerate(zip(before, after, strict=True)):
        item = select.items[index] if index < len(select.items) else None
        if item is None or isinstance(item.expr, ast.Star) or sql != now or _contains_aggregate(item.expr, ctx):
            continue
        loose = [ref for ref in data_references(sql) if ref not in grouped]
        if loose:
            raise query_error(
                f"{item.text} is neither aggregated nor grouped: put it inside an aggregate, in PARTITION BY or "
                "GROUP BY, or beside exactly one selector (max, min, first, last, last_row)",
                item.expr,
            )


def _contains_aggregate(expr: ast.Expr, ctx: TranslationContext) -> bool:
    """Whether ``expr`` calls an aggregate: a built-in one or an AGGREGATE UDF."""

    def aggregate(node: ast.Func) -> bool:
        if node.name in AGGREGATES:
            return True
        function = ctx.functions(node.name) if ctx.functions is not None else None
        return function is not None and function.aggregate

    return any(isinstance(node, ast.Func) and aggregate(node) for node in walk(expr))


def _group_slice(
    select: ast.Select, parts: list[str], items: list[tuple[str, str, OutputColumn]], order: list[str], keys: list[str]
) -> str:
    """SLIMIT n [SOFFSET m]: only the groups m+1 … m+n (of PARTITION BY / GROUP BY, ranked by
    their key values), their rows in the query's order; LIMIT/OFFSET then apply to those rows."""
    aliases = {alias for _, alias, _ in items}
    hidden, outer_order = [], []
    for j, entry in enumerate(order):
        head, _, direction = entry.partition(" ")
        if head in aliases:
            outer_order.append(entry)
        else:  # an expression of the inner query: carried out as a hidden column
            hidden.append(f"{head} AS __o{j}")
            outer_order.append(f"__o{j} {direction}".strip())
    rank = f"dense_rank() OVER (ORDER BY {', '.join(f'{k} ASC NULLS FIRST' for k in keys)}) AS __grp"
    inner = parts[0].replace(" FROM ", f", {', '.join([*hidden, rank])} FROM ", 1) + " " + " ".join(parts[1:])
    first = (select.soffset or 0) + 1
    bound = f"__grp >= {first}" + (f" AND __grp < {first + select.slimit}" if select.slimit is not None else "")
    sql = f"SELECT {', '.join(alias for _, alias, _ in items)} FROM ({inner}) __groups WHERE {bound}"
    if outer_order:
        sql += " ORDER BY " + ", ".join(outer_order)
    if select.limit is not None:
        sql += f" LIMIT {select.limit}"
    if select.offset is not None:
        sql += f" OFFSET {select.offset}"
    return sql


_SELECTORS = ("max", "min", "first", "last", "last_row")


def _with_companions(
    select: ast.Select, items: list[tuple[str, str, OutputColumn]], group_keys: list[str], render: Renderer
) -> list[tuple[str, str, OutputColumn]]:
    """TDengine's selector companions: beside a single max/min/first/last/last_row, a plain
    column — or a scalar expression of columns (``a + b``) — takes its value from the row the
    selector picked (``select max(v), ts from t`` is the time of the maximum). Columns the
    query groups by are left as they are."""
    selectors = [i.expr for i in select.items if isinstance(i.expr, ast.Func) and i.expr.name in _SELECTORS]
    plain = [
        (index, item)
        for index, item in enumerate(select.items)
        if _reads_a_row(item.expr, render.ctx) and items[index][0] not in group_keys
    ]
    if not plain or any(isinstance(i.expr, ast.Star) for i in select.items):
        return items
    tags = {t.name.lower() for table in render.scope.tables for t in table.tags}
    if "d.tbname" in group_keys:
        # a tag is constant within a child table: grouped by tbname it may stand beside aggregates
        items = [
            (f"any_value({sql})", alias, column)
            if isinstance(select.items[i].expr, ast.Column) and select.items[i].expr.name.lower() in tags  # type: ignore[union-attr]
            else (sql, alias, column)
            for i, (sql, alias, column) in enumerate(items)
        ]
        plain = [
            (i, item) for i, item in plain if not (isinstance(item.expr, ast.Column) and item.expr.name.lower() in tags)
        ]
    if not plain or len(selectors) != 1:
        return items
    selector = selectors[0]
    if len(selector.args) != 1 or isinstance(selector.args[0], ast.Star):
        return items
    value = render.expr(selector.args[0]).sql
    pk = render.scope.pk
    if selector.name in ("max", "min"):
        pick = f"{selector.name}_by({{column}}, {value})"
    elif selector.name == "last_row" and pk is not None:
        pick = f"max_by({{column}}, {pk})"
    elif pk is not None:  # first/last: the oldest/newest row whose value is not NULL
        by = "min_by" if selector.name == "first" else "max_by"
        pick = f"{by}({{column}}, CASE WHEN {value} IS NOT NULL THEN {pk} END)"
    else:
        return items
    chosen = list(items)
    for index, _ in plain:
        sql, alias, column = items[index]
        chosen[index] = (pick.format(column=sql), alias, column)
    return chosen


def _reads_a_row(expr: ast.Expr, ctx: TranslationContext) -> bool:
    """A column of the data rows, or an expression without aggregates that reads one: not a
    pseudo-column of the group (_wstart, _wend …; _c0 and _rowts are row columns)."""

    def row_column(node: ast.Expr) -> bool:
        if not isinstance(node, ast.Column):
            return False
        return not node.name.startswith("_") or node.name.lower() in ("_c0", "_rowts")

    if isinstance(expr, ast.Column):
        return row_column(expr)
    return not _contains_aggregate(expr, ctx) and any(row_column(node) for node in walk(expr))


MULTI_COLUMN_SELECTORS = ("first", "last", "last_row")


def _one_column_selectors(select: ast.Select, scope: Scope) -> ast.Select:
    """``last(*)`` and ``last(a, b)`` (also first, last_row) as one select item per column,
    named ``last(a)``, ``last(b)`` as TDengine names them; ``*`` means the data columns,
    not a super table's tags."""
    if not any(_multi_column(item.expr) for item in select.items):
        return select
    tags = {tag.name.lower() for table in scope.tables for tag in table.tags}
    items: list[ast.SelectItem] = []
    for item in select.items:
        expr = item.expr
        if not isinstance(expr, ast.Func) or not _multi_column(expr):
            items.append(item)
            continue
        if item.alias:
            raise query_error(f"{expr.name}() of several columns gives several columns: it cannot take an alias", expr)
        for arg in expr.args:
            if isinstance(arg, ast.Star):
                names = [name for name, key in scope.star if key not in tags]
                columns = [ast.Column(name, arg.table, pos=arg.pos) for name in names]
            elif isinstance(arg, ast.Column):
                columns = [arg]
            else:
                raise query_error(f"{expr.name}() of several arguments takes columns or *", arg)
            for column in columns:
                single = ast.Func(expr.name, (column,), pos=expr.pos)
                items.append(ast.SelectItem(single, None, f"{expr.name}({column.name})"))
    return dataclasses.replace(select, items=tuple(items))


def _multi_column(expr: ast.Expr) -> bool:
    return (
        isinstance(expr, ast.Func)
        and expr.name in MULTI_COLUMN_SELECTORS
        and (len(expr.args) > 1 or any(isinstance(arg, ast.Star) for arg in expr.args))
    )


def _order_by(
    select: ast.Select,
    scope: Scope,
    render: Renderer,
    items: list[tuple[str, str, OutputColumn]],
    group_keys: list[str],
    is_aggregate: bool,
) -> list[str]:
    if select.order_by:
        order = []
        by_name = {col.name.lower(): alias for _, alias, col in items}
        for entry in select.order_by:
            expr = entry.expr
            if isinstance(expr, ast.Column) and expr.table is None and expr.name.lower() in by_name:
                sql = by_name[expr.name.lower()]
            elif isinstance(expr, ast.Literal) and expr.kind == "int" and 1 <= int(expr.value) <= len(items):  # type: ignore[call-overload]
                sql = items[int(expr.value) - 1][1]  # type: ignore[call-overload]
            else:
                sql = render.expr(expr).sql
            direction = " DESC" if entry.descending else " ASC"
            nulls = ""
            if entry.nulls_first is not None:
                nulls = " NULLS FIRST" if entry.nulls_first else " NULLS LAST"
            order.append(sql + direction + nulls)
        return order
    if select.distinct:
        return []
    # TDengine returns rows in time order (per group when partitioned); Spark has no order
    # unless asked, so ask for TDengine's.
    if is_aggregate:
        return list(group_keys)
    keys = [render.expr(e).sql for e in select.partition_by]
    if scope.pk is not None:
        keys.append(scope.pk)
        if any(t.kind == "super" for t in scope.tables):
            keys.append("d.tbname")
    return keys
