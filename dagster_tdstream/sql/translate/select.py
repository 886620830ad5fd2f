"""Translation of SELECT statements (see the package docstring)."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from zoneinfo import ZoneInfo

from ...errors import QueryError, WriteRejectedError
from ...triggers.replay import STATE_VALUE, QueryRowWindow, counted_value, end_flag, start_flag
from ...triggers.windows import IntervalSpec
from .. import ast
from ..timeunits import PRECISIONS, TimeValueError, now_in, parse_timestamp
from ..walk import walk
from .functions import AGGREGATES, NUMERIC, OTHER, SCALARS, SERIES_FUNCTIONS, TIME_FUNCTIONS, Scalar

SUPPORTED_FUNCTIONS = tuple(sorted((*AGGREGATES, *SCALARS, *TIME_FUNCTIONS, *SERIES_FUNCTIONS, *OTHER)))

_WINDOW_PSEUDO = ("_wstart", "_wend", "_wduration")


@dataclass(frozen=True)
class SourceTable:
    """What the translator needs to know of a table: its view name and schema."""

    key: str  # db.name
    view: str
    kind: str  # super | child | normal
    columns: tuple[ast.ColumnDef, ...]
    tags: tuple[ast.ColumnDef, ...]
    precision: str


@dataclass(frozen=True)
class OutputColumn:
    name: str
    is_timestamp: bool
    kind: str = "other"  # the translator's kind (ts, int, float, string, bool …), for outer queries


@dataclass(frozen=True)
class RowWindowPlan:
    """A view the caller registers before running the query: the rows of ``source_sql``
    (``__ts``, the partition keys, the values the trigger reads) labelled with the row windows
    of ``window`` — ``compute/query.py`` runs the trigger engine over each partition."""

    view: str
    source_sql: str
    partition: tuple[str, ...]
    window: QueryRowWindow
    values: tuple[str, ...]  # the columns the window's trigger reads
    gap: int | None  # SESSION's gap, in the table's precision
    true_for: int | None


@dataclass(frozen=True)
class TranslatedQuery:
    sql: str
    columns: tuple[OutputColumn, ...]
    precision: str
    tables: tuple[SourceTable, ...]
    row_windows: tuple[RowWindowPlan, ...] = ()  # registered in this order (inner queries first)
    # (placeholder in ``sql``, scalar SQL giving its value): evaluated and substituted first
    parameters: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class StreamScope:
    """What a stream's query sees of its triggers: a view with one row per trigger
    (``__tid``, ``_twstart``, ``_twend``, ``_twduration``, ``_twrownum``, ``_tgrpid``,
    ``_tlocaltime``, ``__tbname`` and the group values ``__g1`` … ``__gN``), the trigger table
    behind ``%%trows``/``%%tbname``, and how a trigger-table row matches a group."""

    triggers_view: str
    trigger_table: SourceTable | None
    group_columns: tuple[str, ...]  # PARTITION BY names (tbname or tags), lower case
    window_label: Callable[[str], str] | None  # SQL labelling a row with its trigger window start
    # PRE_FILTER: %%trows are the rows that entered the trigger
    trows_filter: ast.Expr | None = None
    point_rows: bool = False  # SLIDING points: %%trows are the rows after the previous point
    rows_by_trigger: bool = False  # PERIOD: the trigger table view carries each row's __tid
    # FORCE_OUTPUT: a trigger without result rows still writes one (constants and
    # placeholders filled, other columns NULL); otherwise such triggers write nothing
    force_output: bool = False
    # the trigger table narrowed to the batch's time span, read by %%trows (a run scans the
    # rows its windows cover, not the table's whole history); %%tbname reads the full table
    trows_view: str | None = None


@dataclass
class TranslationContext:
    """``resolve`` turns a table name into a SourceTable (raising CatalogError when unknown);
    ``stream`` is set when translating a stream's query for a batch of triggers."""

    resolve: Callable[[ast.QualifiedName], SourceTable]
    timezone: ZoneInfo
    now_ns: int | None = None
    stream: StreamScope | None = None
    row_windows: list[RowWindowPlan] = field(default_factory=list)
    parameters: list[tuple[str, str]] = field(default_factory=list)
    _names: itertools.count = field(default_factory=itertools.count)

    def fresh(self, prefix: str) -> str:
        return f"__{prefix}{next(self._names)}"

    def parameter(self, scalar_sql: str) -> str:
        """A placeholder for the value of ``scalar_sql`` (one row, one column), which the
        caller evaluates and substitutes before running the query (one per distinct SQL)."""
        for name, known in self.parameters:
            if known == scalar_sql:
                return name
        name = f"__parameter{len(self.parameters)}__"
        self.parameters.append((name, scalar_sql))
        return name


@dataclass(frozen=True)
class _Typed:
    sql: str
    kind: str  # ts, int, float, string, bool, null, duration, other
    aggregate: bool = False


@dataclass
class _Scope:
    """The data side of a query: ``base`` is the FROM relation; its columns are referenced
    through the derived table ``d`` built over it (``d.<name>``)."""

    base: str | None
    columns: dict[str, tuple[str, str]]  # lower name (or side.name in a join) → (column of d, kind)
    star: list[tuple[str, str]]  # what `*` expands to: (output name, key of columns)
    pk: str | None  # the primary timestamp, as a column of d
    precision: str
    tables: tuple[SourceTable, ...] = ()
    trigger_join: list[str] = field(default_factory=list)  # ON conditions tying d to __trig
    trows_label: str | None = None  # SQL labelling base rows with their trigger window
    trows_filter: ast.Expr | None = None
    window: ast.QueryWindow | None = None
    window_sql: dict[str, str] = field(default_factory=dict)
    labelled: bool = False  # base is a row-window view: already the data relation, WHERE applied
    # window-function columns other row-wise functions read (``expr AS name`` over ``d``),
    # each a layer of its own: Spark does not nest window functions
    layers: list[str] = field(default_factory=list)
    ambiguous: set[str] = field(default_factory=set)  # joined columns that need their side's name


def _kind_of(dtype: ast.DataType) -> str:
    name = dtype.name
    if name == "TIMESTAMP":
        return "ts"
    if "INT" in name:
        return "int"
    if name in ("FLOAT", "DOUBLE", "DECIMAL"):
        return "float"
    if name == "BOOL":
        return "bool"
    if name in ("VARCHAR", "BINARY", "NCHAR", "JSON"):
        return "string"
    return "other"


def quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def quote_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _error(message: str, node: ast.Expr | ast.Select | None = None) -> QueryError:
    pos = getattr(node, "pos", None)
    if pos is not None and pos.line:
        return QueryError(message, line=pos.line, column=pos.column)
    return QueryError(message)


def translate_select(select: ast.Select, ctx: TranslationContext) -> TranslatedQuery:
    sql, columns, scope = _translate(select, ctx)
    return TranslatedQuery(
        sql, tuple(columns), scope.precision, scope.tables, tuple(ctx.row_windows), tuple(ctx.parameters)
    )


def _table_scope(table: SourceTable) -> _Scope:
    columns: dict[str, tuple[str, str]] = {}
    for col in (*table.columns, *table.tags):
        columns[col.name.lower()] = ("d." + quote_ident(col.name), _kind_of(col.type))
    columns["tbname"] = ("d.tbname", "string")
    star = [(c.name, c.name.lower()) for c in table.columns]
    if table.kind == "super":
        star += [(t.name, t.name.lower()) for t in table.tags]
    pk = "d." + quote_ident(table.columns[0].name)
    return _Scope(quote_ident(table.view), columns, star, pk, table.precision, tables=(table,))


