"""FILL of a legacy stream's INTERVAL windows: the rows of windows without data.

A legacy ``… INTERVAL(i) FILL(mode)`` stream writes, beside each window with rows, the windows
of its group that have none. Owns those rows: a window the wall clock closed empty
(FORCE_WINDOW_CLOSE fires every window) gets FILL's values, and the windows between a
group's window with rows and the group's previous written window are written with it —
NEXT and LINEAR know their values only then, and for event-time triggers that is also when
the windows before it close. NULL and VALUE give constants, PREV the previous window's values,
NEXT the next one's, LINEAR numbers interpolated over the window starts. Window
pseudo-columns are the filled window's, partition values its group's. Reads the batch's
groups' neighbouring windows from the output table; must not touch triggers, the catalog or
Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ..errors import QueryError
from ..sql import ast
from ..sql.constants import ConstantContext, evaluate
from ..sql.legacy_stream import fill_kind
from ..sql.limits import MAX_FILL_WINDOWS
from ..sql.timeunits import resolve_timezone
from ..storage.registry import StreamDefinition
from ..storage.warehouse import Warehouse
from ..triggers.engine import WINDOW_CLOSE, WindowTrigger
from .output import Group, child_table_name, group_of, written_columns


def fill_windows(
    warehouse: Warehouse,
    stream: StreamDefinition,
    trigger: WindowTrigger,
    result: pa.Table,
    triggers: Sequence[dict[str, Any]],
    now: int,
    replace_range: tuple[int, int] | None = None,
    rows_around: dict[Group, tuple[int | None, int | None]] | None = None,
) -> pa.Table:
    """``result`` (one column per output column, then ``__tid``) with the filled windows:
    empty windows' rows replaced by FILL's values, the gaps around windows with rows added
    (a recalculated ``replace_range`` is refilled up to the written windows beyond it).
    ``rows_around``: per group, the trigger table's newest row before the batch's windows and
    its oldest after them — a late window between written ones is filled against the windows
    that hold those rows, so the filled windows between are written again."""
    option = stream.stmt.option(ast.LEGACY_FILL)
    assert option is not None and option.fill is not None and stream.stmt.query is not None
    mode = option.fill.mode.removesuffix("_F")
    kinds = _column_kinds(stream.stmt.query)
    constants = _fill_values(stream, option.fill, kinds, now) if mode == "VALUE" else {}
    by_id = {int(t["id"]): t for t in triggers}
    names = [f for f in result.column_names if f != "__tid"]
    values = [result.column(n).to_pylist() for n in names]
    per_group: dict[Group, dict[int, tuple[list[Any], int, bool]]] = {}
    for index, tid in enumerate(result.column("__tid").to_pylist()):
        fired = by_id[int(tid)]
        row = [column[index] for column in values]
        empty = fired["event"] == WINDOW_CLOSE and int(fired["row_count"]) == 0
        per_group.setdefault(group_of(fired), {})[int(fired["wstart"])] = (row, int(tid), empty)
    before, after, written = _neighbours(warehouse, stream, per_group, len(names), replace_range)
    rows: list[list[Any]] = []
    tids: list[int] = []
    spec = trigger.spec
    for group, (newest_before, oldest_after) in (rows_around or {}).items():
        if group not in per_group:
            continue
        first, last = min(per_group[group]), max(per_group[group])
        held = written.get(group, {})
        if newest_before is not None:
            start = max((s for s in spec.starts(newest_before) if s < first), default=None)
            if start is not None and start in held:
                before[group] = (start, held[start])
        if oldest_after is not None:
            start = min((s for s in spec.starts(oldest_after) if s > last), default=None)
            if start is not None and start in held:
                after[group] = (start, held[start])

    def fill_gap(previous: tuple[int, list[Any]], following: tuple[int, list[Any]], tid: int) -> None:
        """The windows strictly between two written ones."""
        window, count = spec.after(previous[0]), 0
        while window < following[0]:
            count += 1
            if count > MAX_FILL_WINDOWS:
                raise QueryError(
                    f"stream {stream.key}: FILL would write more than {MAX_FILL_WINDOWS} windows between two "
                    "windows of one group"
                )
            filled = _filled(mode, kinds, constants, spec, window, previous, following, following[1])
            rows.append(filled)
            tids.append(tid)
            previous = (window, filled)
            window = spec.after(window)

    for group, windows in per_group.items():
        previous = before.get(group)
        for start in sorted(windows):
            row, tid, empty = windows[start]
            if empty:
                row = _filled(mode, kinds, constants, spec, start, previous, None, row)
            elif previous is not None:
                fill_gap(previous, (start, row), tid)
            rows.append(row)
            tids.append(tid)
            previous = (start, row)
        if previous is not None and group in after:  # up to the group's next written window
            fill_gap(previous, after[group], tid)
    arrays = [_array([r[i] for r in rows], result.column(n).type) for i, n in enumerate(names)]
    return pa.table([*arrays, pa.array(tids, result.column("__tid").type)], names=[*names, "__tid"])


def _array(values: list[Any], dtype: pa.DataType) -> pa.Array:
    """A result column with its filled values; LINEAR's numbers in an integer column are cut
    toward zero, as TDengine converts its interpolated double."""
    if pa.types.is_integer(dtype):
        values = [int(v) if isinstance(v, float) else v for v in values]
    return pa.array(values, dtype)


def _column_kinds(query: ast.Select) -> list[str]:
    """Per output column: how FILL writes it (``legacy_stream.fill_kind``)."""
    return [fill_kind(item.expr) for item in query.items]


def _fill_values(stream: StreamDefinition, fill: ast.Fill, kinds: list[str], now: int) -> dict[int, Any]:
    """FILL(VALUE, …): one constant per filled column, in their order."""
    filled = [i for i, kind in enumerate(kinds) if kind == "fill"]
    ctx = ConstantContext(stream.precision, resolve_timezone(stream.info.timezone), now)
    return {i: evaluate(value, ctx) for i, value in zip(filled, fill.values, strict=True)}


def _filled(
    mode: str,
    kinds: list[str],
    constants: dict[int, Any],
    spec: Any,
    start: int,
    previous: tuple[int, list[Any]] | None,
    following: tuple[int, list[Any]] | None,
    neighbour: list[Any],
) -> list[Any]:
    """The row of window ``start`` without data between ``previous`` and ``following``
    (each a window start and its row, or None); ``neighbour`` lends the group's values."""
    row = []
    for i, kind in enumerate(kinds):
        if kind == "_twstart":
            row.append(start)
        elif kind == "_twend":
            row.append(spec.end(start))
        elif kind == "_twduration":
            row.append(spec.end(start) - start)
        elif kind == "keep":
            row.append(neighbour[i])
        elif mode == "VALUE":
            row.append(constants[i])
        elif mode == "PREV":
            row.append(previous[1][i] if previous is not None else None)
        elif mode == "NEXT":
            row.append(following[1][i] if following is not None else None)
        elif mode == "LINEAR":
            row.append(_linear(previous, following, i, start))
        else:  # NULL
            row.append(None)
    return row


