"""The warehouse catalog: metadata in a SQL database through SQLAlchemy.

Owns databases (precision and options), table definitions (super, child, normal tables),
child tables' tag values (the companion rows joined at read time), the per-child-table
write watermark that lets ordered appends skip the merge, and the stream registry. SQLite
in the warehouse by default, any SQLAlchemy URL (PostgreSQL in production) by config.
Must not touch Delta files: ``tables.py`` does, and the warehouse keeps the two in step.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    and_,
    bindparam,
    create_engine,
    delete,
    event,
    func,
    insert,
    select,
    update,
)

from ..errors import CatalogError
from ..sql.ast import ColumnDef
from .types import type_from_json, type_to_json

_meta = MetaData()

# a stream's last_error starts with this when its trigger tick failed (a run's error does not)
TICK_ERROR = "trigger tick failed: "

databases_table = Table(
    "tds_databases",
    _meta,
    Column("name", String(192), primary_key=True),
    Column("precision", String(2), nullable=False),
    Column("options", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

tables_table = Table(
    "tds_tables",
    _meta,
    Column("db", String(192), primary_key=True),
    Column("name", String(192), primary_key=True),
    Column("kind", String(8), nullable=False),  # super | child | normal
    Column("stable", String(192)),
    Column("uid", BigInteger, nullable=False),
    Column("columns", Text),
    Column("tags", Text),
    Column("tag_values", Text),
    Column("created_at", BigInteger, nullable=False),
    # a virtual table's column sources, JSON {column: "db.table.column"} ({} for a virtual
    # super table); NULL for a table that stores its rows
    Column("refs", Text),
    # a super table's children are read by (db, stable) for every history, live-children
    # filter and DROP STABLE: without this index each read scanned every table of the
    # database (1,000 children among 40,000 tables: 76 ms a read)
    Index("tds_tables_children", "db", "stable", "name"),
)

write_state_table = Table(
    "tds_write_state",
    _meta,
    # one row per (physical Delta table, child table): the newest timestamp written and the
    # Delta version that watermark is valid for
    Column("db", String(192), primary_key=True),
    Column("storage", String(192), primary_key=True),
    Column("tbname", String(192), primary_key=True),
    Column("last_ts", BigInteger, nullable=False),
    Column("version", Integer, nullable=False),
    # where the child table's keys may lie (``keyspans.py``, JSON); NULL: anywhere up to last_ts
    Column("spans", Text),
)

verified_table = Table(
    "tds_verified_versions",
    _meta,
    # the newest Delta version of a physical table whose writes the watermarks above account
    # for; a table at another version was written by someone who did not record (a crash
    # between commit and record, an outside writer), so its watermarks are recomputed
    Column("db", String(192), primary_key=True),
    Column("storage", String(192), primary_key=True),
    Column("version", Integer, nullable=False),
)

streams_table = Table(
    "tds_streams",
    _meta,
    Column("db", String(192), primary_key=True),
    Column("name", String(192), primary_key=True),
    Column("sql", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    # the first WAL offset of the trigger table the stream reads (history starts at 0)
    Column("start_offset", Integer, nullable=False, default=0),
    # the session time zone at CREATE: the stream's time literals are read in it
    Column("timezone", String(64)),
    # why the stream's last trigger tick or run failed (cleared by the next success)
    Column("last_error", Text),
    # START STREAM … IGNORE UNTREATED: the first WAL offset to read after the restart (the
    # offsets written while the stream was stopped are skipped)
    Column("resume_from", Integer),
    # NOTIFY … ON_FAILURE_PAUSE: why the stream is paused (its notifications cannot be
    # delivered); no run starts until delivery succeeds again
    Column("paused", Text),
    # a number for the stream, unique in the catalog (2.x SHOW STREAMS shows it, KILL STREAM
    # takes it); NULL for streams created before it existed
    Column("stream_id", Integer),
)

checkpoints_table = Table(
    "tds_checkpoints",
    _meta,
    # trigger state after processing the WAL up to ``offset``: a sensor tick that dies after
    # writing it but before Dagster stores the cursor replays from the previous one
    Column("stream", String(400), primary_key=True),
    Column("offset", Integer, primary_key=True),
    Column("state", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

recalculations_table = Table(
    "tds_recalculations",
    _meta,
    # RECALCULATE STREAM requests: the stream's sensor turns each into a Dagster backfill
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("stream", String(400), nullable=False),
    Column("start", BigInteger, nullable=False),  # event time, the trigger table's precision
    Column("end", BigInteger, nullable=False),  # exclusive
    Column("status", String(10), nullable=False),  # pending | requested
    Column("created_at", BigInteger, nullable=False),
)

triggers_table = Table(
    "tds_triggers",
    _meta,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("stream", String(400), nullable=False),
    Column("trigger_id", String(200), nullable=False),  # stable: the window's open and close share it
    Column("event", String(24), nullable=False),
    Column("group_id", BigInteger, nullable=False),
    Column("group_values", Text, nullable=False),  # JSON list, in PARTITION BY order
    Column("wstart", BigInteger),
    Column("wend", BigInteger),
    Column("row_count", BigInteger),
    Column("detail", Text),  # JSON: what notifications report (states, condition index, values)
    Column("offset", Integer, nullable=False),  # the WAL offset whose rows fired it
    Column("fired_at", BigInteger, nullable=False),  # processing time, ns (_tlocaltime)
    Column("status", String(8), nullable=False),  # pending | done
    Column("run_id", String(64)),
    UniqueConstraint("stream", "trigger_id", "event", "offset", name="tds_triggers_once"),
    # the live worker asks for the streams with pending triggers several times a second, and
    # done triggers pile up: the pending ones are found through this index, not a scan
    Index("tds_triggers_status", "status", "stream"),
)

notifications_table = Table(
    "tds_notifications",
    _meta,
    # the outbox: notification events a run recorded in the transaction that finished its
    # triggers, delivered afterwards (op hook, then the notification sensor) in id order
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("stream", String(400), nullable=False),
    Column("url", Text, nullable=False),
    Column("source", String(64), nullable=False),  # queue row id (or run-local key) + event
    Column("trigger_id", String(200), nullable=False),
    Column("event", Text, nullable=False),  # the event object's JSON, as sent
    Column("status", String(8), nullable=False),  # pending | sent | dropped
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_attempt", BigInteger, nullable=False, default=0),  # epoch ms
    Column("last_error", Text),
    Column("created_at", BigInteger, nullable=False),
    Column("sent_at", BigInteger),
    UniqueConstraint("stream", "url", "source", name="tds_notifications_once"),
)

settings_table = Table(
    "tds_settings",
    _meta,
    # facts about the warehouse's deployment, e.g. which Dagster instance and webserver run
    # its streams (recorded by the code location, read by SQL sessions to reach them)
    Column("key", String(200), primary_key=True),
    Column("value", Text, nullable=False),
)


@dataclass(frozen=True)
class DatabaseInfo:
    name: str
    precision: str
    options: dict[str, str]
    created_at: int


# the warehouse's own Delta tables (a virtual table's feed, a stream's replaced rows) live under
# names no table may take
RESERVED_PREFIX = "."
VIRTUAL_FEED_PREFIX = RESERVED_PREFIX + "vfeed."


@dataclass(frozen=True)
class TableInfo:
    db: str
    name: str
    kind: str  # super | child | normal
    uid: int
    created_at: int
    stable: str | None = None
    columns: tuple[ColumnDef, ...] = ()
    tags: tuple[ColumnDef, ...] = ()
    tag_values: dict[str, Any] = field(default_factory=dict)
    # a virtual table: each column's source "db.table.column" (a column without one reads
    # NULL); {} for a virtual super table; None for a table that stores its rows
    refs: dict[str, str] | None = None

    @property
    def virtual(self) -> bool:
        return self.refs is not None

    @property
    def storage_name(self) -> str:
        """The Delta table that holds this table's rows (a child's rows live in its super table);
        a virtual table's feed, kept while a stream triggers on it (``storage/vfeed.py``)."""
        own = self.stable if self.kind == "child" and self.stable else self.name
        return VIRTUAL_FEED_PREFIX + own if self.virtual else own

    @property
    def primary_key(self) -> str:
        return self.columns[0].name