def _source_scope(select: ast.Select, ctx: TranslationContext) -> _Scope:
    source = select.source
    stream = ctx.stream
    if source is None:
        return _Scope(None, {}, [], None, "ms")
    if isinstance(source, ast.TableSource):
        return _table_scope(ctx.resolve(source.table))
    if isinstance(source, ast.SubquerySource):
        # in a stream's query the subquery runs per trigger too: its rows carry their trigger
        # (``__tid``) and the outer query meets its triggers on it; the subquery's triggers
        # without rows add none (FORCE_OUTPUT is the outer query's)
        inner_ctx = ctx if stream is None else replace(ctx, stream=replace(stream, force_output=False))
        inner_sql, inner_cols, inner_scope = _translate(source.query, inner_ctx)
        columns = {}
        pk = None
        for i, col in enumerate(inner_cols):
            expr = f"d.__c{i}"
            columns.setdefault(col.name.lower(), (expr, col.kind))
            if pk is None and col.is_timestamp:
                pk = expr
        return _Scope(
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
            raise _error(f"%%{placeholder.name} can only be used inside a stream's query", placeholder)
        scope = _table_scope(stream.trigger_table)
        if placeholder.name == "tbname":
            scope.trigger_join.append("d.tbname = __trig.__tbname")
            return scope
        # %%trows: the trigger table's rows of this trigger's group and window
        if stream.trows_view is not None:
            scope.base = quote_ident(stream.trows_view)
        for i, name in enumerate(stream.group_columns, start=1):
            scope.trigger_join.append(f"{scope.columns[name][0]} <=> __trig.__g{i}")
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
        scope.trows_filter = stream.trows_filter
        return scope
    if isinstance(source, ast.Join):
        return _join_scope(source, select, ctx)
    raise _error(f"{type(source).__name__} in FROM is not supported", select)


def _side_name(source: ast.FromSource) -> str | None:
    if isinstance(source, ast.TableSource):
        return (source.alias or source.table.name).lower()
    if isinstance(source, ast.SubquerySource) and source.alias:
        return source.alias.lower()
    return None


def _join_scope(join: ast.Join, select: ast.Select, ctx: TranslationContext) -> _Scope:
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
    pks: list[str] = []
    relations: list[str] = []
    tables: list[SourceTable] = []
    scope: _Scope | None = None
    for index, (source, kind, on) in enumerate(sides):
        if isinstance(source, ast.PlaceholderSource):
            raise _error(f"%%{source.placeholder.name} cannot be joined yet; join the tables it reads", select)
        name = _side_name(source)
        if name is None:
            raise _error("a subquery joined to another source needs an alias", select)
        side = _source_scope(ast.Select((), source), ctx)
        renamed = []
        for k, (column, (sql, col_kind)) in enumerate(side.columns.items()):
            alias = f"__j{index}_{k}"
            renamed.append(f"{sql} AS {alias}")
            columns[f"{name}.{column}"] = (f"d.{alias}", col_kind)
            bare[f"{name}.{column}"] = (alias, col_kind)
            seen[column] = seen.get(column, 0) + 1
            columns.setdefault(column, (f"d.{alias}", col_kind))
            bare.setdefault(column, (alias, col_kind))
            if sql == side.pk:
                pks.append(alias)
        star += [(display, f"{name}.{key}") for display, key in side.star]
        relation = f"(SELECT {', '.join(renamed)} FROM {_data_relation(side)}) {quote_ident(name)}"
        if kind is None:
            relations.append(relation)
        else:
            condition = "TRUE"
            if on is not None:
                on_scope = _Scope(None, bare, [], None, side.precision)
                on_scope.ambiguous = {c for c, n in seen.items() if n > 1}
                condition = _Renderer(on_scope, ctx).condition(on)
            relations.append(f"{kind} JOIN {relation}" + ("" if kind == "CROSS" else f" ON {condition}"))
        tables += side.tables
        scope = scope or side
    assert scope is not None
    ambiguous = {c for c, n in seen.items() if n > 1}
    joined = _Scope(
        f"(SELECT * FROM {' '.join(relations)}) {ctx.fresh('join')}",
        columns,
        star,
        f"d.{pks[0]}" if pks else None,
        scope.precision,
        tables=tuple(tables),
    )
    joined.ambiguous = ambiguous
    _check_timestamp_match(sides, select, joined, ctx, [f"d.{pk}" for pk in pks])
    return joined


def _check_timestamp_match(
    sides: list[tuple[ast.FromSource, str | None, ast.Expr | None]],
    select: ast.Select,
    scope: _Scope,
    ctx: TranslationContext,
    pks: list[str],
) -> None:
    """Each joined side meets an earlier one on the primary timestamps, in its ON (or, for a
    comma join, the WHERE): TDengine's join rule."""
    render = _Renderer(scope, ctx)
    for index, (_, kind, on) in enumerate(sides[1:], start=1):
        conditions = on if kind != "CROSS" else select.where
        pending, matched = [conditions] if conditions is not None else [], False
        while pending and not matched:
            node = pending.pop()
            if isinstance(node, ast.Binary) and node.op == "AND":
                pending += [node.left, node.right]
            elif isinstance(node, ast.Binary) and node.op == "=":
                pair = {render.expr(node.left).sql, render.expr(node.right).sql}
                matched = pks[index] in pair and bool(pair & set(pks[:index]))
        if not matched:
            where = "WHERE" if kind == "CROSS" else "ON"
            raise _error(f"a join matches the tables' primary timestamps: add a.ts = b.ts to its {where}", select)


def _data_relation(scope: _Scope) -> str:
    """``(SELECT *, 1 AS __m [, labels] FROM base) d``: one derived table whose
    columns every expression references as ``d.<name>``; window labels that explode rows get a
    layer each (Spark allows one generator per SELECT). A row-window view is that table already."""
    if scope.labelled:
        return f"{scope.base} d"
    sql = f"SELECT *, 1 AS __m FROM {scope.base}"
    for name, label in (("__tw", scope.trows_label), ("__qw", scope.window_sql.get("label"))):
        if label is not None:
            sql = f"SELECT *, {label} AS {name} FROM ({sql}) {name}_layer"
    for column in scope.layers:
        sql = f"SELECT d.*, {column} FROM ({sql}) d"
    return f"({sql}) d"


def _translate(select: ast.Select, ctx: TranslationContext) -> tuple[str, list[OutputColumn], _Scope]:
    scope = _source_scope(select, ctx)
    stream = ctx.stream
    if (select.slimit is not None or select.soffset is not None) and stream is not None:
        raise _error("SLIMIT/SOFFSET are not supported in a stream's query", select)
    if (select.slimit is not None or select.soffset is not None) and not (select.partition_by or select.group_by):
        raise _error("SLIMIT/SOFFSET limit the groups of PARTITION BY or GROUP BY; this query has none", select)
    render = _Renderer(scope, ctx)
    render.where = select.where
    window = select.window
    if window is not None and any(isinstance(item.expr, ast.Star) for item in select.items):
        raise _error("a window query selects aggregates, selectors and window pseudo-columns, not *", select)
    if window is not None and not isinstance(window, ast.IntervalWindow):
        _row_windows(select, window, scope, render, ctx)
    elif window is not None and scope.pk is None:
        raise _error("INTERVAL needs a table with a timestamp primary key", select)
    elif window is not None and (window.interval.is_calendar or (window.sliding and window.sliding.is_calendar)):
        _calendar_windows(select, window, scope, render)
    elif window is not None:
        interval = render.duration(window.interval, select)
        scope.window = window
        scope.window_sql = {
            "label": _interval_spec(window, scope, select).label_sql(scope.pk).replace("d.", ""),
            "_wstart": "d.__qw",
            "_wend": f"(d.__qw + {interval})",
            "_wduration": f"CAST({interval} AS BIGINT)",
        }
    series = [item for item in select.items if isinstance(item.expr, ast.Func) and item.expr.name in SERIES_FUNCTIONS]
    if series:
        return _series_query(select, scope, render, ctx)
    # a row window's view has the WHERE applied: the windows are over the rows it keeps
    where_sql = render.condition(select.where) if select.where is not None and not scope.labelled else None
    if scope.trows_filter is not None:
        scope.trigger_join.append(render.condition(scope.trows_filter))
    group_keys: list[str] = [render.expr(e).sql for e in (*select.partition_by, *select.group_by)]
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
        name = _output_name(item)
        items.append((typed.sql, f"__c{len(items)}", OutputColumn(name, typed.kind == "ts", typed.kind)))
        kinds.append(typed.kind)

    # PARTITION BY alone does not aggregate: without aggregates or a window it only orders rows
    is_aggregate = bool(select.group_by) or window is not None or render.saw_aggregate
    if is_aggregate:
        plain = list(items)
        items = _with_companions(select, items, group_keys, render)
        _check_grouped(select, plain, items, group_keys)
    select_list = ", ".join(f"{sql} AS {alias}" for sql, alias, _ in items)
    if stream is not None:
        select_list += ", __trig.__tid AS __tid"
        # the trigger's placeholders depend on __tid only; Spark still wants them grouped
        group_keys[:0] = (
            ["__trig.__tid", "__trig.__tbname"]
            + [f"__trig.{column}" for column, _ in dict.fromkeys(_TRIGGER_NAMES.values())]
            + [f"__trig.__g{i}" for i in range(1, len(stream.group_columns) + 1)]
        )
        triggers = f"{quote_ident(stream.triggers_view)} __trig"
        if scope.base is None:
            relation, filter_sql = triggers, where_sql
        else:
            # the WHERE joins data to triggers: a trigger whose window holds no rows still
            # gets its row (count(*) = 0), as TDengine computes every fired trigger
            conditions = [*scope.trigger_join, *([where_sql] if where_sql else [])]
            # (a trigger in two buckets meets NULL data twice: harmless grouped, or filtered out)
            bucketed = (
                None if stream.force_output and not is_aggregate else _range_buckets(select, scope, render, stream)
            )
            if bucketed is not None:
                triggers, bucket_match = bucketed
                conditions.append(bucket_match)
            on = " AND ".join(conditions) or "TRUE"
            relation, filter_sql = f"{triggers} LEFT JOIN {_data_relation(scope)} ON {on}", None
            if not stream.force_output and not is_aggregate:
                filter_sql = "d.__m IS NOT NULL"  # rows only where the trigger matched data
    elif scope.base is None:
        relation, filter_sql = "(SELECT 1)", where_sql
    else:
        relation, filter_sql = _data_relation(scope), where_sql

    parts = [f"SELECT {'DISTINCT ' if select.distinct else ''}{select_list} FROM {relation}"]
    if filter_sql:
        parts.append(f"WHERE {filter_sql}")
    if is_aggregate and group_keys:
        parts.append("GROUP BY " + ", ".join(group_keys))
    if select.having is not None:
        parts.append("HAVING " + render.condition(select.having))
    if isinstance(window, ast.IntervalWindow) and window.fill is not None and window.fill.mode != "NONE":
        partition_sql = [render.expr(e).sql for e in select.partition_by]
        if stream is not None:  # each trigger's windows are filled on their own
            partition_sql.insert(0, "__trig.__tid")
        return (
            _filled(select, window, scope, parts, items, kinds, partition_sql, render),
            [c for _, _, c in items],
            scope,
        )
    order = _order_by(select, scope, render, items, group_keys if is_aggregate else [], is_aggregate)
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
    if stream is not None and is_aggregate and scope.base is not None:
        early = _aggregated_before_join(select, scope, render, items, where_sql, order, stream)
        if early is not None:
            return early, [col for _, _, col in items], scope
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


_PK_BOUND = re.compile(r"\(?(.+?) (>=|>|<=|<) (.+?)\)?")
_FLIPPED = {">=": "<=", ">": "<", "<=": ">=", "<": ">"}


def _balanced(sql: str) -> bool:
    """Whether ``sql`` is one expression as far as parentheses go (never closes more than
    it opened): so ``a) OR (b`` is not taken for a bound."""
    depth = 0
    for char in sql:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def _range_buckets(select: ast.Select, scope: _Scope, render: _Renderer, stream: StreamScope) -> tuple[str, str] | None:
    """Triggers that bound the data's timestamp from both sides with their own values
    (``ts >= _twstart AND ts < _twend`` on another table, a row window's ``%%trows``, a
    SLIDING point's rows) meet the data on a range: left alone, Spark compares every row with
    every trigger. Both sides get a bucket — the trigger every bucket its range touches, a row
    the one its timestamp falls in, buckets as wide as the widest range of the batch — and the
    join gains the equality on it (a hash join), the range conditions still deciding. Returns
    (the bucketed triggers relation, the bucket equality), or None without two such bounds."""
    conditions = list(scope.trigger_join)
    pending = [select.where] if select.where is not None else []
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Binary) and node.op == "AND":
            pending += [node.left, node.right]
        else:
            conditions.append(render.condition(node))
    low = high = None
    for condition in conditions:
        match = _PK_BOUND.fullmatch(condition)
        if match is None:
            continue
        left, op, right = match.groups()
        if right == scope.pk:
            left, op, right = right, _FLIPPED[op], left
        if left != scope.pk or "__trig." not in right or _DATA_COLUMN.search(right) or not _balanced(right):
            continue  # not the timestamp against the trigger's own values alone
        if op in (">=", ">"):
            low = right
        else:
            high = right
    if low is None or high is None:
        return None
    view = quote_ident(stream.triggers_view)
    # the width is a constant of the batch, evaluated before the query (``parameters``): a
    # scalar subquery inside the join trips Spark ("Subquery … has not finished")
    width = render.ctx.parameter(f"SELECT greatest(max({high} - {low}), 1) FROM {view} __trig")
    # explode_outer: a trigger without bounds (an open window has no end yet) keeps its row
    buckets = f"explode_outer(sequence(floor({low} / {width}), floor({high} / {width})))"
    triggers = f"(SELECT __trig.*, {buckets} AS __bucket FROM {view} __trig) __trig"
    return triggers, f"floor({scope.pk} / {width}) = __trig.__bucket"


_TRIGGER_EQUALITY = re.compile(r"(.+) (<=>|=) (__trig\.\w+)")
_DATA_COLUMN = re.compile(r"\bd\.(?!__a\d+\b)")


