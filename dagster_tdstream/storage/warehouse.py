"""The warehouse: catalog + Delta tables kept in step.

Owns where a warehouse lives (a URI, ``TDSTREAM_WAREHOUSE``, default ``./.tdstream``), its
metadata URL (``TDSTREAM_METADATA_URL``, default SQLite inside the warehouse), and every
change to tables: creating/dropping databases and tables, writing rows with TDengine's
update semantics (same timestamp in the same child table: the later write wins) while
ordered appends skip the merge, deleting, and tag changes. Values arrive already typed:
parsing SQL is the session's job, reading for queries is ``spark_read.py``'s.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection

from ..errors import CatalogError, UnknownDatabaseError, WriteRejectedError
from ..faults import failpoint
from ..sql.ast import ColumnDef
from . import keyspans
from .catalog import RESERVED_PREFIX, Catalog, DatabaseInfo, TableInfo, table_uid
from .delta import DeltaStore, is_local, local_path
from .functions import FunctionCatalog
from .groupcommit import GROUP_KEY, GroupCommit
from .intents import WRITE_KEY, Intents, StagedTable
from .maintenance import maintain_after
from .types import arrow_schema, arrow_type
from .writelock import WriteLocks
from .writer import WRITER_MAX_BYTES, WriterClient, WriterLost

DEFAULT_WAREHOUSE = ".tdstream"
WAREHOUSE_ENV = "TDSTREAM_WAREHOUSE"
METADATA_ENV = "TDSTREAM_METADATA_URL"


def resolve_warehouse_uri(uri: str | None = None) -> str:
    chosen = uri or os.environ.get(WAREHOUSE_ENV) or DEFAULT_WAREHOUSE
    if is_local(chosen):
        return str(local_path(chosen).resolve())
    return chosen


@dataclass(frozen=True)
class WriteBatch:
    """Rows for one child or normal table as Arrow columns in the table's column order and
    types (``arrow_schema`` without ``tbname``); for a super table, rows of its child tables
    with ``tbname`` first (``arrow_schema`` with it)."""

    table: TableInfo
    data: pa.Table

    @classmethod
    def from_rows(cls, table: TableInfo, rows: Sequence[Sequence[Any]]) -> WriteBatch:
        """A batch of row tuples whose values are already of the columns' types."""
        arrays = [pa.array([row[i] for row in rows], type=arrow_type(col.type)) for i, col in enumerate(table.columns)]
        return cls(table, pa.table(arrays, schema=arrow_schema(table.columns, with_tbname=False)))


@dataclass(frozen=True)
class WriteResult:
    rows: int
    merged: bool
    versions: dict[str, int]  # storage table → new Delta version (WAL offset)