# The statements on every INSERT's path, built once with bound parameters: building a
# SQLAlchemy statement per call cost 0.25 ms of a 0.29 ms table lookup (SQLite answers in
# microseconds), a quarter of a single-row INSERT's catalog time.
_PARENT = tables_table.alias("parent")
_NAMED = and_(tables_table.c.db == bindparam("db"), tables_table.c.name.in_(bindparam("names", expanding=True)))
_TABLES_NAMED = (
    select(tables_table, _PARENT.c.columns.label("parent_columns"), _PARENT.c.tags.label("parent_tags"))
    .select_from(
        # a child table's columns and tags are its super table's: joined in the same read
        tables_table.outerjoin(
            _PARENT, and_(_PARENT.c.db == tables_table.c.db, _PARENT.c.name == tables_table.c.stable)
        )
    )
    .where(_NAMED)
)
_NAMES_TAKEN = select(tables_table.c.name).where(_NAMED)
_DATABASE_NAMED = select(databases_table).where(databases_table.c.name == bindparam("name"))
_WRITE_STATES = select(write_state_table).where(
    and_(
        write_state_table.c.db == bindparam("db"),
        write_state_table.c.storage == bindparam("storage"),
        write_state_table.c.tbname.in_(bindparam("names", expanding=True)),
    )
)


def _children(*columns: Any) -> Any:
    """``columns`` of a super table's child tables (parameters ``db``, ``stable``), by name."""
    return (
        select(*columns)
        .where(and_(tables_table.c.db == bindparam("db"), tables_table.c.stable == bindparam("stable")))
        .order_by(tables_table.c.name)
    )


_CHILDREN = _children(tables_table)
_CHILD_TAG_VALUES = _children(tables_table.c.name, tables_table.c.tag_values)
_CHILD_UIDS = _children(tables_table.c.name, tables_table.c.uid)
_VERIFIED = select(verified_table.c.version).where(
    and_(verified_table.c.db == bindparam("db"), verified_table.c.storage == bindparam("storage"))
)


def _named_rows(conn: Connection, statement: Any, db: str, names: Iterable[str]) -> list[Any]:
    """``statement``'s rows for the tables ``names`` of ``db``, 500 names a read (older SQLite
    builds take at most 999 bound parameters)."""
    wanted, rows = sorted(set(names)), []
    for i in range(0, len(wanted), 500):
        rows += conn.execute(statement, {"db": db, "names": wanted[i : i + 500]}).all()
    return rows


@functools.cache
def _record_statements(dialect: str) -> tuple[Any, Any] | None:
    """The dialect's upserts of a table's accounted version and of its child tables' write
    marks (None: the dialect has no upsert)."""
    upsert = _upsert(dialect)
    if upsert is None:
        return None
    verified = upsert(verified_table)
    state = upsert(write_state_table)
    return (
        verified.on_conflict_do_update(index_elements=["db", "storage"], set_={"version": verified.excluded.version}),
        state.on_conflict_do_update(
            index_elements=["db", "storage", "tbname"],
            set_={
                "last_ts": state.excluded.last_ts,
                "version": state.excluded.version,
                "spans": state.excluded.spans,
            },
        ),
    )


def sources_by_table(
    info: TableInfo, columns: Iterable[ColumnDef]
) -> dict[tuple[str, str], list[tuple[ColumnDef, str]]]:
    """A virtual table's ``columns`` that have a source, by source (db, table): each with the
    source column it reads."""
    by_table: dict[tuple[str, str], list[tuple[ColumnDef, str]]] = {}
    for column in columns:
        ref = (info.refs or {}).get(column.name)
        if ref is not None:
            db, table, source_column = ref.split(".")
            by_table.setdefault((db, table), []).append((column, source_column))
    return by_table