def _aggregated_before_join(
    select: ast.Select,
    scope: _Scope,
    render: _Renderer,
    items: list[tuple[str, str, OutputColumn]],
    where_sql: str | None,
    order: list[str],
    stream: StreamScope,
) -> str | None:
    """A stream query whose data appears only inside aggregates is computed aggregate-first,
    then left-joined to the triggers on its keys — one row per key crosses that join instead of
    every data row, and a trigger without data keeps its row (count 0, other aggregates NULL):

    - triggers meeting the data on equalities only (``%%trows`` of INTERVAL windows: group and
      window label; ``%%tbname``; a subquery's trigger id): the data grouped by those keys,
      without the triggers at all (Spark aggregates partially before its shuffle);
    - any other condition (``ts >= _twstart AND ts < _twend`` on another table, a row window's
      ``%%trows``): the data inner-joined to the *broadcast* triggers (bucketed when a range
      bounds the timestamp, ``_range_buckets``), grouped by trigger.

    Other shapes: None, and the join-then-aggregate plan."""
    if select.window is not None or select.partition_by or select.group_by or select.distinct:
        return None
    if select.limit is not None or select.offset is not None or not render.aggregates:
        return None
    keys: list[tuple[str, str, str]] = []  # (data side, operator, trigger column)
    filters = [where_sql] if where_sql else []
    equalities = True
    for condition in scope.trigger_join:
        match = _TRIGGER_EQUALITY.fullmatch(condition)
        if "__trig." not in condition:
            filters.append(condition)
        elif match is None or "__trig." in match.group(1):
            equalities = False
        else:
            keys.append((match.group(1), match.group(2), match.group(3)))
    if any("__trig." in sql for sql in filters):
        equalities = False
    aggregates = sorted(render.aggregates, key=len, reverse=True)  # longest first: none is part of another
    if any("explode(" in sql or (equalities and "__trig." in sql) for sql in aggregates):
        return None
    columns = {sql: f"__a{i}" for i, sql in enumerate(aggregates)}

    def lifted(sql: str) -> str:
        for aggregate in aggregates:
            empty = render.aggregates[aggregate]
            column = f"d.{columns[aggregate]}"
            sql = sql.replace(aggregate, f"coalesce({column}, {empty})" if empty else column)
        return sql

    select_list = [f"{lifted(sql)} AS {alias}" for sql, alias, _ in items]
    having = lifted(render.condition(select.having)) if select.having is not None else None
    ordering = [lifted(entry) for entry in order]
    if any(_DATA_COLUMN.search(sql) for sql in [*select_list, *ordering, *([having] if having else [])]):
        return None  # data outside an aggregate (a companion, a data column): join first
    computed = ", ".join(f"{sql} AS {name}" for sql, name in columns.items())
    if equalities:
        key_select = "".join(f"{data} AS __k{i}, " for i, (data, _, _) in enumerate(keys))
        inner = f"SELECT {key_select}{computed} FROM {_data_relation(scope)}"
        inner += f" WHERE {' AND '.join(filters)}" if filters else ""
        inner += (" GROUP BY " + ", ".join(data for data, _, _ in keys)) if keys else ""
        on = " AND ".join(f"{trigger} {op} d.__k{i}" for i, (_, op, trigger) in enumerate(keys)) or "TRUE"
    else:
        triggers = f"{quote_ident(stream.triggers_view)} __trig"
        conditions = [*scope.trigger_join, *filters]
        bucketed = _range_buckets(select, scope, render, stream)
        if bucketed is not None:
            triggers, bucket_match = bucketed
            conditions.append(bucket_match)
        inner = (
            f"SELECT /*+ BROADCAST(__trig) */ __trig.__tid AS __k0, {computed} FROM {_data_relation(scope)} "
            f"JOIN {triggers} ON {' AND '.join(conditions)} GROUP BY __trig.__tid"
        )
        on = "__trig.__tid = d.__k0"
    sql = (
        f"SELECT {', '.join(select_list)}, __trig.__tid AS __tid FROM {quote_ident(stream.triggers_view)} __trig "
        f"LEFT JOIN ({inner}) d ON {on}"
    )
    if having:
        sql += f" WHERE {having}"
    return sql + " ORDER BY " + ", ".join(ordering)


_DATA_REFERENCE = re.compile(r"\bd\.(`(?:[^`]|``)+`|\w+)")


def _check_grouped(
    select: ast.Select,
    before: list[tuple[str, str, OutputColumn]],
    after: list[tuple[str, str, OutputColumn]],
    group_keys: list[str],
) -> None:
    """In an aggregate query a select item reads the data only through aggregates, the
    grouping (PARTITION BY, GROUP BY, the window) or as the companion of one selector; anything
    else is rejected here, with its position, rather than failing in Spark."""
    grouped = {ref for key in group_keys for ref in _DATA_REFERENCE.findall(key)}
    for index, ((sql, _, _), (now, _, _)) in enumerate(zip(before, after, strict=True)):
        item = select.items[index] if index < len(select.items) else None
        if item is None or isinstance(item.expr, ast.Star) or sql != now or _contains_aggregate(item.expr):
            continue
        loose = [ref for ref in _DATA_REFERENCE.findall(sql) if ref not in grouped]
        if loose:
            raise _error(
                f"{item.text} is neither aggregated nor grouped: put it inside an aggregate, in PARTITION BY or "
                "GROUP BY, or beside exactly one selector (max, min, first, last, last_row)",
                item.expr,
            )


def _contains_aggregate(expr: ast.Expr) -> bool:
    return any(isinstance(node, ast.Func) and node.name in AGGREGATES for node in walk(expr))