class Warehouse:
    def __init__(
        self,
        uri: str | None = None,
        *,
        metadata_url: str | None = None,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.uri = resolve_warehouse_uri(uri)
        if is_local(self.uri):
            local_path(self.uri).mkdir(parents=True, exist_ok=True)
        url = metadata_url or os.environ.get(METADATA_ENV)
        if url is None:
            if not is_local(self.uri):
                raise CatalogError(
                    f"warehouse {self.uri} is not a local folder: give a metadata URL "
                    f"(--metadata-url or {METADATA_ENV}), e.g. a PostgreSQL URL"
                )
            url = f"sqlite:///{Path(local_path(self.uri)) / 'catalog.sqlite'}"
        self.catalog = Catalog(url)
        self.delta = DeltaStore(self.uri, storage_options)
        self.locks = WriteLocks(local_path(self.uri) if is_local(self.uri) else None)
        self.intents = Intents(local_path(self.uri) if is_local(self.uri) else None)
        self.spool = GroupCommit(local_path(self.uri) if is_local(self.uri) else None)
        self.writer = WriterClient(local_path(self.uri) if is_local(self.uri) else None, url)
        # (db, table, table id) → (version, table name → key spans or None): the catalog's
        # spans as this process last wrote or read them, valid while the table is at that version
        self._spans: dict[tuple[str, str, str], tuple[int, dict[str, keyspans.Spans | None]]] = {}
        self.recover_writes()  # a statement half-written by a process that died

    @functools.cached_property
    def functions(self) -> FunctionCatalog:
        """The user-defined functions (made on first use: most sessions never call one)."""
        return FunctionCatalog(self.catalog.engine)

    def close(self) -> None:
        self.writer.close()
        self.catalog.dispose()

    # ------------------------------------------------------------------ databases

    def database(self, name: str) -> DatabaseInfo:
        info = self.catalog.get_database(name)
        if info is None:
            raise UnknownDatabaseError(f"database {name} does not exist")
        return info

    def create_database(self, name: str, precision: str, options: dict[str, str], *, if_not_exists: bool) -> bool:
        with self.catalog.transaction() as conn:
            if self.catalog.get_database(name, conn) is not None:
                if if_not_exists:
                    return False
                raise CatalogError(f"database {name} already exists")
            self.catalog.create_database(conn, name, precision, options)
        return True

    def drop_database(self, name: str, *, if_exists: bool) -> bool:
        with self.catalog.transaction() as conn:
            if self.catalog.get_database(name, conn) is None:
                if if_exists:
                    return False
                raise UnknownDatabaseError(f"database {name} does not exist")
            self.catalog.drop_database(conn, name)
        self.delta.drop_database(name)
        return True

    # ------------------------------------------------------------------ tables

    def table(self, db: str, name: str) -> TableInfo:
        self.database(db)
        info = self.catalog.get_table(db, name)
        if info is None:
            raise CatalogError(f"table {db}.{name} does not exist")
        return info

    def find_table(self, db: str, name: str) -> TableInfo | None:
        return self.catalog.get_table(db, name)

    def find_tables(self, db: str, names: Sequence[str]) -> dict[str, TableInfo]:
        """The named tables of ``db`` that exist (one catalog read)."""
        return self.catalog.get_tables(db, names)

    def create_table(
        self,
        db: str,
        name: str,
        columns: tuple[ColumnDef, ...],
        tags: tuple[ColumnDef, ...],
        *,
        is_super: bool,
        if_not_exists: bool,
        virtual: bool = False,
    ) -> bool:
        """A super or normal table; ``virtual``: a virtual super table (its child tables read
        other tables' columns: it stores nothing)."""
        self.database(db)
        created_at = time.time_ns() // 1_000_000
        info = TableInfo(
            db=db,
            name=name,
            kind="super" if is_super else "normal",
            uid=table_uid(db, name, created_at),
            created_at=created_at,
            columns=columns,
            tags=tags,
            refs={} if virtual else None,
        )
        with self.catalog.transaction() as conn:
            if not self._add_table(conn, info, if_not_exists=if_not_exists):
                return False
            # the Delta table is created inside the catalog transaction: if creating it fails
            # the catalog row is rolled back with it
            if not virtual:
                self.delta.create(db, name, arrow_schema(columns, with_tbname=is_super))
        return True

    def create_virtual_table(self, info: TableInfo, *, if_not_exists: bool) -> bool:
        """A virtual normal or child table (``info.refs`` its column sources, checked): a
        catalog row, no storage."""
        with self.catalog.transaction() as conn:
            return self._add_table(conn, info, if_not_exists=if_not_exists)

    def _add_table(self, conn: Connection, info: TableInfo, *, if_not_exists: bool) -> bool:
        """The table's catalog row; False when it exists and IF NOT EXISTS was said."""
        if info.name.startswith(RESERVED_PREFIX):
            raise CatalogError(
                f"table name {info.name}: names starting with {RESERVED_PREFIX!r} are reserved for the "
                "warehouse's own tables"
            )
        if self.catalog.get_table(info.db, info.name, conn) is not None:
            if if_not_exists:
                return False
            raise CatalogError(f"table {info.db}.{info.name} already exists")
        self.catalog.add_table(conn, info)
        return True

    def create_child_tables(self, children: Sequence[TableInfo]) -> list[TableInfo]:
        """Register child tables (already validated); existing names are skipped."""
        if not children:  # most INSERTs: no write transaction on the catalog for nothing
            return []
        created: list[TableInfo] = []
        with self.catalog.transaction() as conn:
            taken = {
                (db, name)
                for db in {child.db for child in children}
                for name in self.catalog.names_taken(conn, db, [c.name for c in children if c.db == db])
            }
            for child in children:  # (a name given twice is created once)
                if (child.db, child.name) not in taken:
                    taken.add((child.db, child.name))
                    created.append(child)
            self.catalog.add_tables(conn, created)
        return created

    def new_child(self, db: str, name: str, stable: TableInfo, tag_values: dict[str, Any]) -> TableInfo:
        created_at = time.time_ns() // 1_000_000
        return TableInfo(
            db=db,
            name=name,
            kind="child",
            uid=table_uid(db, name, created_at),
            created_at=created_at,
            stable=stable.name,
            columns=stable.columns,
            tags=stable.tags,
            tag_values=tag_values,
        )

    def drop_table(self, info: TableInfo) -> None:
        if info.virtual:  # its catalog rows (a virtual super table's children too) and its feed
            with self.catalog.transaction() as conn:
                if info.kind == "super":
                    self.catalog.drop_children(conn, info.db, info.name)
                self.catalog.drop_table(conn, info.db, info.name)
            # a virtual child's rows stay in its super table's feed: the next sync drops them
            if info.kind != "child" and self.delta.exists(info.db, info.storage_name):
                self.delta.drop(info.db, info.storage_name)
            return
        if info.kind == "child":
            assert info.stable is not None
            with self.catalog.transaction() as conn:
                self.catalog.drop_table(conn, info.db, info.name)
            self.delta.delete(info.db, info.stable, f"tbname = {_sql_string(info.name)}")
            return
        with self.catalog.transaction() as conn:
            if info.kind == "super":
                self.catalog.drop_children(conn, info.db, info.name)
            self.catalog.forget_storage(conn, info.db, info.name)
            self.catalog.drop_table(conn, info.db, info.name)
        self.delta.drop(info.db, info.name)

    def set_tags(self, info: TableInfo, values: dict[str, Any]) -> None:
        with self.catalog.transaction() as conn:
            self.catalog.set_tag_values(conn, info.db, info.name, {**info.tag_values, **values})

    # ------------------------------------------------------------------ writes

    def write(
        self,
        batches: Sequence[WriteBatch],
        new_children: Sequence[TableInfo] = (),
        *,
        replace_where: str | None = None,
        replace_table: TableInfo | None = None,
    ) -> WriteResult:
        """Write validated rows: one Delta commit per physical table touched. Child tables
        created by this write (INSERT … USING) are registered first and removed again if
        the data commit fails, so a failed write leaves the catalog as it was.

        With ``replace_where`` (a predicate on ``replace_table``'s rows as ``t``, see
        ``range_predicate``/``keys_predicate``) the matching rows that ``batches`` do not write
        again are removed in the same commit (recalculation overwrites a range of a stream's
        output, or retracts windows that disappeared)."""
        for batch in batches:
            if batch.table.virtual:
                raise WriteRejectedError(
                    f"{batch.table.db}.{batch.table.name} is a virtual table: it reads its sources' columns and "
                    "stores no rows (write to its source tables)"
                )
        self.recover_writes()  # an earlier statement's tables first: their rows came before these
        created = self.create_child_tables(new_children)
        try:
            if replace_where is not None:
                assert replace_table is not None
                return self._replace(replace_table, batches, replace_where)
            return self._write(batches)
        except BaseException:
            with self.catalog.transaction() as conn:
                for child in created:
                    self.catalog.drop_table(conn, child.db, child.name)
            raise

    def columns_as_stored(self, batches: Sequence[WriteBatch]) -> list[tuple[StagedTable, pa.Table]]:
        """Each physical table's rows of a write in its stored columns, a repeated key not yet
        resolved: what ``commit_group`` takes, and resolves with the group's other rows."""
        return [
            (_staged_table(first), _stored_columns(group, first.columns, first.kind != "normal"))
            for group in _by_storage(batches)
            for first in [group[0].table]
        ]

    def _write(self, batches: Sequence[WriteBatch]) -> WriteResult:
        # every table's rows become Arrow before the first commit: a value Arrow refuses
        # rejects the whole statement, not the tables after the ones already committed
        prepared = [
            (_staged_table(first), *_storage_rows(group, first.columns, first.kind != "normal"))
            for group in _by_storage(batches)
            for first in [group[0].table]
        ]
        if len(prepared) == 1 and self.spool.enabled:
            return self._write_grouped(*prepared[0])
        total = 0
        merged_any = False
        versions: dict[str, int] = {}
        with self.locks.hold((target.db, target.storage) for target, *_ in prepared):
            intent = None
            if len(prepared) > 1:  # several commits: staged first, so a crash between them rolls forward
                staged = [
                    (dataclasses.replace(t, after=self.delta.latest_version(t.db, t.storage)), rows)
                    for t, rows, _, _ in prepared
                ]
                intent = self.intents.stage(staged)
            for index, (target, table, batch_min, batch_max) in enumerate(prepared):
                if index:
                    failpoint("between-table-commits")
                extra = {WRITE_KEY: intent.id} if intent is not None else None
                version, merged = self._write_table(target, table, batch_min, batch_max, extra)
                total += table.num_rows
                merged_any |= merged
                versions[f"{target.db}.{target.storage}"] = version
            if intent is not None:
                self.intents.finished(intent)
        return WriteResult(total, merged_any, versions)

    def _write_table(
        self,
        target: StagedTable,
        table: pa.Table,
        batch_min: dict[str, int],
        batch_max: dict[str, int],
        extra: dict[str, str] | None = None,
        committed: Callable[[int, bool], None] | None = None,
    ) -> tuple[int, bool]:
        """One physical table's rows as one commit, under its lock: appended when no row's key
        can be stored already (outside its table's key spans), merged otherwise; returns
        (version, merged). ``extra``: commit info naming the write intent or the spooled
        requests it writes; ``committed``: told the version once it is durable."""
        db, storage, pk = target.db, target.storage, target.primary_key
        before, stored = self._stored_spans(db, storage, list(batch_max), pk, target.is_super)
        written, needs_merge = _written_spans(table, pk, target.is_super, target.name, batch_min, batch_max, stored)
        keys = ("tbname", pk) if target.is_super else (pk,)
        if needs_merge:
            version = self.delta.upsert(db, storage, table, keys, batch_max, extra=extra)
        else:
            version = self.delta.append(db, storage, _by_key(table, pk), batch_max, extra)
        failpoint("after-data-commit")
        if committed is not None:
            committed(version, needs_merge)
            failpoint("after-acknowledged")
        self._record(db, storage, _joined(stored, written), before, version)
        maintain_after(self, db, storage, version)  # small files and expired data, as writes accumulate
        return version, needs_merge

    def _write_grouped(
        self, target: StagedTable, table: pa.Table, batch_min: dict[str, int], batch_max: dict[str, int]
    ) -> WriteResult:
        """One table's rows: sent to the warehouse's writer if one runs, else committed at once
        if its lock is free (with any requests staged for it), else staged for group commit
        and committed by the next lock holder."""
        db, storage = target.db, target.storage
        # a large write gains nothing from grouping, and would only stream through the socket
        if table.nbytes <= WRITER_MAX_BYTES and self.writer.connected():
            sent = self._write_through_writer(target, table)
            if sent is not None:
                return sent
        with self.locks.hold_if_free(db, storage) as free:
            if free:
                version, merged = self._lead(target, (table, batch_min, batch_max))
                return WriteResult(table.num_rows, merged, {f"{db}.{storage}": version})
        request = self.spool.submit(db, storage, table, self.delta.latest_version(db, storage))
        settled: list[dict[str, object]] = []

        def committed() -> bool:
            settled.extend(filter(None, [self.spool.outcome(request)]))
            return bool(settled)

        with self.locks.hold_unless(db, storage, committed) as held:
            if held and not committed():  # nobody committed it meanwhile: this writer leads the next group
                self._lead(target, None)
                committed()
        return _settled(table.num_rows, db, storage, settled[0] if settled else None)

    def _write_through_writer(self, target: StagedTable, table: pa.Table) -> WriteResult | None:
        """One table's rows committed by the warehouse's writer; None when the writer went away
        before committing them (the caller writes them itself)."""
        db, storage = target.db, target.storage
        after = self.delta.latest_version(db, storage)
        try:
            answer = self.writer.write(target, table)
        except WriterLost as lost:  # committed, or not: the log says which
            request_id = str(lost)
            for version, value in self.delta.commit_values(db, storage, after + 1, GROUP_KEY):
                if request_id in value.split(","):
                    return WriteResult(table.num_rows, False, {f"{db}.{storage}": version})
            return None
        if "declined" in answer:  # the writer is stopping
            return None
        return _settled(table.num_rows, db, storage, answer)

    def commit_group(
        self,
        target: StagedTable,
        received: Sequence[tuple[str, pa.Table]],
        committed: Callable[[int, bool], None] | None = None,
    ) -> tuple[int, bool]:
        """The writer's commit of requests it received (id, checked rows), with whatever other
        processes staged for the table, as one write under its lock; returns (version, merged).
        ``committed(version, merged)`` is called once the rows are durable, before the catalog
        records their keys and before maintenance: the writer answers its clients there (a
        crash before the record is caught up from the log, as after any commit)."""
        with self.locks.hold([(target.db, target.storage)]):
            return self._lead(target, None, received, committed)

    def _lead(
        self,
        target: StagedTable,
        own: tuple[pa.Table, dict[str, int], dict[str, int]] | None,
        received: Sequence[tuple[str, pa.Table]] = (),
        committed: Callable[[int, bool], None] | None = None,
    ) -> tuple[int, bool]:
        """Holding the table's lock: commit the staged requests, the writer's ``received``
        ones (id, rows) and ``own`` rows with their key spans, in that order, as one write and
        settle every staged request; returns (version, merged)."""
        db, storage = target.db, target.storage
        requests = self.spool.waiting(db, storage)
        if requests:  # a leader killed after its commit left these settled in the log only
            first = min(r.after for r in requests) + 1
            logged = {
                request_id: version
                for version, value in self.delta.commit_values(db, storage, first, GROUP_KEY)
                for request_id in value.split(",")
            }
            for request in [r for r in requests if r.id in logged]:
                self.spool.settle([request], {"version": logged[request.id], "merged": False})
            requests = [r for r in requests if r.id not in logged]
        parts = [r.rows() for r in requests] + [rows for _, rows in received] + ([own[0]] if own is not None else [])
        if not parts:
            return self.delta.latest_version(db, storage), False
        if own is not None and len(parts) == 1:  # its own rows alone: spans found with them (_storage_rows)
            rows, batch_min, batch_max = own
        else:
            keys = ["tbname", target.primary_key] if target.is_super else [target.primary_key]
            # the received rows' keys are resolved here, with the group's (``columns_as_stored``)
            rows = _last_per_key(pa.concat_tables(parts), keys) if len(parts) > 1 or received else parts[0]
            batch_min, batch_max = _key_spans(rows, target.primary_key, target.is_super, target.name)
        ids = [r.id for r in requests] + [request_id for request_id, _ in received]
        extra = {GROUP_KEY: ",".join(ids)} if ids else None
        try:
            version, merged = self._write_table(target, rows, batch_min, batch_max, extra, committed)
        except BaseException as exc:
            self.spool.settle(requests, {"error": f"{type(exc).__name__}: {exc}"})
            raise
        self.spool.settle(requests, {"version": version, "merged": merged})
        return version, merged

    def recover_writes(self) -> int:
        """Roll forward the statements whose writer died between the commits of their tables
        (see ``intents.py``); how many were."""
        recovered = 0
        for intent in self.intents.unfinished():
            with self.locks.hold((t.db, t.storage) for t in intent.tables):
                if not intent.folder.exists():  # its writer was alive and has finished
                    continue
                for target in intent.tables:
                    committed = self.delta.commit_values(target.db, target.storage, target.after + 1, WRITE_KEY)
                    if any(value == intent.id for _, value in committed):
                        continue
                    rows = intent.rows(target)
                    batch_min, batch_max = _key_spans(rows, target.primary_key, target.is_super, target.name)
                    self._write_table(target, rows, batch_min, batch_max, {WRITE_KEY: intent.id})
                self.intents.finished(intent)
                recovered += 1
        return recovered

    def _replace(self, table: TableInfo, batches: Sequence[WriteBatch], replace_where: str) -> WriteResult:
        storage = table.storage_name
        pk = table.primary_key
        is_super = table.kind in ("super", "child")
        data, low, marks = _storage_rows(batches, table.columns, is_super)
        keys = ("tbname", pk) if is_super else (pk,)
        with self.locks.hold([(table.db, storage)]):
            before, stored = self._stored_spans(table.db, storage, list(marks), pk, is_super)
            version = self.delta.upsert(table.db, storage, data, keys, marks, delete_unmatched=replace_where)
            written, _ = _written_spans(data, pk, is_super, table.name, low, marks)
            self._record(table.db, storage, _joined(stored, written), before, version)
        return WriteResult(data.num_rows, True, {f"{table.db}.{storage}": version})

    @staticmethod
    def range_predicate(table: TableInfo, bounds: tuple[int, int]) -> str:
        """Rows whose primary key lies in [start, end)."""
        pk = table.primary_key
        return f't."{pk}" >= {int(bounds[0])} AND t."{pk}" < {int(bounds[1])}'

    @staticmethod
    def keys_predicate(table: TableInfo, keys: Sequence[tuple[str, int]]) -> str:
        """Rows with one of the (table name, primary key) pairs; the name is the child table's
        for a super table and ignored for a normal one."""
        pk = table.primary_key
        by_name: dict[str, set[int]] = {}
        for name, key in keys:
            by_name.setdefault(name if table.kind != "normal" else "", set()).add(int(key))
        parts = []
        for name, values in sorted(by_name.items()):
            in_keys = f't."{pk}" IN ({", ".join(str(v) for v in sorted(values))})'
            quoted = name.replace("'", "''")
            parts.append(f"""(t."tbname" = '{quoted}' AND {in_keys})""" if name else f"({in_keys})")
        return " OR ".join(parts) if parts else "FALSE"

    def trusted_watermarks(self, info: TableInfo) -> tuple[int, dict[str, int]] | None:
        """The table's current version and, for the child tables (or the normal table) of
        ``info`` that hold rows, the newest timestamp written — when the catalog accounts for
        that version; None when it does not (the caller must then read the data). After a
        delete a watermark is an upper bound, not necessarily a stored row."""
        storage = info.storage_name
        version = self.delta.version(info.db, storage)
        if self.catalog.verified_version(info.db, storage) != version:
            return None
        if info.kind == "super":
            names = [child.name for child in self.catalog.child_tables(info.db, info.name)]
        else:
            names = [info.name]
        marks = self.catalog.write_state(info.db, storage, names)
        return version, {name: ts for name, (ts, _) in marks.items()}

    def _stored_spans(
        self, db: str, storage: str, tbnames: list[str], pk: str, is_super: bool
    ) -> tuple[int, dict[str, keyspans.Spans]]:
        """The table's newest version and, per table name holding rows, the spans its stored
        keys lie in (``keyspans.py``); called under the table's write lock. From the catalog,
        brought up to that version first if it is behind, or from what this process last
        wrote while nobody else has committed since."""
        current = self.delta.latest_version(db, storage)
        identity = self.delta.identity(db, storage)
        key = (db, storage, identity or "")
        cached = self._spans.get(key) if identity is not None else None
        if cached is None or cached[0] != current:
            verified = self.catalog.verified_version(db, storage)
            if verified != current and not (verified is None and current == 0):
                self._catch_up(db, storage, verified, current, pk, is_super)
            cached = (current, {})
            if identity is not None:
                self._spans[key] = cached
        known = cached[1]
        missing = [name for name in tbnames if name not in known]
        if missing:
            found = self.catalog.write_spans(db, storage, missing)
            known.update(
                {name: keyspans.decode(found[name][1], found[name][0]) if name in found else None for name in missing}
            )
        return current, {name: spans for name in tbnames if (spans := known[name]) is not None}

    def _record(self, db: str, storage: str, spans: dict[str, keyspans.Spans], before: int, version: int) -> None:
        """Record a commit's key spans (and newest keys) in the catalog, and keep them for this
        process's next write when the commit directly followed the version they were read at."""
        marks = {name: named[-1][1] for name, named in spans.items()}
        encoded = {name: keyspans.encode(named) for name, named in spans.items()}
        self.catalog.record_writes(db, storage, marks, version, encoded)
        identity = self.delta.identity(db, storage)
        key = (db, storage, identity or "")
        cached = self._spans.get(key)
        if cached is not None and cached[0] == before and version == before + 1:
            cached[1].update(spans)
            self._spans[key] = (version, cached[1])
        else:
            self._spans.pop(key, None)

    def keys_unchanged(self, db: str, storage: str, before: int, after: int) -> None:
        """A commit that changed no data (maintenance, under the table's lock) took the table
        from ``before`` to ``after``: the key spans this process keeps for ``before`` hold at
        ``after`` — else a table written round-robin, child table by child table, reads every
        name's spans from the catalog again after each compaction."""
        key = (db, storage, self.delta.identity(db, storage) or "")
        cached = self._spans.get(key)
        if cached is not None and cached[0] == before:
            self._spans[key] = (after, cached[1])

    def _catch_up(self, db: str, storage: str, verified: int | None, current: int, pk: str, is_super: bool) -> None:
        """Account in the catalog for the versions after ``verified`` (a writer died between its
        commit and its catalog update, or another tool wrote): from the marks their commits
        carry, or else every table name's newest key read from the data — for *every* name,
        since the version is then marked accounted for as a whole."""
        marks = self.delta.commit_marks(db, storage, 1 if verified is None else verified + 1, current)
        if marks is None:
            columns = ["tbname", pk] if is_super else [pk]
            data = self.delta.read(db, storage, columns, version=current)
            if is_super:
                grouped = data.group_by("tbname").aggregate([(pk, "max")])
                marks = dict(zip(grouped["tbname"].to_pylist(), grouped[f"{pk}_max"].to_pylist(), strict=True))
            elif data.num_rows:
                marks = {storage: int(pc.max(data[pk]).as_py())}
            else:
                marks = {}
        known = self.catalog.write_state(db, storage, list(marks))
        # catalog marks stay upper bounds (a delete does not lower them)
        self.catalog.record_writes(
            db, storage, {name: max(ts, known.get(name, (ts, 0))[0]) for name, ts in marks.items()}, current
        )

    def delete(self, info: TableInfo, predicate: str | None) -> int:
        """Delete rows of a table matching a delta-rs SQL predicate (None: all rows)."""
        clauses = []
        if info.kind == "child":
            clauses.append(f"tbname = {_sql_string(info.name)}")
        if predicate:
            clauses.append(f"({predicate})")
        with self.locks.hold([(info.db, info.storage_name)]):
            verified = self.catalog.verified_version(info.db, info.storage_name)
            before = self.delta.latest_version(info.db, info.storage_name)
            deleted, version = self.delta.delete(info.db, info.storage_name, " AND ".join(clauses) or "true")
            # watermarks stay valid upper bounds after a delete: if the catalog had accounted
            # for the version before, it accounts for this one too
            if verified == before:
                self.catalog.record_writes(info.db, info.storage_name, {}, version)
        return deleted

    # ------------------------------------------------------------------ reads (Python side)

    def key_bounds(self, info: TableInfo) -> tuple[int, int] | None:
        """The table's earliest and latest primary key from Delta file statistics (no data
        scan); None when it has no rows or no statistics."""
        actions = self.delta.open(info.db, info.storage_name).get_add_actions(flatten=True)
        low, high = f"min.{info.primary_key}", f"max.{info.primary_key}"
        if actions.num_rows == 0 or low not in actions.schema.names or high not in actions.schema.names:
            return None
        lows = [v for v in actions.column(low).to_pylist() if v is not None]
        highs = [v for v in actions.column(high).to_pylist() if v is not None]
        return (min(lows), max(highs)) if lows and highs else None

    def stored_rows(self, info: TableInfo, version: int | None = None) -> int | None:
        """How many rows the table's storage holds (all child tables of a super table), from
        the Delta log's file statistics — no data read; None when a file has none."""
        if version is None:
            dt = self.delta.current(info.db, info.storage_name)
        else:
            dt = self.delta.open_at(info.db, info.storage_name, version)
        actions = dt.get_add_actions(flatten=True)
        if "num_records" not in actions.schema.names:
            return None if actions.num_rows else 0
        counts = actions.column("num_records").to_pylist()
        return None if any(c is None for c in counts) else int(sum(counts))

    def read_table(self, info: TableInfo, version: int | None = None) -> pa.Table:
        """A table's rows (current, or as of WAL offset ``version``) as Arrow, tags joined for
        super and child tables; for the sensor's re-derivation, tests and small tools —
        queries go through Spark."""
        data = self.delta.read(info.db, info.storage_name, version=version)
        if info.kind == "normal":
            return data
        children = [info] if info.kind == "child" else self.catalog.child_tables(info.db, info.name)
        if info.kind == "child":
            data = data.filter(pc.equal(data["tbname"], info.name))
        tag_table = tags_arrow(children, info.tags)
        return data.join(tag_table, "tbname", join_type="inner")


def _written_spans(
    data: pa.Table,
    pk: str,
    is_super: bool,
    name: str,
    batch_min: dict[str, int],
    batch_max: dict[str, int],
    stored: dict[str, keyspans.Spans] | None = None,
) -> tuple[dict[str, keyspans.Spans], bool]:
    """The spans of the keys ``data`` writes per table name, and whether any of those keys may
    be stored already (in ``stored``'s spans; False without ``stored``). A table name with one
    row — nearly every INSERT's case — needs no look at the rows."""
    stored = stored or {}
    keys: dict[str, np.ndarray] | None = None
    written: dict[str, keyspans.Spans] = {}
    clash = False
    for table_name, low in batch_min.items():
        high = batch_max[table_name]
        spans = stored.get(table_name)
        meets = spans is not None and keyspans.overlaps(spans, low, high)
        if low == high:
            written[table_name] = ((low, high),)
            clash |= meets
            continue
        if keys is None:
            keys = _keys_by_name(data, pk, is_super, name)
        written[table_name] = keyspans.of_keys(keys[table_name])
        clash |= meets and keyspans.covers_any(spans, keys[table_name])  # type: ignore[arg-type]
    return written, clash


def _keys_by_name(data: pa.Table, pk: str, is_super: bool, name: str) -> dict[str, np.ndarray]:
    """Each table name's keys in ``data`` (``name``: a normal table's)."""
    if not is_super:
        return {name: data.column(pk).to_numpy()}
    lists = data.group_by("tbname", use_threads=False).aggregate([(pk, "list")])
    keys = lists.column(f"{pk}_list").combine_chunks()
    values, offsets = keys.values.to_numpy(), keys.offsets.to_numpy()
    names = lists.column("tbname").to_pylist()
    return {table_name: values[offsets[i] : offsets[i + 1]] for i, table_name in enumerate(names)}


def _joined(stored: dict[str, keyspans.Spans], written: dict[str, keyspans.Spans]) -> dict[str, keyspans.Spans]:
    """The spans of the table names written once ``written`` is committed."""
    return {name: keyspans.union(stored.get(name, ()), spans) for name, spans in written.items()}


def tags_arrow(children: Sequence[TableInfo], tags: tuple[ColumnDef, ...]) -> pa.Table:
    """The companion tag rows of child tables as an Arrow table (tbname + tag columns)."""
    columns: dict[str, pa.Array] = {"tbname": pa.array([c.name for c in children], pa.string())}
    for tag in tags:
        columns[tag.name] = pa.array([c.tag_values.get(tag.name) for c in children], type=arrow_type(tag.type))
    return pa.table(columns)


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _by_storage(batches: Sequence[WriteBatch]) -> list[list[WriteBatch]]:
    """A write's batches by the physical table they are stored in."""
    by_storage: dict[tuple[str, str], list[WriteBatch]] = {}
    for batch in batches:
        by_storage.setdefault((batch.table.db, batch.table.storage_name), []).append(batch)
    return list(by_storage.values())


def _stored_columns(group: Sequence[WriteBatch], columns: tuple[ColumnDef, ...], is_super: bool) -> pa.Table:
    """One physical table's rows of a write as Arrow in its stored schema (a super table's
    with ``tbname``), in the order written."""
    schema = arrow_schema(columns, with_tbname=is_super)
    parts = []
    for batch in group:
        data = batch.data
        if is_super and batch.table.kind == "child":
            data = data.add_column(0, schema.field("tbname"), pa.repeat(pa.scalar(batch.table.name), data.num_rows))
        # an INSERT's rows are in the schema already: casting them anyway cost 28 µs (warm) of
        # a group-committing writer's ~0.4 ms a statement
        parts.append(data if data.schema.equals(schema, check_metadata=True) else data.cast(schema))
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts) if len(parts) != 1 else parts[0]


