"""The rows a stream's trigger table was written with that later writes replaced (IGNORE UPDATE 1).

Owns, for a legacy stream with IGNORE UPDATE 1 (``ast.WRITTEN_ROWS``), a hidden Delta table in
the trigger table's database (``storage_name``: the trigger table's storage schema) that holds
the pre-image of every row a write replaced since the stream started. With the table's rows
they are the rows as written, which such a stream's windows count: a row written twice at one
timestamp counts twice, as TDengine's legacy engine aggregates its input rather than its table.
``keep`` appends a trigger tick's pre-images in one commit that records the WAL offset it read
through, so a tick done again after a crash adds nothing twice. Reading them beside the table
is ``spark_read.table_frame``'s (given this storage); a row deleted since is not counted (the
reader keeps the pre-images of rows the table still holds). Does not touch the catalog,
triggers or Dagster.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .catalog import RESERVED_PREFIX, TableInfo
from .types import arrow_schema
from .warehouse import Warehouse

THROUGH_KEY = "tdstream.written_through"  # commit info: the last WAL offset whose pre-images it holds


def storage_name(stream_key: str) -> str:
    """The pre-images' Delta table of the stream ``db.name`` (in its trigger table's database)."""
    return f"{RESERVED_PREFIX}written.{stream_key}"


def keep(warehouse: Warehouse, table: TableInfo, stream_key: str, feed: pa.Table, through: int) -> None:
    """Append the pre-images among a tick's WAL records (offsets up to ``through``) that no
    earlier commit holds."""
    delta, storage = warehouse.delta, storage_name(stream_key)
    schema = arrow_schema(table.columns, with_tbname=table.kind != "normal")
    if not delta.exists(table.db, storage):
        delta.create(table.db, storage, schema)
    version = delta.version(table.db, storage)
    info = delta.commit_info(table.db, storage, version) if version > 0 else None
    done = int(info.get(THROUGH_KEY, -1)) if info else -1
    if through <= done or feed.num_rows == 0:
        return
    replaced = pc.and_(
        pc.equal(feed["_change_type"].cast(pa.string()), "update_preimage"),
        pc.greater(feed["_commit_version"].cast(pa.int64()), done),
    )
    # in the storage's types first (strings come as views, which pyarrow's filter lacks)
    rows = pa.table({f.name: feed[f.name].cast(f.type) for f in schema}, schema=schema).filter(replaced)
    if rows.num_rows:
        delta.append(table.db, storage, rows, {}, {THROUGH_KEY: str(through)})


def drop(warehouse: Warehouse, table: TableInfo | None, stream_key: str) -> None:
    """Remove a dropped stream's pre-images."""
    if table is not None and warehouse.delta.exists(table.db, storage_name(stream_key)):
        warehouse.delta.drop(table.db, storage_name(stream_key))
