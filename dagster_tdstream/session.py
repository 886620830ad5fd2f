"""A SQL session: executes parsed statements against the warehouse.

Owns the current database, the session time zone and the dispatch of each statement kind
to storage (DDL, INSERT, DELETE, tags), to the query translator + Spark (SELECT), and to the
stream registry (CREATE/DROP/START/STOP STREAM). Every statement is checked whole before it
changes anything, so a rejected statement leaves every table as it was. Does not know about
Dagster: the orchestration layer reads the registry this session writes, and a ``control``
(``orchestration/control.py``) given to the session makes committed stream statements take
effect in a running Dagster.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from .compute.spark import LazySpark
from .compute.udf import function_lookup
from .errors import (
    CatalogError,
    QueryError,
    StreamValidationError,
    SubscriptionError,
    TDStreamError,
    UnknownDatabaseError,
    WriteRejectedError,
)
from .families import continuous_query, legacy_stream, server_options, tsma, tsma_query, udf, vtable
from .families.client_options import ClientOptions
from .families.insert import execute_insert, typed_value
from .families.maintenance import execute_maintain
from .families.writer_insert import run_in_writer
from .results import TSMA_METADATA_KEY, Result
from .sql import ast
from .sql.constants import ConstantContext, evaluate
from .sql.dialect import DIALECTS, as_dialect
from .sql.keep_column_name import keep_column_names
from .sql.parser import parse_script, parse_statement_text
from .sql.text import show_like
from .sql.timeunits import resolve_timezone
from .sql.tokens import split_statements
from .sql.translate import OutputColumn, TranslationContext, translate_select
from .sql.validate import validate_create_stream
from .sql.walk import columns_named, sources
from .storage import vfeed, written
from .storage.catalog import StreamInfo, TableInfo
from .storage.registry import StreamDefinition, load_streams, resolve_stream
from .storage.streamcheck import check_stream_against_catalog
from .storage.system import SYSTEM_DATABASES, SYSTEM_DB, stream_progress
from .storage.types import display_length
from .storage.warehouse import Warehouse

if TYPE_CHECKING:
    from .compute.newest import NewestRows
    from .sql.translate.scope import TranslatedQuery
    from .subscription.consumer import Subscription


class StreamControl(Protocol):
    """The orchestrator's side of stream statements, called once the registry has changed;
    each returns a note for the user (what happened there, or why it could not)."""

    def stream_created(self, stream_key: str) -> str: ...

    def stream_dropped(self, stream_key: str) -> str: ...

    def set_running(self, stream_key: str, running: bool) -> str:
        """STOP/START STREAM."""
        ...

    def reconcile(self, warehouse: Warehouse) -> None:
        """Before streams' status is shown: take switches flipped in the orchestrator's UI."""
        ...

    def hold_reloads(self) -> None:
        """A script creating or dropping several streams: defer what each would reload."""
        ...

    def release_reloads(self) -> str | None:
        """The end of such a script: one reload if any was deferred; its note, or None."""
        ...


def normalize(name: str) -> str:
    """TDengine names are case-insensitive; the catalog stores them in lower case."""
    return name.lower()


class Session:
    def __init__(
        self,
        warehouse: Warehouse | str | None = None,
        *,
        database: str | None = None,
        timezone: str | None = None,
        spark: LazySpark | Any = None,
        clock: Callable[[], int] = time.time_ns,
        control: StreamControl | None = None,
        query_timeout: float | None = None,
        dialect: str = "3.x",
    ) -> None:
        if dialect not in DIALECTS:
            raise QueryError(f"unknown SQL dialect {dialect!r}: expected one of {', '.join(DIALECTS)}")
        self.warehouse = warehouse if isinstance(warehouse, Warehouse) else Warehouse(warehouse)
        self.control = control
        self.database = normalize(database) if database else None
        self.timezone = resolve_timezone(timezone)
        self.spark = spark if isinstance(spark, LazySpark) else LazySpark(session=spark, warehouse=self.warehouse.uri)
        self.clock = clock
        self.query_timeout = query_timeout  # seconds a SELECT may run before it is cancelled
        self.dialect = dialect  # "2.x": INTERVAL queries lead with the window start, as the 2.x client shows
        self._view_counter = 0
        self.options = ClientOptions()  # ALTER LOCAL: querySmaOptimize, maxTsmaCalcDelay, keepColumnName

    # ------------------------------------------------------------------ entry points

    def execute(self, sql: str) -> list[Result]:
        """Run every statement of a script in order; the first error stops the script."""
        return list(self.iter_execute(sql))

    def iter_execute(self, sql: str) -> Iterator[Result]:
        if (ran := run_in_writer(self, sql)) is not None:  # an INSERT the warehouse's writer ran
            yield ran
            return
        # parse the whole script first: a syntax error anywhere runs nothing
        statements = parse_script(sql)
        control = self.control
        if control is None or sum(isinstance(s, ast.CreateStream | ast.DropStream) for s in statements) < 2:
            for stmt in statements:
                yield self.execute_statement(stmt)
            return
        # a code-location reload costs seconds: a script of many streams pays for one, at its end
        # (also when a statement fails: the ones before it are committed)
        control.hold_reloads()
        try:
            for stmt in statements[:-1]:
                yield self.execute_statement(stmt)
            last = self.execute_statement(statements[-1])
        finally:
            note = control.release_reloads()
        yield dataclasses.replace(last, message=f"{last.message}\n{note}") if note else last

    def apply(self, sql: str) -> list[Result]:
        """Run a setup script idempotently: every CREATE acts as CREATE … IF NOT EXISTS, so a
        code location can apply its SQL files on each load."""
        statements = parse_script(sql)
        return [self.execute_statement(_if_not_exists(stmt)) for stmt in statements]

    def query(self, sql: str) -> Result:
        """The result of the last statement of ``sql``."""
        results = self.execute(sql)
        if not results:
            raise QueryError("no statement to run")
        return results[-1]

    def write(self, table: str, frame: Any) -> Result:
        """Write a ``pyarrow.Table`` or pandas DataFrame into ``table`` (``name`` or ``db.name``)
        as one write, with INSERT's checks and update semantics: columns by name, time columns
        as Arrow/pandas timestamps or epochs in the database precision; into a super table with
        a ``tbname`` column, child tables created as needed from their first row's tag columns."""
        from .storage.bulk import write_frame

        db, _, name = table.rpartition(".")
        info = self.table(ast.QualifiedName(name, db or None))
        outcome = write_frame(self.warehouse, info, frame, self.warehouse.database(info.db).precision)
        return Result(message=f"Insert OK, {outcome.rows} row(s) affected", affected=outcome.rows)

    def write_lines(
        self,
        lines: str | Iterable[str],
        *,
        database: str | None = None,
        precision: str = "ns",
        child_table_tag: str | None = None,
    ) -> Result:
        """Write InfluxDB line protocol as TDengine's schemaless insert does (super tables and
        child tables created as needed; ``precision``: the lines' timestamp unit; child tables
        named ``t_<md5 of the tag set>`` or by the value of ``child_table_tag``)."""
        from .families.line_protocol import write_lines

        db = normalize(database) if database else self.db_of()
        text = lines.splitlines() if isinstance(lines, str) else lines
        return write_lines(self, db, text, precision=precision, child_table_tag=child_table_tag)

    def subscribe(
        self,
        target: str,
        *,
        topic: str | None = None,
        restart: bool = False,
        where: str | None = None,
        start: str | int | None = None,
        progress_file: str | Path | None = None,
        progress_dir: str | Path | None = None,
        interval_ms: int = 1000,
    ) -> Subscription:
        """Subscribe to a table (TDengine 2.x): ``target`` is a table name (``where``: a
        condition on its rows) or ``SELECT * | columns FROM t [WHERE …]``; ``start`` a time
        (string or epoch in the precision) before which rows are not returned. The progress is
        the client's: in ``progress_file``, or ``<progress_dir>/<topic>.json`` for a topic
        (``progress_dir`` defaults to ``$TDSTREAM_SUBSCRIPTIONS`` or
        ``~/.tdstream/subscriptions``); ``restart`` ignores it."""

        from .subscription.consumer import Subscription, subscription_spec

        text = target.strip().rstrip(";")
        if not re.match(r"(?i)select\b", text):
            text = f"select * from {text}" + (f" where {where}" if where else "")
        elif where:
            raise SubscriptionError("give the condition in the SELECT's WHERE or as where=, not both")
        stmt = parse_statement_text(split_statements(text)[0], text)
        if not isinstance(stmt, ast.Query) or stmt.unions or not isinstance(stmt.select.source, ast.TableSource):
            raise SubscriptionError(f"subscribe to a table or SELECT … FROM table, not {target!r}")
        try:
            table = self.table(stmt.select.source.table)
        except CatalogError as exc:
            raise SubscriptionError(f"cannot subscribe: {exc}") from None
        ctx = self.constants(table.db)
        begin = None if start is None else evaluate(_start_literal(start), ctx, timestamp=True)
        spec = subscription_spec(stmt.select, table, ctx, int(begin) if begin is not None else None)  # type: ignore[call-overload]
        path = Path(progress_file) if progress_file is not None else None
        if path is None and topic is not None:
            folder = (
                progress_dir or os.environ.get("TDSTREAM_SUBSCRIPTIONS") or Path.home() / ".tdstream" / "subscriptions"
            )
            path = Path(folder) / f"{topic}.json"
        return Subscription(self.warehouse, spec, progress_file=path, restart=restart, interval_ms=interval_ms)

    def check(self, sql: str) -> list[ast.Statement]:
        """Parse and validate without executing: CREATE STREAM is checked against the
        catalog as far as the tables it names exist."""
        statements = []
        for part in split_statements(sql):
            stmt = parse_statement_text(part, sql)
            try:
                if isinstance(stmt, ast.CreateStream):
                    self._validate_stream(stmt)
            except TDStreamError as exc:
                raise exc.located(stmt.pos.line, stmt.pos.column, stmt.text) from None
            statements.append(stmt)
        return statements

    def execute_statement(self, stmt: ast.Statement) -> Result:
        handler = getattr(self, "_exec_" + type(stmt).__name__.lower(), None)
        if handler is None:  # pragma: no cover - every AST statement has a handler
            raise QueryError(f"{type(stmt).__name__} cannot be executed")
        if self.options.keep_column_name:
            stmt = keep_column_names(stmt)
        try:
            return handler(stmt)
        except TDStreamError as exc:
            raise exc.located(stmt.pos.line, stmt.pos.column, stmt.text) from None

    # ------------------------------------------------------------------ helpers

    def db_of(self, name: ast.QualifiedName | None = None) -> str:
        if name is not None and name.db:
            return normalize(name.db)
        if self.database is None:
            raise UnknownDatabaseError("no database selected: USE a database or qualify the name as db.table")
        return self.database

    def table(self, name: ast.QualifiedName) -> TableInfo:
        return self.warehouse.table(self.db_of(name), normalize(name.name))

    def constants(self, db: str) -> ConstantContext:
        return ConstantContext(
            self.warehouse.database(db).precision, self.timezone, self.clock(), negative_epochs=self.dialect == "2.x"
        )

    def _tag_values(self, stable: TableInfo, spec: ast.ChildTableDef, ctx: ConstantContext) -> dict[str, Any]:
        tags = {t.name: t for t in stable.tags}
        names = [normalize(n) for n in spec.tag_names] if spec.tag_names is not None else list(tags)
        if len(names) != len(spec.tag_values):
            raise WriteRejectedError(
                f"{stable.name} has {len(names)} tag(s) named here but {len(spec.tag_values)} value(s) were given"
            )
        values: dict[str, Any] = dict.fromkeys(tags)
        for name, expr in zip(names, spec.tag_values, strict=True):
            tag = tags.get(name)
            if tag is None:
                raise WriteRejectedError(f"super table {stable.name} has no tag {name}")
            values[name] = typed_value(expr, tag, ctx)
        return values

    # ------------------------------------------------------------------ databases

    def _exec_createdatabase(self, stmt: ast.CreateDatabase) -> Result:
        if normalize(stmt.name) in SYSTEM_DATABASES:
            raise CatalogError(
                f"database {normalize(stmt.name)} is a system database: choose another name",
                line=stmt.pos.line,
                column=stmt.pos.column,
            )
        options = dict(stmt.options)
        options.setdefault("PRECISION", stmt.precision)
        created = self.warehouse.create_database(
            normalize(stmt.name), stmt.precision, options, if_not_exists=stmt.if_not_exists
        )
        return Result(message="Create OK" if created else "OK (database exists)")

    def _exec_dropdatabase(self, stmt: ast.DropDatabase) -> Result:
        name = normalize(stmt.name)
        if not stmt.force:
            # TDengine refuses to drop a database that another database's stream reads from
            # (its trigger table or a table its query reads), unless FORCE
            for stream in load_streams(self.warehouse):
                if stream.db != name and name in _databases_read(stream):
                    raise StreamValidationError(
                        f"database {name} is read by stream {stream.key}: drop the stream first, "
                        f"or DROP DATABASE {name} FORCE",
                        line=stmt.pos.line,
                        column=stmt.pos.column,
                    )
        dropped = self.warehouse.drop_database(name, if_exists=stmt.if_exists)
        if self.database == name:
            self.database = None
        return Result(message="Drop OK" if dropped else "OK (no such database)")

    def _exec_usedatabase(self, stmt: ast.UseDatabase) -> Result:
        name = normalize(stmt.name)
        if name not in SYSTEM_DATABASES:
            self.warehouse.database(name)
        self.database = name
        return Result(message=f"Database changed to {name}")

    # ------------------------------------------------------------------ tables

    def _exec_createtable(self, stmt: ast.CreateTable) -> Result:
        db = self.db_of(stmt.table)
        columns = tuple(ast.ColumnDef(normalize(c.name), c.type, c.primary_key, c.comment, c.pos) for c in stmt.columns)
        tags = tuple(ast.ColumnDef(normalize(c.name), c.type, c.primary_key, c.comment, c.pos) for c in stmt.tags)
        if not columns or columns[0].type.name != "TIMESTAMP":
            first = stmt.columns[0] if stmt.columns else None
            raise CatalogError(
                "the first column of a table must be a TIMESTAMP (the primary key)",
                line=first.pos.line if first else None,
                column=first.pos.column if first else None,
            )
        seen: set[str] = set()
        for col in (*columns, *tags):
            if col.name in seen or col.name == "tbname":
                raise CatalogError(
                    f"duplicate or reserved column name {col.name}", line=col.pos.line, column=col.pos.column
                )
            seen.add(col.name)
        if stmt.is_super and not tags:
            raise CatalogError("a super table needs at least one tag")
        virtual = dict(stmt.options).get("VIRTUAL", "0")
        if virtual not in ("0", "1"):
            raise CatalogError(f"VIRTUAL is 0 or 1, not {virtual}")
        if virtual == "1" and not stmt.is_super:
            raise CatalogError("VIRTUAL 1 makes a virtual super table (with TAGS); a virtual normal table is a VTABLE")
        created = self.warehouse.create_table(
            db,
            normalize(stmt.table.name),
            columns,
            tags,
            is_super=stmt.is_super,
            if_not_exists=stmt.if_not_exists,
            virtual=virtual == "1",
        )
        return Result(message="Create OK" if created else "OK (table exists)")

    def _exec_createvirtualtable(self, stmt: ast.CreateVirtualTable) -> Result:
        return vtable.create(self, stmt)

    def _exec_dropvirtualtables(self, stmt: ast.DropVirtualTables) -> Result:
        return vtable.drop(self, stmt)

    def _exec_altervirtualcolumn(self, stmt: ast.AlterVirtualColumn) -> Result:
        return vtable.alter_column(self, stmt)

    def _child(self, spec: ast.ChildTableDef, default_db: str | None = None) -> tuple[TableInfo | None, TableInfo]:
        """The existing child table (or None) and the definition ``spec`` asks for."""
        db = normalize(spec.table.db) if spec.table.db else (default_db or self.db_of())
        stable_db = normalize(spec.stable.db) if spec.stable.db else db
        if stable_db != db:
            raise CatalogError("a child table must be in the database of its super table")
        stable = self.warehouse.table(db, normalize(spec.stable.name))
        if stable.kind != "super":
            raise CatalogError(f"{stable.name} is not a super table")
        if stable.virtual:
            raise CatalogError(f"{stable.name} is a virtual super table: its child tables are CREATE VTABLE … USING it")
        existing = self.warehouse.find_table(db, normalize(spec.table.name))
        values = self._tag_values(stable, spec, self.constants(db))
        return existing, self.warehouse.new_child(db, normalize(spec.table.name), stable, values)

    def _exec_createchildtables(self, stmt: ast.CreateChildTables) -> Result:
        new = []
        for spec in stmt.tables:
            existing, child = self._child(spec)
            if existing is not None:
                if not spec.if_not_exists:
                    raise CatalogError(f"table {child.db}.{child.name} already exists")
                if existing.kind != "child" or existing.stable != child.stable:
                    raise CatalogError(
                        f"table {child.db}.{child.name} exists and is not a child table of {child.stable}"
                    )
                continue
            if any(c.name == child.name and c.db == child.db for c in new):
                raise CatalogError(f"table {child.name} is created twice in this statement")
            new.append(child)
        self.warehouse.create_child_tables(new)
        return Result(message="Create OK")

    def _exec_droptables(self, stmt: ast.DropTables) -> Result:
        infos = []
        for name in stmt.tables:
            if stmt.if_exists and not stmt.by_uid and name.db is None and self.database is None:
                continue  # no database selected: the table cannot exist, and IF EXISTS asks no more
            info = (
                self._table_by_uid(name)
                if stmt.by_uid
                else self.warehouse.find_table(self.db_of(name), normalize(name.name))
            )
            if info is None:
                if stmt.if_exists:
                    continue
                raise CatalogError(f"table {self.db_of(name)}.{normalize(name.name)} does not exist")
            if stmt.is_super and info.kind != "super":
                raise CatalogError(f"{info.name} is not a super table: use DROP TABLE")
            if info.virtual and info.kind != "super":
                raise CatalogError(f"{info.name} is a virtual table: use DROP VTABLE")
            if not stmt.is_super and info.kind == "super" and self.dialect != "2.x":
                # 2.x dropped super tables with DROP TABLE too (DROP STABLE came later)
                raise CatalogError(f"{info.name} is a super table: use DROP STABLE")
            if not stmt.by_uid:  # TDengine drops by uid whatever reads the table (its TSMAs stay listed)
                tsma.refuse_drop_table(self.warehouse, info, name.pos)
            infos.append(info)
        for info in infos:
            if info.kind == "child":
                self._drop_output_tables_of(info)
            self.warehouse.drop_table(info)
        stopped = continuous_query.stopped_by_drop(self, infos)
        if stopped and self.control is not None:
            notes = [self.control.stream_dropped(key) for key in stopped]
            return Result(message="\n".join(["Drop OK", *notes]))
        return Result(message="Drop OK")

    def _table_by_uid(self, name: ast.QualifiedName) -> TableInfo | None:
        """DROP TABLE WITH db.`uid`: the child or normal table with that uid (a super table's
        uid names nothing here, as in TDengine)."""
        db = self.db_of(name)
        if not name.name.isdigit():
            raise CatalogError(
                f"{name.name!r} is not a table uid (DROP TABLE WITH db.`uid` takes the number ins_tables shows)"
            )
        return next(
            (t for t in self.warehouse.catalog.list_tables(db, ["child", "normal"]) if t.uid == int(name.name)), None
        )

    def _drop_output_tables_of(self, child: TableInfo) -> None:
        """DELETE_OUTPUT_TABLE: dropping a child table of a trigger super table drops the
        output child table of its group (streams grouped by tbname)."""
        from .compute.output import Group, child_table_name
        from .triggers.tick import group_identity

        for stream in load_streams(self.warehouse):
            table = stream.trigger_table
            if (
                stream.stmt.option("DELETE_OUTPUT_TABLE") is None
                or table is None
                or table.kind != "super"
                or (table.db, table.name) != (child.db, child.stable)
                or "tbname" not in stream.group_columns
                or stream.output is None
            ):
                continue
            values = [child.name if c == "tbname" else child.tag_values.get(c) for c in stream.group_columns]
            group = Group(tuple(values), group_identity(self.warehouse, stream, values))
            output = self.warehouse.find_table(stream.output[0], child_table_name(stream, group))
            if output is not None and output.kind == "child":
                self.warehouse.drop_table(output)

    def _exec_altertags(self, stmt: ast.AlterTags) -> Result:
        info = self.table(stmt.table)
        if info.kind != "super":
            raise CatalogError(f"{info.name} is not a super table: only super tables have tag definitions")
        names = {c.name for c in (*info.columns, *info.tags)}
        if stmt.added is not None:
            tag = dataclasses.replace(stmt.added, name=normalize(stmt.added.name))
            if tag.name in names or tag.name == "tbname":
                raise CatalogError(
                    f"{info.name} already has a column or tag named {tag.name}",
                    line=tag.pos.line or None,
                    column=tag.pos.column or None,
                )
            tags = (*info.tags, tag)
        else:
            name = normalize(stmt.dropped or "")
            if name not in {t.name for t in info.tags}:
                raise CatalogError(f"super table {info.name} has no tag {name}")
            if len(info.tags) == 1:
                raise CatalogError(f"cannot drop {name}: a super table keeps at least one tag")
            tsma.refuse_schema_change(self.warehouse, info, "tag", name, stmt.pos)
            for stream in load_streams(self.warehouse):
                table = stream.trigger_table
                if (
                    table is not None
                    and (table.db, table.name) == (info.db, info.name)
                    and name in stream.group_columns
                ):
                    raise CatalogError(f"cannot drop tag {name}: stream {stream.key} partitions by it")
            tags = tuple(t for t in info.tags if t.name != name)
        with self.warehouse.catalog.transaction() as conn:
            self.warehouse.catalog.set_tags(conn, info.db, info.name, tags)
            if stmt.dropped is not None:
                dropped = normalize(stmt.dropped)
                for child in self.warehouse.catalog.child_tables(info.db, info.name, conn):
                    values = {k: v for k, v in child.tag_values.items() if k != dropped}
                    self.warehouse.catalog.set_tag_values(conn, child.db, child.name, values)
        return Result(message="Alter OK")

    def _exec_altertablesettags(self, stmt: ast.AlterTableSetTags) -> Result:
        info = self.table(stmt.table)
        if info.kind != "child":
            raise CatalogError(f"{info.name} is not a child table: only child tables have tag values")
        tsma.refuse_tag_values(self.warehouse, info, stmt.pos)
        tags = {t.name: t for t in info.tags}
        ctx = self.constants(info.db)
        values = {}
        for name, expr in stmt.assignments:
            tag = tags.get(normalize(name))
            if tag is None:
                raise CatalogError(f"{info.stable} has no tag {name} (tags: {', '.join(tags)})")
            values[tag.name] = typed_value(expr, tag, ctx)
        for stream in load_streams(self.warehouse):
            table = stream.trigger_table
            grouping = set(values) & set(stream.group_columns)
            if table is not None and table.db == info.db and table.name in (info.name, info.stable) and grouping:
                raise StreamValidationError(
                    f"tag {', '.join(sorted(grouping))} of {info.db}.{info.name} groups stream {stream.key} "
                    "(PARTITION BY): TDengine does not allow changing it while the stream exists",
                    line=stmt.pos.line,
                    column=stmt.pos.column,
                )
        self.warehouse.set_tags(info, values)
        return Result(message="Alter OK")

    # ------------------------------------------------------------------ writes

    def _exec_maintaindatabase(self, stmt: ast.MaintainDatabase) -> Result:
        return execute_maintain(self, stmt)

    def _exec_insert(self, stmt: ast.Insert) -> Result:
        return execute_insert(self, stmt)

    def _exec_delete(self, stmt: ast.Delete) -> Result:
        info = self.table(stmt.table)
        vtable.refuse_delete(info)
        predicate = None
        if stmt.where is not None:
            from .storage.predicate import delete_predicate

            predicate = delete_predicate(stmt.where, info, self.constants(info.db))
        deleted = self.warehouse.delete(info, predicate)
        return Result(message=f"Delete OK, {deleted} row(s) affected", affected=deleted)

    # ------------------------------------------------------------------ SHOW / DESCRIBE

    def _exec_show(self, stmt: ast.Show) -> Result:
        from .storage.system import system_schema, system_table

        name = {
            "DATABASES": "ins_databases",
            "STABLES": "ins_stables",
            "TABLES": "ins_tables",
            "VTABLES": "ins_tables",
            "STREAMS": "ins_streams",
            "TSMAS": "ins_tsmas",
            "FUNCTIONS": "ins_functions",
        }[stmt.what]
        db = None
        if stmt.what not in ("DATABASES", "FUNCTIONS"):  # the cluster's, not a database's
            db = normalize(stmt.db) if stmt.db else self.db_of()
            if db not in SYSTEM_DATABASES:  # USEd and listed like any database, never created
                self.warehouse.database(db)
        if stmt.what == "STREAMS" and self.control is not None:
            self.control.reconcile(self.warehouse)
        if stmt.what == "STREAMS" and self.dialect == "2.x" and stmt.like is None:
            return continuous_query.show_streams_2x(self, db)  # type: ignore[arg-type]
        table = system_table(self.warehouse, name, db)
        if stmt.what in ("TABLES", "VTABLES"):
            table = _tables_shown(table, stmt)
        if stmt.like is not None:
            keep = [show_like(str(v), stmt.like) for v in table.column(0).to_pylist()]
            table = table.filter(pa.array(keep, pa.bool_()))
        types = {c.name: c.type.name for c in system_schema(name)}
        arrays = [
            col.cast(pa.timestamp("ms", tz="UTC")) if types[column] == "TIMESTAMP" else col
            for column, col in zip(table.column_names, table.columns, strict=True)
        ]
        result = pa.table(arrays, names=table.column_names)
        return Result(table=result, message=f"Query OK, {result.num_rows} row(s) in set")

    def _exec_describe(self, stmt: ast.Describe) -> Result:
        info = self.table(stmt.table)
        rows = [[c.name, str(c.type.name), display_length(c.type), ""] for c in info.columns]
        rows += [[t.name, str(t.type.name), display_length(t.type), "TAG"] for t in info.tags]
        if info.virtual:  # TDengine adds each column's source
            refs = info.refs or {}
            return _table_result(
                ["field", "type", "length", "note", "ref"], [[*row, refs.get(str(row[0]), "")] for row in rows]
            )
        return _table_result(["field", "type", "length", "note"], rows)

    # ------------------------------------------------------------------ queries

    def _exec_query(self, stmt: ast.Query) -> Result:
        from .compute.union import union

        selects = [stmt.select, *(select for _, select in stmt.unions)]
        if self.control is not None and any(
            isinstance(source, ast.TableSource) and normalize(source.table.db or "") == SYSTEM_DB
            for select in selects
            for source in sources(select)
        ):
            self.control.reconcile(self.warehouse)
        answers = [self._answer(select) for select in selects]
        table = answers[0][0]
        if stmt.unions:
            alls = tuple(all_ for all_, _ in stmt.unions)
            table = union([t for t, _ in answers], alls, stmt.order_by, stmt.limit, stmt.offset)
        read = sorted({key for _, key in answers if key is not None})
        if not read:
            return Result(table=table, message=f"Query OK, {table.num_rows} row(s) in set")
        # which TSMAs answered: in the message and in the result's schema metadata
        names = ", ".join(read)
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), TSMA_METADATA_KEY: names.encode()})
        return Result(table=table, message=f"Query OK, {table.num_rows} row(s) in set (read from TSMA {names})")

    def _answer(self, select: ast.Select) -> tuple[pa.Table, str | None]:
        """One SELECT's result, and the TSMA it read (None: the tables' rows)."""
        from .compute.newest import newest_rows

        select = as_dialect(select, self.dialect)
        # a last-row query first reads only the newest files; if that cannot be proven to be
        # the whole answer, the query runs again over the whole table
        newest = newest_rows(select, self.warehouse, self.database)
        answer = self._run_select(select, newest) if newest is not None else None
        # TDengine tries the last-row path first, then a TSMA (its documented order)
        chosen = self._tsma_for(select) if answer is None else None
        if answer is None:
            answer = self._run_select(select, None, chosen)
        assert answer is not None  # without a floor the rows read are the answer
        arrow, translated = answer
        table = to_result_table(arrow, translated.columns, translated.precision)
        return table, chosen[1].key if chosen is not None else None

    def _tsma_for(self, select: ast.Select) -> tuple[TableInfo, tsma_query.TsmaChoice] | None:
        """The TSMA the query reads instead of its table's rows, if the session lets it
        (querySmaOptimize) and one covers it."""
        if not self.options.query_sma_optimize or not isinstance(select.source, ast.TableSource):
            return None
        name = select.source.table
        db = self.db_of(name)
        if db == SYSTEM_DB:
            return None
        table = self.warehouse.table(db, name.name.lower())
        constants = ConstantContext(self.warehouse.database(db).precision, self.timezone, self.clock())
        choice = tsma_query.choose(self.warehouse, select, table, constants, self.options.max_tsma_calc_delay)
        return (table, choice) if choice is not None else None

    def _run_select(
        self,
        select: ast.Select,
        newest: NewestRows | None,
        tsma_read: tuple[TableInfo, tsma_query.TsmaChoice] | None = None,
    ) -> tuple[pa.Table, TranslatedQuery] | None:
        """The query's rows (reading only above ``newest``'s floor when given; None when
        those rows are not proven to be the whole answer), its table read as a TSMA's states
        when ``tsma_read`` is given."""
        from .compute.query import run_query
        from .compute.tsma_final import answer as answer_from_states
        from .compute.tsma_states import read_states
        from .storage.spark_read import SparkViews

        # a statement into several tables whose writer died between their commits is rolled
        # forward before this reads them, so a query never sees part of one (a statement still
        # being written holds the tables' locks: this waits for it, then finds it done)
        self.warehouse.recover_writes()
        if newest is not None and not newest.covers(self.warehouse):
            return None
        floors = newest.floors if newest else None
        views = SparkViews(self.spark.get(), self.warehouse, self.database, floors, columns_named(select))
        try:
            merged = read_states(views, *tsma_read) if tsma_read is not None else None
            functions = function_lookup(self.warehouse, views.spark)
            ctx = TranslationContext(views.resolve, self.timezone, self.clock(), functions=functions)
            translated = translate_select(select, ctx)
            arrow = None
            if merged is not None and tsma_read is not None:  # a plain lookup is finished here
                table, choice = tsma_read
                precision = self.warehouse.database(table.db).precision
                arrow = answer_from_states(select, table, choice.shape, merged, precision)
            if arrow is None:
                arrow = run_query(views, translated, timeout_seconds=self.query_timeout)
        finally:
            views.close()
        if newest is not None and not newest.complete(arrow):
            return None
        return arrow, translated

    # ------------------------------------------------------------------ streams

    def _validate_stream(self, stmt: ast.CreateStream) -> str:
        validate_create_stream(stmt, timezone=self.timezone.key)
        db = self.db_of(stmt.name)
        self.warehouse.database(db)
        check_stream_against_catalog(stmt, db, self.warehouse, self.timezone)
        return db

    def _exec_createstream(self, stmt: ast.CreateStream) -> Result:
        db = self.db_of(stmt.name)
        name = normalize(stmt.name.name)
        if self.warehouse.catalog.get_stream(db, name) is not None:
            # checked before the catalog rules: the stream's own output table exists by now
            if stmt.if_not_exists:
                return Result(message="OK (stream exists)")
            raise StreamValidationError(f"stream {db}.{name} already exists")
        self._validate_stream(stmt)
        start_offset = self.stream_start_offset(stmt, db)
        self.check_query_runs(stmt, db, name, start_offset)
        with self.warehouse.catalog.transaction() as conn:
            self.warehouse.catalog.add_stream(conn, db, name, stmt.text, start_offset, self.timezone.key)
        return self.told("Create OK", lambda control: control.stream_created(f"{db}.{name}"))

    def _exec_createcontinuousquery(self, stmt: ast.CreateContinuousQuery) -> Result:
        return continuous_query.create(self, stmt)

    def _exec_createlegacystream(self, stmt: ast.CreateLegacyStream) -> Result:
        return legacy_stream.create(self, stmt)

    def _exec_createsnode(self, stmt: ast.CreateSnode) -> Result:
        return legacy_stream.create_snode(stmt)

    def _exec_createtsma(self, stmt: ast.CreateTsma) -> Result:
        return tsma.create(self, stmt)

    def _exec_droptsma(self, stmt: ast.DropTsma) -> Result:
        return tsma.drop(self, stmt)

    def _exec_alterlocal(self, stmt: ast.AlterLocal) -> Result:
        return Result(message=self.options.alter(stmt))

    def _exec_alterdnode(self, stmt: ast.AlterDnode) -> Result:
        return server_options.alter(self.warehouse, stmt)

    def _exec_showvariables(self, stmt: ast.ShowVariables) -> Result:
        return server_options.show(self.warehouse, stmt)

    def _exec_createfunction(self, stmt: ast.CreateFunction) -> Result:
        return udf.create(self.warehouse, stmt)

    def _exec_dropfunction(self, stmt: ast.DropFunction) -> Result:
        return udf.drop(self.warehouse, stmt)

    def _exec_killstream(self, stmt: ast.KillStream) -> Result:
        return continuous_query.kill(self, stmt)

    def check_query_runs(self, stmt: ast.CreateStream, db: str, name: str, start_offset: int) -> None:
        """The stream's query translated as its runs will translate it: what this build cannot
        compute is rejected now, with its position, instead of at the first trigger."""
        from .compute.run import check_stream_query

        info = StreamInfo(db, name, stmt.text, "Running", 0, start_offset, self.timezone.key)
        check_stream_query(self.warehouse, resolve_stream(self.warehouse, info), self.timezone)

    def stream_start_offset(self, stmt: ast.CreateStream, db: str) -> int:
        """Where in the trigger table's WAL the stream starts: at its beginning when the stream
        fills history, otherwise at the next commit (data written before CREATE is history)."""
        if stmt.trigger_table is None:
            return 0
        table = self.table(ast.QualifiedName(stmt.trigger_table.name, stmt.trigger_table.db or db))
        # (a virtual table's feed is built now: its rows so far are the stream's history)
        newest = vfeed.newest_version(self.warehouse, table)
        if stmt.option("FILL_HISTORY") or stmt.option("FILL_HISTORY_FIRST"):
            return 0
        return newest + 1

    def told(self, message: str, tell: Callable[[StreamControl], str]) -> Result:
        """The result of a committed stream statement, with what the orchestrator made of it."""
        if self.control is None:
            return Result(message=message)
        return Result(message=f"{message}\n{tell(self.control)}")

    def _stream(self, name: ast.QualifiedName, if_exists: bool) -> tuple[str, str] | None:
        if name.db is None and self.database is None:
            # legacy stream names are not in a database: with none selected, the name alone
            # finds the stream when one database has it
            found = [s for s in self.warehouse.catalog.list_streams() if s.name == normalize(name.name)]
            if len(found) == 1:
                return found[0].db, found[0].name
            if not found and if_exists:
                return None
        db, stream = self.db_of(name), normalize(name.name)
        if self.warehouse.catalog.get_stream(db, stream) is None:
            if if_exists:
                return None
            raise CatalogError(f"stream {db}.{stream} does not exist")
        return db, stream

    def _exec_dropstream(self, stmt: ast.DropStream) -> Result:
        found = self._stream(stmt.name, stmt.if_exists)
        if found is not None:
            tsma.refuse_drop_stream(self.warehouse, *found, stmt.name.pos)
            info = self.warehouse.catalog.get_stream(*found)
            assert info is not None
            table = resolve_stream(self.warehouse, info).trigger_table
            with self.warehouse.catalog.transaction() as conn:
                self.warehouse.catalog.drop_stream(conn, *found)
            written.drop(self.warehouse, table, info.key)
            return self.told("Drop OK", lambda control: control.stream_dropped(".".join(found)))
        return Result(message="Drop OK")

    def _exec_stopstream(self, stmt: ast.StopStream) -> Result:
        found = self._stream(stmt.name, stmt.if_exists)
        if found is not None:
            self.warehouse.catalog.set_stream_status(*found, "Stopped")
            return self.told("Stop OK", lambda control: control.set_running(".".join(found), False))
        return Result(message="Stop OK")

    def _exec_startstream(self, stmt: ast.StartStream) -> Result:
        found = self._stream(stmt.name, stmt.if_exists)
        if found is not None:
            info = self.warehouse.catalog.get_stream(*found)
            assert info is not None
            resume_from = None
            if stmt.ignore_untreated and info.status == "Stopped":
                # the data written while stopped is not processed: reading resumes after it
                stream = resolve_stream(self.warehouse, info)
                table = stream.trigger_table
                if table is not None:
                    resume_from = vfeed.newest_version(self.warehouse, table) + 1
            self.warehouse.catalog.set_stream_status(*found, "Running", resume_from)
            return self.told("Start OK", lambda control: control.set_running(".".join(found), True))
        return Result(message="Start OK")

    def _exec_recalculatestream(self, stmt: ast.RecalculateStream) -> Result:
        found = self._stream(stmt.name, False)
        assert found is not None
        info = self.warehouse.catalog.get_stream(*found)
        assert info is not None
        stream = resolve_stream(self.warehouse, info).stmt
        if isinstance(stream.trigger, ast.PeriodTrigger):
            raise StreamValidationError("RECALCULATE does not apply to PERIOD streams (they have no event time)")
        if isinstance(stream.trigger, ast.CountTrigger) and stmt.end is None:
            raise StreamValidationError("RECALCULATE of a COUNT_WINDOW stream needs both FROM and TO")
        ctx = self.constants(found[0])
        start = evaluate(stmt.start, ctx, timestamp=True)
        end = evaluate(stmt.end, ctx, timestamp=True) if stmt.end is not None else None
        if end is not None and end <= start:  # type: ignore[operator]
            raise StreamValidationError("RECALCULATE range is empty: TO must be after FROM")
        counted = isinstance(stream.trigger, ast.CountTrigger)
        # read only when needed: the default TO, and COUNT_WINDOW's bound
        progress = (
            stream_progress(self.warehouse, resolve_stream(self.warehouse, info)) if end is None or counted else None
        )
        if end is None:  # up to the stream's progress: the windows it has computed so far
            if progress is None:
                raise StreamValidationError(f"stream {info.key} has computed nothing yet: give RECALCULATE … TO")
            end = progress + 1
        elif counted and (progress is None or end > progress + 1):  # type: ignore[operator]
            # the spec: a COUNT_WINDOW recalculation covering a range the stream has not computed
            # yet is ignored as a whole (its windows would be cut differently from the live ones)
            return Result(
                message=f"Recalculate ignored: COUNT_WINDOW stream {info.key} recalculates only the range it has "
                "computed, and this one reaches past its progress"
            )
        self.warehouse.catalog.request_recalculation(info.key, int(start), int(end))  # type: ignore[arg-type]
        return Result(message="Recalculate OK (a backfill of the stream's asset is launched on its next sensor tick)")


