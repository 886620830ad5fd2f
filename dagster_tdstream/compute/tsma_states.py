"""A TSMA's states standing in for a table's rows in one query.

Owns the view a query over a TSMA reads (``read_states``): the TSMA's rows for the windows
wholly inside the query's time range and final (``families/tsma_query.py``), one row per
window with its start as the row's time, and beside them the raw rows no such window holds —
the range's edges, each table's windows not computed yet — each raw row turned into the states
of a window of its own (count 1 or 0, its value as sum, min, max, first and last, its square).
The translator merges both kinds alike (``Renderer._merged``), so the result is the raw
query's. Reads only.

Two ways to build the view, one result. When the raw rows to read are few (from the files'
statistics), this process reads the states and the rows with pyarrow and merges them into
the query's *atoms* — per table, the spans of time that lie in exactly the same query windows
(the whole range without INTERVAL) — with the TSMA's own merge of states, so Spark gets a few
rows per table and window instead of one per TSMA window, and no scan or join of its own: a
Spark job over files costs a few hundred milliseconds on a small machine whatever it reads.
Otherwise (a table loaded table by table, whose every file spans all the time) Spark reads
both.
"""

from __future__ import annotations

from math import gcd
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..families.tsma_query import TsmaChoice
from ..sql import ast
from ..sql.constants import INT64_MAX
from ..sql.intervals import IntervalSpec
from ..sql.timeunits import TimeValueError
from ..sql.translate import SourceTable
from ..sql.tsma import TBNAME_TAG, State
from ..storage.catalog import TableInfo
from ..storage.spark_read import SparkViews, spark_type, table_frame, with_tags
from ..storage.types import arrow_type
from ..storage.warehouse import Warehouse

# rows (by the statistics of the files that may hold them) this process scans for one query's
# raw part at most. pyarrow filters while it scans, keeping only the rows it needs: 10 M rows
# of files spanning all the time took it 0.1 s on 2 cores, the same read in Spark 0.5-0.9 s;
# beyond this a cluster's executors scan faster than one process
DRIVER_ROWS = 20_000_000
# state rows this process holds for one query at most (a few hundred MB); a long range of a
# small interval over many tables is read by Spark
DRIVER_STATES = 2_000_000
_ATOM = "__atom"


def read_states(views: SparkViews, table: TableInfo, choice: TsmaChoice) -> pa.Table | None:
    """Make ``table`` resolve, in ``views``, to its rows as the TSMA's states; return them
    when they were merged in this process (``tsma_final`` may then finish the query here)."""
    precision = views.warehouse.database(table.db).precision
    source = SourceTable(
        f"{table.db}.{table.name}",
        views.fresh_view(),
        table.kind,
        table.columns,
        table.tags,
        precision,
        states=frozenset(s.name.lower() for s in choice.states),
        tsma=choice.key,
    )
    merged = merged_states(views.warehouse, table, choice)
    if merged is not None:
        views.read_as(table, source, lambda: views.rows_frame(merged, "tsma"))
    else:
        views.read_as(table, source, lambda: _spark_states(views, table, choice))
    return merged


def _final_end(choice: TsmaChoice) -> int:
    """The end of the windows read: wholly inside [low, high] (ends are exclusive) and final."""
    return min(min(choice.shape.high, INT64_MAX - 1) + 1, choice.final_before)


def _source_of(warehouse: Warehouse, choice: TsmaChoice) -> dict[str, str]:
    """The output's child tables, each with the source table's name it carries as a tag."""
    children = warehouse.catalog.child_tag_values(choice.output.db, choice.output.name)
    found = {child: tags.get(TBNAME_TAG) for child, tags in children.items()}
    return {child: source for child, source in found.items() if source is not None}


