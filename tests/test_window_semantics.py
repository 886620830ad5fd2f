"""Window semantics exist once: the incremental engine gives the same triggers for any split
of the input into batches, and Spark's labelling SQL agrees with the Python arithmetic."""

from __future__ import annotations

import random

import pytest

from dagster_tdstream.sql.intervals import CalendarIntervalSpec, IntervalSpec
from dagster_tdstream.sql.timeunits import Duration
from dagster_tdstream.triggers.engine import RECALC, WINDOW_CLOSE, WINDOW_OPEN, Change, GroupState, WindowTrigger

SPECS = [IntervalSpec(10, 10), IntervalSpec(10, 5, 2), IntervalSpec(30, 10, 7), IntervalSpec(7, 3, 1)]
_DAY_MS = 86_400_000
# INTERVAL(interval[, offset]) SLIDING(sliding) in calendar units, in ms, on zones with and
# without daylight saving: natural months and years, and fixed slidings over month lengths
CALENDAR = [
    ("1n", "1n", None, "Asia/Shanghai"),
    ("1y", "1y", None, "UTC"),
    ("1y", "3n", None, "America/New_York"),
    ("2n", "1n", None, "Europe/Berlin"),
    ("1n", "1n", "1d", "Europe/Berlin"),
    ("1n", "1d", None, "Europe/Berlin"),
    ("1n", "4w", "1d", "Asia/Shanghai"),
    ("2n", "7d", "3h", "UTC"),
]


def calendar_spec(interval: str, sliding: str, offset: str | None, zone: str, precision: str = "ms") -> object:
    durations = [Duration(int(d[:-1]), d[-1]) if d else None for d in (interval, sliding, offset)]
    spec = IntervalSpec.from_durations(durations[0], durations[1], durations[2], precision, zone)  # type: ignore[arg-type]
    assert isinstance(spec, CalendarIntervalSpec)
    return spec