def _start_literal(start: str | int) -> ast.Literal:
    return ast.Literal(start, "int") if isinstance(start, int) else ast.Literal(str(start), "string")


def _if_not_exists(stmt: ast.Statement) -> ast.Statement:
    import dataclasses

    if isinstance(stmt, ast.CreateDatabase | ast.CreateTable | ast.CreateStream):
        return _keep_source(dataclasses.replace(stmt, if_not_exists=True), stmt)
    if isinstance(stmt, ast.CreateChildTables):
        tables = tuple(dataclasses.replace(t, if_not_exists=True) for t in stmt.tables)
        return _keep_source(dataclasses.replace(stmt, tables=tables), stmt)
    return stmt


def _keep_source(new: ast.Statement, old: ast.Statement) -> ast.Statement:
    object.__setattr__(new, "pos", old.pos)
    object.__setattr__(new, "text", old.text)
    return new


def to_result_table(arrow: pa.Table, columns: tuple[OutputColumn, ...], precision: str) -> pa.Table:
    """Name the result columns as TDengine does and type timestamp columns in the precision."""
    arrays = []
    for i, col in enumerate(columns):
        array = arrow.column(i)
        if col.is_timestamp:
            array = _epochs(array).cast(pa.timestamp(precision, tz="UTC"))
        arrays.append(array)
    return pa.table(arrays, names=[c.name for c in columns]) if arrays else pa.table({})