def merged_states(warehouse: Warehouse, table: TableInfo, choice: TsmaChoice) -> pa.Table | None:
    """The view's rows built in this process, merged per table and atom: ``pk`` (the atom's
    earliest time, so the query's WHERE and windows place it as they would every row in it),
    ``tbname``, the tags and the states. None when the states or the raw rows to read are too
    many for this process."""
    pk, low, high, end = table.primary_key, choice.shape.low, choice.shape.high, _final_end(choice)
    output = choice.output
    if table.virtual or warehouse.delta.rows_in_range(output.db, output.name, ("wstart", low, end)) > DRIVER_STATES:
        return None
    states = _windows(warehouse, table, choice, [s.name for s in choice.states])
    spans = _spans(states)
    children = _children(warehouse, table)
    ranges = _raw_ranges(children, spans, low, high)
    storage = table.storage_name
    if sum(warehouse.delta.rows_in_range(table.db, storage, (pk, lo, hi)) for lo, hi, _ in ranges) > DRIVER_ROWS:
        return None
    raw = _outside_spans(_read_raw(warehouse, table, choice.states, ranges), pk, spans)
    types = {c.name: arrow_type(c.type) for c in choice.output.columns}
    as_rows = pa.table(
        {
            pk: states.column("wstart"),
            "tbname": states.column("tbname"),
            **{s.name.lower(): states.column(s.name).cast(types[s.name]) for s in choice.states},
        }
    )
    from_raw = pa.table(
        {
            pk: raw.column(pk.lower()),
            "tbname": raw.column("tbname"),
            **{s.name.lower(): _raw_state(raw, s, pk, types[s.name]) for s in choice.states},
        }
    )
    rows = pa.concat_tables([as_rows, from_raw])
    atoms = _atoms(rows.column(pk), choice, warehouse.database(table.db).precision)
    if atoms is not None:
        rows = _merge(rows.append_column(_ATOM, atoms), pk, choice.states)
    return _with_tags(table, children, rows)


def _children(warehouse: Warehouse, table: TableInfo) -> dict[str, dict[str, Any]]:
    """The tables whose rows the query reads, each with its tag values."""
    if table.kind == "super":
        return warehouse.catalog.child_tag_values(table.db, table.name)
    return {table.name: table.tag_values}


def _windows(warehouse: Warehouse, table: TableInfo, choice: TsmaChoice, states: list[str]) -> pa.Table:
    """The TSMA's windows the query reads — wholly inside its range and final — of ``table``
    (of its child tables for a super table): ``tbname`` the source table's name (the output's
    child tables carry it as their tag), ``wstart``, ``wend`` and the ``states`` columns; the
    files pruned by their statistics."""
    output = choice.output
    source_of = _source_of(warehouse, choice)
    windows = warehouse.delta.read(
        output.db,
        output.name,
        columns=["tbname", "wstart", "wend", *states],
        filters=[("wstart", ">=", choice.shape.low), ("wend", "<=", _final_end(choice))],
    )
    sources = pc.take(
        pa.array(list(source_of.values()), pa.string()),
        pc.index_in(windows.column("tbname"), value_set=pa.array(list(source_of), pa.string())),
    )
    return windows.set_column(0, "tbname", sources).filter(
        pc.is_valid(sources) if table.kind == "super" else pc.equal(sources, table.name)
    )


def _spans(windows: pa.Table) -> pa.Table:
    """Each table's span of the windows read, [first start, last end) (``tbname``,
    ``wstart_min``, ``wend_max``): its raw rows inside are in the windows, those outside are
    read as rows."""
    return windows.group_by("tbname").aggregate([("wstart", "min"), ("wend", "max")])


def _raw_ranges(
    children: dict[str, dict[str, Any]], spans: pa.Table, low: int, high: int
) -> list[tuple[int, int, list[str] | None]]:
    """The key ranges whose raw rows the view needs, each with the only tables to read there
    (None: all): the range's ends (before the latest span's start, from the earliest span's
    end), and between them the tables without a span."""
    if not spans.num_rows:
        return [(low, high, None)]
    first_end = pc.max(spans.column("wstart_min")).as_py()  # before it, some table reads rows
    last_start = pc.min(spans.column("wend_max")).as_py()  # from it on, some table reads rows
    if first_end >= last_start:
        return [(low, high, None)]
    ranges: list[tuple[int, int, list[str] | None]] = [(low, first_end - 1, None), (last_start, high, None)]
    names = list(children)
    spanned = set(spans.column("tbname").to_pylist())
    spanless = [name for name in names if name not in spanned]
    if spanless:
        ranges.append((first_end, last_start - 1, spanless))
    return ranges