def check_virtual_source(info: TableInfo, pairs: Iterable[tuple[ColumnDef, str]], source: TableInfo) -> None:
    """A virtual table's columns (with the source column each reads) against their source as it
    is now: a column gone or of another type since is an error naming both."""
    present = {c.name: c for c in source.columns}
    for column, source_column in pairs:
        found = present.get(source_column)
        if found is None or found.type != column.type:
            now = "is gone" if found is None else f"is now {found.type.name}"
            raise CatalogError(
                f"virtual table {info.db}.{info.name}: column {column.name} reads "
                f"{source.db}.{source.name}.{source_column}, which {now} (the column is {column.type.name})"
            )


@dataclass(frozen=True)
class StreamInfo:
    db: str
    name: str
    sql: str
    status: str
    created_at: int
    start_offset: int = 0
    timezone: str | None = None
    last_error: str | None = None
    resume_from: int | None = None
    paused: str | None = None
    stream_id: int | None = None

    @property
    def key(self) -> str:
        return f"{self.db}.{self.name}"


@dataclass(frozen=True)
class Notification:
    """One event for one URL in the outbox (``event`` is its JSON text)."""

    stream: str
    url: str
    source: str  # unique per stream and URL: what recorded it (a rerun records nothing twice)
    trigger_id: str
    event: str
    id: int | None = None
    attempts: int = 0
    due: bool = True


def _stream_info(row: Any) -> StreamInfo:
    return StreamInfo(
        row.db,
        row.name,
        row.sql,
        row.status,
        row.created_at,
        row.start_offset,
        row.timezone,
        row.last_error,
        row.resume_from,
        row.paused,
        row.stream_id,
    )


def _database_info(row: Any) -> DatabaseInfo:
    return DatabaseInfo(row.name, row.precision, json.loads(row.options), row.created_at)


def _named_info(row: Any) -> TableInfo:
    """A ``_TABLES_NAMED`` row: a child table's definitions are its super table's, read beside it."""
    source = _Definitions(row.parent_columns, row.parent_tags) if row.kind == "child" else None
    return Catalog._info(row, source)


