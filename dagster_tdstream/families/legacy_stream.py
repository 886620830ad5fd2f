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
from ..sql.legacy_stream import needs_tbname_partition, validate_legacy_stream, validate_virtual_source
from ..sql.text import expr_text
from ..sql.translate.render import SUPPORTED_FUNCTIONS
from ..sql.walk import is_interp_query, walk
from ..storage.catalog import StreamInfo
from ..storage.registry import StreamDefinition, load_streams
from ..triggers import conditions
from .register import checked_stream, register_with_output

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
    if table.virtual:
        validate_virtual_source(stmt)
    window = stmt.query.window
    key = next((c.name for c in table.columns[1:] if c.primary_key), None)
    if key is not None and isinstance(window, ast.StateWindow | ast.EventWindow | ast.CountWindow):
        # the legacy streams' documented rule: no STATE, EVENT or COUNT window over a source
        # whose primary key is composite
        what = type(window).__name__.replace("Window", "_WINDOW").upper()
        raise _at_query(
            stmt,
            f"{what} is not supported over {table.name}: its composite primary key ({table.primary_key}, {key})"
            " allows several rows per timestamp",
        )
    second = stmt.query.items[1].expr if len(stmt.query.items) > 1 else None
    selects_key = isinstance(second, ast.Column) and key is not None and second.name.lower() == key.lower()
    if key is not None and window is None and not is_interp_query(stmt.query) and not selects_key:
        # each row is its own window here, and the source's rows are told apart by the key's
        # second column: TDengine's tests accept `ts, a, b` and refuse `ts, 1, b` over (ts, a)
        raise _at_query(
            stmt,
            f"a stream without a window over {table.name} must select its composite primary key column"
            f" {key} second, after the timestamp",
        )
    if table.kind == "super" and needs_tbname_partition(stmt):
        what = type(window).__name__.replace("Window", "_WINDOW").upper() if window else "a stream without a window"
        if is_interp_query(stmt.query):
            what = "an INTERP stream"
        elif stmt.trigger == "FORCE_WINDOW_CLOSE":
            what = "TRIGGER FORCE_WINDOW_CLOSE"
        raise _at_query(
            stmt,
            f"{what} over the super table {table.name} needs"
            " PARTITION BY tbname (each child table's rows are windowed apart)",
        )
    by_tbname = any(isinstance(e, ast.Column) and e.name.lower() == "tbname" for e in stmt.query.partition_by)
    udaf = _aggregate_udf(session, stmt) if table.kind == "super" and not by_tbname else None
    if udaf is not None:
        # TDengine's crossTableWithUdaf: a UDF's intermediate buffers are not merged across
        # the child tables' tasks, so a legacy stream computes one per child table only
        raise StreamValidationError(
            f"Unsupported stream query: the aggregate UDF {udaf.name}() over the super table {table.name}"
            " needs PARTITION BY tbname",
            line=udaf.pos.line or None,
            column=udaf.pos.column or None,
            statement=stmt.text,
        )
    info = StreamInfo(db, name, stmt.text, "Running", 0, 0, session.timezone.key)
    stream, columns = checked_stream(session, info)
    _check_group_exprs(stream)
    start_offset = session.stream_start_offset(stream.stmt, db)
    named = stream.stmt.columns  # the column list, the timestamp the engine puts first included
    if named and len(named) != len(columns):
        # the user's list names the query's columns: those after a timestamp the engine put first
        selected = columns[len(named) - len(stmt.columns) :]
        raise _at_query(
            stmt,
            f"the output column list names {len(stmt.columns)} column(s), the query returns {len(selected)}"
            f" ({', '.join(c.name for c in selected)})",
        )
    names = [name.lower() for name in named] or [column.name.lower() for column in columns]
    tags = [tag.name.lower() for tag in stmt.tags]
    repeated = sorted({name for name in names if names.count(name) > 1} | (set(names) & set(tags)))
    if repeated:
        raise _at_query(
            stmt,
            f"duplicate output column name {repeated[0]!r} (output columns: {', '.join(names)};"
            f" tags: {', '.join(tags) or 'group_id'})",
        )
    # the legacy engine creates the output super table with the stream, so it can be
    # queried (empty) before the first window
    output = stream.output
    writer = next((s.key for s in load_streams(warehouse) if output is not None and s.output == output), None)
    if writer is not None and output is not None:
        raise StreamValidationError(
            f"stream {writer} already writes {'.'.join(output)}: a table is the output of one stream",
            statement=stmt.text,
        )
    return register_with_output(session, stream, columns, start_offset)


def _aggregate_udf(session: Session, stmt: ast.CreateLegacyStream) -> ast.Func | None:
    """The first call of an AGGREGATE FUNCTION (a user-defined one) in the stream's query."""
    for node in (n for item in stmt.query.items for n in walk(item.expr)):
        if isinstance(node, ast.Func) and node.name not in SUPPORTED_FUNCTIONS:
            function = session.warehouse.functions.get(node.name)
            if function is not None and function.aggregate:
                return node
    return None


def _at_query(stmt: ast.CreateLegacyStream, message: str) -> StreamValidationError:
    """A refusal of the stream, placed at its query (where the legacy syntax puts the window)."""
    return StreamValidationError(
        message, line=stmt.query.pos.line or None, column=stmt.query.pos.column or None, statement=stmt.text
    )


def create_snode(stmt: ast.CreateSnode) -> Result:
    """Legacy streams ran on a stream node; here every stream runs on the one shared Spark
    (the warm Spark Connect server, or ``TDSTREAM_SPARK_MASTER``): accepted, nothing to make."""
    return Result(message=f"Create OK (streams run on the shared Spark; dnode {stmt.dnode} needs no snode)")


def _check_group_exprs(stream: StreamDefinition) -> None:
    """A PARTITION BY expression is computed row by row where the trigger task meets a row:
    one it cannot compute (a function it does not know) is refused here, with its position."""
    table = stream.trigger_table
    assert table is not None
    row = {c.name: None for c in (*table.columns, *table.tags)} | {"tbname": None}
    for expr in stream.group_exprs.values():
        try:
            conditions.value(expr, row)
        except conditions.ConditionError as exc:
            where = {"line": expr.pos.line, "column": expr.pos.column} if expr.pos.line else {}
            raise StreamValidationError(f"PARTITION BY {expr_text(expr)}: {exc}", **where) from None