def _read_raw(
    warehouse: Warehouse, table: TableInfo, states: tuple[State, ...], ranges: list[tuple[int, int, list[str] | None]]
) -> pa.Table:
    """The table's rows in ``ranges``: the key, the columns the states read, ``tbname``."""
    pk = table.primary_key
    stored = {c.name.lower(): c.name for c in table.columns}
    columns = list(dict.fromkeys([pk, *(stored[s.column.lower()] for s in states)]))
    is_super = table.kind != "normal"
    parts = []
    for lo, hi, only in ranges:
        filters: list[tuple[str, str, object]] = [(pk, ">=", lo), (pk, "<=", hi)]
        if table.kind == "child":
            filters.append(("tbname", "=", table.name))
        if only is not None and table.kind == "super":
            filters.append(("tbname", "in", only))
        part = warehouse.delta.read(
            table.db, table.storage_name, columns=columns + (["tbname"] if is_super else []), filters=filters
        )
        if not is_super:
            part = part.append_column("tbname", pa.array([table.name] * part.num_rows, pa.string()))
        parts.append(part.rename_columns([*(c.lower() for c in columns), "tbname"]))
    return pa.concat_tables(parts)


def _outside_spans(raw: pa.Table, pk: str, spans: pa.Table) -> pa.Table:
    """The rows no window of the TSMA read holds: outside their table's span."""
    if not spans.num_rows or not raw.num_rows:
        return raw
    at = pc.index_in(raw.column("tbname"), value_set=spans.column("tbname"))
    keys = raw.column(pk.lower())
    first, last = pc.take(spans.column("wstart_min"), at), pc.take(spans.column("wend_max"), at)
    outside = pc.or_(pc.less(keys, first), pc.greater_equal(keys, last))
    return raw.filter(pc.or_kleene(pc.is_null(at), outside))


def _raw_state(raw: pa.Table, state: State, pk: str, to: pa.DataType) -> pa.Array:
    """One raw row's value as a state of a window holding only it."""
    value = raw.column(state.column.lower())
    valid = pc.is_valid(value)
    if state.kind in ("firstts", "lastts"):  # its own time, where it has a value
        return pc.if_else(valid, raw.column(pk.lower()), pa.scalar(None, pa.int64())).cast(to)
    if state.kind == "count":
        return valid.cast(to)
    if state.kind == "sumsq":
        double = value.cast(pa.float64())
        return pc.multiply(double, double).cast(to)
    return value.cast(to)


def _atoms(keys: pa.ChunkedArray, choice: TsmaChoice, precision: str) -> pa.Array | None:
    """Each row's atom: the start of the span of time lying in exactly the same query windows
    — with INTERVAL, spans of gcd(interval, sliding) from the offset (every window starts and
    ends on one; each TSMA window lies in one, its interval dividing all three); without, one
    span. None for calendar windows (months start on the time zone's calendar): not merged."""
    window = choice.shape.window
    if window is None:
        return pa.array(np.zeros(len(keys), np.int64))
    spec = fixed_interval(window, precision, choice.shape.timezone)
    if spec is None:
        return None
    step = gcd(spec.interval, spec.sliding)
    at = keys.to_numpy()
    return pa.array(at - np.mod(at - spec.offset, step))


def fixed_interval(window: ast.IntervalWindow, precision: str, timezone: str) -> IntervalSpec | None:
    """The INTERVAL's fixed geometry (days and weeks from ``timezone``'s midnight); None for
    calendar windows or one the translator refuses (it says what is wrong)."""
    try:
        spec = IntervalSpec.of_window(window, precision, timezone)
    except TimeValueError:
        return None
    return spec if isinstance(spec, IntervalSpec) else None


def value_at(rows: pa.Table, keys: list[str], value: str, at: str, *, earliest: bool) -> pa.Table:
    """Per group of ``keys``: ``value`` of the row with the earliest (or latest) ``at`` — a
    first/last state and its time are NULL together, so in that order the first value that is
    not NULL is that row's."""
    ordered = rows.sort_by([(at, "ascending" if earliest else "descending", "at_end")])
    picked = ordered.group_by(keys, use_threads=False).aggregate([(value, "first")])
    return pa.table({**{key: picked.column(key) for key in keys}, value: picked.column(f"{value}_first")})


def _merge(rows: pa.Table, pk: str, states: tuple[State, ...]) -> pa.Table:
    """One row per (table, atom), its states merged as a recursive TSMA merges them: counts,
    sums and squares added, the least minimum and greatest maximum, first/last the value kept
    with the earliest/latest time."""
    keys = ["tbname", _ATOM]
    plain = [s for s in states if s.kind not in ("first", "last")]
    grouped = rows.group_by(keys).aggregate([(pk, "min"), *((s.name.lower(), s.combine) for s in plain)])
    merged = pa.table(
        {
            **{key: grouped.column(key) for key in keys},
            pk: grouped.column(f"{pk}_min"),
            **{s.name.lower(): grouped.column(f"{s.name.lower()}_{s.combine}") for s in plain},
        }
    )
    for state in states:
        if state.kind in ("first", "last"):
            at = f"{state.kind}ts_{state.column}".lower()
            picked = value_at(rows, keys, state.name.lower(), at, earliest=state.kind == "first")
            merged = merged.join(picked, keys, join_type="left outer")
    types = {name: rows.schema.field(name).type for name in rows.column_names}
    return pa.table({name: merged.column(name).cast(types[name]) for name in rows.column_names if name != _ATOM})


