"""Queries answered from a TSMA: which one, and how far its states are final.

Owns choosing the TSMA a query reads — the session's ``querySmaOptimize`` on, the query's
shape one a TSMA may answer and its functions and windows covered (``sql/tsma_use.py``), the
TSMA's progress within ``maxTsmaCalcDelay``, the largest interval first (TDengine's order) —
and how far each TSMA's states can be read (``final_before``): up to the first time its
stream has not computed yet, whether rows it has not read (the WAL past its checkpoint), windows
fired and not computed, or recalculations waiting; for a recursive TSMA the TSMA it is built on
too. Reading the states and the raw rows beside them is ``compute/tsma_states.py``'s; nothing
here runs Spark or writes.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow.compute as pc

from ..sql import ast, tsma
from ..sql.constants import INT64_MAX, ConstantContext
from ..sql.timeunits import NANOS_PER_UNIT, PRECISIONS, Duration, resolve_timezone
from ..sql.tsma_use import QueryShape, covers, query_shape
from ..storage.catalog import StreamInfo, TableInfo
from ..storage.registry import resolve_stream, tsma_root
from ..storage.system import tsma_statements
from ..storage.warehouse import Warehouse


@dataclass(frozen=True)
class TsmaChoice:
    """The TSMA a query reads: its output super table and states, and ``final_before``, the
    time from which its windows are not read (the raw rows are)."""

    key: str  # db.name
    interval: Duration
    output: TableInfo
    states: tuple[tsma.State, ...]
    final_before: int
    shape: QueryShape


def choose(
    warehouse: Warehouse,
    select: ast.Select,
    table: TableInfo,
    constants: ConstantContext,
    max_delay_seconds: int,
) -> TsmaChoice | None:
    """The TSMA the query reads, or None when it reads the raw rows."""
    root = table if table.kind != "child" else warehouse.find_table(table.db, table.storage_name)
    if root is None:
        return None
    found = _tsmas_on(warehouse, root)
    if not found:
        return None
    shape = query_shape(select, table.columns, table.tags, constants)
    if shape is None:
        return None
    for info, written, base in sorted(found, key=lambda f: _length(f[1].interval), reverse=True):
        kept = frozenset((f.name, f.column.lower()) for f in base.functions)
        if not covers(shape, kept, written.interval, resolve_timezone(info.timezone).key):
            continue
        output = warehouse.find_table(info.db, info.name + tsma.OUTPUT_SUFFIX)
        final = final_before(warehouse, info)
        if output is None or final is None or _lags(warehouse, root, final, max_delay_seconds, constants.precision):
            continue
        return TsmaChoice(info.key, written.interval, output, tsma.states(base.functions), final, shape)
    return None


def _tsmas_on(warehouse: Warehouse, root: TableInfo) -> list[tuple[StreamInfo, ast.CreateTsma, ast.CreateTsma]]:
    """The TSMAs whose chain starts at ``root``, each with the TSMA on the table itself (whose
    functions a recursive TSMA keeps)."""
    found = []
    for info, written in tsma_statements(warehouse, root.db):
        base = tsma_root(warehouse, info)[1][-1]
        if (base.table.db or info.db).lower() == root.db and base.table.name.lower() == root.name:
            found.append((info, written, base))
    return found


def _length(interval: Duration) -> int:
    """For ordering only: a month counts as 31 days."""
    return interval.months * 31 * NANOS_PER_UNIT["d"] if interval.is_calendar else interval.nanos


def final_before(warehouse: Warehouse, info: StreamInfo) -> int | None:
    """The time from which the TSMA's states may be missing or stale (INT64_MAX: none are);
    None while its history is not computed (TDengine does not use a TSMA then either)."""
    stream = resolve_stream(warehouse, info)
    source = stream.trigger_table
    offset = warehouse.catalog.latest_checkpoint_offset(info.key)
    if source is None or offset is None:
        return None
    bounds = [INT64_MAX]
    latest = warehouse.delta.version(source.db, source.storage_name)
    if latest > offset:  # rows written, updated or deleted that the trigger has not read
        changes = warehouse.delta.change_feed(source.db, source.storage_name, offset + 1, latest)
        if changes.num_rows:
            bounds.append(pc.min(changes.column(source.primary_key)).as_py())
    bounds += [t["wstart"] for t in warehouse.catalog.pending_triggers(info.key) if t.get("wstart") is not None]
    bounds += [start for _, start, _ in warehouse.catalog.pending_recalculations(info.key)]
    written = tsma_root(warehouse, info)[0]
    if written.recursive:  # states merged from another TSMA's: no further than that one's
        base = warehouse.catalog.get_stream((written.table.db or info.db).lower(), written.table.name.lower())
        below = final_before(warehouse, base) if base is not None else None
        if below is None:
            return None
        bounds.append(below)
    return min(bounds)


def _lags(warehouse: Warehouse, root: TableInfo, final: int, max_delay_seconds: int, precision: str) -> bool:
    """TDengine's maxTsmaCalcDelay: the TSMA's progress is too far behind the table's newest
    row to be worth reading."""
    if final == INT64_MAX:
        return False
    bounds = warehouse.key_bounds(root)
    newest = bounds[1] if bounds is not None else final
    return (newest - final) * PRECISIONS[precision] > max_delay_seconds * 10**9