def _storage_rows(
    group: Sequence[WriteBatch], columns: tuple[ColumnDef, ...], is_super: bool
) -> tuple[pa.Table, dict[str, int], dict[str, int]]:
    """One physical table's rows of a write as Arrow (a super table's with ``tbname``), with
    each table name's smallest and largest timestamp."""
    pk = columns[0].name
    data = _stored_columns(group, columns, is_super)
    if not group:  # a recalculation that only retracts windows
        return data, {}, {}
    if not _unique_keys(group):
        if is_super and (ordered := _increasing_by_name(data, pk)) is not None:
            # a frame of whole child tables, each in time order (how bulk loads come): no key
            # repeats, and each table's first and last key are its span — no grouping by key
            return data, {n: int(k[0]) for n, k in ordered.items()}, {n: int(k[-1]) for n, k in ordered.items()}
        # TDengine update semantics inside one statement too: the last row for a key wins
        data = _last_per_key(data, ["tbname", pk] if is_super else [pk])
    batch_min, batch_max = _key_spans(data, pk, is_super, group[0].table.name)
    return data, batch_min, batch_max


def _increasing_by_name(data: pa.Table, pk: str) -> dict[str, np.ndarray] | None:
    """Each table name's keys in a super table's rows when every name's keys strictly
    increase, else None."""
    if not data.num_rows:
        return None
    by_name = _keys_by_name(data, pk, True, "")
    return by_name if all(keyspans.increasing(keys) for keys in by_name.values()) else None