def table_uid(db: str, name: str, created_at: int) -> int:
    """A stable 63-bit id for a table: TDengine reports a child table's uid as its group id."""
    digest = hashlib.blake2b(f"{db}.{name}@{created_at}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & (2**63 - 1)


class Catalog:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine: Engine = create_engine(url, future=True)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas)
        _meta.create_all(self.engine)
        self._add_missing_columns()
        database = self.engine.url.database if self.engine.dialect.name == "sqlite" else None
        self._plain = _PlainConnection(database) if database and database != ":memory:" else None

    def _add_missing_columns(self) -> None:
        """Catalogs written by an earlier version lack the nullable columns and the indexes
        added since: ``create_all`` makes missing tables only, so those are added here."""
        from sqlalchemy import inspect, text

        inspector = inspect(self.engine)
        with self.engine.begin() as conn:
            for table in _meta.sorted_tables:
                present = {c["name"] for c in inspector.get_columns(table.name)}
                for column in table.columns:
                    if column.name not in present and column.nullable:
                        kind = column.type.compile(dialect=self.engine.dialect)
                        conn.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))
                for index in table.indexes:
                    index.create(conn, checkfirst=True)

    def dispose(self) -> None:
        if self._plain is not None:
            self._plain.close()
        self.engine.dispose()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    # ------------------------------------------------------------------ databases

    def create_database(self, conn: Connection, name: str, precision: str, options: dict[str, str]) -> None:
        conn.execute(
            insert(databases_table).values(
                name=name, precision=precision, options=json.dumps(options), created_at=_now_ms()
            )
        )

    def get_database(self, name: str, conn: Connection | None = None) -> DatabaseInfo | None:
        if conn is None and self._plain is not None:
            memo = self._plain.memo()
            if ("database", name) not in memo:
                found = self._plain.rows(_plain_sql(_DATABASE_NAMED, 0), (name,))
                memo[("database", name)] = _database_info(found[0]) if found else None
            return memo[("database", name)]
        with self._conn(conn) as c:
            row = c.execute(_DATABASE_NAMED, {"name": name}).first()
        return None if row is None else _database_info(row)

    def list_databases(self) -> list[DatabaseInfo]:
        with self._conn(None) as c:
            rows = c.execute(select(databases_table).order_by(databases_table.c.name)).all()
        return [_database_info(r) for r in rows]

    def drop_database(self, conn: Connection, name: str) -> None:
        for table in (tables_table, write_state_table, verified_table, streams_table):
            conn.execute(delete(table).where(table.c.db == name))
        conn.execute(delete(databases_table).where(databases_table.c.name == name))

    # ------------------------------------------------------------------ tables

    def add_table(self, conn: Connection, info: TableInfo) -> None:
        self.add_tables(conn, [info])

    def add_tables(self, conn: Connection, infos: Sequence[TableInfo]) -> None:
        """Insert the tables' rows in one statement (a history run's output creates a child
        table per group: one INSERT each was most of its catalog time)."""
        texts: dict[int, str | None] = {}  # children of one super table share its definitions

        def definitions(columns: Sequence[ColumnDef]) -> str | None:
            if id(columns) not in texts:
                texts[id(columns)] = json.dumps([type_to_json(c) for c in columns]) if columns else None
            return texts[id(columns)]

        rows = [
            {
                "db": info.db,
                "name": info.name,
                "kind": info.kind,
                "stable": info.stable,
                "uid": info.uid,
                "columns": definitions(info.columns),
                "tags": definitions(info.tags),
                "tag_values": json.dumps(info.tag_values) if info.kind == "child" else None,
                "created_at": info.created_at,
                "refs": json.dumps(info.refs) if info.refs is not None else None,
            }
            for info in infos
        ]
        if rows:
            conn.execute(insert(tables_table), rows)

    def names_taken(self, conn: Connection, db: str, names: Iterable[str]) -> set[str]:
        """Which of ``names`` are tables of ``db``, in one read per 500 names."""
        return {row.name for row in _named_rows(conn, _NAMES_TAKEN, db, names)}

    def get_table(self, db: str, name: str, conn: Connection | None = None) -> TableInfo | None:
        with self._conn(conn) as c:
            row = c.execute(
                select(tables_table).where(and_(tables_table.c.db == db, tables_table.c.name == name))
            ).first()
            if row is None:
                return None
            if row.kind == "child":
                parent = c.execute(
                    select(tables_table).where(and_(tables_table.c.db == db, tables_table.c.name == row.stable))
                ).first()
                return self._info(row, parent)
            return self._info(row, None)

    def get_tables(self, db: str, names: Iterable[str]) -> dict[str, TableInfo]:
        """The named tables of ``db`` that exist, in one read per 500 names (an INSERT into
        many child tables looks them up together)."""
        if self._plain is None:
            with self._conn(None) as c:
                return {row.name: _named_info(row) for row in _named_rows(c, _TABLES_NAMED, db, names)}
        memo = self._plain.memo()
        wanted = sorted(set(names))
        missing = [name for name in wanted if ("table", db, name) not in memo]
        for i in range(0, len(missing), 500):
            chunk = missing[i : i + 500]
            for row in self._plain.rows(_plain_sql(_TABLES_NAMED, len(chunk)), (db, *chunk)):
                memo[("table", db, row.name)] = _named_info(row)
        return {name: memo[("table", db, name)] for name in wanted if ("table", db, name) in memo}

    def list_tables(self, db: str, kinds: Iterable[str]) -> list[TableInfo]:
        kinds = tuple(kinds)
        with self._conn(None) as c:
            rows = c.execute(
                select(tables_table)
                .where(and_(tables_table.c.db == db, tables_table.c.kind.in_(kinds)))
                .order_by(tables_table.c.name)
            ).all()
            supers = {
                r.name: r
                for r in c.execute(
                    select(tables_table).where(and_(tables_table.c.db == db, tables_table.c.kind == "super"))
                ).all()
            }
        return [self._info(r, supers.get(r.stable) if r.kind == "child" else None) for r in rows]

    def child_tables_named(self, db: str, stable: str, names: Iterable[str]) -> dict[str, TableInfo]:
        """The named child tables of ``stable`` that exist (``get_tables``'s reads)."""
        return {
            name: info
            for name, info in self.get_tables(db, names).items()
            if info.kind == "child" and info.stable == stable
        }

    def child_tables(self, db: str, stable: str, conn: Connection | None = None) -> list[TableInfo]:
        with self._conn(conn) as c:
            parent = c.execute(
                select(tables_table).where(and_(tables_table.c.db == db, tables_table.c.name == stable))
            ).first()
            rows = c.execute(_CHILDREN, {"db": db, "stable": stable}).all()
        return [self._info(r, parent) for r in rows]

    def child_tag_values(self, db: str, stable: str) -> dict[str, dict[str, Any]]:
        """Each child table of ``stable`` with its tag values, and nothing else of it: a
        third of ``child_tables``'s time for a thousand children (a TSMA query reads them)."""
        with self._conn(None) as c:
            rows = c.execute(_CHILD_TAG_VALUES, {"db": db, "stable": stable}).all()
        return {row.name: json.loads(row.tag_values) if row.tag_values else {} for row in rows}

    def child_uids(self, db: str, stable: str) -> dict[str, int]:
        """Each child table of ``stable`` by name, with its uid and nothing else of it: the
        groups' ids of a history over a thousand children read them in 2 ms, against 15 ms for
        ``child_tables``, which decodes every child's definitions."""
        with self._conn(None) as c:
            rows = c.execute(_CHILD_UIDS, {"db": db, "stable": stable}).all()
        return {row.name: row.uid for row in rows}

    def drop_table(self, conn: Connection, db: str, name: str) -> None:
        conn.execute(delete(tables_table).where(and_(tables_table.c.db == db, tables_table.c.name == name)))
        conn.execute(
            delete(write_state_table).where(and_(write_state_table.c.db == db, write_state_table.c.tbname == name))
        )

    def forget_storage(self, conn: Connection, db: str, storage: str) -> None:
        conn.execute(delete(verified_table).where(and_(verified_table.c.db == db, verified_table.c.storage == storage)))
        conn.execute(
            delete(write_state_table).where(and_(write_state_table.c.db == db, write_state_table.c.storage == storage))
        )

    def drop_children(self, conn: Connection, db: str, stable: str) -> None:
        conn.execute(delete(tables_table).where(and_(tables_table.c.db == db, tables_table.c.stable == stable)))
        conn.execute(
            delete(write_state_table).where(and_(write_state_table.c.db == db, write_state_table.c.storage == stable))
        )

    def set_tag_values(self, conn: Connection, db: str, name: str, values: dict[str, Any]) -> None:
        conn.execute(
            update(tables_table)
            .where(and_(tables_table.c.db == db, tables_table.c.name == name))
            .values(tag_values=json.dumps(values))
        )

    def set_refs(self, conn: Connection, db: str, name: str, refs: dict[str, str]) -> None:
        """A virtual table's column sources."""
        conn.execute(
            update(tables_table)
            .where(and_(tables_table.c.db == db, tables_table.c.name == name))
            .values(refs=json.dumps(refs))
        )

    def set_tags(self, conn: Connection, db: str, stable: str, tags: tuple[ColumnDef, ...]) -> None:
        """A super table's tag definitions (ALTER … ADD/DROP TAG); children keep their values
        by name, a new tag reads NULL until set."""
        conn.execute(
            update(tables_table)
            .where(and_(tables_table.c.db == db, tables_table.c.name == stable))
            .values(tags=json.dumps([type_to_json(c) for c in tags]))
        )

    @staticmethod
    def _info(row: Any, parent: Any | None) -> TableInfo:
        source = parent if parent is not None else row
        columns, tags = _definitions(source.columns), _definitions(source.tags)
        return TableInfo(
            db=row.db,
            name=row.name,
            kind=row.kind,
            uid=row.uid,
            created_at=row.created_at,
            stable=row.stable,
            columns=columns,
            tags=tags,
            tag_values=json.loads(row.tag_values) if row.tag_values else {},
            refs=json.loads(row.refs) if row.refs is not None else None,
        )

    # ------------------------------------------------------------------ write watermarks

    def write_state(self, db: str, storage: str, tbnames: Iterable[str]) -> dict[str, tuple[int, int]]:
        """tbname → (last_ts, version) for the child tables that have one."""
        return {r.tbname: (r.last_ts, r.version) for r in self._write_state_rows(db, storage, tbnames)}

    def write_spans(self, db: str, storage: str, tbnames: Iterable[str]) -> dict[str, tuple[int, str | None]]:
        """tbname → (last_ts, spans as recorded or None) for the child tables that have one."""
        return {r.tbname: (r.last_ts, r.spans) for r in self._write_state_rows(db, storage, tbnames)}

    def _write_state_rows(self, db: str, storage: str, tbnames: Iterable[str]) -> list[Any]:
        with self._conn(None) as c:
            return list(c.execute(_WRITE_STATES, {"db": db, "storage": storage, "names": list(tbnames)}).all())

    def verified_version(self, db: str, storage: str) -> int | None:
        with self._conn(None) as c:
            row = c.execute(_VERIFIED, {"db": db, "storage": storage}).first()
        return None if row is None else int(row.version)

    def record_writes(
        self, db: str, storage: str, last_ts: dict[str, int], version: int, spans: dict[str, str] | None = None
    ) -> None:
        """Record the watermarks of the child tables just written (with their key spans, else
        NULL: anywhere up to the watermark) and that the table's version ``version`` is
        accounted for (one transaction: it is on every INSERT's path, so SQLite and PostgreSQL
        upsert in place instead of deleting and inserting)."""
        marks = [
            {
                "db": db,
                "storage": storage,
                "tbname": name,
                "last_ts": ts,
                "version": version,
                "spans": None if spans is None else spans.get(name),
            }
            for name, ts in last_ts.items()
        ]
        if self._plain is not None:  # every commit's path: without SQLAlchemy's per-statement work
            verified, state = _plain_record_sql()
            steps = [(verified, [{"db": db, "storage": storage, "version": version}]), (state, marks)]
            self._plain.write_relaxed(steps)
            return
        with self._relaxed_transaction() as conn:
            upserts = _record_statements(conn.dialect.name)
            if upserts is None:
                conn.execute(
                    delete(verified_table).where(and_(verified_table.c.db == db, verified_table.c.storage == storage))
                )
                conn.execute(insert(verified_table).values(db=db, storage=storage, version=version))
                conn.execute(
                    delete(write_state_table).where(
                        and_(
                            write_state_table.c.db == db,
                            write_state_table.c.storage == storage,
                            write_state_table.c.tbname.in_(list(last_ts)),
                        )
                    )
                )
                if marks:
                    conn.execute(insert(write_state_table), marks)
                return
            conn.execute(upserts[0], {"db": db, "storage": storage, "version": version})
            if marks:
                conn.execute(upserts[1], marks)

    # ------------------------------------------------------------------ streams

    def add_stream(
        self,
        conn: Connection,
        db: str,
        name: str,
        sql: str,
        start_offset: int,
        timezone: str | None = None,
        created_at: int | None = None,
    ) -> None:
        """``created_at``: epoch ms by the creating session's clock (``now`` of a continuous
        query's WHERE), the catalog's clock by default."""
        # numbered in the creating transaction: ids are never reused while the stream with the
        # highest one exists (a dropped stream's id may come back only after that)
        newest = conn.execute(select(func.max(streams_table.c.stream_id))).scalar()
        conn.execute(
            insert(streams_table).values(
                db=db,
                name=name,
                sql=sql,
                status="Running",
                created_at=_now_ms() if created_at is None else created_at,
                start_offset=start_offset,
                timezone=timezone,
                stream_id=(newest or 0) + 1,
            )
        )

    def get_stream(self, db: str, name: str) -> StreamInfo | None:
        with self._conn(None) as c:
            row = c.execute(
                select(streams_table).where(and_(streams_table.c.db == db, streams_table.c.name == name))
            ).first()
        return None if row is None else _stream_info(row)

    def list_streams(self, db: str | None = None) -> list[StreamInfo]:
        query = select(streams_table).order_by(streams_table.c.db, streams_table.c.name)
        if db is not None:
            query = query.where(streams_table.c.db == db)
        with self._conn(None) as c:
            rows = c.execute(query).all()
        return [_stream_info(r) for r in rows]

    def drop_stream(self, conn: Connection, db: str, name: str) -> None:
        conn.execute(delete(streams_table).where(and_(streams_table.c.db == db, streams_table.c.name == name)))
        key = f"{db}.{name}"
        conn.execute(delete(checkpoints_table).where(checkpoints_table.c.stream == key))
        conn.execute(delete(triggers_table).where(triggers_table.c.stream == key))
        conn.execute(delete(recalculations_table).where(recalculations_table.c.stream == key))
        conn.execute(delete(notifications_table).where(notifications_table.c.stream == key))

    def request_recalculation(self, stream: str, start: int, end: int) -> None:
        with self.transaction() as conn:
            conn.execute(
                insert(recalculations_table).values(
                    stream=stream, start=start, end=end, status="pending", created_at=_now_ms()
                )
            )

    def pending_recalculations(self, stream: str) -> list[tuple[int, int, int]]:
        """(id, start, end) of the stream's recalculations not yet handed to Dagster."""
        query = (
            select(recalculations_table.c.id, recalculations_table.c.start, recalculations_table.c.end)
            .where(and_(recalculations_table.c.stream == stream, recalculations_table.c.status == "pending"))
            .order_by(recalculations_table.c.id)
        )
        with self._conn(None) as c:
            return [(r.id, r.start, r.end) for r in c.execute(query).all()]

    def mark_recalculation_requested(self, ids: list[int]) -> None:
        with self.transaction() as conn:
            conn.execute(
                update(recalculations_table).where(recalculations_table.c.id.in_(ids)).values(status="requested")
            )

    # ------------------------------------------------------------------ trigger state and queue

    def save_checkpoint(self, stream: str, offset: int, state: dict[str, Any], keep: int = 3) -> None:
        """Store the trigger state after ``offset``; older checkpoints beyond ``keep`` go."""
        with self.transaction() as conn:
            conn.execute(
                delete(checkpoints_table).where(
                    and_(checkpoints_table.c.stream == stream, checkpoints_table.c.offset == offset)
                )
            )
            conn.execute(
                insert(checkpoints_table).values(
                    stream=stream, offset=offset, state=json.dumps(state), created_at=_now_ms()
                )
            )
            offsets = [
                r.offset
                for r in conn.execute(
                    select(checkpoints_table.c.offset)
                    .where(checkpoints_table.c.stream == stream)
                    .order_by(checkpoints_table.c.offset.desc())
                ).all()
            ]
            if len(offsets) > keep:
                conn.execute(
                    delete(checkpoints_table).where(
                        and_(checkpoints_table.c.stream == stream, checkpoints_table.c.offset < offsets[keep - 1])
                    )
                )

    def latest_checkpoint_offset(self, stream: str) -> int | None:
        """The newest offset a state was checkpointed at (a schedule's PERIOD tick has no
        cursor of its own: it continues from here)."""
        from sqlalchemy import func

        with self._conn(None) as c:
            return c.execute(
                select(func.max(checkpoints_table.c.offset)).where(checkpoints_table.c.stream == stream)
            ).scalar_one()

    def oldest_pending_offset(self, stream: str) -> int | None:
        """The oldest WAL offset among the stream's triggers not yet computed."""
        from sqlalchemy import func

        with self._conn(None) as c:
            return c.execute(
                select(func.min(triggers_table.c.offset)).where(
                    and_(triggers_table.c.stream == stream, triggers_table.c.status != "done")
                )
            ).scalar_one()

    def last_checkpoint_at(self, stream: str) -> int | None:
        """When the stream's trigger last checkpointed its state (epoch ms)."""
        from sqlalchemy import func

        with self._conn(None) as c:
            return c.execute(
                select(func.max(checkpoints_table.c.created_at)).where(checkpoints_table.c.stream == stream)
            ).scalar_one()

    def load_checkpoint(self, stream: str, offset: int) -> dict[str, Any] | None:
        with self._conn(None) as c:
            row = c.execute(
                select(checkpoints_table.c.state).where(
                    and_(checkpoints_table.c.stream == stream, checkpoints_table.c.offset == offset)
                )
            ).first()
        return None if row is None else json.loads(row.state)

    def enqueue_triggers(self, stream: str, triggers: list[dict[str, Any]]) -> int:
        """Add fired triggers; a trigger already queued by a replayed tick is not added again."""
        if not triggers:
            return 0
        added = 0
        with self.transaction() as conn:
            existing = {
                (r.trigger_id, r.event, r.offset)
                for r in conn.execute(
                    select(triggers_table.c.trigger_id, triggers_table.c.event, triggers_table.c.offset).where(
                        and_(
                            triggers_table.c.stream == stream,
                            triggers_table.c.offset.in_({t["offset"] for t in triggers}),
                        )
                    )
                ).all()
            }
            rows = []
            for trigger in triggers:
                key = (trigger["trigger_id"], trigger["event"], trigger["offset"])
                if key in existing:
                    continue
                existing.add(key)
                rows.append({**trigger, "stream": stream, "status": "pending"})
            if rows:
                conn.execute(insert(triggers_table), rows)
                added = len(rows)
        return added

    def pending_triggers(self, stream: str, ids: tuple[int, int] | None = None) -> list[dict[str, Any]]:
        """Pending triggers in firing order; ``ids``: only those with an id in [first, last]."""
        query = (
            select(triggers_table)
            .where(and_(triggers_table.c.stream == stream, triggers_table.c.status == "pending"))
            .order_by(triggers_table.c.id)
        )
        if ids is not None:
            query = query.where(triggers_table.c.id.between(*ids))
        with self._conn(None) as c:
            return [dict(r._mapping) for r in c.execute(query).all()]

    def count_pending(self, stream: str) -> int:
        from sqlalchemy import func

        with self._conn(None) as c:
            return int(
                c.execute(
                    select(func.count())
                    .select_from(triggers_table)
                    .where(and_(triggers_table.c.stream == stream, triggers_table.c.status == "pending"))
                ).scalar_one()
            )

    def pending_streams(self) -> list[str]:
        """The streams with pending triggers, the one whose oldest trigger fired first first."""
        from sqlalchemy import func

        query = (
            select(triggers_table.c.stream)
            .where(triggers_table.c.status == "pending")
            .group_by(triggers_table.c.stream)
            .order_by(func.min(triggers_table.c.id))
        )
        with self._conn(None) as c:
            return [row.stream for row in c.execute(query).all()]

    def count_events(self, stream: str, event: str) -> int:
        """How many triggers of one event type the stream has fired (e.g. recalculations)."""
        from sqlalchemy import func

        with self._conn(None) as c:
            query = select(func.count()).select_from(triggers_table)
            where = and_(triggers_table.c.stream == stream, triggers_table.c.event == event)
            return int(c.execute(query.where(where)).scalar_one())

    def finish_triggers(self, ids: list[int], run_id: str | None, notifications: Iterable[Notification] = ()) -> None:
        """Mark triggers done and record the notifications their run produced, in one
        transaction: a run that dies before it leaves both to its retry, never one of them."""
        with self.transaction() as conn:
            if ids:
                conn.execute(
                    update(triggers_table).where(triggers_table.c.id.in_(ids)).values(status="done", run_id=run_id)
                )
            self._record_notifications(conn, notifications)

    def record_notifications(self, notifications: Iterable[Notification]) -> None:
        with self.transaction() as conn:
            self._record_notifications(conn, notifications)

    def _record_notifications(self, conn: Connection, notifications: Iterable[Notification]) -> None:
        now = _now_ms()
        for n in notifications:
            exists = conn.execute(
                select(notifications_table.c.id).where(
                    and_(
                        notifications_table.c.stream == n.stream,
                        notifications_table.c.url == n.url,
                        notifications_table.c.source == n.source,
                    )
                )
            ).first()
            if exists is None:  # a rerun of the same triggers records nothing twice
                conn.execute(
                    insert(notifications_table).values(
                        stream=n.stream, url=n.url, source=n.source, trigger_id=n.trigger_id, event=n.event,
                        status="pending", attempts=0, next_attempt=0, created_at=now,
                    )
                )  # fmt: skip

    def due_notifications(self, now_ms: int, streams: Iterable[str] | None = None) -> list[Notification]:
        """Pending notifications in the order they were recorded; ``due`` says whether the
        back-off after a failed attempt has passed."""
        query = select(notifications_table).where(notifications_table.c.status == "pending")
        if streams is not None:
            query = query.where(notifications_table.c.stream.in_(list(streams)))
        with self._conn(None) as c:
            rows = c.execute(query.order_by(notifications_table.c.id)).all()
        return [
            Notification(r.stream, r.url, r.source, r.trigger_id, r.event, r.id, r.attempts, r.next_attempt <= now_ms)
            for r in rows
        ]

    def claim_notifications(self, ids: list[int], now_ms: int, until_ms: int) -> list[int]:
        """Take due notifications for one delivery (the op hook and the sensor may both try):
        each row is claimed only if still pending and due, by moving its next attempt to the
        lease's end; returns the ids this caller holds, in order. A deliverer that dies leaves
        them to be tried again when the lease ends."""
        held = []
        with self.transaction() as conn:
            for nid in ids:
                claimed = conn.execute(
                    update(notifications_table)
                    .where(
                        and_(
                            notifications_table.c.id == nid,
                            notifications_table.c.status == "pending",
                            notifications_table.c.next_attempt <= now_ms,
                        )
                    )
                    .values(next_attempt=until_ms)
                )
                if claimed.rowcount != 1:
                    break  # someone else holds it: the rows behind it wait, to keep the order
                held.append(nid)
        return held

    def mark_notifications(
        self, ids: list[int], status: str, *, error: str | None = None, retry_at: int | None = None
    ) -> None:
        """``sent`` or ``dropped``; or, with ``retry_at``, a failed attempt to try again then."""
        if not ids:
            return
        values: dict[str, Any] = {"last_error": error}
        if retry_at is not None:
            values.update(attempts=notifications_table.c.attempts + 1, next_attempt=retry_at)
        else:
            values.update(status=status, sent_at=_now_ms() if status == "sent" else None)
            if status == "dropped":
                values["attempts"] = notifications_table.c.attempts + 1
        with self.transaction() as conn:
            conn.execute(update(notifications_table).where(notifications_table.c.id.in_(ids)).values(values))

    def count_notifications(self, stream: str, status: str) -> int:
        from sqlalchemy import func

        with self._conn(None) as c:
            query = select(func.count()).select_from(notifications_table)
            where = and_(notifications_table.c.stream == stream, notifications_table.c.status == status)
            return int(c.execute(query.where(where)).scalar_one())

    def set_stream_paused(self, key: str, reason: str | None) -> None:
        """ON_FAILURE_PAUSE: pause the stream with the reason, or (None) resume it."""
        self._set_stream_text(key, streams_table.c.paused, reason)

    def set_stream_status(self, db: str, name: str, status: str, resume_from: int | None = None) -> None:
        """STOP/START; ``resume_from`` (START … IGNORE UNTREATED) skips the WAL before it."""
        values: dict[str, Any] = {"status": status}
        if status == "Running":
            values["resume_from"] = resume_from
        with self.transaction() as conn:
            conn.execute(
                update(streams_table).where(and_(streams_table.c.db == db, streams_table.c.name == name)).values(values)
            )

    def set_stream_error(self, key: str, error: str | None) -> None:
        """Record why the stream's last tick or run failed; None clears it."""
        self._set_stream_text(key, streams_table.c.last_error, error)

    def _set_stream_text(self, key: str, column: Column[Any], value: str | None) -> None:
        """Write a stream's note (error, pause reason) only when it changes: ticks call this
        every few seconds and an unchanged write would still take the database's write lock."""
        db, _, name = key.partition(".")
        with self.transaction() as conn:
            conn.execute(
                update(streams_table)
                .where(and_(streams_table.c.db == db, streams_table.c.name == name, column.is_distinct_from(value)))
                .values({column.name: value})
            )

    def settings(self, prefix: str) -> dict[str, str]:
        """The settings whose key starts with ``prefix``."""
        with self._conn(None) as c:
            rows = c.execute(select(settings_table).where(settings_table.c.key.startswith(prefix)))
            return {row.key: row.value for row in rows}

    def put_settings(self, values: dict[str, str | None]) -> None:
        """Write settings in one transaction; None removes a key."""
        with self.transaction() as conn:
            for key, value in values.items():
                conn.execute(delete(settings_table).where(settings_table.c.key == key))
                if value is not None:
                    conn.execute(insert(settings_table).values(key=key, value=value))

    @contextmanager
    def _relaxed_transaction(self) -> Iterator[Connection]:
        """A transaction whose commit does not wait for the disk (SQLite: ``synchronous=NORMAL``
        in WAL mode: durable through a crash of the process, not of the machine; the next
        commit that waits makes it durable too). Only for what the Delta log holds as well: a
        version's marks lost with the machine are read back from its commit
        (``Warehouse._catch_up``); the fsync was a tenth of a one-row INSERT."""
        if not self.url.startswith("sqlite"):
            with self.transaction() as conn:
                yield conn
            return
        with self.engine.connect() as conn:
            raw = conn.connection.dbapi_connection
            assert raw is not None
            # through the driver: SQLAlchemy would begin its transaction with the PRAGMA
            (level,) = raw.execute("PRAGMA synchronous").fetchone()
            raw.execute("PRAGMA synchronous=NORMAL")
            try:
                with conn.begin():
                    yield conn
            finally:
                raw.execute(f"PRAGMA synchronous={int(level)}")

    @contextmanager
    def _conn(self, conn: Connection | None) -> Iterator[Connection]:
        if conn is not None:
            yield conn
        else:
            with self.engine.connect() as c:
                yield c


