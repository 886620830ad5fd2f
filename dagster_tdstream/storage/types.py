"""TDengine data types in the lakehouse.

Owns the mapping of TDengine column/tag types to Arrow types (what Delta stores), their
JSON form in the catalog, and coercion of Python values into a column's type. Timestamps
are stored as int64 counts of the database precision: Delta's own timestamp type is
microseconds, which would lose nanosecond databases. Knows nothing of SQL text or Spark.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..sql.ast import ColumnDef, DataType

_INT_RANGES: dict[str, tuple[int, int]] = {
    "TINYINT": (-(2**7), 2**7 - 1),
    "SMALLINT": (-(2**15), 2**15 - 1),
    "INT": (-(2**31), 2**31 - 1),
    "INTEGER": (-(2**31), 2**31 - 1),
    "BIGINT": (-(2**63), 2**63 - 1),
    "TINYINT UNSIGNED": (0, 2**8 - 1),
    "SMALLINT UNSIGNED": (0, 2**16 - 1),
    "INT UNSIGNED": (0, 2**32 - 1),
    # Delta has no unsigned types; BIGINT UNSIGNED is stored as int64 and so limited to 2^63-1.
    "BIGINT UNSIGNED": (0, 2**63 - 1),
    "TIMESTAMP": (-(2**63), 2**63 - 1),  # int64 counts of the precision
}
_FLOAT_LIMITS = {"FLOAT": float(np.finfo(np.float32).max), "DOUBLE": float(np.finfo(np.float64).max)}

_ARROW: dict[str, pa.DataType] = {
    "TIMESTAMP": pa.int64(),
    "BOOL": pa.bool_(),
    "TINYINT": pa.int8(),
    "SMALLINT": pa.int16(),
    "INT": pa.int32(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    # unsigned types widen to the next signed type so every value fits
    "TINYINT UNSIGNED": pa.int16(),
    "SMALLINT UNSIGNED": pa.int32(),
    "INT UNSIGNED": pa.int64(),
    "BIGINT UNSIGNED": pa.int64(),
    "FLOAT": pa.float32(),
    "DOUBLE": pa.float64(),
    "BINARY": pa.string(),
    "VARCHAR": pa.string(),
    "NCHAR": pa.string(),
    "JSON": pa.string(),
    "VARBINARY": pa.binary(),
    "GEOMETRY": pa.binary(),
}

STRING_TYPES = ("BINARY", "VARCHAR", "NCHAR", "JSON")
TEXT_TYPES = ("VARCHAR", "BINARY", "NCHAR")  # the character types (JSON apart)
INTEGER_TYPES = tuple(name for name in _INT_RANGES if name != "TIMESTAMP")


def value_range(dtype: DataType) -> tuple[float, float] | None:
    """The smallest and largest value a numeric (or TIMESTAMP) column holds; None for others."""
    if dtype.name in _INT_RANGES:
        return _INT_RANGES[dtype.name]
    if dtype.name in _FLOAT_LIMITS:
        return -_FLOAT_LIMITS[dtype.name], _FLOAT_LIMITS[dtype.name]
    return None


def arrow_type(dtype: DataType) -> pa.DataType:
    if dtype.name == "DECIMAL":
        return pa.decimal128(dtype.length or 10, dtype.scale or 0)
    return _ARROW[dtype.name]


@lru_cache(maxsize=1024)
def arrow_schema(columns: tuple[ColumnDef, ...], *, with_tbname: bool) -> pa.Schema:
    # cached: every INSERT asks twice for its table's, which cost a group-committing writer
    # ~30 µs a statement of building the same fields again (schemas are immutable)
    fields = [pa.field(c.stored, arrow_type(c.type)) for c in columns]
    if with_tbname:
        fields.insert(0, pa.field("tbname", pa.string(), nullable=False))
    return pa.schema(fields)


def type_to_json(col: ColumnDef) -> dict[str, Any]:
    return {
        "name": col.name,
        "type": col.type.name,
        "length": col.type.length,
        "scale": col.type.scale,
        "primary_key": col.primary_key,
        "comment": col.comment,
    }


def type_from_json(data: dict[str, Any]) -> ColumnDef:
    return ColumnDef(
        data["name"],
        DataType(data["type"], data.get("length"), data.get("scale")),
        bool(data.get("primary_key")),
        data.get("comment"),
    )


def display_length(dtype: DataType) -> int:
    if dtype.name in ("BINARY", "VARCHAR", "NCHAR", "VARBINARY", "GEOMETRY"):
        return dtype.length or 0
    sizes = {
        "TIMESTAMP": 8, "BOOL": 1, "TINYINT": 1, "SMALLINT": 2, "INT": 4, "INTEGER": 4, "BIGINT": 8,
        "TINYINT UNSIGNED": 1, "SMALLINT UNSIGNED": 2, "INT UNSIGNED": 4, "BIGINT UNSIGNED": 8,
        "FLOAT": 4, "DOUBLE": 8, "JSON": 4095, "DECIMAL": 16,
    }  # fmt: skip
    return sizes.get(dtype.name, 0)


class ValueTypeError(ValueError):
    """A value does not fit a column's type; the caller adds the statement position."""


