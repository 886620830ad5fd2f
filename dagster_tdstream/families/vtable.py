"""Virtual tables, executed: CREATE VTABLE, DROP VTABLE, and what a virtual table refuses.

Owns checking a virtual table against the catalog — each column's source an existing column
of a normal or child table (not a virtual one, not a tag, not its primary key) of exactly the
column's type, in a database of the same precision; the timestamp column without a source; a
virtual child table only under a virtual super table and a plain child table never under one —
and creating it (a catalog row: it stores nothing), pointing a column at another source,
dropping it, and refusing to write into one. Reading one (the sources' rows joined on the
timestamp) is ``storage/spark_read.py``'s. Does not touch Delta files, triggers or Dagster.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..errors import CatalogError, WriteRejectedError
from ..results import Result
from ..sql import ast
from ..storage.catalog import TableInfo, table_uid

if TYPE_CHECKING:
    from ..session import Session


def _fail(message: str, where: ast.Pos) -> CatalogError:
    return CatalogError(message, line=where.line or None, column=where.column or None)


def create(session: Session, stmt: ast.CreateVirtualTable) -> Result:
    db = session.db_of(stmt.table)
    name = stmt.table.name.lower()
    warehouse = session.warehouse
    warehouse.database(db)
    created_at = time.time_ns() // 1_000_000
    if stmt.using is None:
        columns = tuple(ast.ColumnDef(c.name.lower(), c.type, c.primary_key, c.comment, c.pos) for c in stmt.columns)
        first = stmt.columns[0]
        if columns[0].type.name != "TIMESTAMP":
            raise _fail("the first column of a virtual table must be a TIMESTAMP", first.pos)
        if len(columns) < 2:
            raise _fail("a virtual table needs a column besides its timestamp", first.pos)
        if stmt.refs[0][1] is not None:
            raise _fail(
                f"the timestamp column {first.name} takes no source: a virtual table's rows are its sources' "
                "timestamps",
                stmt.refs[0][1].pos,
            )
        _unique(columns)
        refs = {
            column.name: _source(session, db, column, ref) for column, (_, ref) in zip(columns, stmt.refs, strict=True)
        }
        info = TableInfo(
            db, name, "normal", table_uid(db, name, created_at), created_at, columns=columns,
            refs={k: v for k, v in refs.items() if v is not None},
        )  # fmt: skip
    else:
        info = _child(session, db, name, stmt, created_at)
    created = warehouse.create_virtual_table(info, if_not_exists=stmt.if_not_exists)
    return Result(message="Create OK" if created else "OK (table exists)")


def _child(session: Session, db: str, name: str, stmt: ast.CreateVirtualTable, created_at: int) -> TableInfo:
    """A virtual child table: its super table's columns, each named source (or the sources in
    column order after the timestamp) checked, its tag values typed."""
    spec = stmt.using
    assert spec is not None
    stable_db = spec.stable.db.lower() if spec.stable.db else db
    if stable_db != db:
        raise _fail("a virtual child table must be in the database of its super table", spec.stable.pos)
    stable = session.warehouse.table(db, spec.stable.name.lower())
    if stable.kind != "super" or not stable.virtual:
        raise _fail(
            f"{stable.name} is not a virtual super table: a virtual child table is created USING one "
            "(CREATE STABLE … VIRTUAL 1)",
            spec.stable.pos,
        )
    by_name = {c.name: c for c in stable.columns[1:]}
    pairs: list[tuple[ast.ColumnDef, ast.ColumnRef]] = []
    for position, (column_name, ref) in enumerate(stmt.refs):
        assert ref is not None
        if column_name is None:  # in column order, after the timestamp
            if position + 1 >= len(stable.columns):
                raise _fail(
                    f"{len(stmt.refs)} sources for the {len(stable.columns) - 1} column(s) of {stable.name}", ref.pos
                )
            column = stable.columns[position + 1]
        else:
            key = column_name.lower()
            if key == stable.primary_key:
                raise _fail(f"the timestamp column {key} takes no source", ref.pos)
            if key not in by_name:
                raise _fail(f"{stable.name} has no column {column_name} (tags take values, not sources)", ref.pos)
            column = by_name[key]
        if any(c.name == column.name for c, _ in pairs):
            raise _fail(f"column {column.name} is given two sources", ref.pos)
        pairs.append((column, ref))
    refs = {column.name: _source(session, db, column, ref) for column, ref in pairs}
    values = session._tag_values(stable, spec, session.constants(db))
    return TableInfo(
        db, name, "child", table_uid(db, name, created_at), created_at, stable=stable.name,
        columns=stable.columns, tags=stable.tags, tag_values=values,
        refs={k: v for k, v in refs.items() if v is not None},
    )  # fmt: skip


def _unique(columns: tuple[ast.ColumnDef, ...]) -> None:
    seen: set[str] = set()
    for column in columns:
        if column.name in seen or column.name == "tbname":
            raise _fail(f"duplicate or reserved column name {column.name}", column.pos)
        seen.add(column.name)


def _source(session: Session, db: str, column: ast.ColumnDef, ref: ast.ColumnRef | None) -> str | None:
    """The source of ``column`` as ``db.table.column``, checked (TDengine's rules)."""
    if ref is None:
        return None
    if column.type.name == "DECIMAL":
        raise _fail(f"column {column.name}: a DECIMAL column cannot read another table's column", ref.pos)
    warehouse = session.warehouse
    source_db = ref.db.lower() if ref.db else db
    exists = warehouse.catalog.get_database(source_db) is not None
    table = warehouse.find_table(source_db, ref.table.lower()) if exists else None
    if table is None:
        raise _fail(f"source table {source_db}.{ref.table.lower()} does not exist", ref.pos)
    if table.virtual or table.kind == "super":
        what = "a virtual table" if table.virtual else "a super table"
        raise _fail(f"{source_db}.{table.name} is {what}: a virtual table reads normal or child tables", ref.pos)
    if len(table.columns) > 1 and table.columns[1].primary_key:
        raise _fail(f"{source_db}.{table.name} has a composite primary key: it cannot be a source", ref.pos)
    if warehouse.database(source_db).precision != warehouse.database(db).precision:
        raise _fail(
            f"{source_db} has precision {warehouse.database(source_db).precision}, {db} "
            f"{warehouse.database(db).precision}: a source must share the virtual table's precision",
            ref.pos,
        )
    key = ref.column.lower()
    found = next((c for c in table.columns if c.name == key), None)
    if found is None:
        tag = any(t.name == key for t in table.tags)
        raise _fail(
            f"{source_db}.{table.name}.{ref.column} is a tag: a source is a data column"
            if tag
            else f"{source_db}.{table.name} has no column {ref.column}",
            ref.pos,
        )
    if found.name == table.primary_key:
        raise _fail(f"{source_db}.{table.name}.{found.name} is the primary key: a source is a data column", ref.pos)
    if found.type != column.type:
        raise _fail(
            f"column {column.name} is {_type(column.type)} but its source {source_db}.{table.name}.{found.name} "
            f"is {_type(found.type)}: the types must be the same",
            ref.pos,
        )
    return f"{source_db}.{table.name}.{found.name}"


def _type(dtype: ast.DataType) -> str:
    return dtype.name + (f"({dtype.length})" if dtype.length is not None else "")


def alter_column(session: Session, stmt: ast.AlterVirtualColumn) -> Result:
    """A column of a virtual normal or child table reads another source, or none (NULL)."""
    info = session.table(stmt.table)
    if not info.virtual or info.kind == "super":
        raise _fail(f"{info.name} is not a virtual normal or child table", stmt.table.pos)
    column = next((c for c in info.columns if c.name == stmt.column.lower()), None)
    if column is None:
        raise _fail(f"{info.name} has no column {stmt.column}", stmt.column_pos)
    if column.name == info.primary_key:
        raise _fail(f"the timestamp column {column.name} takes no source", stmt.column_pos)
    refs = dict(info.refs or {})
    source = _source(session, info.db, column, stmt.ref)
    if source is None:
        refs.pop(column.name, None)
    else:
        refs[column.name] = source
    with session.warehouse.catalog.transaction() as conn:
        session.warehouse.catalog.set_refs(conn, info.db, info.name, refs)
    return Result(message="Alter OK")


def drop(session: Session, stmt: ast.DropVirtualTables) -> Result:
    infos = []
    for name in stmt.tables:
        info = session.warehouse.find_table(session.db_of(name), name.name.lower())
        if info is None:
            if stmt.if_exists:
                continue
            raise _fail(f"virtual table {session.db_of(name)}.{name.name.lower()} does not exist", name.pos)
        if not info.virtual or info.kind == "super":
            use = "DROP STABLE" if info.kind == "super" else "DROP TABLE"
            raise _fail(f"{info.name} is not a virtual normal or child table: use {use}", name.pos)
        infos.append(info)
    for info in infos:
        session.warehouse.drop_table(info)
    return Result(message="Drop OK")


def refuse_delete(info: TableInfo) -> None:
    """A virtual table stores nothing: DELETE goes to its sources."""
    if info.virtual:
        raise WriteRejectedError(
            f"{info.db}.{info.name} is a virtual table: it reads its sources' columns and stores no rows "
            f"(delete from {sources_text(info)})"
        )


def sources_text(info: TableInfo) -> str:
    """The tables a virtual table reads, for a message."""
    tables = sorted({ref.rsplit(".", 1)[0] for ref in (info.refs or {}).values()})
    return ", ".join(tables) if tables else "its source tables"