def _with_tags(table: TableInfo, children: dict[str, dict[str, Any]], rows: pa.Table) -> pa.Table:
    """The rows with their child table's tags, those of child tables that no longer exist left
    out (as ``with_tags`` joins them)."""
    if table.kind == "normal":
        return rows
    at = pc.index_in(rows.column("tbname"), value_set=pa.array(list(children), pa.string()))
    kept = pc.is_valid(at)
    rows, at = rows.filter(kept), at.filter(kept)
    for tag in table.tags:
        values = pa.array([tags.get(tag.name) for tags in children.values()], arrow_type(tag.type))
        rows = rows.append_column(tag.name, pc.take(values, at))
    return rows


def _spark_states(views: SparkViews, table: TableInfo, choice: TsmaChoice) -> Any:
    from pyspark.sql import functions as F

    spark, warehouse = views.spark, views.warehouse
    pk, low, high, end = table.primary_key, choice.shape.low, choice.shape.high, _final_end(choice)
    windows = table_frame(spark, warehouse, choice.output).where((F.col("wstart") >= low) & (F.col("wend") <= end))
    if table.kind != "super":  # a child or normal table: its own windows
        windows = windows.where(F.col(TBNAME_TAG) == table.name)
    state_rows = windows.select(
        F.col("wstart").alias(pk),
        F.col(TBNAME_TAG).alias("tbname"),
        *(F.col(f"`{s.name}`").alias(s.name.lower()) for s in choice.states),
    )
    if table.kind != "normal":
        state_rows = with_tags(spark, warehouse, table, state_rows)
    # the spans from the window bounds alone, on the driver (three columns of one row per window)
    spans = _spans(_windows(warehouse, table, choice, []))
    children = _children(warehouse, table)
    raw = _raw_rows(views, table, spans, _raw_ranges(children, spans, low, high))
    types = {c.name.lower(): spark_type(arrow_type(c.type)) for c in choice.output.columns}
    as_states = raw.select(
        F.col(pk),
        F.col("tbname"),
        *(F.col(f"`{t.name}`") for t in table.tags),
        *(_state(s.kind, s.column, pk, types[s.name.lower()]).alias(s.name.lower()) for s in choice.states),
    )
    return state_rows.unionByName(as_states)


def _state(kind: str, column: str, key: str, spark_type: Any) -> Any:
    """One raw row's value as a state of a window holding only it."""
    from pyspark.sql import functions as F

    value = F.col(f"`{column}`")
    if kind in ("firstts", "lastts"):  # its own time, where it has a value
        return F.when(value.isNotNull(), F.col(f"`{key}`")).cast(spark_type)
    if kind == "count":
        return F.when(value.isNull(), 0).otherwise(1).cast(spark_type)
    if kind == "sumsq":
        return (value.cast("double") * value.cast("double")).cast(spark_type)
    return value.cast(spark_type)


def _raw_rows(
    views: SparkViews, table: TableInfo, spans: pa.Table, ranges: list[tuple[int, int, list[str] | None]]
) -> Any:
    """The table's rows in ``ranges`` outside its windows' spans, read by Spark."""
    from functools import reduce

    from pyspark.sql import functions as F

    spark, warehouse = views.spark, views.warehouse
    frames = []
    for lo, hi, only in ranges:
        rows = table_frame(spark, warehouse, table, key_range=(lo, hi))
        frames.append(rows if only is None else rows.where(F.col("tbname").isin(only)))
    rows = reduce(lambda a, b: a.unionByName(b), frames)
    if not spans.num_rows:
        return rows
    bounds = spark.createDataFrame(spans.rename_columns(["tbname", "__lo", "__hi"]))
    pk = table.primary_key
    kept = rows.join(F.broadcast(bounds), "tbname", "left").where(
        F.col("__lo").isNull() | (F.col(pk) < F.col("__lo")) | (F.col(pk) >= F.col("__hi"))
    )
    return kept.drop("__lo", "__hi")
