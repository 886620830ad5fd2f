"""CREATE STREAM rules that need the catalog.

Owns what TDengine checks against table schemas when a stream is created: the trigger
table exists and suits the trigger (SESSION on the primary key, STATE_WINDOW on an integer,
boolean or string column, STATE/EVENT/COUNT on a super table grouped by tbname), grouping
columns are tbname or tags, every column the trigger and the query name exists, the first
result column is a timestamp, and an existing output table matches (kind, column count and
types). The catalog-free rules are in ``sql/validate.py``. Reads the catalog, writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo

from ..errors import StreamValidationError, TDStreamError, UnknownDatabaseError
from ..sql import ast
from ..sql.validate import TRIGGER_PLACEHOLDERS
from ..sql.walk import children as _children
from ..sql.walk import nested_selects, select_expressions, walk
from .catalog import TableInfo
from .types import INTEGER_TYPES, TEXT_TYPES
from .warehouse import Warehouse

_PSEUDO_COLUMNS = frozenset(
    {"tbname", "_c0", "_rowts", "_wstart", "_wend", "_wduration", "_qstart", "_qend", "_qduration"}
    | {"_irowts", "_isfilled", "_irowts_origin"}  # INTERP's
)
_TIMESTAMP_NAMES = frozenset({"_tlocaltime", "_tprev_localtime", "_tnext_localtime", "_irowts_origin"}) | frozenset(
    {"_c0", "_rowts", "_wstart", "_wend", "_twstart", "_twend", "_tcurrent_ts", "_tprev_ts", "_tnext_ts", "_irowts"}
)
_BIGINT_NAMES = frozenset({"_wduration", "_twduration", "_twrownum", "_tgrpid"})
_STATE_TYPES = ("BOOL", *INTEGER_TYPES, *TEXT_TYPES)

TIMESTAMP = ast.DataType("TIMESTAMP")
BIGINT = ast.DataType("BIGINT")
DOUBLE = ast.DataType("DOUBLE")


def _fail(
    message: str, node: ast.Expr | ast.QualifiedName | None = None, kind: type[TDStreamError] = StreamValidationError
) -> TDStreamError:
    pos = getattr(node, "pos", None)
    if pos is not None and pos.line:
        return kind(message, line=pos.line, column=pos.column)
    return kind(message)


@dataclass(frozen=True)
class _Columns:
    types: dict[str, ast.DataType]
    tags: frozenset[str]
    primary_key: str | None
    label: str


def columns_for_types(types: dict[str, ast.DataType]) -> _Columns:
    """Column types of a query's source, for ``infer_result_type``."""
    return _Columns(dict(types), frozenset(), None, "query source")


def _columns_of(info: TableInfo) -> _Columns:
    types = {c.name: c.type for c in (*info.columns, *info.tags)}
    return _Columns(types, frozenset(t.name for t in info.tags), info.primary_key, f"{info.db}.{info.name}")


def check_stream_against_catalog(stmt: ast.CreateStream, db: str, warehouse: Warehouse, tz: ZoneInfo) -> None:
    del tz  # time literals were checked by the catalog-free rules

    def lookup(name: ast.QualifiedName) -> TableInfo:
        table_db = (name.db or db).lower()
        if warehouse.catalog.get_database(table_db) is None:
            raise _fail(f"database {table_db} does not exist", name, UnknownDatabaseError)
        info = warehouse.find_table(table_db, name.name.lower())
        if info is None:
            raise _fail(f"table {table_db}.{name.name.lower()} does not exist", name)
        return info

    trigger_info = lookup(stmt.trigger_table) if stmt.trigger_table is not None else None
    trigger_cols = _columns_of(trigger_info) if trigger_info is not None else None
    if trigger_info is not None and trigger_cols is not None:
        _check_trigger(stmt, trigger_info, trigger_cols)
    if stmt.query is not None:
        outputs = _check_query(stmt, stmt.query, trigger_cols, lookup)
        _check_output_table(stmt, db, outputs, warehouse, lookup)


