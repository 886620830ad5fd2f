"""Running TDengine's Python UDFs in Spark.

Owns the interface TDengine gives a Python UDF — a module with ``process(block)`` (scalar, one
value per row) or ``start()``, ``reduce(block, buf)`` and ``finish(buf)`` (aggregate; ``buf`` is
bytes of at most BUFSIZE), optional ``init()`` and ``destroy()``; ``block.shape()`` is (rows,
columns) and ``block.data(row, col)`` a value, None for NULL, VARCHAR/NCHAR as bytes and
TIMESTAMP as an integer, as TDengine's udfd hands them over — and registering a catalog function
with a Spark session: a scalar UDF as a vectorised (pandas) UDF over Arrow batches, an aggregate
as a UDF over the group's rows in time order. The module's code travels with the registered
function and is compiled once per Python worker. C UDFs (libraries built for TDengine's udfd) do
not run here: the translator refuses a call with that reason. Does not read the catalog's
tables or parse SQL.
"""

from __future__ import annotations

import atexit
import hashlib
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..sql.ast import DataType
from ..sql.translate.scope import UserFunctionRef, kind_of

if TYPE_CHECKING:
    from ..storage.functions import UserFunction
    from ..storage.warehouse import Warehouse

# Spark's type for each output type (unsigned types take the next wider signed one: Spark has none)
_SPARK_TYPES = {
    "TINYINT": "tinyint", "SMALLINT": "smallint", "INT": "int", "INTEGER": "int", "BIGINT": "bigint",
    "TINYINT UNSIGNED": "smallint", "SMALLINT UNSIGNED": "int", "INT UNSIGNED": "bigint",
    "BIGINT UNSIGNED": "decimal(20,0)", "FLOAT": "float", "DOUBLE": "double", "BOOL": "boolean",
    "TIMESTAMP": "bigint", "VARCHAR": "string", "BINARY": "string", "NCHAR": "string",
}  # fmt: skip


class UdfError(RuntimeError):
    """The UDF broke its contract (wrong number of results, an oversized buffer)."""


def spark_type(dtype: DataType) -> str | None:
    return _SPARK_TYPES.get(dtype.name)


class Block:
    """The rows a UDF call receives: columns of Python values."""

    def __init__(self, columns: Sequence[Sequence[Any]], rows: int) -> None:
        self._columns = columns
        self._rows = rows

    def shape(self) -> tuple[int, int]:
        return self._rows, len(self._columns)

    def data(self, row: int, col: int) -> Any:
        return self._columns[col][row]


_LOADED: dict[tuple[str, str], types.ModuleType] = {}  # (name, code digest) → the module, per worker


def load(name: str, code: str) -> types.ModuleType:
    """The UDF's module, compiled and ``init()``-ed once per process; ``destroy()`` at exit."""
    key = (name, hashlib.sha256(code.encode()).hexdigest())
    module = _LOADED.get(key)
    if module is None:
        module = types.ModuleType(f"tdstream_udf_{name}")
        exec(compile(code, f"<udf {name}>", "exec"), module.__dict__)  # the user's UDF: running it is the point
        if callable(getattr(module, "init", None)):
            module.init()
        if callable(getattr(module, "destroy", None)):
            atexit.register(module.destroy)
        _LOADED[key] = module
    return module


def _as_udf_value(value: Any, kind: str) -> Any:
    """A Spark value as TDengine hands it to a UDF."""
    if value is None:
        return None
    if kind == "string":
        return value.encode() if isinstance(value, str) else value
    if kind in ("int", "ts"):
        return int(value)
    if kind == "float":
        return float(value)
    return value


def _from_udf_value(value: Any, kind: str) -> Any:
    if value is None:
        return None
    if kind == "string":
        return value.decode() if isinstance(value, bytes | bytearray) else str(value)
    if kind in ("int", "ts"):
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "bool":
        return bool(value)
    return value


def scalar_function(name: str, code: str, kinds: Sequence[str], out: str) -> Callable[..., Any]:
    """``process(block)`` over each Arrow batch of the arguments (pandas Series)."""

    def run(*series: pd.Series) -> pd.Series:
        rows = len(series[0]) if series else 0
        columns = [
            [None if pd.isna(v) else _as_udf_value(v, kind) for v in s.astype(object)]
            for s, kind in zip(series, kinds, strict=True)
        ]
        result = list(load(name, code).process(Block(columns, rows)))
        if len(result) != rows:
            raise UdfError(f"UDF {name}: process() returned {len(result)} values for {rows} rows")
        return pd.Series([_from_udf_value(v, out) for v in result], dtype=object)

    return run


def aggregate_function(name: str, code: str, kinds: Sequence[str], out: str, bufsize: int) -> Callable[..., Any]:
    """``start``, one ``reduce`` over the group's rows (structs of the arguments, time order), ``finish``."""

    def run(rows: Sequence[Any] | None) -> Any:
        if not rows:
            return None
        module = load(name, code)
        columns = [[_as_udf_value(row[i + 1], kind) for row in rows] for i, kind in enumerate(kinds)]
        buf = module.reduce(Block(columns, len(rows)), module.start())
        if isinstance(buf, bytes | bytearray) and len(buf) > bufsize:
            raise UdfError(f"UDF {name}: the intermediate result is {len(buf)} bytes, over its BUFSIZE {bufsize}")
        return _from_udf_value(module.finish(buf), out)

    return run


def spark_name(function: UserFunction, kinds: Sequence[str]) -> str:
    """The function's name in Spark SQL for arguments of ``kinds``: one per declaration (code,
    output type, buffer size) and argument kinds, so a session never calls a replaced one."""
    declared = [*kinds, str(function.output_type), str(function.bufsize), function.code or ""]
    digest = hashlib.sha256("|".join(declared).encode()).hexdigest()[:12]
    return f"tdstream_udf_{function.name}_{digest}"


def register(spark: Any, function: UserFunction, kinds: Sequence[str]) -> str:
    """Register the function for arguments of ``kinds`` with the session; its Spark name."""
    from pyspark.sql.functions import pandas_udf

    assert function.code is not None
    out_type = spark_type(function.output_type) or "string"
    out = kind_of(function.output_type)
    name = spark_name(function, kinds)
    if function.aggregate:
        run = aggregate_function(function.name, function.code, kinds, out, function.bufsize)
        spark.udf.register(name, run, out_type)
    else:
        spark.udf.register(name, pandas_udf(scalar_function(function.name, function.code, kinds, out), out_type))
    return name


def function_lookup(warehouse: Warehouse, spark: Any = None) -> Callable[[str], UserFunctionRef | None]:
    """The translator's view of the warehouse's functions: each one a query names is read once,
    and with a session a Python one is registered with it for the argument kinds it is called
    with (without one, as when CREATE STREAM checks its query, it is only named)."""
    found: dict[str, UserFunction | None] = {}
    registered: dict[tuple[str, tuple[str, ...]], str] = {}  # one registration per query and kinds

    def lookup(name: str) -> UserFunctionRef | None:
        if name not in found:
            found[name] = warehouse.functions.get(name)
        function = found[name]
        if function is None:
            return None

        def bind(kinds: Sequence[str]) -> str:
            if spark is None:
                return spark_name(function, kinds)
            key = (function.name, tuple(kinds))
            if key not in registered:
                registered[key] = register(spark, function, kinds)
            return registered[key]

        return UserFunctionRef(
            function.name, function.aggregate, kind_of(function.output_type), function.language, bind
        )

    return lookup
