"""PERIOD: processing-time ticks on TDengine's grid, with and without a trigger table."""

from __future__ import annotations

from zoneinfo import ZoneInfo

from dagster_tdstream import Session, StreamHarness, Warehouse
from dagster_tdstream.triggers.period import PeriodState, PeriodTrigger
from dagster_tdstream.triggers.sliding import PointSpec

from .conftest import output

SECOND = 10**9
BASE = 1_800_000_000 * SECOND  # 2027-01-15 08:00:00 UTC, on a 10 s grid


def test_ticks_start_after_create_and_missed_ticks_collapse() -> None:
    trigger = PeriodTrigger(PointSpec(10 * SECOND, SECOND, "ns", ZoneInfo("UTC")))
    state = PeriodState()
    assert trigger.due(state, BASE) is None  # the first tick is scheduled, not fired
    assert state.next_tick == BASE + SECOND
    assert trigger.due(state, BASE + SECOND // 2) is None
    assert trigger.due(state, BASE + SECOND) == BASE + SECOND
    assert trigger.due(state, BASE + 35 * SECOND) == BASE + 31 * SECOND  # 11 s and 21 s collapse into 31 s
    assert state.next_tick == BASE + 41 * SECOND


def test_period_streams_with_and_without_a_trigger_table(warehouse: Warehouse, spark: object) -> None:
    session = Session(warehouse, timezone="UTC")
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "insert into a using st tags (1) values (1700000000000, 1) (1700000001000, 2);"
        "create stream p1 period(10s) into p1_out as "
        "select cast(_tlocaltime / 1000000 as timestamp) ts, _tprev_localtime / 1000000 prev, count(*) c from st;"
        "create stream p2 period(10s) from st partition by tbname into p2_out as "
        "select cast(_tlocaltime / 1000000 as timestamp) ts, count(*) c, sum(v) s from %%trows"
    )
    harness = StreamHarness(warehouse, timezone="UTC", clock=lambda: BASE)
    assert harness.run_until_idle().runs == 0
    session.execute("insert into a values (1700000002000, 3) b using st tags (2) values (1700000002000, 5)")
    harness.advance_clock(10)
    assert harness.run_until_idle().failures == []
    session.execute("insert into a values (1700000003000, 4)")
    harness.advance_clock(10)
    assert harness.run_until_idle().failures == []
    ms = BASE // 10**6
    assert output(session, "select * from p1_out") == [(ms + 10000, ms, 4), (ms + 20000, ms + 10000, 5)]
    # %%trows of a tick: the rows written since the previous tick, per group (history excluded)
    assert output(session, "select tag_tbname, ts, c, s from p2_out order by tag_tbname, ts") == [
        ("a", ms + 10000, 1, 3),
        ("a", ms + 20000, 1, 4),
        ("b", ms + 10000, 1, 5),
        ("b", ms + 20000, 0, None),
    ]
