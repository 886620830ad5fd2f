"""The rows a legacy stream aggregated, where they differ from its trigger table's rows.

TDengine's legacy engine aggregates the rows it accepted as they arrived, not the rows its
table holds. Two options of the equivalent stream make that visible, and this module owns the
two hidden Delta tables (in the trigger table's database, named by ``storage_name``) that
record the difference since the stream started:

- ``ast.WRITTEN_ROWS`` (IGNORE UPDATE 1, the default): a row written again at its timestamp
  is one more row, so the pre-image of every row a write replaced is kept (``written``, the
  trigger table's storage schema);
- ``ast.TABLE_EXPIRY`` (IGNORE EXPIRED 1 judged per child table): a row its own table had
  already passed was never aggregated, though the table stores it and a window computed again
  for another table's row reads it, so its key is kept (``expired``: tbname and timestamp).

``keep`` appends a trigger tick's share to each in one commit that records the WAL offset it
read through, so a tick done again after a crash adds nothing twice. A run reads them beside
the table (``compute/run.py``): the table's rows, plus the pre-images of rows it still holds
(a deleted row goes with all its writes), less the expired keys. Does not touch the catalog,
triggers or Dagster.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from ..faults import failpoint
from ..sql import ast
from .catalog import RESERVED_PREFIX, TableInfo
from .registry import StreamDefinition
from .types import arrow_schema
from .warehouse import Warehouse

THROUGH_KEY = "tdstream.written_through"  # commit info: the last WAL offset a commit accounts for
WRITTEN, EXPIRED = "written", "expired"


def storage_name(stream_key: str, kind: str) -> str:
    """The Delta table of ``kind`` (WRITTEN or EXPIRED) of the stream ``db.name``."""
    return f"{RESERVED_PREFIX}{kind}.{stream_key}"


def kept_for(stream: StreamDefinition, table: TableInfo | None) -> bool:
    """Whether the stream's rows differ from its table's (a virtual table's feed has no writes
    of its own to count: TDengine refuses both options' opposites over one)."""
    options = (ast.WRITTEN_ROWS, ast.TABLE_EXPIRY)
    return table is not None and not table.virtual and any(stream.stmt.option(o) is not None for o in options)


def keep(
    warehouse: Warehouse,
    stream: StreamDefinition,
    table: TableInfo,
    feed: pa.Table,
    expired: list[tuple[str, int]],
    through: int,
) -> None:
    """Append a tick's pre-images (its WAL records up to offset ``through``) and the keys of
    the rows it found expired, each unless an earlier commit accounts for that offset."""
    if stream.stmt.option(ast.WRITTEN_ROWS) is not None and feed.num_rows:
        schema = arrow_schema(table.columns, with_tbname=table.kind != "normal")
        storage = storage_name(stream.key, WRITTEN)
        _append(warehouse, table.db, storage, schema, through, lambda done: _replaced(feed, schema, done))
    if stream.stmt.option(ast.TABLE_EXPIRY) is not None and expired:
        schema = pa.schema([pa.field("tbname", pa.string()), pa.field(table.primary_key, pa.int64())])
        keys = pa.table(
            {"tbname": [t for t, _ in expired], table.primary_key: [ts for _, ts in expired]}, schema=schema
        )
        _append(warehouse, table.db, storage_name(stream.key, EXPIRED), schema, through, lambda _: keys)


def _append(
    warehouse: Warehouse, db: str, storage: str, schema: pa.Schema, through: int, rows_after: Callable[[int], pa.Table]
) -> None:
    """Append the rows ``rows_after(done)`` gives (``done``: the offset the table accounts for
    so far) in a commit that accounts for ``through``; nothing when it already does."""
    delta = warehouse.delta
    exists = delta.exists(db, storage)
    version = delta.version(db, storage) if exists else 0
    info = delta.commit_info(db, storage, version) if version > 0 else None
    done = int(info.get(THROUGH_KEY, -1)) if info else -1
    if through <= done:
        return
    rows = rows_after(done)
    if rows.num_rows:  # (created with its first rows: a stream without any reads nothing more)
        if not exists:
            delta.create(db, storage, schema)
        delta.append(db, storage, rows, {}, {THROUGH_KEY: str(through)})
        failpoint("after-written-commit")


def _replaced(feed: pa.Table, schema: pa.Schema, done: int) -> pa.Table:
    """The pre-images of the feed's commits after offset ``done``."""
    replaced = pc.and_(
        pc.equal(feed["_change_type"].cast(pa.string()), "update_preimage"),
        pc.greater(feed["_commit_version"].cast(pa.int64()), done),
    )
    # in the storage's types first (strings come as views, which pyarrow's filter lacks)
    return pa.table({f.name: feed[f.name].cast(f.type) for f in schema}, schema=schema).filter(replaced)


def drop(warehouse: Warehouse, table: TableInfo | None, stream_key: str) -> None:
    """Remove a dropped stream's tables."""
    if table is None:
        return
    for kind in (WRITTEN, EXPIRED):
        if warehouse.delta.exists(table.db, storage_name(stream_key, kind)):
            warehouse.delta.drop(table.db, storage_name(stream_key, kind))