def _check_trigger(stmt: ast.CreateStream, info: TableInfo, cols: _Columns) -> None:
    grouped_by_tbname = False
    for expr in stmt.partition_by:
        if not isinstance(expr, ast.Column):  # a legacy PARTITION BY expression over the columns
            assert stmt.option(ast.PARTITION_BY_VALUES) is not None  # the catalog-free rules allow no other
            _check_names(expr, cols, "PARTITION BY")
            continue
        name = expr.name.lower()
        if name == "tbname":
            grouped_by_tbname = True
        elif stmt.option(ast.PARTITION_BY_VALUES) is not None and name in cols.types:
            continue  # the legacy streams partition by ordinary columns too
        elif name not in cols.tags:
            raise _fail(
                f"PARTITION BY {expr.name}: a stream groups by tbname or a tag of {cols.label} "
                f"(tags: {', '.join(sorted(cols.tags)) or 'none'})",
                expr,
            )
    trigger = stmt.trigger
    by_table_only = isinstance(trigger, ast.StateTrigger | ast.EventTrigger | ast.CountTrigger)
    if info.kind == "super" and by_table_only and not grouped_by_tbname:
        raise _fail(f"a {trigger.kind} trigger on the super table {cols.label} needs PARTITION BY tbname", stmt.name)
    if isinstance(trigger, ast.SessionTrigger) and trigger.column.name.lower() != cols.primary_key:
        raise _fail(
            f"SESSION needs the primary key column {cols.primary_key} of {cols.label}, not {trigger.column.name}",
            trigger.column,
        )
    if isinstance(trigger, ast.StateTrigger):
        _check_names(trigger.expr, cols, "STATE_WINDOW")
        if isinstance(trigger.expr, ast.Column):
            dtype = cols.types.get(trigger.expr.name.lower())
            if dtype is not None and dtype.name not in _STATE_TYPES:
                raise _fail(
                    f"STATE_WINDOW column {trigger.expr.name} is {dtype}; it must be an integer, BOOL or string column",
                    trigger.expr,
                )
    if isinstance(trigger, ast.EventTrigger):
        for cond in (*trigger.start, *trigger.end):
            _check_names(cond, cols, "EVENT_WINDOW")
    if isinstance(trigger, ast.CountTrigger):
        for col in trigger.columns:
            _check_names(col, cols, "COUNT_WINDOW")
    pre_filter = stmt.option("PRE_FILTER")
    if pre_filter is not None and pre_filter.expr is not None:
        _check_names(pre_filter.expr, cols, "PRE_FILTER")
    group_columns = {e.name.lower() for e in stmt.partition_by if isinstance(e, ast.Column)}
    if stmt.output_subtable is not None:
        _check_string_expr(stmt.output_subtable, cols, "OUTPUT_SUBTABLE")
    for tag in stmt.tags:
        produced = _check_string_expr(tag.expr, cols, f"tag {tag.name}")
        if produced == "string" and tag.type.name not in TEXT_TYPES:
            raise _fail(f"tag {tag.name} is {tag.type} but its expression gives a string", tag.expr)
    for expr in (stmt.output_subtable, *(t.expr for t in stmt.tags)):
        if expr is None:
            continue
        for node in walk(expr):
            if isinstance(node, ast.Column):
                name = node.name.lower()
                if name not in ("tbname", "_tgrpid") and name not in group_columns:
                    raise _fail(
                        f"{node.name} is not a PARTITION BY column; OUTPUT_SUBTABLE and TAGS use group columns", node
                    )


_STRING_FUNCS = frozenset({"concat", "concat_ws", "upper", "lower", "substr", "replace", "ltrim", "rtrim", "trim"})


