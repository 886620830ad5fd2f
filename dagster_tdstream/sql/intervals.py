"""INTERVAL/SLIDING window arithmetic: one definition for queries and stream triggers.

A window is ``[start, start + interval)`` with ``start = k * sliding + offset``; a row at
``ts`` belongs to every window whose range contains it (several when SLIDING < INTERVAL).
``label_sql`` renders the same arithmetic for Spark, so bulk and incremental labelling
cannot drift apart. ``CalendarIntervalSpec`` is the same contract for INTERVALs in months
(``n``, ``y``) on a time zone's calendar. Must not touch storage or triggers' state.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from .timeunits import PRECISIONS, Duration

if TYPE_CHECKING:
    from .ast import IntervalWindow


@dataclass(frozen=True)
class IntervalSpec:
    """Window geometry in integer units of the table's precision."""

    interval: int
    sliding: int
    offset: int = 0

    @classmethod
    def from_durations(
        cls,
        interval: Duration | None,
        sliding: Duration,
        offset: Duration | None,
        precision: str,
        timezone: str = "UTC",
    ) -> IntervalSpec | CalendarIntervalSpec:
        """The geometry of ``INTERVAL(interval[, offset]) SLIDING(sliding)``; calendar units
        give a ``CalendarIntervalSpec`` on ``timezone``'s calendar."""
        size = interval or sliding
        fixed_offset = offset.in_precision(precision) if offset else 0
        if size.is_calendar or sliding.is_calendar:
            return CalendarIntervalSpec(
                months=size.months,
                sliding=0 if sliding.is_calendar else sliding.in_precision(precision),
                sliding_months=sliding.months if sliding.is_calendar else 0,
                offset=fixed_offset,
                precision=precision,
                timezone=timezone,
            )
        step = sliding.in_precision(precision)
        return cls(size.in_precision(precision), step, fixed_offset + day_shift(size, precision, timezone) % step)

    @classmethod
    def of_window(
        cls, window: IntervalWindow, precision: str, timezone: str = "UTC"
    ) -> IntervalSpec | CalendarIntervalSpec:
        """The geometry of a query's or TSMA's ``INTERVAL(interval[, offset]) [SLIDING(s)]``,
        SLIDING being the interval when absent."""
        sliding = window.sliding or window.interval
        return cls.from_durations(window.interval, sliding, window.offset, precision, timezone)

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

    def after(self, start: int) -> int:
        """The next window start."""
        return start + self.sliding

    def between(self, first: int, last: int) -> range:
        """The window starts from ``first`` (a start) to ``last``, ascending."""
        return range(first, last + 1, self.sliding)

    def last_closed(self, progress: int) -> int:
        """The last window start whose window ends at or before ``progress``."""
        return self.floor(progress - self.interval)

    @property
    def reach(self) -> int:
        """The longest a window can be (to widen a time range by the windows it touches)."""
        return self.interval

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


