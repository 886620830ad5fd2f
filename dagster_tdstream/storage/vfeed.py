"""A virtual trigger table's feed: the Delta table whose versions are a virtual table's WAL.

Owns keeping, for a virtual table a stream triggers on, a hidden Delta table (its
``TableInfo.storage_name``: one per virtual normal table, one per virtual super table for all
its child tables) that holds exactly the virtual table's rows — its sources' rows joined on
the timestamp, NULL where a source has no row — so the trigger task reads a virtual table's
changes as it reads any table's: from one change feed. ``sync`` brings it up to date from the
sources' change feeds since the source versions its last sync committed, in one commit that
records the new ones: a sync that dies before its commit is done again, one that committed is
never repeated. A row no source holds any more is deleted; one whose values did not change is
not written again (an update in the WAL would recalculate its window). Does not touch the
catalog, triggers or Dagster.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from ..faults import failpoint
from .catalog import TableInfo, check_virtual_source, sources_by_table
from .types import arrow_schema
from .warehouse import Warehouse

FEED_KEY = "tdstream.vfeed"  # commit info: {"plan": digest, "versions": {"db.storage": version}}


@dataclass(frozen=True)
class _Source:
    """One table a virtual table's columns read: (virtual column, source column) pairs."""

    info: TableInfo
    pairs: tuple[tuple[str, str], ...]

    @property
    def storage(self) -> str:
        return f"{self.info.db}.{self.info.storage_name}"


@dataclass(frozen=True)
class _Member:
    """A virtual normal table, or one child table of a virtual super table, and its sources."""

    info: TableInfo
    sources: tuple[_Source, ...]


def newest_version(warehouse: Warehouse, table: TableInfo) -> int:
    """A trigger table's newest WAL offset; a virtual table's feed is synced first."""
    return sync(warehouse, table) if table.virtual else warehouse.delta.version(table.db, table.storage_name)


def feed_root(warehouse: Warehouse, info: TableInfo) -> TableInfo:
    """The table whose feed holds ``info``'s rows: a virtual child table's super table."""
    if info.kind == "child" and info.stable is not None:
        root = warehouse.find_table(info.db, info.stable)
        if root is not None:
            return root
    return info


def sync(warehouse: Warehouse, info: TableInfo) -> int:
    """Bring the feed of the virtual table ``info`` up to date (created on first use) and
    return its newest version."""
    root = feed_root(warehouse, info)
    db, feed = root.db, root.storage_name
    delta = warehouse.delta
    with warehouse.locks.hold([(db, feed)]):
        if not delta.exists(db, feed):
            delta.create(db, feed, _schema(root))
        version = delta.version(db, feed)
        members = _members(warehouse, root)
        plan = _plan_digest(members)
        current = {s.storage: delta.version(s.info.db, s.info.storage_name) for m in members for s in m.sources}
        recorded = _recorded(warehouse, db, feed, version)
        if recorded is not None and recorded["plan"] == plan and recorded["versions"] == current:
            return version
        extra = {FEED_KEY: json.dumps({"plan": plan, "versions": current}, sort_keys=True)}
        schema = _schema(root)
        keys = ("tbname", root.primary_key) if root.kind == "super" else (root.primary_key,)
        if recorded is None or recorded["plan"] != plan:
            # first sync, or the table's columns, child tables or sources changed: all its rows
            # (compared with what the feed holds: a row that did not change is not written)
            rows = _concat(schema, [_rows(warehouse, m, schema, None) for m in members])
            stored = delta.read(db, feed).cast(schema) if version > 0 else schema.empty_table()
            affected = _keys_of(root, stored)
        else:
            affected = _affected(warehouse, members, recorded["versions"], current)
            rows = _concat(schema, [_rows(warehouse, m, schema, affected.get(m.info.name)) for m in members])
            stored = _stored(warehouse, root, schema, affected)
        vanished = _vanished(root, affected, rows)
        rows, replaces = _changed(rows, stored, keys)
        failpoint("feed-rows-computed")
        if not vanished and rows.num_rows == 0:
            version = _record(warehouse, db, feed, extra)
        elif not vanished and not replaces:
            version = delta.append(db, feed, rows, {}, extra)
        else:
            predicate = warehouse.keys_predicate(root, vanished) if vanished else None
            version = delta.upsert(db, feed, rows, keys, {}, delete_unmatched=predicate, extra=extra)
        failpoint("after-feed-commit")
        return version


