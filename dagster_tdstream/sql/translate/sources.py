"""FROM → the data relation: a table or super table (tags, tbname), a subquery, ``%%trows`` /
``%%tbname`` in a stream's query, joins on the primary timestamp. Every expression reads the
result as the derived table ``d``.
"""

from __future__ import annotations

from dataclasses import replace

from .. import ast
from ..walk import conjuncts
from .render import Renderer
from .scope import Scope, SourceTable, StreamScope, TranslationContext, Typed, kind_of, query_error, quote_ident


def _table_scope(table: SourceTable) -> Scope:
    columns: dict[str, tuple[str, str]] = {}
    for col in table.columns:
        columns[col.stored.lower()] = ("d." + quote_ident(col.stored), kind_of(col.type))
    for tag in table.tags:
        columns[tag.name.lower()] = ("d." + quote_ident(tag.name), kind_of(tag.type))
    # the name tbname is the pseudo-column, as in TDengine; a data column so named (a legacy
    # stream's output) is read through `*` only
    columns["tbname"] = ("d.tbname", "string")
    star = [(c.name, c.stored.lower()) for c in table.columns]
    if table.kind == "super":
        star += [(t.name, t.name.lower()) for t in table.tags]
    pk = "d." + quote_ident(table.columns[0].name)
    return Scope(quote_ident(table.view), columns, star, pk, table.precision, tables=(table,), states=table.states)


def row_condition(table: SourceTable, expr: ast.Expr, ctx: TranslationContext) -> str:
    """A condition over one table's rows (aliased ``d``) as Spark SQL — a stream's PRE_FILTER
    where rows are counted outside its query."""
    return Renderer(_table_scope(table), ctx).condition(expr)


def row_expression(table: SourceTable, expr: ast.Expr, ctx: TranslationContext) -> Typed:
    """A scalar expression over one table's rows (aliased ``d``) as Spark SQL, with its kind —
    a legacy stream's PARTITION BY expression, a STATE_WINDOW's state: computed on the rows."""
    return Renderer(_table_scope(table), ctx).expr(expr)


def source_scope(select: ast.Select, ctx: TranslationContext) -> Scope:
    source = select.source
    stream = ctx.stream
    if source is None:
        return Scope(None, {}, [], None, "ms")
    if isinstance(source, ast.TableSource):
        return _table_scope(ctx.resolve(source.table))
    if isinstance(source, ast.SubquerySource):
        # in a stream's query the subquery runs per trigger too: its rows carry their trigger
        # (``__tid``) and the outer query meets its triggers on it; the subquery's triggers
        # without rows add none (FORCE_OUTPUT is the outer query's)
        inner_ctx = ctx if stream is None else replace(ctx, stream=replace(stream, force_output=False))
        from .select import translate  # a subquery is a query: deferred, select imports this module

        inner_sql, inner_cols, inner_scope = translate(source.query, inner_ctx)
        columns = {}
        pk = None
        for i, col in enumerate(inner_cols):
            expr = f"d.__c{i}"
            columns.setdefault(col.name.lower(), (expr, col.kind))
            if pk is None and col.is_timestamp:
                pk = expr
        return Scope(
            f"({inner_sql}) {ctx.fresh('q')}",
            columns,
            [(c.name, c.name.lower()) for c in inner_cols],
            pk,
            inner_scope.precision,
            tables=inner_scope.tables,
            trigger_join=["d.__tid = __trig.__tid"] if stream is not None else [],
        )
    if isinstance(source, ast.PlaceholderSource):
        placeholder = source.placeholder
        if stream is None or stream.trigger_table is None:
            raise query_error(f"%%{placeholder.name} can only be used inside a stream's query", placeholder)
        scope = _table_scope(stream.trigger_table)
        if placeholder.name == "tbname":
            scope.trigger_join.append("d.tbname = __trig.__tbname")
            return scope
        # %%trows: the trigger table's rows of this trigger's group and window
        if stream.trows_view is not None:
            scope.base = quote_ident(stream.trows_view)
        for i, name in enumerate(stream.group_columns, start=1):
            expr = stream.group_exprs.get(name)
            column = Renderer(scope, ctx).expr(expr).sql if expr is not None else scope.columns[name][0]
            scope.trigger_join.append(f"{column} <=> __trig.__g{i}")
        assert scope.pk is not None
        if stream.rows_by_trigger:
            scope.trigger_join = ["d.__tid = __trig.__tid"]
        elif stream.window_label is not None:
            scope.trows_label = stream.window_label(scope.pk.removeprefix("d."))
            scope.trigger_join.append("d.__tw = __trig._twstart")
        elif stream.point_rows:
            scope.trigger_join += [f"{scope.pk} > __trig._tprev_ts", f"{scope.pk} <= __trig._tcurrent_ts"]
        else:  # row windows: from the first row to the last row, both included
            scope.trigger_join += [f"{scope.pk} >= __trig._twstart", f"{scope.pk} <= __trig._twend"]
        if stream.trows_filter is not None:  # PRE_FILTER: the rows that entered the trigger
            scope.trigger_join.append(Renderer(scope, ctx).condition(stream.trows_filter))
        return scope
    if isinstance(source, ast.Join):
        return _join_scope(source, select, ctx)
    raise query_error(f"{type(source).__name__} in FROM is not supported", select)


def _side_name(source: ast.FromSource) -> str | None:
    if isinstance(source, ast.TableSource):
        return (source.alias or source.table.name).lower()
    if isinstance(source, ast.SubquerySource) and source.alias:
        return source.alias.lower()
    return None


