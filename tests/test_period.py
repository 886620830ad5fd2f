"""PERIOD: processing-time ticks on TDengine's grid, with and without a trigger table."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from dagster_tdstream import Session, StreamHarness, TDStreamProject, Warehouse, build_definitions
from dagster_tdstream.triggers.period import MAX_MISSED_TICKS, PeriodState, PeriodTrigger, cron_schedules
from dagster_tdstream.triggers.sliding import PointSpec

from .conftest import output

SECOND = 10**9
BASE = 1_800_000_000 * SECOND  # 2027-01-15 08:00:00 UTC, on a 10 s grid


def test_ticks_start_after_create_and_missed_ticks_fire_each() -> None:
    trigger = PeriodTrigger(PointSpec(10 * SECOND, SECOND, "ns", ZoneInfo("UTC")))
    state = PeriodState()
    assert trigger.due(state, BASE) == []  # the first tick is scheduled, not fired
    assert state.next_tick == BASE + SECOND
    assert trigger.due(state, BASE + SECOND // 2) == []
    assert trigger.due(state, BASE + SECOND) == [BASE + SECOND]
    # a late timer fires the ticks it missed, each with its own time (no gaps in _tlocaltime)
    assert trigger.due(state, BASE + 35 * SECOND) == [BASE + 11 * SECOND, BASE + 21 * SECOND, BASE + 31 * SECOND]
    assert state.next_tick == BASE + 41 * SECOND


def test_an_outage_fires_only_the_latest_missed_ticks() -> None:
    step = 10 * 10**6  # PERIOD(10a)
    trigger = PeriodTrigger(PointSpec(step, 0, "ns", ZoneInfo("UTC")))
    state = PeriodState(next_tick=BASE)
    ticks = trigger.due(state, BASE + 3600 * SECOND)  # an hour down: 360,000 ticks missed
    assert len(ticks) == MAX_MISSED_TICKS
    assert ticks[-1] == BASE + 3600 * SECOND and ticks[0] == ticks[-1] - (MAX_MISSED_TICKS - 1) * step
    assert state.next_tick == BASE + 3600 * SECOND + step


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


def test_cron_strings_follow_the_daily_reset_and_fixed_grids() -> None:
    def crons(step: int, offset: int = 0) -> list[str] | None:
        return cron_schedules(PointSpec(step, offset, "ns", ZoneInfo("UTC")))

    minute, hour, day = 60 * SECOND, 3600 * SECOND, 86400 * SECOND
    # 5h30m: 00:00, 05:30, 11:00, 16:30, 22:00, then the grid restarts at midnight
    assert crons(5 * hour + 30 * minute) == ["0 0,11,22 * * *", "30 5,16 * * *"]
    assert crons(minute) == ["* * * * *"]
    assert crons(15 * minute, 5 * minute) == ["5,20,35,50 * * * *"]
    assert crons(10 * hour, 10 * hour) == ["0 6,10,20 * * *"]  # 10:00, 20:00, then 06:00 (30:00) before the reset
    assert crons(day, 2 * hour + 30 * minute) == ["30 2 * * *"]
    assert crons(7 * day, day) == ["0 0 * * 5"]  # the weekly grid counts from Thursday 1970-01-01
    assert crons(10 * SECOND) is None and crons(minute, SECOND) is None and crons(2 * day) is None


def test_a_whole_minute_period_is_a_dagster_schedule(warehouse: Warehouse, spark: object) -> None:
    session = Session(warehouse, timezone="UTC")
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create stream p period(1m) from st partition by tbname into p_out as "
        "select cast(_tlocaltime / 1000000 as timestamp) ts, _tprev_localtime / 1000000 prev, count(*) c from %%trows;"
        "create stream fast period(10s) into fast_out as select cast(_tlocaltime / 1000000 as timestamp) ts, "
        "count(*) c from st"
    )
    defs = build_definitions(TDStreamProject(warehouse=warehouse.uri, timezone="UTC"))
    assert [(s.name, s.cron_schedule, s.execution_timezone) for s in defs.schedules] == [
        ("d__p__period", "* * * * *", "UTC")
    ]
    # 10s: cron cannot: the timer sensor (and the live worker's keeper)
    assert [s.name for s in defs.sensors] == ["d__fast__trigger", "tdstream_live_worker"]
    harness = StreamHarness(warehouse, timezone="UTC", clock=lambda: BASE)
    assert harness.run_until_idle().runs == 0
    session.execute("insert into a using st tags (1) values (1700000000000, 1) (1700000001000, 2)")
    harness.advance_clock(30)
    harness.run_until_idle()
    assert session.warehouse.find_table("d", "p_out") is None  # no minute boundary passed yet
    harness.advance_clock(30)
    assert harness.run_until_idle().failures == []
    ms = BASE // 10**6
    assert output(session, "select ts, prev, c, tag_tbname from p_out") == [(ms + 60000, ms, 2, "a")]
    # a tick re-evaluated (a daemon retry) fires nothing twice
    schedule = defs.schedules[0]
    from dagster import build_schedule_context

    context = build_schedule_context(
        instance=harness.instance,
        scheduled_execution_time=datetime.fromtimestamp(BASE / 1e9 + 60, UTC),
        resources=harness.resources,
    )
    assert schedule.evaluate_tick(context).skip_message == "no pending triggers"
