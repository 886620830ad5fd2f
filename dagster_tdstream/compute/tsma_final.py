"""A plain aggregate query over a TSMA, answered in this process from its merged states.

Owns ``answer``: when the states a query reads were merged here (``tsma_states.merged_states``:
a few rows per table and window) and the query has the plain shape of a pre-aggregation
lookup — its select items aggregates the TSMA keeps, the windows' pseudo-columns and its
PARTITION BY / GROUP BY keys (tbname, tags); a fixed INTERVAL without FILL, or none; no
WHERE but the time range, no HAVING; ORDER BY ``_wstart`` and LIMIT of one series of windows
— each aggregate is finished from the
states with the formulas, result types and row order of the translated query
(``Renderer._merged``: the groups' keys, NULL first, then the window start), so a lookup that
Spark would answer from a few thousand rows costs no Spark job. Any other query: None, and
Spark runs the translated query. Reads only; must not decide which TSMA a query reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..sql import ast
from ..sql.intervals import IntervalSpec
from ..sql.tsma import FUNCTION_STATES, State
from ..sql.tsma_use import QueryShape
from ..storage.catalog import TableInfo
from .tsma_states import fixed_interval, value_at

_PSEUDO = ("_wstart", "_wend", "_wduration")
_WINDOW = "__w"


@dataclass(frozen=True)
class _Item:
    """A select item: a group ``key``, a window ``pseudo``-column, or an ``agg``regate of
    ``column`` combining the states ``needs`` ((state column, how), by its function)."""

    kind: str
    name: str
    column: str = ""
    needs: tuple[tuple[str, str], ...] = ()


def answer(select: ast.Select, table: TableInfo, shape: QueryShape, rows: pa.Table, precision: str) -> pa.Table | None:
    """The query's result columns (``__c0`` …, as the translated query names them), or None
    when it is not of the plain shape (or reads no row: Spark says what an empty input gives)."""
    descending = _by_window(select)
    if (
        select.having is not None
        or descending is None
        or any(v is not None for v in (select.slimit, select.soffset, select.interp))
        or shape.tag_filtered
        or not rows.num_rows
    ):
        return None
    spec = _spec(select.window, precision, shape.timezone)
    if select.window is not None and spec is None:
        return None
    # ORDER BY and LIMIT of one series of windows only (each partition ranks its own rows)
    series = not select.partition_by and not select.group_by
    limited = select.limit is not None or select.offset is not None
    if (select.order_by and (spec is None or not series)) or (limited and not series):
        return None
    groupable = {"tbname": "tbname", **{t.name.lower(): t.name for t in table.tags}}
    keys: list[str] = []
    for expr in (*select.partition_by, *select.group_by):
        if not isinstance(expr, ast.Column) or expr.table is not None or expr.name.lower() not in groupable:
            return None
        keys.append(groupable[expr.name.lower()])
    keys = list(dict.fromkeys(keys))
    items = [_item(item.expr, keys, groupable, spec, table.primary_key.lower(), rows) for item in select.items]
    if any(item is None for item in items):
        return None
    chosen = [item for item in items if item is not None]
    # the keys as non-null codes: a group whose tag is NULL is a group, and joins match it
    codes, values = {}, {}
    for i, key in enumerate(keys):
        encoded = rows.column(key).combine_chunks().dictionary_encode(null_encoding="encode")
        codes[f"__k{i}"], values[key] = encoded.indices, encoded.dictionary
    data = pa.table({**codes, **{c: rows.column(c) for c in rows.column_names}})
    groups = [*codes]
    if spec is not None:
        data = _in_windows(data, table.primary_key, spec)
        groups.append(_WINDOW)
    if not groups:
        data = data.append_column("__all", pa.array([0] * data.num_rows, pa.int8()))
        groups.append("__all")
    wanted = sorted({need for item in chosen for need in item.needs})
    grouped = data.group_by(groups).aggregate(wanted)
    for func, column in dict.fromkeys((i.name, i.column) for i in chosen if i.name in ("first", "last")):
        grouped = _with_chosen(grouped, data, groups, func, column)
    decoded = {key: pc.take(values[key], grouped.column(f"__k{i}")) for i, key in enumerate(keys)}
    order = [*keys] + ([_WINDOW] if spec is not None else [])
    if order:
        by = pa.table({**decoded, **({_WINDOW: grouped.column(_WINDOW)} if spec is not None else {})})
        permutation = pc.sort_indices(by, sort_keys=[(c, "ascending", "at_start") for c in order])
        grouped = grouped.take(permutation)
        decoded = {key: array.take(permutation) for key, array in decoded.items()}
    arrays = [_finish(item, grouped, decoded, spec) for item in chosen]
    result = pa.table(arrays, names=[f"__c{i}" for i in range(len(arrays))])
    if descending:
        result = result.take(pa.array(range(result.num_rows - 1, -1, -1)))
    start = select.offset or 0
    return result.slice(start, select.limit) if select.limit is not None else result.slice(start)


def _by_window(select: ast.Select) -> bool | None:
    """Whether the rows come newest window first: False without ORDER BY or by ``_wstart``
    (or its alias) ascending, True descending; None for any other ORDER BY."""
    if not select.order_by:
        return False
    named = {"_wstart"} | {
        item.alias.lower()
        for item in select.items
        if item.alias and isinstance(item.expr, ast.Column) and item.expr.name.lower() == "_wstart"
    }
    order = select.order_by[0]
    if len(select.order_by) != 1 or not isinstance(order.expr, ast.Column) or order.expr.table is not None:
        return None
    return order.descending if order.expr.name.lower() in named else None


def _spec(window: ast.QueryWindow | None, precision: str, timezone: str) -> IntervalSpec | None:
    """The INTERVAL's geometry when it is one this process finishes: fixed, no FILL."""
    if not isinstance(window, ast.IntervalWindow) or window.fill is not None:
        return None
    spec = fixed_interval(window, precision, timezone)
    return spec if spec is not None and spec.sliding <= spec.interval else None  # else the translator refuses it


