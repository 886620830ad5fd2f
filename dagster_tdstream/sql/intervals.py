"""INTERVAL/SLIDING window arithmetic: one definition for queries and stream triggers.

A window is ``[start, start + interval)`` with ``start = k * sliding + offset``; a row at
``ts`` belongs to every window whose range contains it (several when SLIDING < INTERVAL).
``label_sql`` renders the same arithmetic for Spark, so bulk and incremental labelling
cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from .timeunits import Duration


@dataclass(frozen=True)
class IntervalSpec:
    """Window geometry in integer units of the table's precision."""

    interval: int
    sliding: int
    offset: int = 0

    @classmethod
    def from_durations(
        cls, interval: Duration | None, sliding: Duration, offset: Duration | None, precision: str
    ) -> IntervalSpec:
        size = (interval or sliding).in_precision(precision)
        step = sliding.in_precision(precision)
        return cls(size, step, offset.in_precision(precision) if offset else 0)

    def floor(self, ts: int) -> int:
        """The start of the last window that starts at or before ``ts``."""
        return ts - (ts - self.offset) % self.sliding

    def first_start(self, ts: int) -> int:
        """The earliest window start whose window contains ``ts``."""
        return self.floor(ts - self.interval) + self.sliding

    def starts(self, ts: int) -> range:
        """Every window start whose window contains ``ts``, ascending."""
        return range(self.first_start(ts), self.floor(ts) + 1, self.sliding)

    def end(self, start: int) -> int:
        return start + self.interval

    def bucket(self, ts: int) -> tuple[int, int]:
        """Rows with equal buckets lie in exactly the same windows (``starts`` depends on
        ``ts`` through these two floors only)."""
        return self.floor(ts), self.floor(ts - self.interval)

    def floor_sql(self, ts_sql: str) -> str:
        return f"({ts_sql} - pmod({ts_sql} - {self.offset}, {self.sliding}))"

    def bucket_sql(self, ts_sql: str) -> tuple[str, str]:
        """``bucket`` in Spark SQL."""
        return self.floor_sql(ts_sql), self.floor_sql(f"({ts_sql} - {self.interval})")

    def label_sql(self, ts_sql: str) -> str:
        """Spark SQL giving, for a row at ``ts_sql``, its window start(s); an ``explode`` when
        windows overlap, so the caller gets one row per (row, window)."""
        floor, shifted_floor = self.bucket_sql(ts_sql)
        if self.sliding == self.interval:
            return floor
        return f"explode(sequence({shifted_floor} + {self.sliding}, {floor}, CAST({self.sliding} AS BIGINT)))"