def _check_string_expr(expr: ast.Expr, cols: _Columns, where: str) -> str | None:
    """Check string functions get string arguments; return 'string', 'number' or None
    (unknown) for the expression's own kind."""
    if isinstance(expr, ast.Literal):
        return {"string": "string", "int": "number", "float": "number"}.get(expr.kind)
    if isinstance(expr, ast.Column):
        if expr.name.lower() == "tbname":
            return "string"
        dtype = cols.types.get(expr.name.lower())
        if dtype is None:
            return None
        return "string" if dtype.name in TEXT_TYPES else "number"
    if isinstance(expr, ast.Func) and expr.name in _STRING_FUNCS:
        text_args = expr.args[:1] if expr.name in ("substr",) else expr.args
        if expr.name == "replace":
            text_args = expr.args
        for arg in text_args:
            if _check_string_expr(arg, cols, where) == "number":
                raise _fail(f"{where}: {expr.name}() needs string arguments, got a number", arg)
        return "string"
    if isinstance(expr, ast.Binary) and expr.op in ("+", "-", "*", "/", "%"):
        _check_string_expr(expr.left, cols, where)
        _check_string_expr(expr.right, cols, where)
        return "number"
    for child in _children(expr):
        _check_string_expr(child, cols, where)
    return None


def _check_names(expr: ast.Expr, cols: _Columns, where: str) -> None:
    for node in walk(expr):
        if isinstance(node, ast.Column):
            name = node.name.lower()
            if name not in cols.types and name not in ("tbname", "_c0", "_rowts"):
                raise _fail(f"{where}: {cols.label} has no column {node.name} (columns: {', '.join(cols.types)})", node)


def _check_query(
    stmt: ast.CreateStream, query: ast.Select, trigger_cols: _Columns | None, lookup: object
) -> list[ast.DataType | None]:
    """Check column names per SELECT level; return the top level's output types (None: unknown)."""
    outputs: list[ast.DataType | None] = []
    for level, select in enumerate(nested_selects(query)):
        cols = _source_columns(select.source, trigger_cols, lookup)
        aliases = {item.alias.lower() for item in select.items if item.alias}
        if cols is not None:
            for expr in select_expressions(select):
                for node in walk(expr):
                    if not isinstance(node, ast.Column):
                        continue
                    name = node.name.lower()
                    if name in cols.types or name in _PSEUDO_COLUMNS or name in TRIGGER_PLACEHOLDERS or name in aliases:
                        continue
                    raise _fail(
                        f"the query reads {cols.label}, which has no column {node.name} "
                        f"(columns: {', '.join(cols.types)})",
                        node,
                    )
        if level == 0:
            outputs = [infer_result_type(item.expr, cols) for item in select.items]
    first = outputs[0] if outputs else None
    if first is not None and first.name != "TIMESTAMP":
        raise _fail(
            f"the first column of the query must be a timestamp (the output primary key), found {first}",
            query.items[0].expr,
        )
    del stmt
    return outputs


def _source_columns(source: ast.FromSource | None, trigger_cols: _Columns | None, lookup: object) -> _Columns | None:
    if isinstance(source, ast.PlaceholderSource):
        return trigger_cols
    if isinstance(source, ast.TableSource):
        return _columns_of(lookup(source.table))  # type: ignore[operator]
    if isinstance(source, ast.Join):
        left = _source_columns(source.left, trigger_cols, lookup)
        right = _source_columns(source.right, trigger_cols, lookup)
        if left is None or right is None:
            return None
        return _Columns(
            {**right.types, **left.types}, left.tags | right.tags, left.primary_key, f"{left.label}, {right.label}"
        )
    return None  # subquery or no FROM: names are checked at their own level