def coerce(value: Any, dtype: DataType, column: str, *, computed: bool = False) -> Any:
    """A Python value (already evaluated: timestamps as ints) converted to ``dtype``.
    ``computed``: a stream's result rather than a written value — a float its arithmetic
    produced (NaN from ``sqrt(-1)``, an infinity) is kept as the result it is."""
    if value is None:
        return None
    name = dtype.name
    if name in _INT_RANGES:
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueTypeError(f"value {value} is out of range for column {column} ({dtype})")
            if value != int(value) and name == "TIMESTAMP":
                raise ValueTypeError(f"column {column} (TIMESTAMP) needs an integer, got {value}")
            value = int(value)
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                raise ValueTypeError(f"column {column} ({dtype}) needs an integer, got {value!r}") from None
        if not isinstance(value, int):
            raise ValueTypeError(f"column {column} ({dtype}) needs an integer, got {value!r}")
        low, high = _INT_RANGES[name]
        if not low <= value <= high:
            raise ValueTypeError(f"value {value} is out of range for column {column} ({dtype})")
        return value
    if name in _FLOAT_LIMITS:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ValueTypeError(f"column {column} ({dtype}) needs a number, got {value!r}") from None
        if not isinstance(value, int | float):  # bool included: true is 1.0
            raise ValueTypeError(f"column {column} ({dtype}) needs a number, got {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an integer beyond any double
            number = math.inf
        if computed:
            return number
        # NaN and infinities are not values TDengine stores; nor is a FLOAT beyond float32
        if not math.isfinite(number) or abs(number) > _FLOAT_LIMITS[name]:
            raise ValueTypeError(f"value {value} is out of range for column {column} ({dtype})")
        return number
    if name == "BOOL":
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float):
            return value != 0
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ValueTypeError(f"column {column} (BOOL) needs true or false, got {value!r}")
    if name in STRING_TYPES:
        text = value if isinstance(value, str) else _plain(value)
        limit = dtype.length
        size = len(text.encode()) if name == "BINARY" or name == "VARCHAR" else len(text)
        if limit is not None and size > limit:
            raise ValueTypeError(f"value {text[:20]!r}… is longer than {dtype} allows for column {column}")
        return text
    if name in ("VARBINARY", "GEOMETRY"):
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            if value.startswith("\\x"):
                try:
                    return bytes.fromhex(value[2:])
                except ValueError:
                    raise ValueTypeError(f"invalid hex literal for column {column}") from None
            return value.encode()
        raise ValueTypeError(f"column {column} ({dtype}) needs a string, got {value!r}")
    if name == "DECIMAL":
        import decimal

        try:
            return decimal.Decimal(str(value)).quantize(decimal.Decimal(1).scaleb(-(dtype.scale or 0)))
        except decimal.InvalidOperation:
            raise ValueTypeError(f"column {column} ({dtype}) needs a decimal, got {value!r}") from None
    raise ValueTypeError(f"unsupported type {dtype} for column {column}")


def coerce_array(
    values: pa.Array | pa.ChunkedArray, dtype: DataType, column: str, *, computed: bool = False
) -> pa.Array:
    """A column of values converted to ``dtype`` as ``coerce`` converts each one, with the same
    checks: numbers, booleans and strings whole-column in Arrow; anything else, or a column a
    check fails on, value by value (so the error names the value as ``coerce`` does)."""
    array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    fast = _coerced_in_arrow(array, dtype, computed)
    if fast is not None:
        return fast
    return pa.array([coerce(v, dtype, column, computed=computed) for v in array.to_pylist()], type=arrow_type(dtype))


def _coerced_in_arrow(array: pa.Array, dtype: DataType, computed: bool) -> pa.Array | None:
    """``coerce_array``'s whole-column conversions; None where a value needs ``coerce``."""
    name, kind = dtype.name, array.type
    numeric = pa.types.is_integer(kind) or pa.types.is_boolean(kind)
    if name in _INT_RANGES and (numeric or pa.types.is_floating(kind)):
        if pa.types.is_floating(kind):
            if not pc.all(pc.is_finite(array)).as_py():
                return None
            truncated = pc.trunc(array)
            if name == "TIMESTAMP" and not pc.all(pc.equal(truncated, array)).as_py():
                return None
            array = truncated
        try:
            wide = array.cast(pa.int64())
        except (pa.ArrowInvalid, OverflowError):  # beyond int64: ``coerce`` names the value
            return None
        low, high = _INT_RANGES[name]
        bounds = pc.min_max(wide)
        if bounds["min"].is_valid and not (low <= bounds["min"].as_py() and bounds["max"].as_py() <= high):
            return None
        return wide.cast(arrow_type(dtype))
    if name in _FLOAT_LIMITS and (numeric or pa.types.is_floating(kind)):
        wide = array.cast(pa.float64(), safe=False)  # as float(value): large integers round
        if not computed:  # NaN, infinities and FLOATs beyond float32 are not stored values
            limit = _FLOAT_LIMITS[name]
            if not pc.all(pc.and_(pc.is_finite(wide), pc.less_equal(pc.abs(wide), limit))).as_py():
                return None
        return wide.cast(arrow_type(dtype), safe=False)
    if name == "BOOL" and pa.types.is_boolean(kind):
        return array
    if name in STRING_TYPES and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        if dtype.length is not None and len(array):
            sizes = pc.binary_length(array) if name in ("BINARY", "VARCHAR") else pc.utf8_length(array)
            longest = pc.max(sizes)
            if longest.is_valid and longest.as_py() > dtype.length:
                return None
        return array.cast(pa.string())
    return None


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def float32_value(value: float | None) -> float | None:
    """A FLOAT (float32) value as TDengine prints it: the shortest decimal that is the same
    float32 (11.946, not the double 11.946000099182129 it widens to)."""
    if value is None or not math.isfinite(value):
        return value
    return float(str(np.float32(value)))
