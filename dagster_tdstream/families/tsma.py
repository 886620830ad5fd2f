"""TSMAs, executed: CREATE [RECURSIVE] TSMA, DROP TSMA, SHOW TSMAS and the guards a TSMA
puts on its table.

Owns creating a TSMA — its rules against the catalog (the table's kind, each function's column
and type, the name unique across databases, the limit on how many exist, a recursive interval
over its base), the hidden output super table created at once, the stream registered under the
TSMA's name (``storage/registry.py`` resolves it to the stream that keeps the states) — dropping
one (never a base before the TSMAs built on it), and refusing what would break one: dropping
its table, a column it uses or any tag, renaming a tag or changing a tag value, dropping its
stream. Everything else (triggers, runs, Dagster) sees an ordinary stream. Does not touch
triggers, runs or Dagster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import CatalogError, StreamValidationError
from ..results import Result
from ..sql import ast, tsma
from ..storage.catalog import StreamInfo, TableInfo
from ..storage.registry import tsma_root
from ..storage.system import tsma_outputs, tsma_statements
from .register import checked_stream, register_with_output
from .server_options import max_tsma_num

if TYPE_CHECKING:
    from ..session import Session
    from ..storage.warehouse import Warehouse

_NUMERIC = ("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL")


def _fail(exc: type[Exception], message: str, where: ast.Pos) -> Exception:
    return exc(message, line=where.line or None, column=where.column or None)


def create(session: Session, stmt: ast.CreateTsma) -> Result:
    warehouse = session.warehouse
    name = stmt.name.name.lower()
    if stmt.recursive:
        base_db, base_name = session.db_of(stmt.table), stmt.table.name.lower()
        base = next(((i, w) for i, w in tsma_statements(warehouse, base_db) if i.name == base_name), None)
        if base is None:
            raise _fail(CatalogError, f"TSMA {base_db}.{base_name} does not exist", stmt.table.pos)
        if not tsma.recursive_interval_allowed(base[1].interval, stmt.interval):
            raise _fail(
                StreamValidationError,
                f"Invalid recursive tsma interval: {stmt.interval} on {base_db}.{base_name} of "
                f"{base[1].interval} (a larger multiple of it; a day is built on 1h, a month on 1d)",
                stmt.pos,
            )
        db = base_db
        chain = [base[1], *tsma_root(warehouse, base[0])[1][1:]]
        table = warehouse.table(*_table_of(chain[-1], base[0].db))
    else:
        db = session.db_of(stmt.table)
        table = warehouse.table(db, stmt.table.name.lower())
        _check_table(warehouse, table, stmt)
        for f in stmt.functions:
            _check_function(table, f)
    if warehouse.find_table(db, name + tsma.OUTPUT_SUFFIX) is not None:
        raise _fail(
            CatalogError, f"table {db}.{name}{tsma.OUTPUT_SUFFIX} exists: it would be the TSMA's output", stmt.name.pos
        )
    existing = tsma_statements(warehouse)
    if any(info.name == name for info, _ in existing) or warehouse.catalog.get_stream(db, name) is not None:
        if stmt.if_not_exists:
            return Result(message="OK (TSMA exists)")
        raise _fail(CatalogError, f"SMA already exists: a TSMA or stream named {name} exists", stmt.name.pos)
    limit = max_tsma_num(warehouse)
    if len(existing) >= limit:
        raise _fail(
            StreamValidationError,
            f"Tsma num exceeded: at most {limit} TSMAs may exist (maxTsmaNum); drop one first "
            "or raise it with ALTER ALL DNODES 'maxTsmaNum' 'n'",
            stmt.pos,
        )
    created_at = session.clock() // 10**6
    info = StreamInfo(db, name, _canonical(stmt, db), "Running", created_at, 0, session.timezone.key)
    stream, columns = checked_stream(session, info)
    return register_with_output(session, stream, columns)


def _canonical(stmt: ast.CreateTsma, db: str) -> str:
    """The statement as stored: the table qualified with its database, so the TSMA reads the
    same table whatever database a later session uses."""
    table = f"`{(stmt.table.db or db).lower()}`.`{stmt.table.name.lower()}`"
    if stmt.recursive:
        return f"CREATE RECURSIVE TSMA `{stmt.name.name.lower()}` ON {table} INTERVAL({stmt.interval})"
    functions = ", ".join(f"{f.name}(`{f.column}`)" for f in stmt.functions)
    return f"CREATE TSMA `{stmt.name.name.lower()}` ON {table} FUNCTION({functions}) INTERVAL({stmt.interval})"


def _table_of(root: ast.CreateTsma, db: str) -> tuple[str, str]:
    return (root.table.db or db).lower(), root.table.name.lower()


def _check_table(warehouse: Warehouse, table: TableInfo, stmt: ast.CreateTsma) -> None:
    if table.kind == "child":
        raise _fail(
            StreamValidationError,
            f"Invalid table to create tsma, only stable or normal table allowed: {table.name} is a child table",
            stmt.table.pos,
        )
    if table.virtual:
        raise _fail(
            StreamValidationError,
            f"Invalid table to create tsma: {table.name} is a virtual table (a TSMA keeps a stored table's windows)",
            stmt.table.pos,
        )
    if (table.db, table.name) in tsma_outputs(warehouse):
        raise _fail(CatalogError, f"table {table.db}.{table.name} does not exist", stmt.table.pos)


def _check_function(table: TableInfo, f: ast.TsmaFunction) -> None:
    if any(t.name == f.column for t in table.tags) or f.column == "tbname":
        raise _fail(
            StreamValidationError,
            f"Invalid tsma func param, only one non-tag column allowed: {f.column} is a tag of {table.name}",
            f.pos,
        )
    column = next((c for c in table.columns if c.name == f.column), None)
    if column is None:
        raise _fail(CatalogError, f"Invalid column name: {table.name} has no column {f.column}", f.pos)
    kind = column.type.name.split()[0]
    numeric = kind in _NUMERIC
    allowed = numeric or (f.name == "spread" and kind == "TIMESTAMP") or f.name in ("count", "first", "last")
    if f.name in ("min", "max"):
        allowed = numeric or kind == "TIMESTAMP"
    if not allowed:
        raise _fail(
            StreamValidationError,
            f"Invalid function para type: {f.name}({f.column}) of a {column.type} column",
            f.pos,
        )


def drop(session: Session, stmt: ast.DropTsma) -> Result:
    warehouse = session.warehouse
    db, name = session.db_of(stmt.name), stmt.name.name.lower()
    found = next((info for info, _ in tsma_statements(warehouse, db) if info.name == name), None)
    if found is None:
        if stmt.if_exists:
            return Result(message="OK (no such TSMA)")
        raise _fail(CatalogError, f"TSMA {db}.{name} does not exist", stmt.name.pos)
    built_on = [
        info.key
        for info, written in tsma_statements(warehouse)
        if written.recursive and ((written.table.db or info.db).lower(), written.table.name.lower()) == (db, name)
    ]
    if built_on:
        raise _fail(
            StreamValidationError,
            f"Invalid drop base tsma, drop recursive tsma first: {', '.join(built_on)} built on {db}.{name}",
            stmt.name.pos,
        )
    with warehouse.catalog.transaction() as conn:
        warehouse.catalog.drop_stream(conn, db, name)
    output = warehouse.find_table(db, name + tsma.OUTPUT_SUFFIX)
    if output is not None:
        warehouse.drop_table(output)
    return session.told("Drop OK", lambda control: control.stream_dropped(f"{db}.{name}"))


# ---------------------------------------------------------------------- guards


def on_table(warehouse: Warehouse, table: TableInfo) -> list[str]:
    """The TSMAs reading ``table`` (directly; a recursive TSMA reads its base's output)."""
    return [
        info.key
        for info, written in tsma_statements(warehouse, table.db)
        if not written.recursive and _table_of(written, info.db) == (table.db, table.name)
    ]


def columns_used(warehouse: Warehouse, table: TableInfo) -> set[str]:
    return {
        f.column
        for info, written in tsma_statements(warehouse, table.db)
        if not written.recursive and _table_of(written, info.db) == (table.db, table.name)
        for f in written.functions
    }


def _kept_tags(warehouse: Warehouse, table: TableInfo) -> set[str]:
    kept = set()
    for key in on_table(warehouse, table):
        db, name = key.split(".", 1)
        output = warehouse.find_table(db, name + tsma.OUTPUT_SUFFIX)
        kept |= {t.name for t in output.tags} if output is not None else set()
    return kept


def refuse_drop_table(warehouse: Warehouse, table: TableInfo, where: ast.Pos) -> None:
    """A super or normal table with a TSMA stays until its TSMAs are dropped (child tables go)."""
    if table.kind == "child":
        return
    if (table.db, table.name) in tsma_outputs(warehouse):
        raise _fail(
            StreamValidationError,
            f"{table.db}.{table.name} is a TSMA's output: DROP TSMA {table.name[: -len(tsma.OUTPUT_SUFFIX)]} drops it",
            where,
        )
    users = on_table(warehouse, table)
    if users:
        raise _fail(
            StreamValidationError,
            f"Tsma must be dropped first: {', '.join(users)} reads {table.db}.{table.name}",
            where,
        )


def refuse_schema_change(warehouse: Warehouse, table: TableInfo, what: str, name: str, where: ast.Pos) -> None:
    """Dropping or renaming a tag the TSMAs keep, or a column one uses, needs the TSMAs dropped
    first (TDengine: "Stream must be dropped first"); adding columns or tags is fine."""
    users = on_table(warehouse, table)
    if not users:
        return
    if what == "column" and name not in columns_used(warehouse, table):
        return
    if what == "tag" and name not in _kept_tags(warehouse, table):
        return  # added after the TSMAs: none of them keeps it
    raise _fail(
        StreamValidationError,
        f"Stream must be dropped first: {what} {name} of {table.db}.{table.name} is kept by TSMA {', '.join(users)}",
        where,
    )


def refuse_tag_values(warehouse: Warehouse, child: TableInfo, where: ast.Pos) -> None:
    stable = warehouse.find_table(child.db, child.stable or "")
    users = on_table(warehouse, stable) if stable is not None else []
    if users:
        raise _fail(
            StreamValidationError,
            f"Stream must be dropped first: tag values of {child.db}.{child.name} are kept by TSMA {', '.join(users)}",
            where,
        )


def refuse_drop_stream(warehouse: Warehouse, db: str, name: str, where: ast.Pos) -> None:
    if any(info.name == name for info, _ in tsma_statements(warehouse, db)):
        raise _fail(StreamValidationError, f"Tsma must be dropped first: stream {db}.{name} keeps TSMA {name}", where)