def day_shift(interval: Duration, precision: str, timezone: str) -> int:
    """How far ``INTERVAL(interval)``'s grid moves from the Unix epoch's: TDengine's
    ``taosTimeTruncate`` starts windows whose INTERVAL is in days or weeks at the time zone's
    midnight (it adds C's ``timezone``, the standard-time offset west of UTC; no daylight
    saving), every other fixed unit at multiples from 1970-01-01 00:00 UTC."""
    if interval.unit not in ("d", "w"):
        return 0
    return -_standard_offset_seconds(timezone) * (10**9 // PRECISIONS[precision])


@lru_cache(maxsize=64)
def _standard_offset_seconds(timezone: str) -> int:
    # a fixed day keeps results independent of the date they are computed on; January gives
    # the southern hemisphere's daylight time, which dst() takes back out
    at = datetime(2025, 1, 15, 12, tzinfo=ZoneInfo(timezone))
    offset, dst = at.utcoffset() or timedelta(0), at.dst() or timedelta(0)
    return int((offset - dst).total_seconds())


# the rule as docs/sql-support.md states it (generated from here with the function tables)
CALENDAR_RULES = (
    "`INTERVAL` in `n` (months) or `y` (years, 12n), in queries and stream triggers, on the calendar",
    "of the session's (a stream's: its creator's) time zone, as TDengine computes them: a window",
    "lasts its months from its start — the same day and time of day, the day clamped to a shorter",
    "month's last (`taosTimeAdd`).",
    "",
    "| form | windows |",
    "|---|---|",
    "| `INTERVAL(k n)` (no SLIDING, or SLIDING in months: legacy streams, continuous queries, TSMAs) "
    "| natural months counted from January 1970 at local midnight: `1n` months, `3n` quarters, `1y` "
    "years; SLIDING in months steps through them |",
    "| `INTERVAL(k n[, o]) SLIDING(s)` with a fixed `s` (the only form a 3.3.7 trigger takes: its "
    "SLIDING is `a`…`w`) | one every `s` from Unix time 0 (plus `o`), each `k` months long: "
    "`INTERVAL(1n) SLIDING(4w)` gives 2021-03-18 08:00 to 2021-04-18 08:00 in UTC+8 |",
    "",
    "A row belongs to the windows from the latest start at or before it back to the earliest still",
    "holding it. The offset is a fixed duration; a trigger takes at most 99 windows per row,",
    "a month counting as 31 days (`INTERVAL(1y) SLIDING(1d)` is refused); FILL over calendar",
    "windows needs SLIDING equal to the INTERVAL.",
    "",
    "Fixed windows in days or weeks (`INTERVAL(1d)`, `INTERVAL(2w)`, in queries, stream triggers",
    "and TSMAs) start at the time zone's midnight in its standard time, as TDengine's",
    "`taosTimeTruncate` shifts them (daylight saving does not move them); weeks on the Thursday",
    "1970-01-01 fell on. Every other fixed unit, `24h` included, counts from 1970-01-01 00:00 UTC.",
    "A query reads a TSMA only when its windows also start on the TSMA's grid: in UTC+5:30 an",
    "hourly TSMA answers `INTERVAL(2h)`, not `INTERVAL(1d)`.",
)

_DAY_SECONDS = 86400
# the most windows a row may fall in (validate.py's limit), so the walk back from a row's
# latest window to its earliest is bounded
_MAX_WALK = 128


@lru_cache(maxsize=4096)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


@dataclass(frozen=True)
class CalendarSql:
    """Timestamp values (epochs in ``precision``) on ``timezone``'s calendar in Spark SQL,
    whose own session zone is UTC: what calendar windows and ``ts ± 1n`` are made of."""

    precision: str
    timezone: str

    def micros(self, ts_sql: str) -> str:
        """A timestamp value as microseconds since the epoch (Spark's unit)."""
        return {"ms": f"(({ts_sql}) * 1000)", "us": f"({ts_sql})", "ns": f"(({ts_sql}) DIV 1000)"}[self.precision]

    def from_micros(self, micros_sql: str) -> str:
        return {"ms": f"({micros_sql} DIV 1000)", "us": micros_sql, "ns": f"({micros_sql} * 1000)"}[self.precision]

    def local(self, ts_sql: str) -> str:
        """A timestamp value as a Spark TIMESTAMP of the time zone's wall-clock time."""
        return f"from_utc_timestamp(timestamp_micros({self.micros(ts_sql)}), '{self.timezone}')"

    def from_local(self, local_sql: str) -> str:
        """The inverse of ``local``."""
        return self.from_micros(f"unix_micros(to_utc_timestamp({local_sql}, '{self.timezone}'))")

    def month_index(self, ts_sql: str) -> str:
        """Months since January 1970 of a timestamp value."""
        local = self.local(ts_sql)
        return f"((year({local}) - 1970) * 12 + month({local}) - 1)"

    def month_start(self, month_sql: str) -> str:
        """The start of month ``month_sql`` (months since January 1970) at local midnight."""
        year = f"CAST(1970 + floor(({month_sql}) / 12) AS INT)"
        return self.from_local(f"make_timestamp({year}, CAST(pmod({month_sql}, 12) + 1 AS INT), 1, 0, 0, 0)")

    def shift_months(self, ts_sql: str, months: int | str) -> str:
        """``ts`` moved by whole months: the same day and time of day, the day clamped to the
        month's length (Spark's ``add_months`` clamps as TDengine's ``taosTimeAdd``)."""
        local = self.local(ts_sql)
        moved = (
            f"timestamp_micros(unix_micros({local}) - unix_micros(CAST(to_date({local}) AS TIMESTAMP)) + "
            f"unix_micros(CAST(add_months(to_date({local}), {months}) AS TIMESTAMP)))"
        )
        return self.from_local(moved)


@dataclass(frozen=True)
class CalendarIntervalSpec:
    """INTERVAL in months (``n``; ``y`` is 12n) on the calendar of ``timezone``, as TDengine
    computes it (``taosTimeTruncate``/``taosTimeAdd``): a window lasts ``months`` from its
    start (the same day and time of day, the day clamped to a shorter month's last).

    Two grids of starts, both moved by ``offset``: ``sliding_months`` (calendar SLIDING:
    natural months, counted from January 1970 at midnight of the time zone — ``1n`` windows
    are months, ``3n`` quarters, ``1y`` calendar years), or a fixed ``sliding`` from Unix time
    0 (a 3.3.7 trigger's SLIDING is a fixed duration: ``INTERVAL(1n) SLIDING(1d)`` starts a
    month-long window every day). A row belongs to the windows from the latest start at or before it
    back to the earliest whose window still holds it, stepping start by start (TDengine's
    walk: with clamped month ends a window's end is not monotonic in its start).
    Times are integers in ``precision``."""

    months: int
    sliding: int
    sliding_months: int
    offset: int
    precision: str
    timezone: str

    # --- the calendar -------------------------------------------------------------------
    def _split(self, ts: int) -> tuple[datetime, int]:
        per_second = 10**9 // PRECISIONS[self.precision]
        seconds, fraction = divmod(ts, per_second)
        return datetime.fromtimestamp(seconds, _zone(self.timezone)), fraction

    def _join(self, local: datetime, fraction: int) -> int:
        per_second = 10**9 // PRECISIONS[self.precision]
        return int(local.replace(fold=0).timestamp()) * per_second + fraction

    def _month_of(self, ts: int) -> int:
        local, _ = self._split(ts)
        return (local.year - 1970) * 12 + local.month - 1

    @lru_cache(maxsize=4096)  # noqa: B019 - as ``end``
    def _month_start(self, month: int) -> int:
        year, index = divmod(month, 12)
        return self._join(datetime(1970 + year, index + 1, 1, tzinfo=_zone(self.timezone)), 0)

    def _add_months(self, ts: int, months: int) -> int:
        local, fraction = self._split(ts)
        year, index = divmod(local.year * 12 + local.month - 1 + months, 12)
        day = min(local.day, calendar.monthrange(year, index + 1)[1])
        return self._join(local.replace(year=year, month=index + 1, day=day), fraction)

    # --- the grid of starts -------------------------------------------------------------
    def floor(self, ts: int) -> int:
        """The last window start at or before ``ts``."""
        if self.sliding_months:
            month = self._month_of(ts - self.offset)
            return self._month_start(month - month % self.sliding_months) + self.offset
        return ts - (ts - self.offset) % self.sliding

    def after(self, start: int) -> int:
        if self.sliding_months:
            return self._month_start(self._month_of(start - self.offset) + self.sliding_months) + self.offset
        return start + self.sliding

    def _before(self, start: int) -> int:
        if self.sliding_months:
            return self._month_start(self._month_of(start - self.offset) - self.sliding_months) + self.offset
        return start - self.sliding

    @lru_cache(maxsize=65536)  # noqa: B019 - a spec is small, frozen and lives as long as its stream
    def end(self, start: int) -> int:
        # TDengine adds the months to the start before its offset, then the offset back
        if self.sliding_months:
            return self._month_start(self._month_of(start - self.offset) + self.months) + self.offset
        return self._add_months(start - self.offset, self.months) + self.offset

    def first_start(self, ts: int) -> int:
        """The earliest window start whose window holds ``ts`` (after ``floor(ts)`` when no
        window does: a fixed SLIDING longer than a short month leaves gaps)."""
        start = self.floor(ts)
        for _ in range(_MAX_WALK):
            if self.end(start) <= ts:
                break
            start = self._before(start)
        return self.after(start)

    def between(self, first: int, last: int) -> Iterator[int]:
        start = first
        while start <= last:
            yield start
            start = self.after(start)

    def starts(self, ts: int) -> list[int]:
        return list(self.between(self.first_start(ts), self.floor(ts)))

    def last_closed(self, progress: int) -> int:
        return self._before(self.first_start(progress))

    def bucket(self, ts: int) -> tuple[int, int]:
        """Rows with equal buckets lie in exactly the same windows (the starts between the
        two)."""
        return self.floor(ts), self.first_start(ts)

    @property
    def reach(self) -> int:
        """The longest a window can be: 31 days a month, a day more for a time-zone change."""
        per_second = 10**9 // PRECISIONS[self.precision]
        return (self.months * 31 + 1) * _DAY_SECONDS * per_second + self.offset

    # --- the same in Spark SQL -----------------------------------------------------------
    @property
    def _sql(self) -> CalendarSql:
        return CalendarSql(self.precision, self.timezone)

    def end_sql(self, start_sql: str) -> str:
        """``end``: on the fixed grid the months added to the start's wall-clock date, its time
        of day kept (below a microsecond too)."""
        shifted = f"({start_sql} - {self.offset})"
        if self.sliding_months:
            return f"({self._sql.month_start(f'{self._sql.month_index(shifted)} + {self.months}')} + {self.offset})"
        below_micros = f" + pmod({shifted}, 1000)" if self.precision == "ns" else ""
        return f"({self._sql.shift_months(shifted, self.months)}{below_micros} + {self.offset})"

    def floor_sql(self, ts_sql: str) -> str:
        if self.sliding_months:
            month = self._sql.month_index(f"({ts_sql} - {self.offset})")
            return f"({self._sql.month_start(f'{month} - pmod({month}, {self.sliding_months})')} + {self.offset})"
        return f"({ts_sql} - pmod({ts_sql} - {self.offset}, {self.sliding}))"

    def _first_sql(self, ts_sql: str) -> tuple[str, str]:
        """(first start, last start) of a row's windows; on the month grid as month indices."""
        if self.sliding_months:
            month, step = self._sql.month_index(f"({ts_sql} - {self.offset})"), self.sliding_months
            # windows [k, k + months) of month indices holding the row's month
            return f"({month} - {self.months} - pmod({month} - {self.months}, {step}) + {step})", (
                f"({month} - pmod({month}, {step}))"
            )
        floor = self.floor_sql(ts_sql)
        steps = self.reach // self.sliding + 1
        candidates = f"sequence({floor} - {steps * self.sliding}, {floor}, CAST({self.sliding} AS BIGINT))"
        ended = f"array_max(filter({candidates}, s -> {self.end_sql('s')} <= {ts_sql}))"
        return f"({ended} + {self.sliding})", floor

    def bucket_sql(self, ts_sql: str) -> tuple[str, str]:
        first, last = self._first_sql(ts_sql)
        return last, first

    def label_sql(self, ts_sql: str) -> str:
        first, last = self._first_sql(ts_sql)
        if self.sliding_months:
            if self.sliding_months == self.months:
                return f"({self._sql.month_start(last)} + {self.offset})"
            months = f"sequence({first}, {last}, {self.sliding_months})"
            return f"explode(transform({months}, k -> {self._sql.month_start('k')} + {self.offset}))"
        return f"explode(IF({first} <= {last}, sequence({first}, {last}, CAST({self.sliding} AS BIGINT)), array()))"