def _epochs(array: pa.ChunkedArray) -> pa.ChunkedArray:
    """A timestamp column's values as int64 epochs; arithmetic in doubles (``now - 1e20``)
    can leave the 64-bit range, and such a value is NULL rather than a failed query."""
    if not pa.types.is_floating(array.type):
        return array.cast(pa.int64())
    fits = pc.and_(pc.is_finite(array), pc.less(pc.abs(array), 2.0**63))
    return pc.if_else(fits, array, pa.scalar(None, array.type)).cast(pa.int64(), safe=False)


def _tables_shown(table: pa.Table, stmt: ast.Show) -> pa.Table:
    """SHOW TABLES lists the tables that store rows; SHOW [NORMAL | CHILD] VTABLES the virtual
    ones, by name alone (as TDengine shows them)."""
    virtual = pc.starts_with(table.column("type"), "VIRTUAL_")
    if stmt.what == "TABLES":
        return table.filter(pc.invert(virtual))
    wanted = virtual
    if stmt.kind is not None:
        wanted = pc.and_(wanted, pc.equal(table.column("type"), f"VIRTUAL_{stmt.kind}_TABLE"))
    return table.filter(wanted).select(["table_name"])


def _table_result(columns: list[str], rows: list[list[Any]], timestamps: set[str] | None = None) -> Result:
    arrays = []
    for i, name in enumerate(columns):
        values = [row[i] for row in rows]
        if timestamps and name in timestamps:
            arrays.append(pa.array(values, pa.int64()).cast(pa.timestamp("ms", tz="UTC")))
        else:
            arrays.append(pa.array(values))
    table = pa.table(arrays, names=columns)
    return Result(table=table, message=f"Query OK, {len(rows)} row(s) in set")


def _databases_read(stream: StreamDefinition) -> set[str]:
    """The databases a stream reads: its trigger table's and those of the tables its query
    reads (unqualified names are in the stream's database)."""
    names = set()
    if stream.stmt.trigger_table is not None:
        names.add(normalize(stream.stmt.trigger_table.db or stream.db))
    if stream.stmt.query is not None:
        for source in sources(stream.stmt.query):
            if isinstance(source, ast.TableSource):
                names.add(normalize(source.table.db or stream.db))
    return names
