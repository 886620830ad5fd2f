"""UNION [ALL] of query results: the SELECTs' rows one after another.

Owns combining the results of the SELECTs a UNION joins — as many columns in each, named by
the first, each column's values in one type (integers widened, numbers to DOUBLE), UNION
without ALL keeping each distinct row once — then the ORDER BY, LIMIT and OFFSET written
after the last SELECT, which order and cut the whole (they name the result's columns, by
name or position). Works on Arrow tables; runs no SQL.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import QueryError
from ..sql import ast


def union(
    tables: list[pa.Table],
    alls: tuple[bool, ...],
    order_by: tuple[ast.OrderItem, ...],
    limit: int | None,
    offset: int | None,
) -> pa.Table:
    """``tables[0] UNION [ALL] tables[1] …`` (``alls[i]`` joins table i + 1), ordered and cut."""
    names = tables[0].column_names
    for number, table in enumerate(tables[1:], start=2):
        if table.num_columns != len(names):
            raise QueryError(
                f"the SELECTs of a UNION return as many columns: the first returns {len(names)}, "
                f"SELECT {number} returns {table.num_columns}"
            )
    combined = tables[0]
    for all_, table in zip(alls, tables[1:], strict=True):
        combined = _concat(combined, table.rename_columns(names))
        if not all_:
            combined = _distinct(combined)
    if order_by:
        keys = [_sort_key(item, names) for item in order_by]
        combined = combined.take(pc.sort_indices(combined, sort_keys=keys))
    start = offset or 0
    return combined.slice(start, limit) if limit is not None else combined.slice(start)


def _concat(first: pa.Table, second: pa.Table) -> pa.Table:
    fields = []
    for a, b in zip(first.schema, second.schema, strict=True):
        fields.append(pa.field(a.name, _common(a.type, b.type, a.name)))
    schema = pa.schema(fields)
    return pa.concat_tables([first.cast(schema), second.cast(schema)])


def _common(a: pa.DataType, b: pa.DataType, name: str) -> pa.DataType:
    if a == b or pa.types.is_null(b):
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        return pa.int64()
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)
    if any(t(a) for t in numeric) and any(t(b) for t in numeric):
        return pa.float64()
    if pa.types.is_string(a) and pa.types.is_string(b):
        return pa.string()
    raise QueryError(f"UNION column {name!r} is {a} in one SELECT and {b} in another")


def _distinct(table: pa.Table) -> pa.Table:
    """Each distinct row once, at its first place."""
    seen: set[tuple[object, ...]] = set()
    keep = []
    for index, row in enumerate(zip(*(column.to_pylist() for column in table.columns), strict=True)):
        if row not in seen:
            seen.add(row)
            keep.append(index)
    return table.take(pa.array(keep, pa.int64()))


def _sort_key(item: ast.OrderItem, names: list[str]) -> tuple[str, str, str]:
    """(column, order, where NULLs go): first ascending and last descending unless the item
    says, as TDengine (and the SELECT's own ORDER BY)."""
    expr = item.expr
    order = "descending" if item.descending else "ascending"
    nulls_first = item.nulls_first if item.nulls_first is not None else not item.descending
    nulls = "at_start" if nulls_first else "at_end"
    if isinstance(expr, ast.Literal) and expr.kind == "int" and 1 <= int(expr.value) <= len(names):  # type: ignore[call-overload]
        return names[int(expr.value) - 1], order, nulls  # type: ignore[call-overload]
    if isinstance(expr, ast.Column) and expr.table is None:
        matches = [name for name in names if name.lower() == expr.name.lower()]
        if matches:
            return matches[0], order, nulls
    raise QueryError(
        "ORDER BY after a UNION names a column of its result (by name or position), not an expression",
        line=expr.pos.line or None,
        column=expr.pos.column or None,
    )