def infer_result_type(expr: ast.Expr, cols: _Columns | None) -> ast.DataType | None:
    """The TDengine type of a result column when it can be told from the statement."""
    if isinstance(expr, ast.Column):
        name = expr.name.lower()
        if name in _TIMESTAMP_NAMES:
            return TIMESTAMP
        if name in _BIGINT_NAMES:
            return BIGINT
        if name == "tbname":
            return ast.DataType("VARCHAR", 192)
        return cols.types.get(name) if cols is not None else None
    if isinstance(expr, ast.Cast):
        return expr.type
    if isinstance(expr, ast.Placeholder):
        return ast.DataType("VARCHAR", 192) if expr.name == "tbname" else None
    if isinstance(expr, ast.Func):
        name = expr.name
        if name in ("now", "today", "to_timestamp"):
            return TIMESTAMP
        if name in ("count", "hyperloglog"):
            return BIGINT
        if name in ("avg", "spread", "stddev", "stddev_pop", "var_pop", "twa", "irate", "apercentile", "percentile"):
            return DOUBLE
        arg = infer_result_type(expr.args[0], cols) if expr.args and not isinstance(expr.args[0], ast.Star) else None
        if name == "sum" and arg is not None:
            if arg.name in ("FLOAT", "DOUBLE"):
                return DOUBLE
            if arg.name == "DECIMAL":  # TDengine widens a DECIMAL's sum to 38 digits
                return ast.DataType("DECIMAL", 38, arg.scale)
            return ast.DataType("BIGINT UNSIGNED") if "UNSIGNED" in arg.name else BIGINT
        if name in ("min", "max", "first", "last", "last_row", "mode", "top", "bottom", "sample", "tail", "unique"):
            return arg
        return None
    if isinstance(expr, ast.Binary) and expr.op in ("+", "-"):
        left, right = infer_result_type(expr.left, cols), infer_result_type(expr.right, cols)
        if TIMESTAMP in (left, right) and not (left == right == TIMESTAMP):
            return TIMESTAMP
        return None
    if isinstance(expr, ast.Literal):
        return {"int": BIGINT, "float": DOUBLE, "bool": ast.DataType("BOOL")}.get(expr.kind)
    return None


def _check_output_table(
    stmt: ast.CreateStream, db: str, outputs: list[ast.DataType | None], warehouse: Warehouse, lookup: object
) -> None:
    if stmt.into is None:
        return
    into_db = (stmt.into.db or db).lower()
    into_name = stmt.into.name.lower()
    for source in _table_sources(stmt.query):
        if (source.db or db).lower() == into_db and source.name.lower() == into_name:
            raise _fail("the output table cannot be a table the query reads", stmt.into)
    if warehouse.catalog.get_database(into_db) is None:
        raise UnknownDatabaseError(f"database {into_db} of the output table does not exist")
    existing = warehouse.find_table(into_db, into_name)
    if existing is None:
        return
    label = f"{into_db}.{into_name}"
    if existing.kind == "child":
        raise _fail(f"the output table {label} is a child table; name a super table or a new table", stmt.into)
    legacy = stmt.option(ast.LEGACY_OUTPUT) is not None
    if (stmt.partition_by or legacy) and existing.kind != "super":
        raise _fail(f"a grouped or legacy stream writes a super table, but {label} is a normal table", stmt.into)
    if not stmt.partition_by and not legacy and existing.kind != "normal":
        raise _fail(f"a stream without PARTITION BY writes a normal table, but {label} is a super table", stmt.into)
    if not stmt.columns and not legacy:  # a legacy stream maps the query's columns by position
        raise _fail(
            f"the output table {label} exists: name its columns after INTO "
            f"({', '.join(c.name for c in existing.columns)})",
            stmt.into,
        )
    if legacy:
        _check_legacy_mapping(stmt, existing, label, outputs)
        return
    if stmt.columns and [c.lower() for c in stmt.columns] != [c.name for c in existing.columns][: len(stmt.columns)]:
        raise _fail(
            f"the output column list does not match the existing table {label} "
            f"(columns: {', '.join(c.name for c in existing.columns)})",
            stmt.into,
        )
    if existing.kind == "super":
        if stmt.tags:
            names = [t.name.lower() for t in stmt.tags]
            if names != [t.name for t in existing.tags]:
                raise _fail(
                    f"TAGS must match the tags of the existing table {label} "
                    f"({', '.join(t.name for t in existing.tags)})",
                    stmt.into,
                )
        elif len(stmt.partition_by) != len(existing.tags):
            raise _fail(
                f"without TAGS the output tags are the {len(stmt.partition_by)} PARTITION BY column(s), but the "
                f"existing table {label} has {len(existing.tags)} tag(s)",
                stmt.into,
            )
    if len(existing.columns) != len(outputs):
        raise _fail(
            f"the existing output table {label} has {len(existing.columns)} columns, the query returns {len(outputs)}",
            stmt.into,
        )
    for col, inferred in zip(existing.columns, outputs, strict=True):
        if inferred is not None and inferred.name != col.type.name:
            raise _fail(
                f"the existing output table {label} does not match: column {col.name} is {col.type}, "
                f"the query gives {inferred}",
                stmt.into,
            )
    del lookup


