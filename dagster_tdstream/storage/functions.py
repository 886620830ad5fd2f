"""The user-defined functions of a warehouse: what ``CREATE FUNCTION`` declared, kept in the
catalog's SQL database (table ``tds_functions``) beside the schema catalog.

Owns the rows: name, aggregate or scalar, output type, buffer size, language, the library path
as written, the code (a Python UDF's source, read at CREATE as TDengine reads the file into the
catalog), its version (1, then +1 per OR REPLACE) and creation time. A warehouse-wide namespace,
as TDengine's functions belong to the cluster, not a database. Does not parse or run code.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, Column, Engine, Integer, MetaData, String, Table, Text, delete, insert, select

from ..sql.ast import ColumnDef, DataType
from .types import type_from_json, type_to_json

_meta = MetaData()

functions_table = Table(
    "tds_functions",
    _meta,
    Column("name", String(64), primary_key=True),
    Column("aggregate", Integer, nullable=False),
    Column("output_type", Text, nullable=False),  # the DataType as JSON
    Column("bufsize", Integer, nullable=False),
    Column("language", String(16), nullable=False),
    Column("path", Text, nullable=False),
    Column("code", Text),  # a Python UDF's source; None for a C library (not loaded here)
    Column("code_len", Integer, nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)


@dataclass(frozen=True)
class UserFunction:
    name: str
    aggregate: bool
    output_type: DataType
    bufsize: int
    language: str  # C or Python
    path: str
    code: str | None
    code_len: int
    version: int
    created_at: int  # epoch ms


class FunctionCatalog:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        _meta.create_all(engine)

    def get(self, name: str) -> UserFunction | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(functions_table).where(functions_table.c.name == name)).first()
        return None if row is None else _function(row)

    def all(self) -> list[UserFunction]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(functions_table).order_by(functions_table.c.name)).all()
        return [_function(row) for row in rows]

    def put(self, function: UserFunction) -> None:
        """Insert or replace the function's row in one transaction."""
        values = {
            "name": function.name,
            "aggregate": int(function.aggregate),
            "output_type": _type_json(function.output_type),
            "bufsize": function.bufsize,
            "language": function.language,
            "path": function.path,
            "code": function.code,
            "code_len": function.code_len,
            "version": function.version,
            "created_at": function.created_at or time.time_ns() // 10**6,
        }
        with self.engine.begin() as conn:
            conn.execute(delete(functions_table).where(functions_table.c.name == function.name))
            conn.execute(insert(functions_table).values(**values))

    def drop(self, name: str) -> bool:
        with self.engine.begin() as conn:
            return conn.execute(delete(functions_table).where(functions_table.c.name == name)).rowcount > 0


def _type_json(dtype: DataType) -> str:
    return json.dumps(type_to_json(ColumnDef("output", dtype)))


def _function(row: Any) -> UserFunction:
    return UserFunction(
        name=row.name,
        aggregate=bool(row.aggregate),
        output_type=type_from_json(json.loads(row.output_type)).type,
        bufsize=row.bufsize,
        language=row.language,
        path=row.path,
        code=row.code,
        code_len=row.code_len,
        version=row.version,
        created_at=row.created_at,
    )
