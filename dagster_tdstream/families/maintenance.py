"""``COMPACT DATABASE``, ``TRIM DATABASE`` and ``FLUSH DATABASE``: maintenance of every table of
a database on demand.

Owns mapping TDengine's statements onto ``storage/maintenance.py`` (which also runs on its own
as writes accumulate): COMPACT merges small files and vacuums what no reader needs, TRIM drops
the data files KEEP has expired, FLUSH has nothing to do (an acknowledged write is already a
Delta commit, not a memory buffer). Must not touch files itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..results import Result
from ..sql import ast
from ..storage.maintenance import Maintained, maintain

if TYPE_CHECKING:
    from ..session import Session


def execute_maintain(session: Session, stmt: ast.MaintainDatabase) -> Result:
    db = stmt.name.lower()
    warehouse = session.warehouse
    warehouse.database(db)
    if stmt.action == "FLUSH":
        return Result(message="Flush OK: every acknowledged write is already committed to its Delta table")
    done = [
        maintain(warehouse, db, table.storage_name, trim_only=stmt.action == "TRIM")
        for table in warehouse.catalog.list_tables(db, ("super", "normal"))
        if not table.virtual  # a virtual table stores nothing of its own
    ]
    total = Maintained(
        sum(d.files_trimmed for d in done),
        sum(d.files_compacted for d in done),
        sum(d.files_vacuumed for d in done),
        sum(d.log_entries_expired for d in done),
    )
    if stmt.action == "TRIM":
        return Result(message=f"Trim OK: {total.files_trimmed} expired data file(s) removed from {len(done)} table(s)")
    return Result(
        message=f"Compact OK: {total.files_compacted} file(s) compacted, {total.files_trimmed} expired, "
        f"{total.files_vacuumed} unreferenced file(s) deleted, {total.log_entries_expired} expired log "
        f"entr{'y' if total.log_entries_expired == 1 else 'ies'} removed in {len(done)} table(s)"
    )