def _schema(root: TableInfo) -> pa.Schema:
    return arrow_schema(root.columns, with_tbname=root.kind == "super")


def _members(warehouse: Warehouse, root: TableInfo) -> list[_Member]:
    tables = warehouse.catalog.child_tables(root.db, root.name) if root.kind == "super" else [root]
    members = []
    for table in tables:
        sources = []
        for (source_db, source_table), pairs in sorted(sources_by_table(table, table.columns[1:]).items()):
            source = warehouse.find_table(source_db, source_table)
            if source is not None and not source.virtual:  # dropped since: its columns read NULL
                check_virtual_source(table, pairs, source)  # as a query of it would
                sources.append(_Source(source, tuple((c.name, s) for c, s in pairs)))
        members.append(_Member(table, tuple(sources)))
    return members


def _plan_digest(members: Sequence[_Member]) -> str:
    """What the feed's rows are made of: the columns, the member tables and each column's
    source table incarnation (a table dropped and created again has another uid)."""
    plan = [
        [m.info.name, [[c.name, c.type.name] for c in m.info.columns]]
        + [[s.info.db, s.info.name, s.info.uid, list(s.pairs)] for s in m.sources]
        for m in members
    ]
    return hashlib.blake2b(json.dumps(plan).encode(), digest_size=16).hexdigest()


def _recorded(warehouse: Warehouse, db: str, feed: str, version: int) -> dict | None:
    """The plan and source versions of the newest sync commit (other commits, e.g. a
    compaction, record none); None when there is none: the feed is built from all rows."""
    for at in range(version, 0, -1):
        info = warehouse.delta.commit_info(db, feed, at)
        if info is None:
            return None
        if FEED_KEY in info:
            return json.loads(info[FEED_KEY])
    return None


def _record(warehouse: Warehouse, db: str, feed: str, extra: dict[str, str]) -> int:
    version = warehouse.delta.record(db, feed, extra)
    # an object store takes no empty commit: the next sync reads the same changes again
    return warehouse.delta.version(db, feed) if version is None else version


def _affected(
    warehouse: Warehouse, members: Sequence[_Member], before: dict[str, int], after: dict[str, int]
) -> dict[str, set[int]]:
    """Per member table, the timestamps its sources' commits since ``before`` wrote, updated
    or deleted. A source with no recorded version is new to the plan (the plan digest then
    differs): it is not read here."""
    feeds: dict[str, pa.Table] = {}
    affected: dict[str, set[int]] = {}
    for member in members:
        for source in member.sources:
            start, end = before.get(source.storage), after[source.storage]
            if start is None or end <= start:
                continue
            if source.storage not in feeds:
                feeds[source.storage] = warehouse.delta.change_feed(
                    source.info.db, source.info.storage_name, start + 1, end
                )
            changes = feeds[source.storage]
            keys = changes[source.info.primary_key]
            if source.info.kind == "child":
                keys = keys.filter(pc.equal(changes["tbname"].cast(pa.string()), source.info.name))
            keys = keys.to_pylist()
            affected.setdefault(member.info.name, set()).update(int(k) for k in keys)
    return affected


