"""Stream options that change when triggers fire: MAX_DELAY (processing time, through the
harness clock) and FILL_HISTORY start times."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from dagster_tdstream import Session, StreamHarness, Warehouse

T = 1_700_000_000_000


def output(session: Session, sql: str) -> list[tuple[Any, ...]]:
    table = session.query(sql).to_arrow()
    columns = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in table.columns]
    return list(zip(*(c.to_pylist() for c in columns), strict=True))


@pytest.fixture
def harness(warehouse: Warehouse, spark: object) -> StreamHarness:
    return StreamHarness(warehouse, timezone="UTC", clock=lambda: 10**18)  # processing time stands still


def test_max_delay_emits_open_windows_once_per_new_data(session: Session, harness: StreamHarness) -> None:
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream md interval(10s) sliding(10s) from t stream_options(max_delay(3s)) into md_out "
        "as select _twstart, count(*) n, sum(v) s from %%trows"
    )
    session.execute(f"insert into t values ({T}, 1) ({T + 10000}, 2) ({T + 12000}, 3)")
    harness.run_until_idle()
    assert output(session, "select * from md_out") == [(T, 1, 1)]  # [T+10s, T+20s) is open
    harness.advance_clock(2)
    assert harness.run_until_idle().runs == 0  # the delay has not passed yet
    harness.advance_clock(2)
    assert harness.run_until_idle().runs == 1
    assert output(session, "select * from md_out") == [(T, 1, 1), (T + 10000, 2, 5)]
    harness.advance_clock(10)
    assert harness.run_until_idle().runs == 0  # no new rows: nothing is sent again
    # new rows after the delay since the last computation: computed on the next tick
    session.execute(f"insert into t values ({T + 15000}, 4)")
    assert harness.run_until_idle().runs == 1
    assert output(session, "select * from md_out") == [(T, 1, 1), (T + 10000, 3, 9)]
    harness.advance_clock(4)
    assert harness.run_until_idle().runs == 0
    session.execute(f"insert into t values ({T + 20000}, 5)")  # closes the window: same key, final value
    harness.run_until_idle()
    assert output(session, "select * from md_out") == [(T, 1, 1), (T + 10000, 3, 9)]


def test_max_delay_waits_for_the_watermark(session: Session, harness: StreamHarness) -> None:
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream wm interval(10s) sliding(10s) from t stream_options(max_delay(3s)|watermark(1d)) into wm_out "
        "as select _twstart, count(*) n from %%trows;"
        f"insert into t values ({T}, 1) ({T + 10000}, 2)"
    )
    harness.run_until_idle()
    harness.advance_clock(60)
    assert harness.run_until_idle().runs == 0
    assert session.warehouse.find_table("d", "wm_out") is None  # the output appears with its first result


def test_fill_history_start_skips_older_rows(warehouse: Warehouse, spark: object) -> None:
    session = Session(warehouse, timezone="Asia/Shanghai")
    session.execute(
        "create database d; use d; create table t (ts timestamp, s int);"
        "insert into t values ('2024-01-01 00:00:00', 1) ('2024-01-01 00:00:01', 2)"
        " ('2024-01-02 00:00:00', 1) ('2024-01-02 00:00:01', 1) ('2024-01-02 00:00:02', 2);"
        "create stream fh state_window(s) from t stream_options(fill_history('2024-01-02 00:00:00')) into fh_out "
        "as select _twstart, count(*) n from %%trows;"
        "insert into t values ('2025-01-01 00:00:00', 3)"
    )
    assert StreamHarness(warehouse, timezone="Asia/Shanghai").run_until_idle().failures == []
    rows = session.query("select * from fh_out").display_rows(session.timezone)
    assert rows == [["2024-01-02 00:00:00.000", 2], ["2024-01-02 00:00:02.000", 1]]