# below this many rows a batch's keys are grouped in Python: Arrow's grouping costs ~0.3 ms
# to set up, more than a group commit's few rows take here
_SMALL_ROWS = 64


def _last_per_key(data: pa.Table, keys: list[str]) -> pa.Table:
    """The last row written for each key, in the order written."""
    if data.num_rows < _SMALL_ROWS:
        last = {key: row for row, key in enumerate(zip(*(data.column(k).to_pylist() for k in keys), strict=True))}
        if len(last) == data.num_rows:  # no key repeats, as in nearly every group: Arrow's take cost 34 µs
            return data
        return data.take(pa.array(sorted(last.values()), pa.int64()))
    numbered = data.select(keys).append_column("__row", pa.array(range(data.num_rows), pa.int64()))
    last = numbered.group_by(keys, use_threads=False).aggregate([("__row", "max")]).column("__row_max")
    return data.take(pc.take(last, pc.sort_indices(last)))


def _key_spans(data: pa.Table, pk: str, is_super: bool, name: str) -> tuple[dict[str, int], dict[str, int]]:
    """Each table name's smallest and largest key in ``data`` (``name``: a normal table's)."""
    if is_super and data.num_rows:
        named = pc.min_max(data.column("tbname"))
        if named["min"] == named["max"]:  # rows of one child table, as an INSERT writes: no grouping
            name = named["min"].as_py()
            is_super = False
    if is_super and data.num_rows < _SMALL_ROWS:
        batch_min: dict[str, int] = {}
        batch_max: dict[str, int] = {}
        for table_name, key in zip(data.column("tbname").to_pylist(), data.column(pk).to_pylist(), strict=True):
            if key is not None:
                batch_min[table_name] = min(key, batch_min.get(table_name, key))
                batch_max[table_name] = max(key, batch_max.get(table_name, key))
        return batch_min, batch_max
    if is_super:
        spans = data.group_by("tbname", use_threads=False).aggregate([(pk, "min"), (pk, "max")])
        names = spans.column("tbname").to_pylist()
        lows, highs = spans.column(f"{pk}_min").to_pylist(), spans.column(f"{pk}_max").to_pylist()
    else:
        extremes = pc.min_max(data.column(pk))
        names, lows, highs = [name], [extremes["min"].as_py()], [extremes["max"].as_py()]
    batch_min = {n: low for n, low in zip(names, lows, strict=True) if low is not None}
    batch_max = {n: high for n, high in zip(names, highs, strict=True) if high is not None}
    return batch_min, batch_max


