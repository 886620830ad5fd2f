"""Registering a statement family's stream: the equivalent stream checked as runs will see it,
its output table created at once (the older families create it with the statement, queryable
before the first window), the registry row written — and nothing left of a rejected statement.

Owns that sequence for every family; the families own their own rules before it. Does not touch
triggers, runs or Dagster (the session tells the orchestrator).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..results import Result
from ..storage.catalog import StreamInfo
from ..storage.registry import StreamDefinition, resolve_stream
from ..storage.streamcheck import check_stream_against_catalog

if TYPE_CHECKING:
    from ..session import Session
    from ..sql.translate.scope import OutputColumn


def checked_stream(session: Session, info: StreamInfo) -> tuple[StreamDefinition, Sequence[OutputColumn]]:
    """The stream a registry row resolves to, checked against the catalog, and its output
    columns as its query is translated for runs."""
    from ..compute.run import check_stream_query

    stream = resolve_stream(session.warehouse, info)
    check_stream_against_catalog(stream.stmt, info.db, session.warehouse, session.timezone)
    return stream, check_stream_query(session.warehouse, stream, session.timezone)


def register_with_output(
    session: Session, stream: StreamDefinition, columns: Sequence[OutputColumn], start_offset: int = 0
) -> Result:
    """Create the stream's output table if it does not exist, then register the stream; if
    registering fails, the table created here is dropped again."""
    from ..compute.output import create_declared_output

    warehouse = session.warehouse
    source, output = stream.trigger_table, stream.output
    assert source is not None
    created = output is not None and warehouse.find_table(*output) is None
    if created and columns:
        create_declared_output(warehouse, stream, columns, {c.name: c.type for c in (*source.columns, *source.tags)})
    info = stream.info
    try:
        with warehouse.catalog.transaction() as conn:
            warehouse.catalog.add_stream(
                conn, info.db, info.name, info.sql, start_offset, info.timezone, info.created_at or None
            )
    except Exception:
        if created and output is not None and warehouse.find_table(*output) is not None:
            warehouse.drop_table(warehouse.table(*output))  # nothing is left of a rejected statement
        raise
    return session.told("Create OK", lambda control: control.stream_created(info.key))
