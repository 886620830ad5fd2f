"""Window semantics exist once: the incremental engine gives the same triggers for any split
of the input into batches, and Spark's labelling SQL agrees with the Python arithmetic."""

from __future__ import annotations

import random

import pytest

from dagster_tdstream.sql.intervals import IntervalSpec
from dagster_tdstream.triggers.engine import RECALC, WINDOW_CLOSE, WINDOW_OPEN, Change, GroupState, WindowTrigger

SPECS = [IntervalSpec(10, 10), IntervalSpec(10, 5, 2), IntervalSpec(30, 10, 7), IntervalSpec(7, 3, 1)]


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
