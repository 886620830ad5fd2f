"""TDengine 2.x continuous queries, executed: CREATE TABLE … AS SELECT … INTERVAL, KILL STREAM.

Owns creating a continuous query — its rules checked (``sql/continuous_query.py``), the
equivalent stream checked against the catalog and its query translated as runs will, the
result table created at once as 2.x does, the stream registered — and stopping one: KILL
STREAM, or dropping its result table or its source table. Everything else (triggers, runs,
Dagster) sees an ordinary stream. Does not touch triggers, runs or Dagster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import CatalogError
from ..results import Result
from ..sql import ast
from ..sql.continuous_query import validate_continuous_query
from ..sql.timeunits import PRECISIONS
from ..storage.catalog import StreamInfo, TableInfo
from ..storage.registry import load_streams, resolve_stream
from ..triggers.engine import WINDOW_CLOSE
from .register import checked_stream, register_with_output

if TYPE_CHECKING:
    from ..session import Session


def create(session: Session, stmt: ast.CreateContinuousQuery) -> Result:
    warehouse = session.warehouse
    db, name = session.db_of(stmt.table), stmt.table.name.lower()
    warehouse.database(db)
    if warehouse.catalog.get_stream(db, name) is not None or warehouse.find_table(db, name) is not None:
        if stmt.if_not_exists:
            return Result(message="OK (table exists)")
        raise CatalogError(
            f"table {db}.{name} already exists", line=stmt.table.pos.line or None, column=stmt.table.pos.column or None
        )
    validate_continuous_query(stmt)
    source = stmt.query.source
    assert isinstance(source, ast.TableSource)
    session.table(source.table)  # a missing source is an error now, not at the first window
    created_at = session.clock() // 10**6
    info = StreamInfo(db, name, stmt.text, "Running", created_at, 0, session.timezone.key)
    stream, columns = checked_stream(session, info)
    return register_with_output(session, stream, columns)


def stopped_by_drop(session: Session, dropped: list[TableInfo]) -> list[str]:
    """The continuous queries that dropping these tables stops (2.x: dropping a result table
    stops its query; a query whose table or super table is gone has nothing to compute):
    unregistered here, their keys returned for the orchestrator."""
    gone = {(t.db, t.name) for t in dropped}
    stopped = []
    for stream in load_streams(session.warehouse):
        if stream.family != "continuous_query":
            continue
        source = stream.stmt.trigger_table
        assert source is not None
        source_key = ((source.db or stream.db).lower(), source.name.lower())
        if stream.output in gone or source_key in gone:
            with session.warehouse.catalog.transaction() as conn:
                session.warehouse.catalog.drop_stream(conn, stream.db, stream.name)
            stopped.append(stream.key)
    return stopped


def kill(session: Session, stmt: ast.KillStream) -> Result:
    """KILL STREAM: the continuous query stops (its result table stays, as in 2.x)."""
    catalog = session.warehouse.catalog
    if stmt.name is None:
        info = next((s for s in catalog.list_streams() if s.stream_id == stmt.stream_id), None)
        what = f"stream id {stmt.stream_id}"
    else:
        db, name = session.db_of(stmt.name), stmt.name.name.lower()
        info = catalog.get_stream(db, name)
        what = f"{db}.{name}"
    if info is None or resolve_stream(session.warehouse, info).family != "continuous_query":
        where = stmt.name.pos if stmt.name is not None else stmt.pos
        raise CatalogError(
            f"no continuous query {what}: KILL STREAM stops 2.x continuous queries (DROP STREAM stops streams)",
            line=where.line or None,
            column=where.column or None,
        )
    with catalog.transaction() as conn:
        catalog.drop_stream(conn, info.db, info.name)
    return session.told("Kill OK", lambda control: control.stream_dropped(info.key))


# SHOW STREAMS as the 2.x client shows it (2.x's mnode stream meta, with its dest table column)
TWO_X_STREAM_COLUMNS = (
    ("streamId", "VARCHAR"),
    ("user", "VARCHAR"),
    ("dest table", "VARCHAR"),
    ("ip:port", "VARCHAR"),
    ("created time", "TIMESTAMP"),
    ("exec time", "TIMESTAMP"),
    ("time(us)", "BIGINT"),
    ("sql", "VARCHAR"),
    ("cycles", "BIGINT"),
)


def show_streams_2x(session: Session, db: str) -> Result:
    """SHOW STREAMS in the 2.x dialect. ``streamId`` is ``0:<stream id>`` (2.x's
    ``connId:streamId``; there are no connections here, so the connection part is 0), what KILL
    STREAM takes; ``exec time`` the start of the latest window it
    computed (NULL before the first); ``cycles`` the windows computed. A 2.x server also showed
    the client's address and the query time spent: neither exists here (NULL)."""
    warehouse = session.warehouse
    columns: dict[str, list[Any]] = {name: [] for name, _ in TWO_X_STREAM_COLUMNS}
    for stream in load_streams(warehouse):
        if stream.db != db:
            continue
        output = warehouse.find_table(*stream.output) if stream.output else None
        bounds = warehouse.key_bounds(output) if output is not None else None
        per_ms = 10**6 // PRECISIONS[warehouse.database(output.db).precision] if output is not None else 1
        values = (
            f"0:{stream.info.stream_id}" if stream.info.stream_id is not None else stream.name,
            "root",
            f"{stream.output[0]}.{stream.output[1]}" if stream.output else None,
            None,
            stream.info.created_at,
            bounds[1] // per_ms if bounds is not None else None,
            None,
            stream.info.sql,
            warehouse.catalog.count_events(stream.key, WINDOW_CLOSE),
        )
        for (name, _), value in zip(TWO_X_STREAM_COLUMNS, values, strict=True):
            columns[name].append(value)
    arrow = {
        "TIMESTAMP": pa.timestamp("ms", tz="UTC"),
        "BIGINT": pa.int64(),
        "VARCHAR": pa.string(),
    }
    table = pa.table({name: pa.array(columns[name], arrow[kind]) for name, kind in TWO_X_STREAM_COLUMNS})
    return Result(table=table, message=f"Query OK, {table.num_rows} row(s) in set")
