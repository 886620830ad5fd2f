"""Bulk writes from Python: an Arrow table or pandas DataFrame into a table, as one write.

Owns matching a frame's columns to a table's (by name; missing columns are NULL, unknown ones
an error), checking every value against its column type with Arrow's checked casts (the
ranges, NaN and infinities, FLOAT's float32 range, string lengths, NULL primary keys —
the rules the INSERT path applies, so a frame and an INSERT accept the same values), turning
time columns into counts of the database precision, and, for a super table, the child tables
the ``tbname`` column names (created with the tag values of their first row when missing).
The rows then go through ``Warehouse.write``: TDengine's update semantics, one Delta commit
per physical table, nothing written if anything is rejected. Must not parse SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import WriteRejectedError
from ..sql.ast import ColumnDef
from .catalog import TableInfo
from .types import STRING_TYPES, ValueTypeError, arrow_schema, arrow_type, coerce, value_range
from .warehouse import Warehouse, WriteBatch, WriteResult

_UNITS = {"ms": "ms", "us": "us", "ns": "ns"}


def write_frame(warehouse: Warehouse, table: TableInfo, frame: Any, precision: str) -> WriteResult:
    """Write ``frame`` (a ``pyarrow.Table`` or anything ``pyarrow.table()`` takes, such as a
    pandas DataFrame) into ``table``; a super table's frame needs a ``tbname`` column and may
    carry its tag columns."""
    data = frame if isinstance(frame, pa.Table) else pa.table(frame)
    if data.num_rows == 0:
        return WriteResult(0, False, {})
    batch, new_children = frame_batch(warehouse, table, data, precision)
    return warehouse.write([batch], new_children)


def frame_batch(
    warehouse: Warehouse, table: TableInfo, data: pa.Table, precision: str
) -> tuple[WriteBatch, Sequence[TableInfo]]:
    """The checked batch of a non-empty frame and the child tables it needs created (several
    frames then go in one write: schemaless lines for several super tables)."""
    names = {name.lower(): name for name in data.column_names}
    tag_names = {tag.name for tag in table.tags} if table.kind == "super" else set()
    unknown = sorted(
        set(names) - {c.name for c in table.columns} - tag_names - ({"tbname"} if table.kind == "super" else set())
    )
    if unknown:
        raise WriteRejectedError(
            f"{table.name} has no column {', '.join(unknown)} (columns: {', '.join(c.name for c in table.columns)}"
            + (f"; tags: {', '.join(sorted(tag_names))}; and tbname" if table.kind == "super" else "")
            + ")"
        )
    arrays = [
        _checked(data.column(names[col.name]), col, precision) if col.name in names else None for col in table.columns
    ]
    rows = data.num_rows
    columns = [
        array if array is not None else pa.nulls(rows, arrow_type(col.type))
        for array, col in zip(arrays, table.columns, strict=True)
    ]
    if columns[0].null_count:
        first = pc.index(pc.is_null(columns[0]), True).as_py()
        raise WriteRejectedError(f"the primary key {table.primary_key} cannot be NULL (row {first})")
    if table.kind != "super":
        return WriteBatch(table, pa.table(columns, schema=arrow_schema(table.columns, with_tbname=False))), []
    if "tbname" not in names:
        raise WriteRejectedError(f"{table.name} is a super table: the frame needs a tbname column naming child tables")
    tbname = pc.utf8_lower(data.column(names["tbname"]).cast(pa.string()))
    if tbname.null_count:
        raise WriteRejectedError(f"tbname cannot be NULL (row {pc.index(pc.is_null(tbname), True).as_py()})")
    new_children = _new_children(warehouse, table, data, names, tbname)
    stored = pa.table([tbname, *columns], schema=arrow_schema(table.columns, with_tbname=True))
    return WriteBatch(table, stored), new_children


def _checked(column: pa.ChunkedArray, col: ColumnDef, precision: str) -> pa.ChunkedArray:
    """The column in ``col``'s storage type, or the error naming the column and why."""
    name, target = col.type.name, arrow_type(col.type)
    try:
        if name == "TIMESTAMP" and pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp(_UNITS[precision])).cast(pa.int64())
        if name in ("FLOAT", "DOUBLE"):
            column = column.cast(pa.float64())
            finite = pc.is_finite(column)
            largest = pc.max(pc.abs(column)).as_py()
            _, limit = value_range(col.type)  # type: ignore[misc]
            if not pc.all(pc.or_kleene(finite, pc.is_null(column))).as_py() or (
                largest is not None and largest > limit
            ):
                raise ValueTypeError(f"a value is out of range for column {col.name} ({col.type})")
            return column.cast(target, safe=False)
        if name in STRING_TYPES and col.type.length is not None:
            column = column.cast(pa.string())
            size = pc.binary_length(column) if name in ("BINARY", "VARCHAR") else pc.utf8_length(column)
            longest = pc.max(size).as_py()
            if longest is not None and longest > col.type.length:
                raise ValueTypeError(f"a value is longer than {col.type} allows for column {col.name}")
        bounds = value_range(col.type)
        if bounds is not None and name != "TIMESTAMP" and pa.types.is_integer(column.type):
            extremes = pc.min_max(column)
            low, high = extremes["min"].as_py(), extremes["max"].as_py()
            if low is not None and (low < bounds[0] or high > bounds[1]):
                raise ValueTypeError(f"a value is out of range for column {col.name} ({col.type})")
        return column.cast(target)  # checked: overflow and fractional parts are errors
    except ValueTypeError as exc:
        raise WriteRejectedError(str(exc)) from None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise WriteRejectedError(f"column {col.name} ({col.type}) cannot hold the frame's values: {exc}") from None


def _new_children(
    warehouse: Warehouse, stable: TableInfo, data: pa.Table, names: dict[str, str], tbname: pa.ChunkedArray
) -> Sequence[TableInfo]:
    """The child tables the frame names that do not exist yet, with their first row's tags."""
    distinct = pc.unique(tbname).to_pylist()
    existing = warehouse.find_tables(stable.db, distinct)
    for name, info in existing.items():
        if info.kind != "child" or info.stable != stable.name:
            raise WriteRejectedError(f"table {name} exists and is not a child table of {stable.name}")
    missing = [name for name in distinct if name not in existing]
    if not missing:
        return []
    numbered = pa.table({"t": tbname, "i": pa.array(range(len(tbname)), pa.int64())})
    firsts = numbered.group_by("t", use_threads=False).aggregate([("i", "min")])
    first_row = dict(zip(firsts.column("t").to_pylist(), firsts.column("i_min").to_pylist(), strict=True))
    rows = [first_row[name] for name in missing]
    children = []
    for name, row in zip(missing, rows, strict=True):
        tags: dict[str, Any] = {}
        for tag in stable.tags:
            value = data.column(names[tag.name])[row].as_py() if tag.name in names else None
            try:
                tags[tag.name] = coerce(value, tag.type, tag.name)
            except ValueTypeError as exc:
                raise WriteRejectedError(f"child table {name}: {exc}") from None
        children.append(warehouse.new_child(stable.db, name, stable, tags))
    return children