def _check_legacy_mapping(
    stmt: ast.CreateStream, existing: TableInfo, label: str, outputs: list[ast.DataType | None]
) -> None:
    """A legacy stream into an existing super table (TDengine's "写入已存在的超级表"): a column
    list maps the query's columns to some of the table's, in any order (the others stay NULL);
    without one the counts match and columns map by position. TAGS names some of its tags,
    else the PARTITION BY columns are its tags by position. Types are converted on write."""
    names = [c.name for c in existing.columns]
    if stmt.columns:
        listed = [c.lower() for c in stmt.columns]
        if len(listed) != len(outputs):
            raise _fail(f"the column list names {len(listed)} columns, the query returns {len(outputs)}", stmt.into)
        # the first query column (the window start, put first by the engine if not written)
        # writes the primary key: its list entry is the key or the name the engine gave it
        if listed[0] != names[0] and listed[0] in names:
            raise _fail(
                f"the first output column writes the primary key {names[0]} of {label}, not {listed[0]}", stmt.into
            )
        unknown = [n for n in listed[1:] if n not in names[1:]]  # (the parser refuses a name twice)
        if unknown:
            raise _fail(
                f"the column list names {', '.join(unknown)}: not a column of {label} ({', '.join(names)})", stmt.into
            )
        targets = [existing.columns[0], *(existing.columns[names.index(n)] for n in listed[1:])]
    elif len(names) != len(outputs):
        raise _fail(
            f"the existing output table {label} has {len(names)} columns, the query returns {len(outputs)}: "
            "name the table's columns the query writes after INTO",
            stmt.into,
        )
    else:
        targets = list(existing.columns)
    for col, inferred in zip(targets, outputs, strict=True):
        if inferred is not None and _family(inferred) != _family(col.type):
            raise _fail(
                f"the existing output table {label} does not match: column {col.name} is {col.type}, "
                f"the query gives {inferred}, which does not convert to it",
                stmt.into,
            )
    if existing.kind != "super":
        return
    tags = [t.name for t in existing.tags]
    if stmt.tags:
        given = [t.name.lower() for t in stmt.tags]
        unknown = [n for n in given if n not in tags]
        if unknown:
            raise _fail(
                f"TAGS names {', '.join(unknown)}: the tags of the existing table {label} are {', '.join(tags)}",
                stmt.into,
            )
    elif tags != ["group_id"] and stmt.partition_by and len(stmt.partition_by) != len(tags):
        # (a group_id tag: written by a legacy stream before; no PARTITION BY: one group, tags NULL)
        raise _fail(
            f"without TAGS the output tags are the {len(stmt.partition_by)} PARTITION BY column(s), but the "
            f"existing table {label} has {len(tags)} tag(s): name the tags after TAGS",
            stmt.into,
        )


def _family(dtype: ast.DataType) -> str:
    """What a legacy stream's write converts between: numbers, booleans and timestamps into
    each other, strings into strings; the other types only into themselves."""
    if dtype.name in TEXT_TYPES:
        return "text"
    return dtype.name if dtype.name in ("VARBINARY", "GEOMETRY", "JSON", "DECIMAL") else "number"


def _table_sources(query: ast.Select | None) -> list[ast.QualifiedName]:
    if query is None:
        return []
    from ..sql.walk import sources

    return [s.table for s in sources(query) if isinstance(s, ast.TableSource)]