def _in_windows(data: pa.Table, pk: str, spec: IntervalSpec) -> pa.Table:
    """``data`` with each row once per window holding it and ``__w`` that window's start:
    ``IntervalSpec.starts`` over whole columns (several windows when SLIDING < INTERVAL, as
    the translated query labels its rows)."""
    at = data.column(pk).to_numpy()
    last = at - (at - spec.offset) % spec.sliding
    before = at - spec.interval
    first = before - (before - spec.offset) % spec.sliding + spec.sliding
    counts = (last - first) // spec.sliding + 1
    rows = np.repeat(np.arange(len(at)), counts)
    nth = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    return data.take(pa.array(rows)).append_column(_WINDOW, pa.array(first[rows] + nth * spec.sliding))


def _item(
    expr: ast.Expr, keys: list[str], groupable: dict[str, str], spec: IntervalSpec | None, pk: str, rows: pa.Table
) -> _Item | None:
    if isinstance(expr, ast.Column) and expr.table is None:
        name = expr.name.lower()
        if name in _PSEUDO:
            return _Item("pseudo", name) if spec is not None else None
        return _Item("key", groupable[name]) if groupable.get(name) in keys else None
    if not isinstance(expr, ast.Func) or expr.name not in FUNCTION_STATES or expr.distinct or len(expr.args) != 1:
        return None
    arg = expr.args[0]
    if expr.name == "count" and isinstance(arg, ast.Star):
        column = pk
    elif isinstance(arg, ast.Column) and arg.table is None:
        column = arg.name.lower()
    else:
        return None
    states = [State(kind, column) for kind in FUNCTION_STATES[expr.name]]
    # first/last are picked by their times (``value_at``); the others combine their states
    needs = () if expr.name in ("first", "last") else tuple((s.name, s.combine) for s in states)
    kept = [s.name for s in states]
    if not all(name in rows.column_names for name in kept):
        return None
    if any(pa.types.is_decimal(rows.schema.field(name).type) for name in kept):
        return None  # Spark widens a DECIMAL's sum (p + 10 digits); its query says how
    return _Item("agg", expr.name, column, needs)


def _with_chosen(grouped: pa.Table, data: pa.Table, groups: list[str], func: str, column: str) -> pa.Table:
    """``grouped`` with ``__first_<column>`` (``__last_``): each group's value kept with its
    earliest (latest) time, over all its rows."""
    picked = value_at(data, groups, f"{func}_{column}", f"{func}ts_{column}", earliest=func == "first")
    return grouped.join(picked.rename_columns([*groups, f"__{func}_{column}"]), groups, join_type="left outer")


def _finish(item: _Item, grouped: pa.Table, decoded: dict[str, pa.Array], spec: IntervalSpec | None) -> pa.Array:
    """An item's values, of the type the translated query gives."""
    if item.kind == "key":
        return decoded[item.name]
    if item.kind == "pseudo":
        assert spec is not None
        start = grouped.column(_WINDOW)
        if item.name == "_wstart":
            return start
        if item.name == "_wend":
            return pc.add(start, spec.interval)
        return pa.array([spec.interval] * grouped.num_rows, pa.int64())
    c = item.column
    if item.name in ("first", "last"):
        return grouped.column(f"__{item.name}_{c}")
    if item.name in ("min", "max"):
        return grouped.column(f"{item.name}_{c}_{item.name}")
    if item.name == "spread":  # CAST(max - min AS DOUBLE): the difference in the column's type
        return pc.subtract(grouped.column(f"max_{c}_max"), grouped.column(f"min_{c}_min")).cast(pa.float64())
    if item.name == "sum":
        total = grouped.column(f"sum_{c}_sum")
        return total.cast(pa.float64() if pa.types.is_floating(total.type) else pa.int64())
    count = grouped.column(f"count_{c}_sum").cast(pa.int64())
    if item.name == "count":
        return pc.fill_null(count, 0)
    counted = pc.if_else(pc.equal(count, 0), pa.scalar(None, pa.float64()), count.cast(pa.float64()))
    mean = pc.divide(grouped.column(f"sum_{c}_sum").cast(pa.float64()), counted)
    if item.name == "avg":
        return mean
    # stddev: TDengine's formula over the states, a rounding below 0 as 0, NULL without values
    variance = pc.subtract(pc.divide(grouped.column(f"sumsq_{c}_sum"), counted), pc.multiply(mean, mean))
    return pc.sqrt(pc.max_element_wise(variance, pa.scalar(0.0), skip_nulls=False))