def _rows(warehouse: Warehouse, member: _Member, schema: pa.Schema, keys: set[int] | None) -> pa.Table:
    """The member's virtual rows, all of them or those at ``keys``, in the feed's schema."""
    if keys is not None and not keys:
        return schema.empty_table()
    pk = member.info.primary_key
    joined: pa.Table | None = None
    for source in member.sources:
        filters: list[tuple[str, str, object]] = []
        if keys is not None:
            filters += [(source.info.primary_key, ">=", min(keys)), (source.info.primary_key, "<=", max(keys))]
        if source.info.kind == "child":
            filters.append(("tbname", "=", source.info.name))
        names = [source.info.primary_key, *dict.fromkeys(column for _, column in source.pairs)]
        data = warehouse.delta.read(source.info.db, source.info.storage_name, names, filters or None)
        # in the feed's types (strings are read as views, which pyarrow's filters and joins lack)
        part = pa.table(
            {
                pk: data[source.info.primary_key].cast(pa.int64()),
                **{virtual: data[column].cast(schema.field(virtual).type) for virtual, column in source.pairs},
            }
        )
        if keys is not None:
            part = part.filter(pc.is_in(part[pk], pa.array(sorted(keys), pa.int64())))
        joined = part if joined is None else joined.join(part, pk, join_type="full outer")
    count = 0 if joined is None else joined.num_rows
    columns = {}
    for field in schema:
        if field.name == "tbname":
            columns[field.name] = pa.array([member.info.name] * count, pa.string())
        elif joined is not None and field.name in joined.column_names:
            columns[field.name] = joined[field.name]
        else:
            columns[field.name] = pa.nulls(count, field.type)
    return pa.table(columns, schema=schema).sort_by(pk)


def _concat(schema: pa.Schema, parts: list[pa.Table]) -> pa.Table:
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _stored(warehouse: Warehouse, root: TableInfo, schema: pa.Schema, affected: dict[str, set[int]]) -> pa.Table:
    """The feed's rows at the affected keys, as the last sync wrote them."""
    every = set().union(*affected.values()) if affected else set()
    if not every:
        return schema.empty_table()
    pk = root.primary_key
    filters: list[tuple[str, str, object]] = [(pk, ">=", min(every)), (pk, "<=", max(every))]
    data = warehouse.delta.read(root.db, root.storage_name, filters=filters).cast(schema)
    names = data["tbname"].to_pylist() if root.kind == "super" else [root.name] * data.num_rows
    wanted = [ts in affected.get(name, ()) for name, ts in zip(names, data[pk].to_pylist(), strict=True)]
    return data.filter(pa.array(wanted, pa.bool_()))


def _vanished(root: TableInfo, affected: dict[str, set[int]], rows: pa.Table) -> list[tuple[str, int]]:
    """The affected keys no source holds a row at any more."""
    present = _keys_of(root, rows)
    return sorted((name, ts) for name, keys in affected.items() for ts in keys if ts not in present.get(name, ()))


def _keys_of(root: TableInfo, rows: pa.Table) -> dict[str, set[int]]:
    """The (member table → timestamps) of feed rows."""
    names = rows["tbname"].to_pylist() if root.kind == "super" else [root.name] * rows.num_rows
    keys: dict[str, set[int]] = {}
    for name, ts in zip(names, rows[root.primary_key].to_pylist(), strict=True):
        keys.setdefault(name, set()).add(ts)
    return keys


def _changed(rows: pa.Table, stored: pa.Table, keys: tuple[str, ...]) -> tuple[pa.Table, bool]:
    """The rows that differ from what the feed holds (a source's column the virtual table
    does not read changed, or an update wrote the same values), and whether one of them
    replaces a held row (a merge) rather than adding one (an append)."""
    if stored.num_rows == 0:
        return rows, False
    held = {tuple(r[k] for k in keys): r for r in stored.to_pylist()}
    fresh, replaces = [], False
    for row in rows.to_pylist():
        before = held.get(tuple(row[k] for k in keys))
        fresh.append(before != row)
        replaces = replaces or (before is not None and before != row)
    return rows.filter(pa.array(fresh, pa.bool_())), replaces
