"""INSERT statements run by the warehouse's writer: sent as text, parsed, checked and converted
there, committed with the other clients' writes.

Owns which statements a session sends to its writer as text (one INSERT of moderate size,
while a writer runs), the writer's side of them (``writer_statements``: the session's state
and text → the one table's rows, or None: the client runs the statement), and what a client
does when the writer goes away before answering. Why: with 8 clients on 2 cores, each
client's parse-check-convert of a one-row INSERT cost 1.5–2 ms of CPU (0.3 ms when run
warm: a process that sleeps on every commit runs cold), more than the commit it waited for;
the writer, busy anyway, does that work warm. What the writer does not take — a script, a
statement creating child tables or writing several physical tables, a rejected one — the
client runs as before, and a rejected statement's error is the client's own. Must not commit
(the writer's committer does) nor speak the socket protocol (``storage/writer.py``).
"""

from __future__ import annotations

import copy
import re
import time
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import CatalogError, TDStreamError
from ..results import Result
from ..sql import ast
from ..sql.insert_row import one_row_insert
from ..sql.parser import parse_statement_text
from ..sql.tokens import split_statements
from ..storage.groupcommit import GROUP_KEY
from ..storage.intents import StagedTable
from ..storage.writer import Statements, WriterLost, new_request_id
from .insert import PreparedInsert, inserted, prepare_insert

if TYPE_CHECKING:
    from ..session import Session
    from ..storage.warehouse import Warehouse

# larger statements are parsed by their client: a bulk INSERT gains nothing from group commit,
# and would hold the writer's interpreter while the other clients' statements wait
MAX_CHARS = 64 << 10
# a commit holding a lost request is at most this much older (ms) than when it was sent (same
# machine, same clock: the margin only covers clock steps)
_CLOCK_MARGIN_MS = 5_000
_INSERT = re.compile(r"\s*insert\s", re.IGNORECASE)


def run_in_writer(session: Session, sql: str) -> Result | None:
    """``sql``'s result when the warehouse's writer ran it; None when it was not sent (not one
    INSERT, no writer) or the writer did not take it: the session runs it then."""
    writer = session.warehouse.writer
    zone = getattr(session.timezone, "key", None)
    if len(sql) > MAX_CHARS or not _INSERT.match(sql) or zone is None or not writer.connected():
        return None
    now = session.clock()  # the client's: NOW in the statement is when the client ran it
    request_id = new_request_id()
    sent_ms = time.time_ns() // 1_000_000
    state = {"sql": sql, "database": session.database, "timezone": zone, "dialect": session.dialect, "now": now}
    try:
        answer = writer.statement(request_id, state)
    except WriterLost:
        return _after_lost_writer(session, sql, now, request_id, sent_ms)
    if "not_taken" in answer or "declined" in answer:
        return None
    if "error" in answer:  # at the statement's start, as a commit's error is located without a writer
        leading = sql[: len(sql) - len(sql.lstrip())]
        line, column = leading.count("\n") + 1, len(leading) - (leading.rfind("\n") + 1) + 1
        raise CatalogError(f"the write was not committed: {answer['error']}", line=line, column=column, statement=sql)
    return inserted(int(answer["affected"]))


def writer_statements(warehouse: Warehouse) -> Statements:
    """The writer's side (``WriterServer``'s ``statements``): a statement's rows as the
    session that sent it would write them, when they are one physical table's and create no
    child table; None otherwise. Raises what the statement's client would raise."""

    def taken(state: dict[str, Any]) -> tuple[StagedTable, pa.Table, int] | None:
        from ..session import Session

        now = int(state["now"])
        session = Session(
            warehouse,
            database=state["database"],
            timezone=state["timezone"],
            dialect=state["dialect"],
            clock=lambda: now,
        )
        stmt = _one_insert(str(state["sql"]))
        if stmt is None:
            return None
        prepared = prepare_insert(session, stmt)
        single = _one_table(warehouse, prepared)
        return None if single is None else (*single, prepared.rows)

    return taken


def _one_table(warehouse: Warehouse, prepared: PreparedInsert) -> tuple[StagedTable, pa.Table] | None:
    """The one physical table a prepared INSERT writes, with its rows in the stored columns;
    None when it writes several or creates a child table: what the writer does not take."""
    stored = warehouse.columns_as_stored(prepared.batches) if not prepared.new_children else []
    return stored[0] if len(stored) == 1 else None


def _one_insert(sql: str) -> ast.Insert | None:
    if (fast := one_row_insert(sql)) is not None:  # what clients send most, without the grammar
        return fast
    parts = split_statements(sql)
    if len(parts) != 1:
        return None
    stmt = parse_statement_text(parts[0], sql)
    return stmt if isinstance(stmt, ast.Insert) else None


def _after_lost_writer(session: Session, sql: str, now: int, request_id: str, sent_ms: int) -> Result:
    """The writer went away with the statement in hand. It committed it (its id is in a
    commit of the table since it was sent), or it did not and the statement runs here, with
    the same NOW: either way the rows are written once."""
    pinned = copy.copy(session)
    pinned.clock = lambda: now
    stmt = _one_insert(sql)
    if stmt is None:  # the writer took only single INSERTs: it committed nothing of this
        return pinned.execute(sql)[-1]
    try:
        prepared = prepare_insert(pinned, stmt)
    except TDStreamError:
        return pinned.execute_statement(stmt)  # raises the error, with the statement's position
    single = _one_table(session.warehouse, prepared)  # else the writer did not take it
    if single is not None:
        target, delta = single[0], session.warehouse.delta
        if delta.commit_listing(target.db, target.storage, GROUP_KEY, request_id, sent_ms - _CLOCK_MARGIN_MS):
            return inserted(prepared.rows)
    session.warehouse.write(prepared.batches, prepared.new_children)
    return inserted(prepared.rows)