class _PlainConnection:
    """SQLite only: an INSERT's catalog reads (its tables with their super tables' definitions,
    its database) and a commit's record (``record_writes``) on a plain sqlite3 connection of
    the calling thread and process. SQLAlchemy's per-statement work — connection checkout and
    return, compiled-statement lookup, result set-up — was nearly all of each read (103 → 13 µs
    and 49 → 8 µs; ~0.1 ms of an INSERT client's 0.39 ms) and most of each record. The
    connection is in autocommit, so no read holds a snapshot, and its SQL is compiled from the
    same statements as the other reads and writes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._inherited: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def memo(self) -> dict[Any, Any]:
        """This thread's decoded reads of the tables and databases rows, valid while no other
        connection has committed: SQLite's ``data_version`` moves with every commit of another
        connection (another process's, or this process's SQLAlchemy DDL) and never with this
        connection's own, which writes only the write state (``write_relaxed``). Checking it
        costs ~3 µs; the two reads it spares an INSERT, decoded, ~0.1 ms. Emptied whole on a
        change, so a version read before a concurrent commit only empties it once more."""
        version = self._connection().execute("PRAGMA data_version").fetchone()[0]
        if version != self._local.version or len(self._local.memo) > _MEMO_ENTRIES:
            self._local.memo, self._local.version = {}, version
        return self._local.memo

    def rows(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        cursor = self._connection().execute(sql, params)
        names = tuple(column[0] for column in cursor.description)
        return [_row_type(names)(*row) for row in cursor.fetchall()]

    def write_relaxed(self, steps: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> None:
        """Run each (SQL, parameter sets) step as one transaction, committed as
        ``Catalog._relaxed_transaction`` commits (this connection is ``synchronous=NORMAL``)."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")  # the write lock first: a deferred one may fail to upgrade
        try:
            for sql, params in steps:
                if params:
                    conn.executemany(sql, params)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # left open, the connection's later reads would see a snapshot
                conn.execute("ROLLBACK")
            raise

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid != os.getpid():
            # a forked child opens its own, and never closes its parent's (SQLite must not
            # close a connection in another process than the one that opened it)
            self._inherited.append(conn)
            conn = None
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=_BUSY_SECONDS)
            # only ``write_relaxed`` commits here: what it records the Delta log holds as well
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn, self._local.pid = conn, os.getpid()
            self._local.memo, self._local.version = {}, None  # a new connection's versions start anew
            with self._lock:
                self._opened.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            opened, self._opened = [c for c in self._opened if c not in self._inherited], []
        for conn in opened:
            with contextlib.suppress(sqlite3.ProgrammingError):  # another thread's: closed at its exit
                conn.close()
        self._local = threading.local()


