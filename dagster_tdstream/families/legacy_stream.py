"""Legacy streams (TDengine 3.0–3.3.6), executed: their CREATE STREAM and CREATE SNODE.

Owns creating a legacy stream — its rules checked (``sql/legacy_stream.py``, then the ones that
need the source table's kind), the equivalent 3.3.7 stream checked against the catalog and its
query translated as runs will, the statement registered as written (SHOW STREAMS shows it, the
registry resolves it into the stream it is each time it is read). PAUSE and RESUME STREAM are
STOP and START (the parser reads them so). Everything else (triggers, runs, Dagster) sees an
ordinary stream. Does not touch triggers, runs or Dagster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import StreamValidationError
from ..results import Result
from ..sql import ast
from ..sql.legacy_stream import needs_tbname_partition, validate_legacy_stream
from ..storage.catalog import StreamInfo
from ..storage.registry import resolve_stream
from ..storage.streamcheck import check_stream_against_catalog

if TYPE_CHECKING:
    from ..session import Session


def create(session: Session, stmt: ast.CreateLegacyStream) -> Result:
    warehouse = session.warehouse
    db, name = session.db_of(stmt.name), stmt.name.name.lower()
    warehouse.database(db)
    if warehouse.catalog.get_stream(db, name) is not None:
        if stmt.if_not_exists:
            return Result(message="OK (stream exists)")
        raise StreamValidationError(f"stream {db}.{name} already exists", statement=stmt.text)
    validate_legacy_stream(stmt)
    source = stmt.query.source
    assert isinstance(source, ast.TableSource)
    table = session.table(source.table)  # a missing source is an error now, not at the first window
    if table.kind == "super" and needs_tbname_partition(stmt):
        window = stmt.query.window
        raise StreamValidationError(
            f"{type(window).__name__.replace('Window', '_WINDOW').upper()} over the super table {table.name} needs"
            " PARTITION BY tbname (each child table's rows are windowed apart)",
            line=stmt.query.pos.line or None,
            column=stmt.query.pos.column or None,
            statement=stmt.text,
        )
    info = StreamInfo(db, name, stmt.text, "Running", 0, 0, session.timezone.key)
    equivalent = resolve_stream(warehouse, info).stmt
    check_stream_against_catalog(equivalent, db, warehouse, session.timezone)
    start_offset = session.stream_start_offset(equivalent, db)
    session.check_query_runs(equivalent, db, name, start_offset)
    with warehouse.catalog.transaction() as conn:
        warehouse.catalog.add_stream(conn, db, name, stmt.text, start_offset, session.timezone.key)
    return session.told("Create OK", lambda control: control.stream_created(f"{db}.{name}"))


def create_snode(stmt: ast.CreateSnode) -> Result:
    """Legacy streams ran on a stream node; here every stream runs on the one shared Spark
    (the warm Spark Connect server, or ``TDSTREAM_SPARK_MASTER``): accepted, nothing to make."""
    return Result(message=f"Create OK (streams run on the shared Spark; dnode {stmt.dnode} needs no snode)")