def _settled(rows: int, db: str, storage: str, outcome: dict[str, Any] | None) -> WriteResult:
    """The result of rows another process committed (a group's leader, the writer), or the
    error it met."""
    if outcome is None or "error" in outcome:
        reason = "its group's commit did not settle it" if outcome is None else outcome["error"]
        raise CatalogError(f"the write was not committed: {reason}")
    return WriteResult(rows, bool(outcome["merged"]), {f"{db}.{storage}": int(outcome["version"])})


def _staged_table(table: TableInfo) -> StagedTable:
    """What a write intent keeps of a physical table (``after`` is set when it is staged)."""
    return StagedTable(table.db, table.storage_name, -1, table.kind != "normal", table.primary_key, table.name)


def _unique_keys(group: Sequence[WriteBatch]) -> bool:
    """Whether no (table, timestamp) repeats: each table written once, its keys increasing
    (how nearly every INSERT arrives — no grouping needed then)."""
    if len({batch.table.name for batch in group}) != len(group) or group[0].table.kind == "super":
        return False  # a super table's rows may repeat a key of any of its child tables
    for batch in group:
        keys = batch.data.column(0)
        if len(keys) > 1 and not pc.all(pc.greater(keys.slice(1), keys.slice(0, len(keys) - 1))).as_py():
            return False
    return True


def _by_key(rows: pa.Table, pk: str) -> pa.Table:
    """``rows`` in key order (a stable sort: rows of one key keep theirs), so that each row group
    of the file they become holds a slice of its time (``append.ROW_GROUP_ROWS``) — rows come in
    table by table, and a file of whole tables was one span of all its time."""
    keys = rows.column(pk)
    if len(keys) < 2 or pc.all(pc.less_equal(keys[:-1], keys[1:])).as_py():
        return rows
    return rows.take(pc.sort_indices(keys))