def calendar_stamps(seed: int, count: int) -> list[int]:
    """Times over 2023-2026 (ms), a third of them near month ends where clamping bites."""
    rng = random.Random(seed)
    base = 1_672_531_200_000  # 2023-01-01 UTC
    stamps = [base + rng.randrange(4 * 365 * _DAY_MS) for _ in range(count)]
    ends = [1_675_123_200_000 + k * 30 * _DAY_MS + rng.randrange(-2 * _DAY_MS, 2 * _DAY_MS) for k in range(count // 3)]
    return sorted(set(stamps + ends))


def fire(trigger: WindowTrigger, batches: list[list[Change]]) -> list[tuple[str, int, int]]:
    state = GroupState()
    fired = []
    for batch in batches:
        fired += [(f.event, f.start, f.row_count) for f in trigger.advance(state, batch)]
    return fired


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("seed", range(12))
def test_any_split_into_batches_fires_the_same_triggers(spec: IntervalSpec, seed: int) -> None:
    rng = random.Random(seed)
    stamps = sorted(rng.sample(range(0, 400), 60))
    changes = [Change(ts, "insert") for ts in stamps]
    for ignore_nodata in (False, True):
        trigger = WindowTrigger(spec, watermark=rng.choice([0, 4]), ignore_nodata=ignore_nodata,
                                events=(WINDOW_OPEN, WINDOW_CLOSE))  # fmt: skip
        whole = fire(trigger, [changes])
        cuts = sorted(rng.sample(range(1, len(changes)), rng.randint(1, 10)))
        pieces = [changes[a:b] for a, b in zip([0, *cuts], [*cuts, len(changes)], strict=True)]
        assert fire(trigger, pieces) == whole
        assert fire(trigger, [[c] for c in changes]) == whole


def test_closed_windows_are_exactly_those_the_progress_passed() -> None:
    spec = IntervalSpec(10, 5, 2)
    trigger = WindowTrigger(spec, watermark=3)
    closes = [(s, n) for e, s, n in fire(trigger, [[Change(t, "insert") for t in (3, 5, 8, 40)]]) if e == WINDOW_CLOSE]
    # progress 40 - 3 = 37: windows [s, s+10) with s + 10 <= 37, from the first row's first window
    assert closes == [(-3, 2), (2, 3), (7, 1), (12, 0), (17, 0), (22, 0), (27, 0)]


def test_late_rows_and_updates_recalculate_closed_windows_unless_ignored() -> None:
    spec = IntervalSpec(10, 10)
    batches = [
        [Change(0, "insert"), Change(25, "insert")],
        [Change(5, "insert"), Change(12, "update"), Change(1, "delete")],
    ]
    fired = fire(WindowTrigger(spec), batches)
    assert [f for f in fired if f[0] == RECALC] == [(RECALC, 0, -1), (RECALC, 10, -1)]
    assert [f for f in fire(WindowTrigger(spec, ignore_disorder=True), batches) if f[0] == RECALC] == []


def test_spark_labels_match_python_window_starts(spark: object) -> None:
    rng = random.Random(7)
    rows = [(ts,) for ts in rng.sample(range(-200, 2000), 300)]
    frame = spark.createDataFrame(rows, "ts bigint")  # type: ignore[attr-defined]
    frame.createOrReplaceTempView("__labels")
    for spec in SPECS:
        labelled = spark.sql(f"SELECT ts, {spec.label_sql('ts')} AS w FROM __labels").collect()  # type: ignore[attr-defined]
        from_spark = sorted((r.ts, r.w) for r in labelled)
        from_python = sorted((ts, w) for (ts,) in rows for w in spec.starts(ts))
        assert from_spark == from_python


@pytest.mark.parametrize("case", CALENDAR, ids=["-".join(str(p) for p in c) for c in CALENDAR])
def test_calendar_windows_hold_their_rows_and_close_in_order(case: tuple[str, str, str | None, str]) -> None:
    spec = calendar_spec(*case)
    stamps = calendar_stamps(3, 200)
    for ts in stamps:
        starts = spec.starts(ts)  # type: ignore[attr-defined]
        assert starts, ts  # these slidings leave no gaps
        assert all(s <= ts < spec.end(s) for s in starts)  # type: ignore[attr-defined]
        assert spec.end(spec.after(starts[-1])) > ts and spec.after(starts[-1]) > ts  # type: ignore[attr-defined]
        assert spec.end(spec.last_closed(ts)) <= ts < spec.end(spec.after(spec.last_closed(ts)))  # type: ignore[attr-defined]
    trigger = WindowTrigger(spec, events=(WINDOW_OPEN, WINDOW_CLOSE))  # type: ignore[arg-type]
    changes = [Change(ts, "insert") for ts in stamps]
    whole = fire(trigger, [changes])
    assert fire(trigger, [changes[:50], changes[50:120], changes[120:]]) == whole
    closes = [(start, n) for e, start, n in whole if e == WINDOW_CLOSE]
    assert [start for start, _ in closes] == sorted({start for start, _ in closes})
    for start, n in closes:  # each closed window counts exactly the rows in [start, end)
        assert n == sum(start <= ts < spec.end(start) for ts in stamps)  # type: ignore[attr-defined]


def test_natural_months_on_the_time_zone_calendar() -> None:
    spec = calendar_spec("1n", "1n", None, "Asia/Shanghai")
    march = 1_740_758_400_000  # 2025-03-01 00:00 +08:00
    assert spec.starts(march + 14 * _DAY_MS) == [march]  # type: ignore[attr-defined]
    assert spec.end(march) == march + 31 * _DAY_MS  # type: ignore[attr-defined]
    # TDengine's own query test: INTERVAL(1n) SLIDING(4w) starts every 28 days from Unix
    # time 0, each window one calendar month long (2021-03-18 08:00 to 2021-04-18 08:00 +08)
    fixed = calendar_spec("1n", "4w", None, "Asia/Shanghai")
    start = 1_616_025_600_000  # 2021-03-18 08:00 +08:00
    assert start in fixed.starts(start + _DAY_MS)  # type: ignore[attr-defined]
    assert fixed.end(start) == start + 31 * _DAY_MS  # type: ignore[attr-defined]


@pytest.mark.parametrize("precision", ["ms", "ns"])
def test_spark_labels_match_python_calendar_windows(spark: object, precision: str) -> None:
    scale = 1 if precision == "ms" else 1_000_000
    rows = [(ts * scale + (ts % 997),) for ts in calendar_stamps(11, 150)]
    frame = spark.createDataFrame(rows, "ts bigint")  # type: ignore[attr-defined]
    frame.createOrReplaceTempView("__calendar_labels")
    for case in CALENDAR:
        spec = calendar_spec(*case, precision=precision)
        labelled = spark.sql(f"SELECT ts, {spec.label_sql('ts')} AS w FROM __calendar_labels").collect()  # type: ignore[attr-defined]
        assert sorted((r.ts, r.w) for r in labelled) == sorted((ts, w) for (ts,) in rows for w in spec.starts(ts)), case  # type: ignore[attr-defined]
        first, last = spec.bucket_sql("ts")  # type: ignore[attr-defined]
        buckets = spark.sql(f"SELECT ts, {first} AS a, {last} AS b FROM __calendar_labels").collect()  # type: ignore[attr-defined]
        groups: dict[tuple[int, int], set[tuple[int, ...]]] = {}
        for r in buckets:  # rows in one bucket share their windows
            groups.setdefault((r.a, r.b), set()).add(tuple(spec.starts(r.ts)))  # type: ignore[attr-defined]
        assert all(len(windows) == 1 for windows in groups.values()), case