@functools.lru_cache(maxsize=256)
def _plain_sql(statement: Any, names: int) -> str:
    """``statement`` as SQLite's SQL, its ``names`` list expanded to that many parameters
    (positional: the database, then the names)."""
    from sqlalchemy.dialects import sqlite

    if names:
        statement = statement.params(db="", names=[""] * names)
    return statement.compile(dialect=sqlite.dialect(), compile_kwargs={"render_postcompile": True}).string


@functools.lru_cache(maxsize=1)
def _plain_record_sql() -> tuple[str, str]:
    """``record_writes``'s two upserts as SQLite's SQL with named parameters."""
    from sqlalchemy.dialects import sqlite

    upserts = _record_statements("sqlite")
    assert upserts is not None
    dialect = sqlite.dialect(paramstyle="named")
    verified = upserts[0].compile(dialect=dialect, column_keys=["db", "storage", "version"]).string
    state = (
        upserts[1]
        .compile(dialect=dialect, column_keys=["db", "storage", "tbname", "last_ts", "version", "spans"])
        .string
    )
    return verified, state


@functools.lru_cache(maxsize=16)
def _row_type(names: tuple[str, ...]) -> Any:
    return collections.namedtuple("CatalogRow", names)  # type: ignore[misc]


@dataclass(frozen=True)
class _Definitions:
    """A super table's column and tag definitions as stored (JSON), read beside its child."""

    columns: str | None
    tags: str | None


@functools.lru_cache(maxsize=1024)
def _definitions(stored: str | None) -> tuple[ColumnDef, ...]:
    """Column or tag definitions from their stored JSON; memoised, since every INSERT reads
    its table's and they change only with ALTER (a changed text is another key)."""
    return tuple(type_from_json(c) for c in json.loads(stored or "[]"))


_BUSY_SECONDS = 30.0
_MEMO_ENTRIES = 100_000  # decoded rows a thread keeps at most (a few hundred bytes each)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    # WAL lets the Dagster daemon's sensors read while a writer commits; the busy timeout
    # makes concurrent processes wait instead of failing with "database is locked".
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={int(_BUSY_SECONDS * 1000)}")
    cursor.close()


def _upsert(dialect: str) -> Any:
    """The dialect's INSERT … ON CONFLICT construct, or None where there is none."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert
    return None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
