"""The output table of a stream: its shape, its child tables, and writing results.

Owns creating the output super (or normal) table on the first result — columns named by the
column list or by the query (``avg(cint)``), tags from TAGS or from the group columns
(``tag_tbname VARCHAR(270)`` for tbname, as TDengine does) — naming each group's child table
(OUTPUT_SUBTABLE or a stable ``t_<md5>``), and writing a batch of results with upsert on the
primary key in one Delta commit. A NULL primary key drops the row, as in TDengine.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import QueryError
from ..sql import ast
from ..sql.translate import OutputColumn
from ..storage.catalog import TableInfo
from ..storage.registry import StreamDefinition
from ..storage.streamcheck import columns_for_types, infer_result_type
from ..storage.types import INTEGER_TYPES, TEXT_TYPES, arrow_schema, arrow_type, coerce, coerce_array
from ..storage.warehouse import Warehouse, WriteBatch

TBNAME_TAG = ast.ColumnDef("tag_tbname", ast.DataType("VARCHAR", 270))
# the one tag of a legacy stream's output without TAGS: its group's id (0 without PARTITION BY)
GROUP_ID_TAG = ast.ColumnDef("group_id", ast.DataType("BIGINT UNSIGNED"))
# a legacy SUBTABLE name already ends in ``_<groupId>`` (TDengine: 15 digits or more)
_GROUP_ID_SUFFIX = re.compile(r"_[0-9]{15,}$")


@dataclass(frozen=True)
class Group:
    """A trigger group as the output sees it."""

    values: tuple[Any, ...]
    group_id: int


def _arrow_type_name(arrow: pa.DataType, is_timestamp: bool) -> ast.DataType:
    if is_timestamp:
        return ast.DataType("TIMESTAMP")
    for check, name in (
        (pa.types.is_int64, "BIGINT"),
        (pa.types.is_int32, "INT"),
        (pa.types.is_int16, "SMALLINT"),
        (pa.types.is_int8, "TINYINT"),
        (pa.types.is_float64, "DOUBLE"),
        (pa.types.is_float32, "FLOAT"),
        (pa.types.is_boolean, "BOOL"),
    ):
        if check(arrow):
            return ast.DataType(name)
    if pa.types.is_decimal(arrow):
        return ast.DataType("DECIMAL", arrow.precision, arrow.scale)
    if pa.types.is_binary(arrow):
        return ast.DataType("VARBINARY", 256)
    return ast.DataType("VARCHAR", 256)


def output_columns(
    stream: StreamDefinition, columns: Sequence[OutputColumn], arrow: pa.Table, source_types: dict[str, ast.DataType]
) -> tuple[ast.ColumnDef, ...]:
    """Column definitions of a new output table: names from the column list or the query,
    types as TDengine derives them where the statement tells, else from the computed data."""
    assert stream.stmt.query is not None
    names = list(stream.stmt.columns) or [c.name for c in columns]
    cols = columns_for_types(source_types)
    defs = []
    for i, (name, column) in enumerate(zip(names, columns, strict=True)):
        inferred = (
            infer_result_type(stream.stmt.query.items[i].expr, cols) if i < len(stream.stmt.query.items) else None
        )
        dtype = inferred or _arrow_type_name(arrow.schema.field(i).type, column.is_timestamp)
        if i == 0 and dtype.name != "TIMESTAMP":
            raise QueryError(f"the first result column {name} must be a timestamp, got {dtype}")
        defs.append(ast.ColumnDef(name.lower(), dtype))
    return tuple(defs)


_KIND_TYPES = {
    "ts": ast.DataType("TIMESTAMP"),
    "int": ast.DataType("BIGINT"),
    "float": ast.DataType("DOUBLE"),
    "bool": ast.DataType("BOOL"),
}


def create_declared_output(
    warehouse: Warehouse,
    stream: StreamDefinition,
    columns: Sequence[OutputColumn],
    source_types: dict[str, ast.DataType],
) -> None:
    """Create the output table before any result, from the statement alone (2.x creates a
    continuous query's result table at once): types as TDengine derives them, else from the
    translator's kind of each column (strings as VARCHAR(256))."""
    db, name = stream.output  # type: ignore[misc]
    assert stream.stmt.query is not None
    cols = columns_for_types(source_types)
    defs = []
    names = [c.lower() for c in stream.stmt.columns] or [c.name for c in columns]
    for item, column, column_name in zip(stream.stmt.query.items, columns, names, strict=True):
        dtype = (
            infer_result_type(item.expr, cols)
            or _group_value_type(stream, item.expr)
            or _KIND_TYPES.get(column.kind, ast.DataType("VARCHAR", 256))
        )
        defs.append(ast.ColumnDef(column_name, dtype))
    tags = _tags_of_new_output(stream)
    warehouse.create_table(db, name, tuple(defs), tags, is_super=bool(tags), if_not_exists=True)


def _group_value_type(stream: StreamDefinition, expr: ast.Expr) -> ast.DataType | None:
    """``%%n``: the type of the n-th PARTITION BY column (a tag or, legacy, a column)."""
    table = stream.trigger_table
    if not isinstance(expr, ast.Placeholder) or not expr.name.isdigit() or table is None:
        return None
    index = int(expr.name) - 1
    if index >= len(stream.group_columns):
        return None
    name = stream.group_columns[index]
    if name == "tbname":
        return TBNAME_TAG.type
    if name in stream.group_exprs:
        return stream.group_expr_type(name)
    return next((c.type for c in (*table.columns, *table.tags) if c.name == name), None)


def _tags_of_new_output(stream: StreamDefinition) -> tuple[ast.ColumnDef, ...]:
    """A grouped stream writes a super table (a legacy stream always does), else a normal one."""
    if stream.stmt.partition_by or stream.stmt.option(ast.LEGACY_OUTPUT) is not None:
        return output_tags(stream)
    return ()


def output_tags(stream: StreamDefinition) -> tuple[ast.ColumnDef, ...]:
    if stream.stmt.tags:
        return tuple(ast.ColumnDef(t.name.lower(), t.type, comment=t.comment) for t in stream.stmt.tags)
    if stream.stmt.option(ast.LEGACY_OUTPUT) is not None:
        return (GROUP_ID_TAG,)
    table = stream.trigger_table
    tags = []
    for column in stream.group_columns:
        if column == "tbname":
            tags.append(TBNAME_TAG)
        else:
            assert table is not None
            tags.append(next(t for t in table.tags if t.name == column))
    return tuple(tags)


def evaluate_group_expr(expr: ast.Expr, stream: StreamDefinition, group: Group) -> Any:
    """OUTPUT_SUBTABLE and TAGS expressions: over the group columns, ``_tgrpid`` and constants."""
    if isinstance(expr, ast.Literal):
        return expr.value
    if isinstance(expr, ast.Column):
        name = expr.name.lower()
        if name == "_tgrpid":
            return group.group_id
        if name in stream.group_columns:
            return group.values[stream.group_columns.index(name)]
        raise QueryError(f"{expr.name} is not a PARTITION BY column of stream {stream.key}")
    if isinstance(expr, ast.Placeholder):
        if expr.name == "tbname" and "tbname" in stream.group_columns:
            return group.values[stream.group_columns.index("tbname")]
        if expr.name.isdigit() and int(expr.name) <= len(group.values):
            return group.values[int(expr.name) - 1]
        return None
    if isinstance(expr, ast.Cast):
        value = evaluate_group_expr(expr.operand, stream, group)
        return (
            None if value is None else coerce(value if not isinstance(value, bool) else int(value), expr.type, "cast")
        )
    if isinstance(expr, ast.Func):
        args = [evaluate_group_expr(a, stream, group) for a in expr.args]
        text = ["" if a is None else str(a) for a in args]
        if expr.name == "concat":
            return None if any(a is None for a in args) else "".join(text)
        if expr.name == "concat_ws":
            return text[0].join(t for t, a in zip(text[1:], args[1:], strict=True) if a is not None)
        simple = {"lower": str.lower, "upper": str.upper, "ltrim": str.lstrip, "rtrim": str.rstrip, "trim": str.strip}
        if expr.name in simple and len(args) == 1:
            return None if args[0] is None else simple[expr.name](text[0])
        if expr.name == "substr" and len(args) in (2, 3):
            start = int(args[1]) - 1
            return text[0][start : start + int(args[2])] if len(args) == 3 else text[0][start:]
        if expr.name == "replace" and len(args) == 3:
            return text[0].replace(text[1], text[2])
    if isinstance(expr, ast.Binary) and expr.op in ("+", "-", "*", "/"):
        left, right = evaluate_group_expr(expr.left, stream, group), evaluate_group_expr(expr.right, stream, group)
        if left is None or right is None:
            return None
        return {"+": left + right, "-": left - right, "*": left * right}.get(expr.op, left / right if right else None)
    raise QueryError(f"unsupported expression in OUTPUT_SUBTABLE/TAGS of stream {stream.key}")


def child_table_name(stream: StreamDefinition, group: Group) -> str:
    if stream.stmt.output_subtable is not None:
        name = evaluate_group_expr(stream.stmt.output_subtable, stream, group)
        legacy = stream.stmt.option(ast.LEGACY_OUTPUT) is not None
        if (name is None or str(name) == "") and legacy:
            return _default_child_name(stream, group)  # TDengine's legacy sink: the name without SUBTABLE
        if name is None or str(name) == "":
            raise QueryError(f"OUTPUT_SUBTABLE of stream {stream.key} gave an empty name for group {group.values}")
        name = str(name).lower()
        if legacy and stream.group_columns and stream.output is not None and not _GROUP_ID_SUFFIX.search(name):
            # TDengine ≥ 3.2.3: the group id keeps partitions apart that SUBTABLE names alike
            name = f"{name}_{stream.output[1]}_{group.group_id}"
        return name[:192]
    return _default_child_name(stream, group)


def _default_child_name(stream: StreamDefinition, group: Group) -> str:
    digest = hashlib.md5(f"{stream.key}:{group.group_id}".encode()).hexdigest()
    return f"t_{digest}"


def tag_values(stream: StreamDefinition, group: Group, tags: tuple[ast.ColumnDef, ...]) -> dict[str, Any]:
    legacy = stream.stmt.option(ast.LEGACY_OUTPUT) is not None
    if stream.stmt.tags and legacy:
        # a legacy stream into an existing super table may name some of its tags: the others
        # stay NULL, and the values convert to the table's types
        given = {tag.name.lower(): evaluate_group_expr(tag.expr, stream, group) for tag in stream.stmt.tags}
        return {tag.name: _converted(given.get(tag.name), tag.type, tag.name) for tag in tags}
    if stream.stmt.tags:
        return {
            tag.name.lower(): coerce(evaluate_group_expr(tag.expr, stream, group), tag.type, tag.name)
            for tag in stream.stmt.tags
        }
    if tags == (GROUP_ID_TAG,) and legacy:
        return {GROUP_ID_TAG.name: group.group_id if stream.group_columns else 0}
    if legacy and not stream.group_columns:  # an existing super table's tags: the one group has none
        return {tag.name: None for tag in tags}
    return {tag.name: value for tag, value in zip(tags, group.values, strict=True)}


def written_columns(stream: StreamDefinition, info: TableInfo) -> list[ast.ColumnDef]:
    """The output table's column each query column writes: the first the primary key, the
    others named by the column list where the stream has one (a legacy stream into an
    existing super table may name some of its columns, in any order), else by position."""
    if not stream.stmt.columns:
        return list(info.columns)
    by_name = {c.name: c for c in info.columns}
    return [info.columns[0], *(by_name[name.lower()] for name in stream.stmt.columns[1:])]


# the leading number of a text, as C's strtod reads it
_LEADING_NUMBER = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _converted(value: Any, dtype: ast.DataType, name: str) -> Any:
    """A tag value converted to the output table's type as TDengine's sink converts it,
    whatever it is: a text to a number by its leading digits (``'t1'`` is 0), a number to
    its text."""
    if isinstance(value, str) and dtype.name in (*INTEGER_TYPES, "TIMESTAMP", "FLOAT", "DOUBLE"):
        match = _LEADING_NUMBER.match(value)
        number = float(match.group(0)) if match else 0.0
        value = number if dtype.name in ("FLOAT", "DOUBLE") else int(number)
    elif value is not None and not isinstance(value, str) and dtype.name in TEXT_TYPES:
        value = str(value)
    return coerce(value, dtype, name, computed=True)


@dataclass(frozen=True)
class WriteOutcome:
    rows: int
    version: int | None
    tables: tuple[str, ...]


def write_results(
    warehouse: Warehouse,
    stream: StreamDefinition,
    columns: Sequence[OutputColumn],
    data: pa.Table,
    row_groups: Sequence[Group],
    source_types: dict[str, ast.DataType],
    *,
    replace_range: tuple[int, int] | None = None,
    retract: Sequence[tuple[Group, int]] = (),
) -> WriteOutcome:
    """Write query results (one column per output column) to the output table; ``row_groups``
    names each row's group. With ``replace_range`` the output rows whose
    key lies in [start, end) and that the results do not produce again are removed in the same
    commit (recalculation overwrites a range); ``retract`` names (group, window start) rows of
    windows that no longer exist, removed in that commit unless produced again."""
    target = stream.output
    assert target is not None
    db, name = target
    info = warehouse.find_table(db, name)
    if info is None:
        if data.num_rows == 0:
            return WriteOutcome(0, None, ())  # the output table appears with its first result
        info = _create_output(warehouse, stream, columns, data, source_types)
    kept = pc.is_valid(data.column(0))  # TDengine drops a result whose primary key is NULL
    data = data.filter(kept)
    written = {}
    for column, definition, values in zip(columns, written_columns(stream, info), data.columns, strict=True):
        if column.is_timestamp and pa.types.is_floating(values.type):
            values = pc.trunc(values)  # a computed time is an integer count of the precision
        elif column.is_timestamp and pa.types.is_decimal(values.type):
            values = values.cast(pa.int64(), safe=False)
        written[definition.name] = coerce_array(values, definition.type, definition.name, computed=True)
    arrays = [
        written[c.name] if c.name in written else pa.nulls(data.num_rows, arrow_type(c.type)) for c in info.columns
    ]
    rows = pa.table(arrays, schema=arrow_schema(info.columns, with_tbname=False))
    if data.num_rows != len(row_groups):  # rows dropped above: their groups too
        row_groups = list(itertools.compress(row_groups, kept.to_pylist()))
    child_of_group: dict[Group, str] = {}  # a batch's triggers share few groups: each named once
    names: list[str] = []
    # rows come in runs of one group object (by trigger id, or by group): one lookup a run,
    # not a hash of the group's values per row (0.13 s of 166,000 rows)
    for _, run in itertools.groupby(row_groups, key=id):
        rows_of_group = list(run)
        group = rows_of_group[0]
        if group not in child_of_group:
            child_of_group[group] = child_table_name(stream, group) if info.kind != "normal" else info.name
        names += [child_of_group[group]] * len(rows_of_group)
    new_children = _new_children(warehouse, stream, info, child_of_group)
    if info.kind != "normal":  # one batch of the super table: each row names its child table
        rows = rows.add_column(0, pa.field("tbname", pa.string(), nullable=False), pa.array(names, pa.string()))
    batches = [WriteBatch(info, rows)] if rows.num_rows else []
    removals = []
    if replace_range is not None:
        removals.append(f"({warehouse.range_predicate(info, replace_range)})")
    if retract:
        keys = [
            (child_table_name(stream, group) if info.kind != "normal" else info.name, start) for group, start in retract
        ]
        removals.append(f"({warehouse.keys_predicate(info, keys)})")
    if not batches and not removals:
        return WriteOutcome(0, None, ())
    replace_where = " OR ".join(removals) if removals else None
    outcome = warehouse.write(batches, new_children, replace_where=replace_where, replace_table=info)
    version = next(iter(outcome.versions.values()), None)
    return WriteOutcome(outcome.rows, version, tuple(dict.fromkeys(names)))


def _create_output(
    warehouse: Warehouse,
    stream: StreamDefinition,
    columns: Sequence[OutputColumn],
    data: pa.Table,
    source_types: dict[str, ast.DataType],
) -> TableInfo:
    db, name = stream.output  # type: ignore[misc]
    defs = output_columns(stream, columns, data, source_types)
    tags = _tags_of_new_output(stream)
    warehouse.create_table(db, name, defs, tags, is_super=bool(tags), if_not_exists=True)
    return warehouse.table(db, name)


def _new_children(
    warehouse: Warehouse, stream: StreamDefinition, output: TableInfo, child_of_group: dict[Group, str]
) -> list[TableInfo]:
    """The child tables of the output a batch writes that do not exist yet (looked up at
    once), with their groups' tag values, in the order the batch names them."""
    if output.kind == "normal":
        return []
    existing = warehouse.find_tables(output.db, sorted(set(child_of_group.values())))
    new: dict[str, TableInfo] = {}
    for group, name in child_of_group.items():
        if name not in existing and name not in new:
            new[name] = warehouse.new_child(output.db, name, output, tag_values(stream, group, output.tags))
    return list(new.values())


def group_of(trigger: dict[str, Any]) -> Group:
    return _group(trigger["group_values"], int(trigger["group_id"]))


@functools.lru_cache(maxsize=65536)
def _group(values: str, group_id: int) -> Group:
    """A run's triggers share few groups: each group's JSON is decoded once."""
    return Group(tuple(json.loads(values)), group_id)
