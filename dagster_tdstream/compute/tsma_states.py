"""A TSMA's states standing in for a table's rows in one query.

Owns the view a query over a TSMA reads (``read_states``): the TSMA's rows for the windows
wholly inside the query's time range and final (``families/tsma_query.py``), one row per
window with its start as the row's time, and beside them the raw rows no such window holds —
the range's edges, each table's windows not computed yet — each raw row turned into the states
of a window of its own (count 1 or 0, its value as sum, min, max, first and last, its square).
The translator merges both kinds alike (``Renderer._merged``), so the result is the raw
query's. Reads only.
"""

from __future__ import annotations

from typing import Any

from ..families.tsma_query import TsmaChoice
from ..sql.constants import INT64_MAX
from ..sql.translate import SourceTable
from ..sql.tsma import TBNAME_TAG
from ..storage.catalog import TableInfo
from ..storage.spark_read import SparkViews, spark_type, table_frame, with_tags
from ..storage.types import arrow_type


def read_states(views: SparkViews, table: TableInfo, choice: TsmaChoice) -> SourceTable:
    """Make ``table`` resolve, in ``views``, to its rows as the TSMA's states."""
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
    views.read_as(table, source, lambda: _states_frame(views, table, choice))
    return source


def _states_frame(views: SparkViews, table: TableInfo, choice: TsmaChoice) -> Any:
    from pyspark.sql import functions as F

    spark, warehouse = views.spark, views.warehouse
    pk, low, high = table.primary_key, choice.shape.low, choice.shape.high
    # the windows read: wholly inside [low, high] (ends are exclusive) and final
    end = min(min(high, INT64_MAX - 1) + 1, choice.final_before)
    windows = table_frame(spark, warehouse, choice.output).where((F.col("wstart") >= low) & (F.col("wend") <= end))
    if table.kind != "super":  # a child or normal table: its own windows
        windows = windows.where(F.col(TBNAME_TAG) == table.name)
    spans = _spans(views, table, choice, low, end)
    state_rows = windows.select(
        F.col("wstart").alias(pk),
        F.col(TBNAME_TAG).alias("tbname"),
        *(F.col(f"`{s.name}`").alias(s.name.lower()) for s in choice.states),
    )
    if table.kind != "normal":
        state_rows = with_tags(spark, warehouse, table, state_rows)
    raw = _raw_rows(views, table, spans, low, high)
    types = {c.name.lower(): spark_type(arrow_type(c.type)) for c in choice.output.columns}
    as_states = raw.select(
        F.col(pk),
        F.col("tbname"),
        *(F.col(f"`{t.name}`") for t in table.tags),
        *(_state(s.kind, s.column, pk, types[s.name.lower()]).alias(s.name.lower()) for s in choice.states),
    )
    return state_rows.unionByName(as_states)


def _spans(views: SparkViews, table: TableInfo, choice: TsmaChoice, low: int, end: int) -> dict[str, tuple[int, int]]:
    """Each table's span of the windows read, [first start, last end): its raw rows inside
    are in the windows, those outside are read as rows. Read on the driver from the window
    bounds alone (three columns of one row per window, the files pruned by their statistics);
    the output's child tables carry the source table's name as their tag."""
    output, warehouse = choice.output, views.warehouse
    source_of = {
        child.name: child.tag_values.get(TBNAME_TAG) for child in warehouse.catalog.child_tables(output.db, output.name)
    }
    filters: list[tuple[str, str, object]] = [("wstart", ">=", low), ("wend", "<=", end)]
    if table.kind != "super":  # the output child tables of this one table
        mine = [child for child, source in source_of.items() if source == table.name]
        if not mine:
            return {}
        filters.append(("tbname", "in", mine))
    bounds = warehouse.delta.read(output.db, output.name, columns=["tbname", "wstart", "wend"], filters=filters)
    grouped = bounds.group_by("tbname").aggregate([("wstart", "min"), ("wend", "max")])
    return {
        source_of[child]: (lo, hi)
        for child, lo, hi in zip(
            grouped.column("tbname").to_pylist(),
            grouped.column("wstart_min").to_pylist(),
            grouped.column("wend_max").to_pylist(),
            strict=True,
        )
        if source_of.get(child) is not None
    }


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


def _raw_rows(views: SparkViews, table: TableInfo, spans: dict[str, tuple[int, int]], low: int, high: int) -> Any:
    """The table's rows in [low, high] outside its windows' spans: the files of the range's
    ends are read (before the latest span's start, from the earliest span's end), and of the
    middle only the rows of tables without a span."""
    from pyspark.sql import functions as F

    spark, warehouse = views.spark, views.warehouse
    pk = table.primary_key
    if not spans:
        return table_frame(spark, warehouse, table, key_range=(low, high))
    first_end = max(lo for lo, _ in spans.values())  # before it, some table reads rows
    last_start = min(hi for _, hi in spans.values())  # from it on, some table reads rows
    if first_end >= last_start:
        rows = table_frame(spark, warehouse, table, key_range=(low, high))
    else:
        rows = table_frame(spark, warehouse, table, key_range=(low, first_end - 1))
        rows = rows.unionByName(table_frame(spark, warehouse, table, key_range=(last_start, high)))
        names = (
            [table.name]
            if table.kind != "super"
            else [c.name for c in warehouse.catalog.child_tables(table.db, table.name)]
        )
        spanless = [name for name in names if name not in spans]
        if spanless:
            middle = table_frame(spark, warehouse, table, key_range=(first_end, last_start - 1))
            rows = rows.unionByName(middle.where(F.col("tbname").isin(spanless)))
    bounds = spark.createDataFrame(
        [(name, lo, hi) for name, (lo, hi) in spans.items()], "tbname string, __lo long, __hi long"
    )
    kept = rows.join(F.broadcast(bounds), "tbname", "left").where(
        F.col("__lo").isNull() | (F.col(pk) < F.col("__lo")) | (F.col(pk) >= F.col("__hi"))
    )
    return kept.drop("__lo", "__hi")