def _join_scope(join: ast.Join, select: ast.Select, ctx: TranslationContext) -> Scope:
    """``a [INNER|LEFT|RIGHT|FULL] JOIN b ON …`` and ``a, b WHERE …``: each side's columns
    renamed apart (``__j<side>_<n>``) and reachable as ``side.column`` — or as ``column`` when
    only one side has it. As in TDengine the sides are matched on their primary timestamps
    (``a.ts = b.ts`` in ON, or in WHERE for a comma join), and the left side's timestamp is
    the result's."""
    sides: list[tuple[ast.FromSource, str | None, ast.Expr | None]] = []
    node: ast.FromSource = join
    while isinstance(node, ast.Join):
        sides.insert(0, (node.right, node.kind, node.on))
        node = node.left
    sides.insert(0, (node, None, None))
    columns: dict[str, tuple[str, str]] = {}
    bare: dict[str, tuple[str, str]] = {}  # the ON condition's view: renamed columns, no prefix
    seen: dict[str, int] = {}
    star: list[tuple[str, str]] = []
    pks: list[str | None] = []  # each side's primary timestamp (renamed), None without one
    relations: list[str] = []
    tables: list[SourceTable] = []
    scope: Scope | None = None
    for index, (source, kind, on) in enumerate(sides):
        if isinstance(source, ast.PlaceholderSource):
            raise query_error(f"%%{source.placeholder.name} cannot be joined yet; join the tables it reads", select)
        name = _side_name(source)
        if name is None:
            raise query_error("a subquery joined to another source needs an alias", select)
        side = source_scope(ast.Select((), source), ctx)
        renamed = []
        pks.append(None)
        for k, (column, (sql, col_kind)) in enumerate(side.columns.items()):
            alias = f"__j{index}_{k}"
            renamed.append(f"{sql} AS {alias}")
            columns[f"{name}.{column}"] = (f"d.{alias}", col_kind)
            bare[f"{name}.{column}"] = (alias, col_kind)
            seen[column] = seen.get(column, 0) + 1
            columns.setdefault(column, (f"d.{alias}", col_kind))
            bare.setdefault(column, (alias, col_kind))
            if sql == side.pk:
                pks[index] = alias
        star += [(display, f"{name}.{key}") for display, key in side.star]
        relation = f"(SELECT {', '.join(renamed)} FROM {data_relation(side)}) {quote_ident(name)}"
        if kind is None:
            relations.append(relation)
        else:
            condition = "TRUE"
            if on is not None:
                on_scope = Scope(None, bare, [], None, side.precision)
                on_scope.ambiguous = {c for c, n in seen.items() if n > 1}
                condition = Renderer(on_scope, ctx).condition(on)
            relations.append(f"{kind} JOIN {relation}" + ("" if kind == "CROSS" else f" ON {condition}"))
        tables += side.tables
        scope = scope or side
    assert scope is not None
    ambiguous = {c for c, n in seen.items() if n > 1}
    joined = Scope(
        f"(SELECT * FROM {' '.join(relations)}) {ctx.fresh('join')}",
        columns,
        star,
        f"d.{pks[0]}" if pks[0] else None,
        scope.precision,
        tables=tuple(tables),
    )
    joined.ambiguous = ambiguous
    _check_timestamp_match(sides, select, joined, ctx, [f"d.{pk}" if pk else None for pk in pks])
    return joined


def _check_timestamp_match(
    sides: list[tuple[ast.FromSource, str | None, ast.Expr | None]],
    select: ast.Select,
    scope: Scope,
    ctx: TranslationContext,
    pks: list[str | None],
) -> None:
    """Each joined side meets an earlier one on the primary timestamps, in its ON (or, for a
    comma join, the WHERE): TDengine's join rule (a side without one cannot meet it)."""
    render = Renderer(scope, ctx)
    for index, (_, kind, on) in enumerate(sides[1:], start=1):
        equalities = (
            {render.expr(node.left).sql, render.expr(node.right).sql}
            for node in conjuncts(on if kind != "CROSS" else select.where)
            if isinstance(node, ast.Binary) and node.op == "="
        )
        if pks[index] is None or not any(pks[index] in pair and pair & set(pks[:index]) for pair in equalities):
            where = "WHERE" if kind == "CROSS" else "ON"
            raise query_error(f"a join matches the tables' primary timestamps: add a.ts = b.ts to its {where}", select)


def trigger_rows(scope: Scope, stream: StreamScope) -> str:
    """Each trigger's own rows: the data inner-joined to the batch's triggers on
    ``scope.trigger_join``, the trigger's columns beside each row as ``__trig``."""
    on = " AND ".join(scope.trigger_join) or "TRUE"
    return f"{quote_ident(stream.triggers_view)} __trig JOIN {data_relation(scope)} ON {on}"


def data_relation(scope: Scope) -> str:
    """``(SELECT *, 1 AS __m [, labels] FROM base) d``: one derived table whose
    columns every expression references as ``d.<name>``; window labels that explode rows get a
    layer each (Spark allows one generator per SELECT). A row-window view is that table already."""
    if scope.labelled:
        return f"{scope.base} d"
    sql = f"SELECT *, 1 AS __m FROM {scope.base}"
    if scope.neighbours:
        where = f" WHERE {scope.row_filter}" if scope.row_filter else ""
        sql = f"SELECT d.*, {', '.join(scope.neighbours)} FROM ({sql}) d{where}"
    for name, label in (("__tw", scope.trows_label), ("__qw", scope.window_sql.get("label"))):
        if label is not None:
            sql = f"SELECT *, {label} AS {name} FROM ({sql}) {name}_layer"
    for column in scope.layers:
        sql = f"SELECT d.*, {column} FROM ({sql}) d"
    return f"({sql}) d"
