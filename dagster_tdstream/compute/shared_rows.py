"""One read of a trigger table's rows for the batches of several streams on it.

The live worker computes the streams of one trigger table one after another, each batch
reading the same recent rows from the same Parquet files; with 20 streams on a table that
read was 40% of each batch's Spark time (``docs/benchmarks.md``). A round's batches whose
windows lie close together share one cached Spark frame of the rows they span, dropped when
the round ends. Owns only that frame: which rows a stream's query reads stays
``run.py``'s decision (it filters the frame to its batch's span, as it would the files).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..storage.catalog import TableInfo
from ..storage.spark_read import table_frame
from ..storage.warehouse import Warehouse

# batches share a read while their spans together are at most this many times the widest
# one: a stream far behind (its windows hours back) reads its own rows instead of making
# every other stream's cached read cover the hours in between
SPAN_SLACK = 2


@dataclass
class SharedRows:
    """The cached rows of ``table`` with primary timestamps in [low, high]."""

    table: TableInfo
    low: int
    high: int
    frame: Any

    def covers(self, table: TableInfo, low: int, high: int) -> bool:
        return (table.db, table.name) == (self.table.db, self.table.name) and self.low <= low and high <= self.high

    def rows(self, low: int, high: int) -> Any:
        """The rows with primary timestamps in [low, high], as ``table_frame`` reads them."""
        from pyspark.sql import functions as F

        pk = F.col(self.table.primary_key)
        return self.frame.where((pk >= low) & (pk <= high))

    def release(self) -> None:
        with contextlib.suppress(Exception):  # a server gone meanwhile dropped it already
            self.frame.unpersist()


def share_rows(
    spark: Any, warehouse: Warehouse, batches: Sequence[tuple[str, TableInfo, tuple[int, int]]]
) -> dict[str, SharedRows]:
    """For batches (a key, the trigger table, the event-time span of its windows), the shared
    read each batch takes its rows from — only batches with another batch close by get one."""
    by_table: dict[tuple[str, str], list[tuple[str, TableInfo, tuple[int, int]]]] = {}
    for batch in batches:
        by_table.setdefault((batch[1].db, batch[1].name), []).append(batch)
    shared: dict[str, SharedRows] = {}
    for group in by_table.values():
        for cluster in _clusters(sorted(group, key=lambda b: b[2])):
            if len(cluster) < 2:
                continue
            table = cluster[0][1]
            low, high = min(b[2][0] for b in cluster), max(b[2][1] for b in cluster)
            frame = table_frame(spark, warehouse, table, key_range=(low, high)).cache()
            rows = SharedRows(table, low, high, frame)
            shared.update({key: rows for key, _, _ in cluster})
    return shared


def _clusters(
    batches: list[tuple[str, TableInfo, tuple[int, int]]],
) -> list[list[tuple[str, TableInfo, tuple[int, int]]]]:
    """Batches in span order, cut where a batch would stretch the cluster's span past
    ``SPAN_SLACK`` times its widest member."""
    clusters: list[list[tuple[str, TableInfo, tuple[int, int]]]] = []
    for batch in batches:
        current = clusters[-1] if clusters else None
        if current is not None:
            members = [*current, batch]
            width = max(b[2][1] for b in members) - min(b[2][0] for b in members)
            if width <= SPAN_SLACK * max(b[2][1] - b[2][0] for b in members):
                current.append(batch)
                continue
        clusters.append([batch])
    return clusters
