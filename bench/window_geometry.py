"""Benchmark: the trigger engine advancing over rows, per window geometry.

INTERVAL windows of fixed length are arithmetic; calendar ones (``n``, ``y``) convert times on
the stream's time zone and, with a fixed SLIDING, walk back from a row's latest window to its
earliest. Prints microseconds per row for 10,000 rows a minute apart, one group.

    .venv/bin/python bench/window_geometry.py
"""

from __future__ import annotations

import time

from dagster_tdstream.sql.intervals import IntervalSpec
from dagster_tdstream.sql.timeunits import Duration
from dagster_tdstream.triggers.engine import Change, GroupState, WindowTrigger

START = 1_700_000_000_000  # ms
ROWS = 10_000
CASES = (("1m", "1m"), ("1h", "1m"), ("1n", "1n"), ("1n", "1d"), ("1y", "1w"))


def _duration(text: str) -> Duration:
    return Duration(int(text[:-1]), text[-1])


def per_row(interval: str, sliding: str) -> float:
    spec = IntervalSpec.from_durations(_duration(interval), _duration(sliding), None, "ms", "Asia/Shanghai")
    trigger = WindowTrigger(spec)
    changes = [Change(START + i * 60_000, "insert") for i in range(ROWS)]
    started = time.perf_counter()
    trigger.advance(GroupState(), changes)
    return (time.perf_counter() - started) / ROWS * 1e6


def main() -> None:
    for interval, sliding in CASES:
        print(f"INTERVAL({interval}) SLIDING({sliding}): {per_row(interval, sliding):.1f} us a row")


if __name__ == "__main__":
    main()