def _output_name(item: ast.SelectItem) -> str:
    """TDengine names an unaliased column by its text, a qualified column (``a.ts``) by the
    column's name alone."""
    if item.alias:
        return item.alias
    if isinstance(item.expr, ast.Column) and item.expr.table is not None:
        return item.expr.name
    return item.text


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
    select: ast.Select, items: list[tuple[str, str, OutputColumn]], group_keys: list[str], render: _Renderer
) -> list[tuple[str, str, OutputColumn]]:
    """TDengine's selector companions: beside a single max/min/first/last/last_row, a plain
    column takes its value from the row the selector picked (``select max(v), ts from t`` is
    the time of the maximum). Columns the query groups by are left as they are."""
    selectors = [i.expr for i in select.items if isinstance(i.expr, ast.Func) and i.expr.name in _SELECTORS]
    plain = [
        (index, item)
        for index, item in enumerate(select.items)
        if isinstance(item.expr, ast.Column)
        # pseudo-columns (_wstart, _wend …) are the group's own; _c0/_rowts are row columns
        and (not item.expr.name.startswith("_") or item.expr.name.lower() in ("_c0", "_rowts"))
        and items[index][0] not in group_keys
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
        plain = [(i, item) for i, item in plain if item.expr.name.lower() not in tags]  # type: ignore[union-attr]
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


def _series_query(
    select: ast.Select, scope: _Scope, render: _Renderer, ctx: TranslationContext
) -> tuple[str, list[OutputColumn], _Scope]:
    """Queries with time-series functions or multi-row selectors: one output row per input
    row that the function keeps, in time order per partition (what each keeps and computes:
    ``_series_function``, ``_row_selector``, and ``docs/sql-support.md``)."""
    stream = ctx.stream
    if stream is not None and (select.limit is not None or select.offset is not None):
        raise _error("LIMIT/OFFSET beside time-series functions in a stream's query is not supported yet", select)
    if select.window is not None or select.group_by or select.having is not None or select.distinct:
        raise _error(
            "time-series functions and multi-row selectors (diff, csum, top, …) cannot be combined "
            "with windows, GROUP BY, HAVING or DISTINCT",
            select,
        )
    if scope.pk is None or scope.base is None:
        raise _error("time-series functions and multi-row selectors need a table with a timestamp primary key", select)
    names = {i.expr.name for i in select.items if isinstance(i.expr, ast.Func) and i.expr.name in SERIES_FUNCTIONS}
    if len(names) > 1:
        raise _error(f"{' and '.join(sorted(names))} cannot be mixed in one query", select)
    partition = [render.expr(e).sql for e in select.partition_by]
    if stream is not None:  # each trigger's rows are a series of their own
        partition.insert(0, "__trig.__tid")
    over = f"PARTITION BY {', '.join(partition) or 'NULL'} ORDER BY {scope.pk}"
    items: list[tuple[str, str, OutputColumn]] = []
    keep: list[str] = []
    drop_when_all_null: list[str] = []
    for item in select.items:
        alias = f"__c{len(items)}"
        name = _output_name(item)
        expr = item.expr
        if not (isinstance(expr, ast.Func) and expr.name in SERIES_FUNCTIONS):
            if isinstance(expr, ast.Star):
                raise _error(
                    "* cannot be selected beside time-series functions and multi-row selectors; name the columns", expr
                )
            typed = render.expr(expr)
            if typed.aggregate:
                raise _error("aggregates cannot be selected beside time-series functions and multi-row selectors", expr)
            items.append((typed.sql, alias, OutputColumn(name, typed.kind == "ts", typed.kind)))
            continue
        sql, condition, all_null = _series_function(expr, render, over, partition)
        items.append((sql, alias, OutputColumn(name, False, "other")))
        keep += [condition] if condition else []
        drop_when_all_null += [alias] if all_null else []
    where = render.condition(select.where) if select.where is not None else None
    select_list = ", ".join(f"{sql} AS {alias}" for sql, alias, _ in items)
    keys = "".join(f", {p} AS __p{i}" for i, p in enumerate(partition))
    # a kept row's conditions use the row and window functions: evaluated in the inner query
    flags = "".join(f", ({condition}) AS __k{i}" for i, condition in enumerate(keep))
    relation = _data_relation(scope)
    if stream is not None:  # the trigger's rows only: an inner join with the batch's triggers
        if scope.trows_filter is not None:
            scope.trigger_join.append(render.condition(scope.trows_filter))
        on = " AND ".join(scope.trigger_join) or "TRUE"
        relation = f"{quote_ident(stream.triggers_view)} __trig JOIN {relation} ON {on}"
        keys += ", __trig.__tid AS __tid"
    inner = f"SELECT {select_list}{keys}{flags}, {scope.pk} AS __ts FROM {relation}" + (
        f" WHERE {where}" if where else ""
    )
    conditions = [f"__k{i}" for i in range(len(keep))]
    if drop_when_all_null:
        conditions.append("(" + " OR ".join(f"{a} IS NOT NULL" for a in drop_when_all_null) + ")")
    order = [f"__p{i}" for i in range(len(partition))] + ["__ts"]
    if select.order_by:
        raise _error(
            "ORDER BY beside time-series functions and multi-row selectors is not supported yet "
            "(rows come in time order)",
            select,
        )
    outputs = [alias for _, alias, _ in items] + (["__tid"] if stream is not None else [])
    sql = f"SELECT {', '.join(outputs)} FROM ({inner}) __series"
    if conditions:
        sql += " WHERE " + " AND ".join(f"({c})" for c in conditions)
    sql += " ORDER BY " + ", ".join(order)
    if select.limit is not None:
        sql += f" LIMIT {select.limit}"
    if select.offset is not None:
        sql += f" OFFSET {select.offset}"
    return sql, [col for _, _, col in items], scope


def _series_function(
    expr: ast.Func, render: _Renderer, over: str, partition: list[str]
) -> tuple[str, str | None, bool]:
    """(the value's SQL, the condition for its row to be output, whether an all-NULL row of
    such values is dropped) for one time-series function or multi-row selector. diff is the
    value minus the nearest earlier non-NULL value (ignore_option 0/1: the first row has no
    output; 1/3: a negative difference is NULL; 2/3: rows whose differences are all NULL are
    dropped); csum the running sum of the non-NULL values (a NULL row has no output); mavg(expr,
    k) the mean of the last k non-NULL values (the first k-1 have no output)."""
    name = expr.name
    if not expr.args:
        raise _error(f"{name}() needs a column", expr)
    arg = render.expr(expr.args[0])
    if arg.aggregate:
        raise _error(f"{name}() cannot contain an aggregate", expr.args[0])
    if name in ("top", "bottom", "tail", "unique", "sample"):
        return _row_selector(expr, arg, render, partition)
    if name in ("statecount", "stateduration"):
        return _state_run(expr, arg, render, partition), None, False
    value = f"CAST({arg.sql} AS INT)" if arg.kind == "bool" else arg.sql
    allowed = ("int", "float", "ts", "bool") if name == "diff" else NUMERIC
    if arg.kind not in allowed:
        raise _error(f"{name}() needs a numeric column, got a {arg.kind} value", expr.args[0])
    cast = "DOUBLE" if arg.kind == "float" else "BIGINT"
    if name == "diff":
        option = 0
        if len(expr.args) == 2:
            node = expr.args[1]
            if not (isinstance(node, ast.Literal) and node.kind == "int" and node.value in (0, 1, 2, 3)):
                raise _error("diff()'s ignore_option is 0, 1, 2 or 3", node)
            option = int(node.value)  # type: ignore[call-overload]
        elif len(expr.args) > 2:
            raise _error("diff() takes a column and an optional ignore_option", expr)
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
            raise _error("derivative() takes a column, a time interval (at least 1s) and 0 or 1", expr)
        interval = expr.args[1].duration
        if interval.nanos < 10**9:
            raise _error("derivative()'s time interval is at least 1s", expr.args[1])
        flag = expr.args[2]
        if not (isinstance(flag, ast.Literal) and flag.value in (0, 1)):
            raise _error("derivative()'s ignore_negative is 0 or 1", flag)
        pk = render.scope.pk
        before = f"{over} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"
        previous = f"last({value}, true) OVER ({before})"
        previous_ts = f"last(CASE WHEN {value} IS NOT NULL THEN {pk} END, true) OVER ({before})"
        step = interval.in_precision(render.scope.precision)
        rate = f"CAST({value} - {previous} AS DOUBLE) * {step} / ({pk} - {previous_ts})"
        keep = f"{value} IS NOT NULL AND {previous} IS NOT NULL" + (f" AND {rate} >= 0" if flag.value == 1 else "")
        return rate, keep, False
    if name == "csum":
        if len(expr.args) != 1:
            raise _error("csum() takes one column", expr)
        running = f"CAST(sum({value}) OVER ({over} ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS {cast})"
        return running, f"{value} IS NOT NULL", False
    # mavg(expr, k): the non-NULL values form their own partition, so k counts only them
    if len(expr.args) != 2 or not (isinstance(expr.args[1], ast.Literal) and expr.args[1].kind == "int"):
        raise _error("mavg() takes a column and a constant number of rows k (1 to 1000)", expr)
    k = int(expr.args[1].value)  # type: ignore[call-overload]
    if not 1 <= k <= 1000:
        raise _error("mavg()'s k is from 1 to 1000", expr.args[1])
    frame = over.replace("PARTITION BY ", f"PARTITION BY ({value} IS NULL), ", 1)
    frame += f" ROWS BETWEEN {k - 1} PRECEDING AND CURRENT ROW"
    average = f"CAST(avg({value}) OVER ({frame}) AS DOUBLE)"
    return average, f"{value} IS NOT NULL AND count({value}) OVER ({frame}) >= {k}", False


_STATE_OPERATORS = {"LT": "<", "GT": ">", "LE": "<=", "GE": ">=", "NE": "<>", "EQ": "="}


def _state_run(expr: ast.Func, arg: _Typed, render: _Renderer, partition: list[str]) -> str:
    """statecount/stateduration: per row, how many rows (how long) the run of consecutive
    rows meeting ``expr oper value`` has lasted so far; -1 on a row that does not meet it;
    NULL on a NULL row, which neither extends nor breaks the run. A run is numbered by the
    rows not meeting the condition before it (a layer of its own: windows do not nest)."""
    name, scope = expr.name, render.scope
    duration = name == "stateduration"
    if not 3 <= len(expr.args) <= (4 if duration else 3):
        unit = " and an optional time unit" if duration else ""
        raise _error(f"{name}() takes a column, an operator ('LT', 'GT', 'LE', 'GE', 'NE', 'EQ'), a value{unit}", expr)
    if arg.kind not in NUMERIC:
        raise _error(f"{name}() needs a numeric column, got a {arg.kind} value", expr.args[0])
    oper = expr.args[1]
    if not (isinstance(oper, ast.Literal) and oper.kind == "string" and str(oper.value).upper() in _STATE_OPERATORS):
        raise _error(f"{name}()'s operator is one of 'LT', 'GT', 'LE', 'GE', 'NE', 'EQ'", oper)
    bound = render.expr(expr.args[2])
    if bound.kind not in NUMERIC or not isinstance(expr.args[2], ast.Literal | ast.Unary):
        raise _error(f"{name}()'s value is a numeric constant", expr.args[2])
    meets = f"({arg.sql} {_STATE_OPERATORS[str(oper.value).upper()]} {bound.sql})"
    by = ", ".join([*partition, f"({arg.sql} IS NULL)"])
    run = render.ctx.fresh("run")
    scope.layers.append(
        f"sum(CASE WHEN {meets} THEN 0 ELSE 1 END) OVER (PARTITION BY {by} ORDER BY {scope.pk} "
        f"ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS {run}"
    )
    within = f"PARTITION BY {by}, d.{run}"
    if duration:
        unit = render._unit(expr, 3) if len(expr.args) == 4 else 1
        so_far = f"({scope.pk} - min(CASE WHEN {meets} THEN {scope.pk} END) OVER ({within})) DIV {unit}"
    else:
        so_far = (
            f"sum(CASE WHEN {meets} THEN 1 ELSE 0 END) OVER ({within} ORDER BY {scope.pk} "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
        )
    return f"CASE WHEN {arg.sql} IS NULL THEN NULL WHEN {meets} THEN CAST({so_far} AS BIGINT) ELSE -1 END"


def _row_selector(expr: ast.Func, arg: _Typed, render: _Renderer, partition: list[str]) -> tuple[str, str, bool]:
    """top/bottom(expr, k): the k largest/smallest non-NULL values; tail(expr, k[, offset]):
    the last k rows after skipping the newest ``offset``; unique(expr): each value's first row;
    sample(expr, k): k rows at random. The rows come out in time order, with their columns."""
    name, pk = expr.name, render.scope.pk
    groups = ", ".join(partition) or "NULL"

    def constant(index: int, low: int, high: int, what: str) -> int:
        node = expr.args[index] if index < len(expr.args) else None
        if not (isinstance(node, ast.Literal) and node.kind == "int" and low <= int(node.value) <= high):  # type: ignore[call-overload]
            raise _error(f"{name}()'s {what} is a constant from {low} to {high}", node or expr)
        return int(node.value)  # type: ignore[call-overload]

    if name == "unique":
        if len(expr.args) != 1:
            raise _error("unique() takes one column", expr)
        return arg.sql, f"row_number() OVER (PARTITION BY {groups}, {arg.sql} ORDER BY {pk}) = 1", False
    if name == "tail":
        if len(expr.args) not in (2, 3):
            raise _error("tail() takes a column, k (1 to 100) and an optional offset (0 to 100)", expr)
        k = constant(1, 1, 100, "k")
        offset = constant(2, 0, 100, "offset") if len(expr.args) == 3 else 0
        rank = f"row_number() OVER (PARTITION BY {groups} ORDER BY {pk} DESC)"
        return arg.sql, f"{rank} > {offset} AND {rank} <= {offset + k}", False
    if len(expr.args) != 2:
        raise _error(f"{name}() takes a column and k", expr)
    if name == "sample":
        k = constant(1, 1, 1000, "k")
        return arg.sql, f"row_number() OVER (PARTITION BY {groups} ORDER BY rand()) <= {k}", False
    if arg.kind not in NUMERIC:
        raise _error(f"{name}() needs a numeric column, got a {arg.kind} value", expr.args[0])
    k = constant(1, 1, 100, "k")
    direction = "DESC" if name == "top" else "ASC"
    rank = f"row_number() OVER (PARTITION BY {groups} ORDER BY {arg.sql} {direction} NULLS LAST, {pk})"
    return arg.sql, f"{arg.sql} IS NOT NULL AND {rank} <= {k}", False


def _filled(
    select: ast.Select,
    window: ast.IntervalWindow,
    scope: _Scope,
    parts: list[str],
    items: list[tuple[str, str, OutputColumn]],
    kinds: list[str],
    partition_sql: list[str],
    render: _Renderer,
) -> str:
    """INTERVAL … FILL: every window of the queried range (see the grid below), the windows
    without rows filled — NULL/NULL_F with NULL, VALUE/VALUE_F with the given constants (in
    the order of the filled columns), PREV/NEXT with the nearest earlier/later window's
    value, LINEAR by interpolating numbers between them over the window starts.
    Window pseudo-columns and partition keys are not filled: they come from the window grid."""
    assert window.fill is not None
    mode = window.fill.mode.removesuffix("_F")
    if select.having is not None:
        raise _error("FILL with HAVING is not supported yet", select)
    stream = render.ctx.stream
    if stream is not None and (select.order_by or select.limit is not None or select.offset is not None):
        raise _error("FILL with ORDER BY or LIMIT in a stream's query is not supported yet", select)
    keys = [f"__p{i}" for i in range(len(partition_sql))]
    inner_select = ", ".join([*(f"{sql} AS {k}" for sql, k in zip(partition_sql, keys, strict=True)), "d.__qw AS __w"])
    inner = parts[0].replace(" FROM ", f", {inner_select} FROM ", 1) + " " + " ".join(parts[1:])
    key_list = "".join(f"{k}, " for k in keys)
    # the grid spans the WHERE's time range where it has one (TDengine fills the queried
    # range) — in a stream's query over an INTERVAL trigger, the trigger's window — else each
    # partition's first and last window with data
    low, high = render.query_bounds()
    if window.interval.is_calendar:  # a grid of months: their indices, each mapped to its start
        if stream is not None:
            raise _error("FILL over calendar INTERVAL windows in a stream's query is not supported yet", select)
        months = window.interval.months
        first = f"min({render.month_index(f'{low}L')})" if low != _INT64_MIN else f"min({render.month_index('__w')})"
        last = f"max({render.month_index(f'{high}L')})" if high != _INT64_MAX else f"max({render.month_index('__w')})"
        first = f"({first} - pmod({first}, {months}))"
        sequence = f"explode(sequence(__lo, __hi, {months}))"
        grid_start = render.month_start("__mi")
        bounds = f"SELECT {key_list}{first} AS __lo, {last} AS __hi FROM __agg" + (
            f" GROUP BY {', '.join(keys)}" if keys else ""
        )
        months_grid = f"SELECT {key_list}{sequence} AS __mi FROM ({bounds}) __b"
        grid = f"SELECT {key_list}{grid_start} AS __w FROM ({months_grid}) __m"
        return _filled_select(select, window, scope, mode, inner, grid, keys, items, kinds, partition_sql, render)
    step = render.duration(window.sliding or window.interval, select)
    spec = _interval_spec(window, scope, select)
    # (constants inside min/max: the bounds query aggregates, partitioned or not)
    first = f"min({spec.first_start(low)}L)" if low != _INT64_MIN else "min(__w)"
    last = f"max({spec.floor(high)}L)" if high != _INT64_MAX else "max(__w)"
    if stream is not None and stream.window_label is not None:
        inner = inner.replace(" FROM ", ", __trig._twstart AS __tws, __trig._twend AS __twe FROM ", 1)

        def floor(ts: str) -> str:
            return f"({ts} - pmod({ts} - {spec.offset}, {spec.sliding}))"

        first = f"min({floor(f'__tws - {spec.interval}')} + {spec.sliding})"
        last = f"max({floor('__twe - 1')})"
    bounds = f"SELECT {key_list}{first} AS __lo, {last} AS __hi FROM __agg" + (
        f" GROUP BY {', '.join(keys)}" if keys else ""
    )
    grid = f"SELECT {key_list}explode(sequence(__lo, __hi, CAST({step} AS BIGINT))) AS __w FROM ({bounds}) __b"
    return _filled_select(select, window, scope, mode, inner, grid, keys, items, kinds, partition_sql, render)


def _filled_select(
    select: ast.Select,
    window: ast.IntervalWindow,
    scope: _Scope,
    mode: str,
    inner: str,
    grid: str,
    keys: list[str],
    items: list[tuple[str, str, OutputColumn]],
    kinds: list[str],
    partition_sql: list[str],
    render: _Renderer,
) -> str:
    """The grid of window starts (``__w`` per partition key) left-joined to the aggregated
    windows (``__agg``), each column filled by the mode."""
    assert window.fill is not None
    stream = render.ctx.stream
    on = " AND ".join([*(f"g.{k} <=> a.{k}" for k in keys), "g.__w = a.__w"])
    pseudo = {"d.__qw": "g.__w", **{v: v.replace("d.__qw", "g.__w") for v in scope.window_sql.values()}}
    filled_columns = [i for i, (sql, _, _) in enumerate(items) if sql not in pseudo and sql not in partition_sql]
    values = list(window.fill.values)
    if mode == "VALUE" and len(values) != len(filled_columns):
        raise _error(
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
        by_sql = {sql: alias for sql, alias, _ in items}
        ordering = ", ".join(
            _filled_order(entry, by_sql, render, items) + (" DESC" if entry.descending else " ASC")
            for entry in select.order_by
        )
    sql = f"WITH __agg AS ({inner}) SELECT {', '.join(columns)} FROM ({grid}) g LEFT JOIN __agg a ON {on} "
    sql += f"ORDER BY {ordering}"
    if select.limit is not None:
        sql += f" LIMIT {select.limit}"
    if select.offset is not None:
        sql += f" OFFSET {select.offset}"
    return sql


def _filled_order(
    entry: ast.OrderItem, by_sql: dict[str, str], render: _Renderer, items: list[tuple[str, str, OutputColumn]]
) -> str:
    expr = entry.expr
    by_name = {col.name.lower(): alias for _, alias, col in items}
    if isinstance(expr, ast.Column) and expr.table is None and expr.name.lower() in by_name:
        return by_name[expr.name.lower()]
    if isinstance(expr, ast.Literal) and expr.kind == "int" and 1 <= int(expr.value) <= len(items):  # type: ignore[call-overload]
        return items[int(expr.value) - 1][1]  # type: ignore[call-overload]
    rendered = render.expr(expr).sql
    if rendered in by_sql:
        return by_sql[rendered]
    raise _error("ORDER BY beside FILL names a selected column (by name, position or the same expression)", expr)


_ROW_WINDOW_VIEWS = itertools.count()  # view names unique in the process's Spark session
_ROW_WINDOW_NAMES = {
    ast.SessionWindow: "SESSION",
    ast.StateWindow: "STATE_WINDOW",
    ast.EventWindow: "EVENT_WINDOW",
    ast.CountWindow: "COUNT_WINDOW",
}


def _row_windows(
    select: ast.Select, window: QueryRowWindow, scope: _Scope, render: _Renderer, ctx: TranslationContext
) -> None:
    """SESSION, STATE_WINDOW, EVENT_WINDOW, COUNT_WINDOW: the query reads a view of its rows
    labelled with their windows (``RowWindowPlan``), computed as TDengine does over the rows
    the WHERE keeps, per partition, in time order; ``_wstart``/``_wend`` are a window's first
    and last row times."""
    kind = _ROW_WINDOW_NAMES[type(window)]
    if scope.pk is None or scope.base is None:
        raise _error(f"{kind} needs a table with a timestamp primary key", select)
    values: list[tuple[str, str]] = []  # (column the trigger reads, its SQL)
    gap = true_for = None
    if isinstance(window, ast.SessionWindow):
        if render.expr(window.column).sql != scope.pk:
            raise _error("SESSION's first argument is the table's primary timestamp column", window.column)
        if not isinstance(window.gap, ast.DurationLiteral) or window.gap.duration.is_calendar:
            raise _error("SESSION's gap is a duration such as 10s or 5m", window.gap)
        gap = render.duration(window.gap.duration, window.gap)
        if gap <= 0:
            raise _error(f"SESSION's gap {window.gap.duration} is finer than the database precision", window.gap)
    elif isinstance(window, ast.StateWindow):
        state = render.expr(window.expr)
        if state.kind not in ("int", "bool", "string") or state.aggregate:
            raise _error(
                f"STATE_WINDOW needs an integer, boolean or string value, got a {state.kind} value", window.expr
            )
        values.append((STATE_VALUE, state.sql))
    elif isinstance(window, ast.EventWindow):
        values += [(start_flag(i), render.condition(c)) for i, c in enumerate(window.start)]
        values += [(end_flag(i), render.condition(c)) for i, c in enumerate(window.end)]
    else:
        if window.count < 2 or not 1 <= (window.sliding or window.count) <= window.count:
            raise _error("COUNT_WINDOW takes a row count of at least 2 and a sliding from 1 to that count", select)
        values += [(counted_value(i), render.expr(column).sql) for i, column in enumerate(window.columns)]
    if isinstance(window, ast.StateWindow | ast.EventWindow) and window.true_for is not None:
        true_for = render.duration(window.true_for, select)
    keys = [(render.expr(e).sql, f"__p{i}") for i, e in enumerate(select.partition_by)]
    relation = _data_relation(scope)
    stream = ctx.stream
    if stream is not None:  # windows within each trigger's rows: the trigger is a partition key
        if scope.trows_filter is not None:
            scope.trigger_join.append(render.condition(scope.trows_filter))
        on = " AND ".join(scope.trigger_join) or "TRUE"
        relation = f"{quote_ident(stream.triggers_view)} __trig JOIN {relation} ON {on}"
        keys.insert(0, ("__trig.__tid", "__tid"))
        scope.trigger_join, scope.trows_filter = ["d.__tid = __trig.__tid"], None
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


def _calendar_windows(select: ast.Select, window: ast.IntervalWindow, scope: _Scope, render: _Renderer) -> None:
    """INTERVAL(k n) / INTERVAL(k y): natural months and years of the session time zone,
    counted from January 1970 (so 3n windows are quarters, 1y windows calendar years); a
    window ends where the next begins, so its length follows the calendar."""
    months = window.interval.months if window.interval.is_calendar else 0
    if not months or (window.sliding is not None and window.sliding != window.interval):
        raise _error(
            "a calendar INTERVAL (n, y) takes no SLIDING of another length, and a calendar SLIDING needs one", select
        )
    if window.offset is not None:
        raise _error("a calendar INTERVAL (n, y) takes no offset", select)
    assert scope.pk is not None
    month = render.month_index(scope.pk.removeprefix("d."))
    scope.window = window
    scope.window_sql = {
        "label": render.month_start(f"({month} - pmod({month}, {months}))"),
        "_wstart": "d.__qw",
        "_wend": render.shift_months("d.__qw", months),
        "_wduration": f"({render.shift_months('d.__qw', months)} - d.__qw)",
    }


def _interval_spec(window: ast.IntervalWindow, scope: _Scope, select: ast.Select) -> IntervalSpec:
    try:
        spec = IntervalSpec.from_durations(
            window.interval, window.sliding or window.interval, window.offset, scope.precision
        )
    except TimeValueError as exc:
        raise _error(str(exc), select) from None
    if spec.sliding > spec.interval:
        raise _error(f"SLIDING {window.sliding} must not be larger than INTERVAL {window.interval}", select)
    return spec


def _order_by(
    select: ast.Select,
    scope: _Scope,
    render: _Renderer,
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


class _Renderer:
    def __init__(self, scope: _Scope, ctx: TranslationContext) -> None:
        self.scope = scope
        self.ctx = ctx
        self.saw_aggregate = False
        self.where: ast.Expr | None = None  # the query's WHERE, for _qstart/_qend
        self.aggregates: dict[str, str | None] = {}  # each aggregate's SQL → its value over no rows
        self.now = ctx.now_ns // PRECISIONS[scope.precision] if ctx.now_ns else now_in(scope.precision)

    def _query_range(self, name: str) -> _Typed:
        """_qstart/_qend/_qduration: the query's time range (``query_bounds``)."""
        low, high = self.query_bounds()
        if name == "_qduration":
            return _Typed(str(max(min(high - low, _INT64_MAX), 0)), "int")
        return _Typed(f"{low if name == '_qstart' else high}L", "ts")

    def query_bounds(self) -> tuple[int, int]:
        """The time range the WHERE puts on the primary key (both ends included, as TDengine
        keeps it: ``ts < b`` ends at b - 1); an open end is the smallest/largest timestamp."""
        low, high = _INT64_MIN, _INT64_MAX
        pending = [self.where] if self.where is not None else []
        while pending:
            node = pending.pop()
            if isinstance(node, ast.Binary) and node.op == "AND":
                pending += [node.left, node.right]
                continue
            for bound_low, bound_high in self._time_bounds(node):
                low, high = max(low, bound_low), min(high, bound_high)
        return low, high

    def _time_bounds(self, node: ast.Expr) -> list[tuple[int, int]]:
        """The primary-key range one WHERE conjunct states, if it compares the key with
        constants (``ts >= '2024-01-01'``, ``_c0 < now``, ``ts BETWEEN a AND b``)."""
        from ..constants import ConstantContext, evaluate

        now_ns = self.now * PRECISIONS[self.scope.precision]
        constants = ConstantContext(self.scope.precision, self.ctx.timezone, now_ns)

        def constant(expr: ast.Expr) -> int | None:
            try:
                value = evaluate(expr, constants, timestamp=True)
            except WriteRejectedError:  # not a constant: no bound
                return None
            return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

        def is_key(expr: ast.Expr) -> bool:
            return isinstance(expr, ast.Column) and self.scope.pk is not None and self.expr(expr).sql == self.scope.pk

        if isinstance(node, ast.Between) and not node.negated and is_key(node.operand):
            low, high = constant(node.low), constant(node.high)
            return [(low, high)] if low is not None and high is not None else []
        if not (isinstance(node, ast.Binary) and node.op in ("<", "<=", ">", ">=", "=")):
            return []
        op, other = node.op, node.right
        if is_key(node.right):  # constant on the left: turn the comparison around
            op, other = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}[op], node.left
        elif not is_key(node.left):
            return []
        value = constant(other)
        if value is None:
            return []
        return [{"<": (_INT64_MIN, value - 1), "<=": (_INT64_MIN, value), ">": (value + 1, _INT64_MAX),
                 ">=": (value, _INT64_MAX), "=": (value, value)}[op]]  # fmt: skip

    def duration(self, value: ast.Duration | None, node: ast.Expr | ast.Select) -> int:
        assert value is not None
        try:
            return value.in_precision(self.scope.precision)
        except TimeValueError as exc:
            raise _error(str(exc), node) from None

    def condition(self, expr: ast.Expr) -> str:
        return self.expr(expr).sql

    def timestamp_literal(self, literal: ast.Literal) -> str:
        try:
            return str(parse_timestamp(str(literal.value), self.scope.precision, self.ctx.timezone))
        except TimeValueError as exc:
            raise _error(str(exc), literal) from None

    def as_ts(self, expr: ast.Expr, typed: _Typed) -> _Typed:
        """A string literal compared with a timestamp is a timestamp literal."""
        if typed.kind == "string" and isinstance(expr, ast.Literal):
            return _Typed(self.timestamp_literal(expr), "ts")
        return typed

    def expr(self, expr: ast.Expr) -> _Typed:
        method = getattr(self, "_" + type(expr).__name__.lower(), None)
        if method is None:
            raise _error(f"{type(expr).__name__} expressions are not supported here", expr)
        return method(expr)

    def _literal(self, expr: ast.Literal) -> _Typed:
        if expr.kind == "null":
            return _Typed("NULL", "null")
        if expr.kind == "bool":
            return _Typed("TRUE" if expr.value else "FALSE", "bool")
        if expr.kind == "string":
            return _Typed(quote_string(str(expr.value)), "string")
        if expr.kind == "float":
            return _Typed(repr(float(expr.value)), "float")  # type: ignore[arg-type]
        return _Typed(f"{int(expr.value)}L" if abs(int(expr.value)) >= 2**31 else str(expr.value), "int")  # type: ignore[call-overload]

    def _durationliteral(self, expr: ast.DurationLiteral) -> _Typed:
        return _Typed(str(self.duration(expr.duration, expr)), "duration")

    def _column(self, expr: ast.Column) -> _Typed:
        name = expr.name.lower()
        if name in _WINDOW_PSEUDO:
            if self.scope.window is None:
                raise _error(f"{expr.name} needs a window clause such as INTERVAL(...)", expr)
            return _Typed(self.scope.window_sql[name], "ts" if name != "_wduration" else "int")
        if name in ("_c0", "_rowts") and self.scope.pk is not None:
            return _Typed(self.scope.pk, "ts")
        if name in ("_qstart", "_qend", "_qduration"):
            return self._query_range(name)
        if name in _TRIGGER_NAMES and (self.ctx.stream is not None or name not in self.scope.columns):
            # a stream's output keeps unaliased placeholders as column names (``_twstart``):
            # outside a stream's query such a name is that column
            if self.ctx.stream is None:
                raise _error(f"placeholder {expr.name} can only be used inside a stream's query", expr)
            column, kind = _TRIGGER_NAMES[name]
            return _Typed(f"__trig.{column}", kind)
        if expr.table is not None and f"{expr.table.lower()}.{name}" in self.scope.columns:
            found: tuple[str, str] | None = self.scope.columns[f"{expr.table.lower()}.{name}"]
        elif name in self.scope.ambiguous:
            raise _error(f"column {expr.name} is in more than one joined table: name its table (t.{expr.name})", expr)
        else:
            found = self.scope.columns.get(name)
        if found is None:
            known = ", ".join(sorted(self.scope.columns)) or "none"
            raise _error(f"unknown column {expr.name} (columns: {known})", expr)
        return _Typed(found[0], found[1])

    def _star(self, expr: ast.Star) -> _Typed:
        raise _error("* is only allowed as a select item or in count(*)", expr)

    def _placeholder(self, expr: ast.Placeholder) -> _Typed:
        stream = self.ctx.stream
        if stream is None:
            raise _error(f"%%{expr.name} can only be used inside a stream's query", expr)
        if expr.name == "tbname":
            return _Typed("__trig.__tbname", "string")
        if expr.name.isdigit() and int(expr.name) <= len(stream.group_columns):
            return _Typed(f"__trig.__g{expr.name}", "other")
        return _Typed("NULL", "null")  # TDengine reads a %%n beyond the group columns as NULL

    def _unary(self, expr: ast.Unary) -> _Typed:
        inner = self.expr(expr.operand)
        if expr.op == "NOT":
            return _Typed(f"(NOT {inner.sql})", "bool", inner.aggregate)
        return _Typed(f"({expr.op}{inner.sql})", inner.kind, inner.aggregate)

    def _binary(self, expr: ast.Binary) -> _Typed:
        calendar = next(
            (
                side
                for side in (expr.right, expr.left)
                if isinstance(side, ast.DurationLiteral) and side.duration.is_calendar
            ),
            None,
        )
        if calendar is not None and expr.op in ("+", "-") and not (expr.op == "-" and calendar is expr.left):
            # ts ± 1n / 1y: a calendar step on the session time zone's calendar
            other = self.expr(expr.left if calendar is expr.right else expr.right)
            if other.kind != "ts":
                raise _error(f"a calendar duration ({calendar.duration}) is added to a timestamp", expr)
            months = calendar.duration.months * (-1 if expr.op == "-" else 1)  # type: ignore[union-attr]
            return _Typed(self.shift_months(other.sql, months), "ts", other.aggregate)
        left, right = self.expr(expr.left), self.expr(expr.right)
        agg = left.aggregate or right.aggregate
        op = expr.op
        if op in ("=", "<>", "<", "<=", ">", ">="):
            if left.kind == "ts":
                right = self.as_ts(expr.right, right)
            if right.kind == "ts":
                left = self.as_ts(expr.left, left)
            return _Typed(f"({left.sql} {op} {right.sql})", "bool", agg)
        if op in ("AND", "OR"):
            return _Typed(f"({left.sql} {op} {right.sql})", "bool", agg)
        if op == "LIKE":
            return _Typed(f"({left.sql} LIKE {right.sql})", "bool", agg)
        if op == "MATCH":
            return _Typed(f"({left.sql} RLIKE {right.sql})", "bool", agg)
        if op == "NMATCH":
            return _Typed(f"(NOT ({left.sql} RLIKE {right.sql}))", "bool", agg)
        if op in ("+", "-"):
            kind = "ts" if "ts" in (left.kind, right.kind) and not (left.kind == right.kind == "ts") else None
            if kind is None:
                kind = "float" if "float" in (left.kind, right.kind) else "int"
            return _Typed(f"({left.sql} {op} {right.sql})", kind, agg)
        if op in ("*", "%"):
            kind = "float" if "float" in (left.kind, right.kind) else "int"
            return _Typed(f"({left.sql} {op} {right.sql})", kind, agg)
        if op == "/":
            return _Typed(f"(CAST({left.sql} AS DOUBLE) / {right.sql})", "float", agg)
        if op in ("&", "|"):
            return _Typed(f"(CAST({left.sql} AS BIGINT) {op} CAST({right.sql} AS BIGINT))", "int", agg)
        raise _error(f"operator {op} is not supported", expr)

    def _isnull(self, expr: ast.IsNull) -> _Typed:
        inner = self.expr(expr.operand)
        return _Typed(f"({inner.sql} IS {'NOT ' if expr.negated else ''}NULL)", "bool", inner.aggregate)

    def _between(self, expr: ast.Between) -> _Typed:
        operand = self.expr(expr.operand)
        low, high = self.expr(expr.low), self.expr(expr.high)
        if operand.kind == "ts":
            low, high = self.as_ts(expr.low, low), self.as_ts(expr.high, high)
        neg = "NOT " if expr.negated else ""
        return _Typed(f"({operand.sql} {neg}BETWEEN {low.sql} AND {high.sql})", "bool", operand.aggregate)

    def _inlist(self, expr: ast.InList) -> _Typed:
        operand = self.expr(expr.operand)
        items = []
        for item in expr.items:
            typed = self.expr(item)
            items.append(self.as_ts(item, typed).sql if operand.kind == "ts" else typed.sql)
        neg = "NOT " if expr.negated else ""
        return _Typed(f"({operand.sql} {neg}IN ({', '.join(items)}))", "bool", operand.aggregate)

    def _case(self, expr: ast.Case) -> _Typed:
        parts = ["CASE"]
        agg = False
        if expr.operand is not None:
            operand = self.expr(expr.operand)
            parts.append(operand.sql)
            agg |= operand.aggregate
        kind = "other"
        for cond, value in expr.whens:
            c, v = self.expr(cond), self.expr(value)
            agg |= c.aggregate or v.aggregate
            kind = v.kind
            parts += ["WHEN", c.sql, "THEN", v.sql]
        if expr.default is not None:
            d = self.expr(expr.default)
            parts += ["ELSE", d.sql]
        parts.append("END")
        return _Typed("(" + " ".join(parts) + ")", kind, agg)

    def _cast(self, expr: ast.Cast) -> _Typed:
        target = expr.type.name
        if target == "TIMESTAMP":
            if isinstance(expr.operand, ast.Literal) and expr.operand.kind == "string":
                return _Typed(self.timestamp_literal(expr.operand), "ts")
            inner = self.expr(expr.operand)
            return _Typed(f"CAST({inner.sql} AS BIGINT)", "ts", inner.aggregate)
        inner = self.expr(expr.operand)
        spark = _SPARK_CAST.get(target)
        if spark is None:
            raise _error(f"CAST to {expr.type} is not supported", expr)
        if expr.type.name == "DECIMAL":
            spark = f"DECIMAL({expr.type.length or 10},{expr.type.scale or 0})"
        return _Typed(f"CAST({inner.sql} AS {spark})", _kind_of(expr.type), inner.aggregate)

    def _func(self, expr: ast.Func) -> _Typed:
        name = expr.name
        if name == "now":
            return _Typed(f"{self.now}L", "ts")
        if name == "today":
            day = 86400 * 10**9 // PRECISIONS[self.scope.precision]
            local_offset = self._utc_offset(self.now)
            return _Typed(f"{(self.now + local_offset) // day * day - local_offset}L", "ts")
        if name in AGGREGATES:
            typed = self._aggregate(expr)
            # what the aggregate is over no rows, where Spark's value over none is not NULL
            self.aggregates[typed.sql] = {"count": "0", "hyperloglog": "0", "irate": "0.0"}.get(name)
            return typed
        if name in TIME_FUNCTIONS:
            return self._time_function(expr)
        if name in SERIES_FUNCTIONS:  # handled by _series_query when it is a whole select item
            raise _error(f"{name}() must be a select item of its own, not part of an expression", expr)
        if name in SCALARS:
            return self._scalar(expr, SCALARS[name])
        raise _error(f"function {name}() is not supported yet; supported: {', '.join(SUPPORTED_FUNCTIONS)}", expr)

    def _scalar(self, expr: ast.Func, fn: Scalar) -> _Typed:
        if len(expr.args) not in fn.forms:
            counts = fn.arities
            wanted = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
            raise _error(f"{expr.name}() takes {wanted} argument(s), got {len(expr.args)}", expr)
        args = [self.expr(a) for a in expr.args]
        for arg, node in zip(args, expr.args, strict=True):
            literal_null = isinstance(node, ast.Literal) and node.kind == "null"
            if arg.kind not in fn.args and not literal_null:
                wanted = "a number" if fn.args == NUMERIC else "a string"
                raise _error(f"{expr.name}() needs {wanted}, got a {arg.kind} value", node)
        kind = args[0].kind if fn.result == "same" else fn.result
        sql = fn.spark([a.sql for a in args])
        if fn.result == "same" and kind == "float":
            sql = f"CAST({sql} AS DOUBLE)"  # Spark's ceil/floor/round/sign of a DOUBLE are not all DOUBLE
        return _Typed(sql, kind, any(a.aggregate for a in args))

    def _ts_arg(self, expr: ast.Func, index: int) -> _Typed:
        """A timestamp argument: a timestamp value, an integer (an epoch in the precision, as
        TDengine takes it), or a string literal read as a timestamp."""
        node = expr.args[index]
        typed = self.as_ts(node, self.expr(node))
        if typed.kind not in ("ts", "int"):
            raise _error(f"{expr.name}() needs a timestamp, got a {typed.kind} value", node)
        return typed

    def _local(self, ts_sql: str) -> str:
        """A timestamp value (epoch in the precision) as a Spark TIMESTAMP in the session time
        zone's wall-clock time (Spark's own session zone is UTC)."""
        return f"from_utc_timestamp(timestamp_micros({self._micros(ts_sql)}), '{self.ctx.timezone.key}')"

    def _time_function(self, expr: ast.Func) -> _Typed:
        name, args = expr.name, expr.args
        arities = {"timediff": (2, 3), "timetruncate": (2, 3), "to_iso8601": (1, 1), "to_unixtimestamp": (1, 1),
                   "timezone": (0, 0), "weekday": (1, 1), "dayofweek": (1, 1), "weekofyear": (1, 1),
                   "to_char": (2, 2), "to_timestamp": (2, 2)}  # fmt: skip
        low, high = arities[name]
        if not low <= len(args) <= high:
            wanted = str(low) if low == high else f"{low} to {high}"
            raise _error(f"{name}() takes {wanted} argument(s), got {len(args)}", expr)
        per_second = 10**9 // PRECISIONS[self.scope.precision]
        if name == "timezone":
            return _Typed(f"'{_zone_label(self.ctx.timezone, self.now, per_second)}'", "string")
        if name == "to_unixtimestamp":
            node = args[0]
            if isinstance(node, ast.Literal) and node.kind == "string":
                return _Typed(self.timestamp_literal(node), "int")
            text = self.expr(node)
            if text.kind != "string":
                raise _error(f"to_unixtimestamp() needs a timestamp string, got a {text.kind} value", node)
            micros = f"unix_micros(to_utc_timestamp(to_timestamp({text.sql}), '{self.ctx.timezone.key}'))"
            return _Typed(self._from_micros(micros), "int", text.aggregate)
        if name == "to_timestamp":
            text = self.expr(args[0])
            if text.kind != "string":
                raise _error(f"to_timestamp() needs a string, got a {text.kind} value", args[0])
            pattern = "".join(piece if literal else spark for piece, spark, literal, _ in self._format(expr, 1))
            local = f"to_timestamp({text.sql}, '{pattern}')"
            micros = f"unix_micros(to_utc_timestamp({local}, '{self.ctx.timezone.key}'))"
            return _Typed(self._from_micros(micros), "ts", text.aggregate)
        ts = self._ts_arg(expr, 0)
        if name == "to_char":
            local = self._local(ts.sql)
            pieces = []
            for piece, spark, literal, case in self._format(expr, 1):
                if literal:
                    pieces.append(quote_string(piece))
                    continue
                formatted = f"date_format({local}, '{spark}')"
                pieces.append(f"{case}({formatted})" if case else formatted)  # case: upper | lower
            return _Typed(f"concat({', '.join(pieces)})", "string", ts.aggregate)
        if name == "timediff":
            other = self._ts_arg(expr, 1)
            unit = self._unit(expr, 2) if len(args) == 3 else 1
            # TDengine truncates toward zero, in the unit asked for (default: the precision)
            return _Typed(
                f"CAST(({ts.sql} - {other.sql}) DIV {unit} AS BIGINT)", "int", ts.aggregate or other.aggregate
            )
        if name == "timetruncate":
            return self._timetruncate(expr, ts)
        local = self._local(ts.sql)
        if name == "weekday":  # 0 = Monday … 6 = Sunday
            return _Typed(f"weekday({local})", "int", ts.aggregate)
        if name == "dayofweek":  # 1 = Sunday … 7 = Saturday
            return _Typed(f"dayofweek({local})", "int", ts.aggregate)
        if name == "weekofyear":  # the ISO week
            return _Typed(f"weekofyear({local})", "int", ts.aggregate)
        # to_iso8601: local wall-clock time, the precision's fraction, and the offset in force
        fraction = {"ms": ".SSS", "us": ".SSSSSS", "ns": ".SSSSSS"}[self.scope.precision]
        minutes = f"CAST((unix_micros({local}) - {self._micros(ts.sql)}) DIV 60000000 AS INT)"
        sign = f"CASE WHEN {minutes} < 0 THEN '-' ELSE '+' END"
        hours = f"lpad(CAST(abs({minutes}) DIV 60 AS STRING), 2, '0')"
        mins = f"lpad(CAST(abs({minutes}) % 60 AS STRING), 2, '0')"
        text = f"concat(date_format({local}, \"yyyy-MM-dd'T'HH:mm:ss{fraction}\"), {sign}, {hours}, ':', {mins})"
        return _Typed(text, "string", ts.aggregate)

    def _format(self, expr: ast.Func, index: int) -> list[tuple[str, str, bool, str]]:
        """A TDengine format string (``yyyy-mm-dd hh24:mi:ss.ms``) as pieces: (text, Spark
        pattern, is literal text, case of month/day names: upper, lower or as Spark writes
        them). Quoted text ("…") and characters that are no token stay literal."""
        node = expr.args[index]
        if not (isinstance(node, ast.Literal) and node.kind == "string"):
            raise _error(f"{expr.name}() takes a constant format string such as 'yyyy-mm-dd hh24:mi:ss'", node)
        text, pieces, i = str(node.value), [], 0
        while i < len(text):
            if text[i] == '"':
                end = text.find('"', i + 1)
                end = len(text) if end < 0 else end
                pieces.append((text[i + 1 : end], "", True, ""))
                i = end + 1
                continue
            for token, spark in _FORMAT_TOKENS:
                written = text[i : i + len(token)]
                if written.upper() == token:
                    case = "upper" if written.isupper() else "lower" if written.islower() else ""
                    pieces.append((written, spark, False, case if token in _NAMED_TOKENS else ""))
                    i += len(token)
                    break
            else:
                pieces.append((text[i], "", True, ""))
                i += 1
        return pieces

    def month_index(self, ts_sql: str) -> str:
        """Months since January 1970 of a timestamp value, on the session time zone's calendar."""
        local = self._local(ts_sql)
        return f"((year({local}) - 1970) * 12 + month({local}) - 1)"

    def month_start(self, month_index_sql: str) -> str:
        """The start of month ``index`` (months since January 1970) at midnight of the session
        time zone, as a timestamp value in the precision."""
        year = f"CAST(1970 + floor({month_index_sql} / 12) AS INT)"
        local = f"make_timestamp({year}, CAST(pmod({month_index_sql}, 12) + 1 AS INT), 1, 0, 0, 0)"
        return self._from_micros(f"unix_micros(to_utc_timestamp({local}, '{self.ctx.timezone.key}'))")

    def shift_months(self, ts_sql: str, months: int | str) -> str:
        """``ts`` moved by whole months on the session time zone's calendar (TDengine's ``n``
        and ``y``): the same day and time of day, the day clamped to the month's length."""
        local = self._local(ts_sql)
        moved = f"timestamp_micros(unix_micros({local}) - unix_micros(CAST(to_date({local}) AS TIMESTAMP)) + "
        moved += f"unix_micros(CAST(add_months(to_date({local}), {months}) AS TIMESTAMP)))"
        return self._from_micros(f"unix_micros(to_utc_timestamp({moved}, '{self.ctx.timezone.key}'))")

    def _from_micros(self, micros_sql: str) -> str:
        """Microseconds since the epoch (Spark's unit) as a timestamp value in the precision."""
        return {"ms": f"{micros_sql} DIV 1000", "us": micros_sql, "ns": f"{micros_sql} * 1000"}[self.scope.precision]

    def _micros(self, ts_sql: str) -> str:
        return {"ms": f"({ts_sql} * 1000)", "us": ts_sql, "ns": f"({ts_sql} DIV 1000)"}[self.scope.precision]

    def _unit(self, expr: ast.Func, index: int) -> int:
        node = expr.args[index]
        if not isinstance(node, ast.DurationLiteral) or node.duration.is_calendar:
            raise _error(f"{expr.name}() takes a time unit such as 1s, 1m, 1h or 1d", node)
        unit = node.duration.in_precision(self.scope.precision)
        if unit <= 0:
            raise _error(f"{expr.name}() time unit {node.duration} is finer than the database precision", node)
        return unit

    def _timetruncate(self, expr: ast.Func, ts: _Typed) -> _Typed:
        """Down to a multiple of the unit; whole days (and longer) at midnight of the session
        time zone unless the third argument is 0 (then UTC midnight), as TDengine does."""
        unit = self._unit(expr, 1)
        local_zone = True
        if len(expr.args) == 3:
            flag = expr.args[2]
            if not (isinstance(flag, ast.Literal) and flag.value in (0, 1)):
                raise _error("timetruncate()'s third argument is 0 (UTC) or 1 (the session time zone)", flag)
            local_zone = flag.value == 1
        per_day = 86400 * 10**9 // PRECISIONS[self.scope.precision]  # PRECISIONS: ns per unit
        if unit % per_day or not local_zone:
            return _Typed(f"({ts.sql} - pmod({ts.sql}, {unit}))", "ts", ts.aggregate)
        zone = self.ctx.timezone.key
        days = unit // per_day
        if days != 1:
            raise _error("timetruncate() to several days is not supported yet; use 1d", expr.args[1])
        midnight = f"unix_micros(to_utc_timestamp(date_trunc('DAY', {self._local(ts.sql)}), '{zone}'))"
        return _Typed(self._from_micros(midnight), "ts", ts.aggregate)

    def _utc_offset(self, value: int) -> int:
        from datetime import datetime

        seconds = value * PRECISIONS[self.scope.precision] // 10**9
        offset = datetime.fromtimestamp(seconds, self.ctx.timezone).utcoffset()
        return int(offset.total_seconds()) * 10**9 // PRECISIONS[self.scope.precision] if offset else 0

    def _aggregate(self, expr: ast.Func) -> _Typed:
        name = expr.name
        self.saw_aggregate = True
        if name == "count":
            if len(expr.args) != 1:
                raise _error("count() takes one argument: count(*) or count(column)", expr)
            if isinstance(expr.args[0], ast.Star):
                # count the rows of the data side: an unmatched trigger (empty window) counts 0
                return _Typed("count(d.__m)" if self.scope.base is not None else "count(1)", "int", True)
            arg = self._plain_arg(expr)
            return _Typed(f"count({'DISTINCT ' if expr.distinct else ''}{arg.sql})", "int", True)
        if name in ("percentile", "apercentile"):
            return self._percentile(expr)
        if name == "leastsquares":
            return self._leastsquares(expr)
        if name == "elapsed":
            return self._elapsed(expr)
        if name == "histogram":
            return self._histogram(expr)
        if len(expr.args) != 1 or isinstance(expr.args[0], ast.Star):
            raise _error(f"{name}() takes one column argument", expr)
        arg = self._plain_arg(expr)
        if name == "irate":
            # the rate per second between the last two rows (a counter reset counts from zero)
            if self.scope.pk is None or arg.kind not in NUMERIC:
                raise _error("irate() needs a numeric column of a table with a timestamp primary key", expr)
            ranked = f"slice({self._points(arg.sql, newest_first=True)}, 1, 2)"  # the last two
            per_second = 10**9 // PRECISIONS[self.scope.precision]
            last, before = f"element_at({ranked}, 1)", f"element_at({ranked}, 2)"
            delta = f"CASE WHEN {last}.v < {before}.v THEN {last}.v ELSE {last}.v - {before}.v END"
            return _Typed(
                f"CASE WHEN size({ranked}) < 2 THEN 0.0 ELSE {delta} * {per_second} / ({last}.t - {before}.t) END",
                "float",
                True,
            )
        if name == "twa":
            return self._twa(expr, arg)
        if name == "hyperloglog":
            return _Typed(f"approx_count_distinct({arg.sql})", "int", True)
        if name == "mode":
            # the most frequent non-NULL value; among equally frequent ones the smallest, so the
            # answer does not depend on how Spark split the rows
            return _Typed(f"mode({arg.sql}, true)", arg.kind, True)
        if name in ("stddev_pop", "var_pop") and arg.kind not in NUMERIC:
            raise _error(f"{name}() needs a numeric argument, got a {arg.kind} column", expr)
        if name in ("stddev_pop", "var_pop"):
            return _Typed(f"{name}({arg.sql})", "float", True)
        spread_of_time = name == "spread" and arg.kind == "ts"
        if name in ("sum", "avg", "spread", "stddev") and arg.kind in ("string", "ts", "bool") and not spread_of_time:
            raise _error(f"{name}() needs a numeric argument, got a {arg.kind} column", expr)
        if name == "sum":
            return _Typed(f"sum({arg.sql})", "float" if arg.kind == "float" else "int", True)
        if name == "avg":
            return _Typed(f"avg({arg.sql})", "float", True)
        if name in ("min", "max"):
            return _Typed(f"{name}({arg.sql})", arg.kind, True)
        if name == "spread":
            return _Typed(f"CAST(max({arg.sql}) - min({arg.sql}) AS DOUBLE)", "float", True)
        if name == "stddev":
            return _Typed(f"stddev_pop({arg.sql})", "float", True)
        pk = self.scope.pk
        if pk is None:
            raise _error(f"{name}() needs a table with a timestamp primary key", expr)
        if name == "first":
            if arg.sql == pk:
                return _Typed(f"min({pk})", "ts", True)
            return _Typed(f"min_by({arg.sql}, CASE WHEN {arg.sql} IS NOT NULL THEN {pk} END)", arg.kind, True)
        if name == "last":
            if arg.sql == pk:
                return _Typed(f"max({pk})", "ts", True)
            return _Typed(f"max_by({arg.sql}, CASE WHEN {arg.sql} IS NOT NULL THEN {pk} END)", arg.kind, True)
        # last_row: the newest row's value, NULL included
        return _Typed(f"max_by({arg.sql}, {pk})", arg.kind, True)

    def _percentile(self, expr: ast.Func) -> _Typed:
        """percentile(col, p): the exact p-th percentile, interpolated; apercentile(col, p[,
        algorithm]): an approximation (Spark's). p is a constant in [0, 100]."""
        name = expr.name
        most = 3 if name == "apercentile" else 2
        if not 2 <= len(expr.args) <= most:
            raise _error(f"{name}() takes a column and a percentile (0 to 100)", expr)
        arg = self._plain_arg(expr)
        if arg.kind not in NUMERIC:
            raise _error(f"{name}() needs a numeric argument, got a {arg.kind} column", expr.args[0])
        p = expr.args[1]
        if not (isinstance(p, ast.Literal) and p.kind in ("int", "float") and 0 <= float(p.value) <= 100):  # type: ignore[arg-type]
            raise _error(f"{name}() takes a constant percentile from 0 to 100", p)
        if len(expr.args) == 3:
            algorithm = expr.args[2]
            if not (isinstance(algorithm, ast.Literal) and str(algorithm.value).lower() in ("default", "t-digest")):
                raise _error("apercentile() algorithm is 'default' or 't-digest'", algorithm)
        fraction = float(p.value) / 100  # type: ignore[arg-type]
        if name == "percentile":
            return _Typed(f"percentile({arg.sql}, {fraction})", "float", True)
        return _Typed(f"CAST(percentile_approx({arg.sql}, {fraction}) AS DOUBLE)", "float", True)

    def _points(self, value_sql: str, *, newest_first: bool) -> str:
        """The group's non-NULL values as (t, v) structs sorted by time: an aggregate over
        the whole group, for functions that need the values in order (irate, leastsquares)."""
        pair = f"struct({self.scope.pk} AS t, CAST({value_sql} AS DOUBLE) AS v)"
        collected = f"collect_list(CASE WHEN {value_sql} IS NOT NULL THEN {pair} END)"
        return f"sort_array({collected}, {'false' if newest_first else 'true'})"

    def _leastsquares(self, expr: ast.Func) -> _Typed:
        """leastsquares(expr, start, step): the line fitting the non-NULL values in time order
        against x = start, start + step, …, as TDengine prints it: ``{slop:a, intercept:b}``."""
        if len(expr.args) != 3:
            raise _error("leastsquares() takes a column, a start value and a step", expr)
        arg = self._plain_arg(expr)
        if arg.kind not in NUMERIC or self.scope.pk is None:
            raise _error("leastsquares() needs a numeric column of a table with a timestamp primary key", expr)
        start, step = (self.expr(a) for a in expr.args[1:])
        if not (start.kind in NUMERIC and step.kind in NUMERIC) or start.aggregate or step.aggregate:
            raise _error("leastsquares()'s start and step are numbers", expr.args[1])
        points = self._points(arg.sql, newest_first=False)
        xs = f"transform({points}, (p, i) -> CAST({start.sql} AS DOUBLE) + CAST({step.sql} AS DOUBLE) * i)"
        n = f"size({points})"
        sx = f"aggregate({xs}, 0D, (a, x) -> a + x)"
        sy = f"aggregate({points}, 0D, (a, p) -> a + p.v)"
        sxy = f"aggregate(zip_with({points}, {xs}, (p, x) -> p.v * x), 0D, (a, z) -> a + z)"
        sxx = f"aggregate({xs}, 0D, (a, x) -> a + x * x)"
        slope = f"(({n} * {sxy} - {sx} * {sy}) / ({n} * {sxx} - {sx} * {sx}))"
        intercept = f"(({sy} - {slope} * {sx}) / {n})"
        text = f"format_string('{{slop:%f, intercept:%f}}', {slope}, {intercept})"
        self.saw_aggregate = True
        return _Typed(f"CASE WHEN {n} < 2 THEN NULL ELSE {text} END", "string", True)

    def _twa(self, expr: ast.Func, arg: _Typed) -> _Typed:
        """The time-weighted average of the non-NULL values: the trapezoids between consecutive
        values summed, over the time from the first to the last (one value: that value)."""
        if self.scope.pk is None or arg.kind not in NUMERIC:
            raise _error("twa() needs a numeric column of a table with a timestamp primary key", expr)
        points = self._points(arg.sql, newest_first=False)
        n = f"size({points})"
        first, last = f"element_at({points}, 1)", f"element_at({points}, -1)"
        pairs = f"zip_with(slice({points}, 1, greatest({n} - 1, 1)), slice({points}, 2, greatest({n} - 1, 1)), "
        pairs += "(a, b) -> (a.v + b.v) / 2 * (b.t - a.t))"
        area = f"aggregate({pairs}, 0D, (s, x) -> s + x)"
        return _Typed(
            f"CASE WHEN {n} = 0 THEN NULL WHEN {last}.t = {first}.t THEN {first}.v "
            f"ELSE {area} / ({last}.t - {first}.t) END",
            "float",
            True,
        )

    def _histogram(self, expr: ast.Func) -> _Typed:
        """histogram(expr, bin_type, bins, normalized): one output row per bin (lower, upper],
        as TDengine prints it; the bins from a JSON list ('user_input') or a JSON object
        ('linear_bin': start, width, count, infinity; 'log_bin': start, factor, count,
        infinity). A select item of its own: it turns a group into several rows."""
        if len(expr.args) != 4:
            raise _error(
                "histogram() takes a column, 'user_input', 'linear_bin' or 'log_bin', the bins and 0 or 1", expr
            )
        arg = self._plain_arg(expr)
        if arg.kind not in NUMERIC:
            raise _error(f"histogram() needs a numeric column, got a {arg.kind} value", expr.args[0])
        kind_node, bins_node, normalized = expr.args[1:]
        for node in (kind_node, bins_node):
            if not (isinstance(node, ast.Literal) and node.kind == "string"):
                raise _error("histogram()'s bin type and bins are string constants", node)
        if not (isinstance(normalized, ast.Literal) and normalized.value in (0, 1)):
            raise _error("histogram()'s last argument is 0 (counts) or 1 (fractions)", normalized)
        edges = _histogram_edges(str(kind_node.value).lower(), str(bins_node.value), bins_node)  # type: ignore[union-attr]
        texts = []
        for low, high in itertools.pairwise(edges):
            inside = " AND ".join(
                [*([f"{arg.sql} > {low!r}"] if low != -math.inf else []),
                 *([f"{arg.sql} <= {high!r}"] if high != math.inf else [])]
            ) or "TRUE"  # fmt: skip
            count = f"count(CASE WHEN {arg.sql} IS NOT NULL AND {inside} THEN 1 END)"
            template = '{"lower_bin":%g, "upper_bin":%g, "count":' % (low, high)  # noqa: UP031 (C's %g)
            if normalized.value == 1:
                share = f"coalesce(CAST({count} AS DOUBLE) / nullif(count({arg.sql}), 0), 0D)"
                texts.append(f"format_string({quote_string(template + '%f}')}, {share})")
            else:
                texts.append(f"format_string({quote_string(template + '%d}')}, {count})")
        return _Typed(f"explode(array({', '.join(texts)}))", "string", True)

    def _elapsed(self, expr: ast.Func) -> _Typed:
        """elapsed(ts[, unit]): the time between the first and the last row, in ``unit``
        (default: the database precision), as DOUBLE."""
        if not 1 <= len(expr.args) <= 2:
            raise _error("elapsed() takes the timestamp column and an optional time unit", expr)
        arg = self._plain_arg(expr)
        if arg.kind != "ts":
            raise _error(f"elapsed() needs the timestamp column, got a {arg.kind} value", expr.args[0])
        unit = 1
        if len(expr.args) == 2:
            given = expr.args[1]
            if not isinstance(given, ast.DurationLiteral):
                raise _error("elapsed() takes a time unit such as 1s or 1m as its second argument", given)
            unit = given.duration.in_precision(self.scope.precision)
            if unit <= 0:
                raise _error("elapsed() time unit is finer than the database precision", given)
        return _Typed(f"CAST(max({arg.sql}) - min({arg.sql}) AS DOUBLE) / {unit}", "float", True)

    def _plain_arg(self, expr: ast.Func) -> _Typed:
        arg = self.expr(expr.args[0])
        if arg.aggregate:
            raise _error(f"{expr.name}() cannot contain another aggregate", expr)
        return arg


def _histogram_edges(kind: str, text: str, node: ast.Expr) -> list[float]:
    """The bin edges of TDengine's HISTOGRAM: at most 1000 bins, edges strictly increasing."""
    import json

    try:
        spec = json.loads(text)
    except ValueError:
        raise _error(f"histogram() bins {text!r} are not JSON", node) from None
    if kind == "user_input":
        if not (isinstance(spec, list) and len(spec) >= 2 and all(isinstance(v, int | float) for v in spec)):
            raise _error("histogram() 'user_input' bins are a JSON list of two or more numbers, e.g. '[1, 3, 5]'", node)
        edges = [float(v) for v in spec]
    elif kind in ("linear_bin", "log_bin"):
        step = "width" if kind == "linear_bin" else "factor"
        if not (isinstance(spec, dict) and all(isinstance(spec.get(k), int | float) for k in ("start", step, "count"))):
            raise _error(f"histogram() '{kind}' bins are a JSON object with start, {step}, count and infinity", node)
        count = int(spec["count"])
        if count < 1 or spec[step] == 0 or (kind == "log_bin" and (spec[step] <= 0 or spec[step] == 1)):
            raise _error(f"histogram() '{kind}' needs count >= 1 and a usable {step}", node)
        if kind == "linear_bin":
            edges = sorted(float(spec["start"] + spec["width"] * i) for i in range(count + 1))
        else:
            edges = sorted(float(spec["start"] * spec["factor"] ** i) for i in range(count + 1))
        if spec.get("infinity"):
            edges = [-math.inf, *edges, math.inf]
    else:
        raise _error(f"histogram() bin type is 'user_input', 'linear_bin' or 'log_bin', not {kind!r}", node)
    if any(b <= a for a, b in itertools.pairwise(edges)) or len(edges) > 1001:
        raise _error("histogram() bin edges must increase strictly, at most 1000 bins", node)
    return edges


_SPARK_CAST = {
    "BOOL": "BOOLEAN",
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INT": "INT",
    "INTEGER": "INT",
    "BIGINT": "BIGINT",
    "TINYINT UNSIGNED": "SMALLINT",
    "SMALLINT UNSIGNED": "INT",
    "INT UNSIGNED": "BIGINT",
    "BIGINT UNSIGNED": "BIGINT",
    "FLOAT": "FLOAT",
    "DOUBLE": "DOUBLE",
    "VARCHAR": "STRING",
    "BINARY": "STRING",
    "NCHAR": "STRING",
    "DECIMAL": "DECIMAL",
}

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

# trigger placeholders → (column of the triggers view, kind)
_TRIGGER_NAMES: dict[str, tuple[str, str]] = {
    "_twstart": ("_twstart", "ts"),
    "_twend": ("_twend", "ts"),
    "_twduration": ("_twduration", "int"),
    "_twrownum": ("_twrownum", "int"),
    "_tgrpid": ("_tgrpid", "int"),
    "_tlocaltime": ("_tlocaltime", "int"),
    "_tprev_localtime": ("_tprev_localtime", "int"),
    "_tnext_localtime": ("_tnext_localtime", "int"),
    "_tcurrent_ts": ("_tcurrent_ts", "ts"),
    "_tprev_ts": ("_tprev_ts", "ts"),
    "_tnext_ts": ("_tnext_ts", "ts"),
}


def _zone_label(zone: ZoneInfo, now: int, per_second: int) -> str:
    """TDengine's TIMEZONE(): ``Asia/Shanghai (CST, +0800)``, as in force at ``now``."""
    from datetime import datetime

    moment = datetime.fromtimestamp(now / per_second, zone)
    return f"{zone.key} ({moment.tzname()}, {moment.strftime('%z')})"


# TDengine's TO_CHAR/TO_TIMESTAMP format tokens → Spark datetime patterns, longest first
_FORMAT_TOKENS: tuple[tuple[str, str], ...] = (
    ("MONTH", "MMMM"), ("YYYY", "yyyy"), ("HH24", "HH"), ("HH12", "hh"), ("DAY", "EEEE"), ("MON", "MMM"),
    ("DDD", "DDD"), ("A.M.", "a"), ("P.M.", "a"), ("YY", "yy"), ("MM", "MM"), ("DD", "dd"), ("DY", "EEE"),
    ("HH", "hh"), ("MI", "mm"), ("SS", "ss"), ("MS", "SSS"), ("US", "SSSSSS"), ("AM", "a"), ("PM", "a"),
)  # fmt: skip
# name tokens whose case in the format is the case of the name (MONTH → NOVEMBER, Month → November)
_NAMED_TOKENS = frozenset(["MONTH", "MON", "DAY", "DY", "AM", "PM", "A.M.", "P.M."])