def _linear(previous: tuple[int, list[Any]] | None, following: tuple[int, list[Any]] | None, i: int, at: int) -> Any:
    if previous is None or following is None:
        return None
    (x0, row0), (x1, row1) = previous, following
    y0, y1 = row0[i], row1[i]
    if not all(isinstance(y, int | float) and not isinstance(y, bool) for y in (y0, y1)) or x1 == x0:
        return None  # numbers only: other types have no line between two values
    return y0 + (y1 - y0) * (at - x0) / (x1 - x0)


def _neighbours(
    warehouse: Warehouse,
    stream: StreamDefinition,
    per_group: dict[Group, dict[int, Any]],
    width: int,
    replace_range: tuple[int, int] | None,
) -> tuple[dict[Group, tuple[int, list[Any]]], dict[Group, tuple[int, list[Any]]], dict[Group, dict[int, list[Any]]]]:
    """Each group's written windows around the batch: the latest before its first window and
    the earliest after its last (their starts and rows) — outside ``replace_range``, whose
    rows the write replaces — and every written window of the group by its start."""
    if stream.output is None or not per_group:
        return {}, {}, {}
    info = warehouse.find_table(*stream.output)
    if info is None:
        return {}, {}, {}
    group_of_child = {
        (child_table_name(stream, group) if info.kind != "normal" else info.name): group for group in per_group
    }
    names = [c.name for c in written_columns(stream, info)][:width]
    # only the batch's groups' rows, and only the columns a row of the result has
    super_table = info.kind != "normal"
    data = warehouse.delta.read(
        info.db,
        info.storage_name,
        columns=list(dict.fromkeys([info.primary_key, *names, *(["tbname"] if super_table else [])])),
        filters=[("tbname", "in", sorted(group_of_child))] if super_table else None,
    )
    if data.num_rows == 0:
        return {}, {}, {}
    starts = data.column(info.primary_key).cast(pa.int64()).to_pylist()
    tables = data.column("tbname").to_pylist() if super_table else [info.name] * data.num_rows
    columns = [
        (data.column(n).cast(pa.int64()) if pa.types.is_timestamp(data.column(n).type) else data.column(n)).to_pylist()
        for n in names
    ]
    low, high = replace_range or (None, None)
    before: dict[Group, tuple[int, list[Any]]] = {}
    after: dict[Group, tuple[int, list[Any]]] = {}
    written: dict[Group, dict[int, list[Any]]] = {}
    for index, (start, table) in enumerate(zip(starts, tables, strict=True)):
        group = group_of_child.get(table)
        if group is None:
            continue
        written.setdefault(group, {})[start] = [c[index] for c in columns]
        first, last = min(per_group[group]), max(per_group[group])
        earlier = start < (first if low is None else min(first, low))
        later = start > (last if high is None else max(last, high - 1))
        if earlier and (group not in before or start > before[group][0]):
            before[group] = (start, [c[index] for c in columns])
        elif later and (group not in after or start < after[group][0]):
            after[group] = (start, [c[index] for c in columns])
    return before, after, written
