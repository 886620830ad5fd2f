"""Stream options that change when triggers fire: MAX_DELAY (processing time, through the
harness clock) and FILL_HISTORY start times."""

from __future__ import annotations

import pytest
from dagster import AssetKey

from dagster_tdstream import Session, StreamHarness, Warehouse

from .conftest import output

T = 1_700_000_000_000


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


def test_max_delay_writes_every_count_window_not_yet_full(session: Session, harness: StreamHarness) -> None:
    # COUNT_WINDOW(4, 2): while rows arrive two windows can be open at once; each is written
    # once per delay while it gets rows, and its final value when it fills
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream mc count_window(4, 2) from t stream_options(max_delay(3s)) into mc_out "
        "as select _twstart, count(*) n, sum(v) s from %%trows"
    )
    session.execute(f"insert into t values ({T}, 1) ({T + 1000}, 2) ({T + 2000}, 3)")
    assert harness.run_until_idle().runs == 0  # the delay has not passed yet
    harness.advance_clock(4)
    assert harness.run_until_idle().runs == 1
    assert output(session, "select * from mc_out") == [(T, 3, 6), (T + 2000, 1, 3)]
    harness.advance_clock(10)
    assert harness.run_until_idle().runs == 0  # no new rows: nothing is sent again
    session.execute(f"insert into t values ({T + 3000}, 4)")  # fills the first window
    harness.run_until_idle()
    assert output(session, "select * from mc_out") == [(T, 4, 10), (T + 2000, 1, 3)]
    harness.advance_clock(4)
    harness.run_until_idle()
    assert output(session, "select * from mc_out") == [(T, 4, 10), (T + 2000, 2, 7)]


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


def test_expired_time_and_delete_recalc(session: Session, harness: StreamHarness) -> None:
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream ex interval(10s) sliding(10s) from t stream_options(expired_time(15s)) into ex_out "
        "as select _twstart, count(*) n from %%trows;"
        "create stream dr interval(10s) sliding(10s) from t stream_options(delete_recalc) into dr_out "
        "as select _twstart, count(*) n from %%trows;"
        f"insert into t values ({T}, 1) ({T + 10000}, 2) ({T + 30000}, 3)"
    )
    harness.run_until_idle()
    # late rows: T+5s is older than T+30s less 15s (expired, ignored); T+21s recalculates its window
    session.execute(f"insert into t values ({T + 5000}, 9) ({T + 21000}, 9)")
    harness.run_until_idle()
    assert output(session, "select * from ex_out") == [(T, 1), (T + 10000, 1), (T + 20000, 1)]
    assert output(session, "select * from dr_out") == [(T, 2), (T + 10000, 1), (T + 20000, 1)]
    session.execute(f"delete from t where ts = {T + 10000}")
    harness.run_until_idle()
    assert output(session, "select * from dr_out") == [(T, 2), (T + 10000, 0), (T + 20000, 1)]
    assert output(session, "select * from ex_out") == [(T, 1), (T + 10000, 1), (T + 20000, 1)]


def test_force_output_writes_a_row_for_triggers_without_results(session: Session, harness: StreamHarness) -> None:
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream plain interval(10s) sliding(10s) from t into plain_out "
        "as select _twstart, v from %%trows where v > 100;"
        "create stream forced interval(10s) sliding(10s) from t stream_options(force_output) into forced_out "
        "as select _twstart, v from %%trows where v > 100;"
        f"insert into t values ({T}, 1) ({T + 10000}, 200) ({T + 20000}, 3)"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from plain_out") == [(T + 10000, 200)]
    assert output(session, "select * from forced_out") == [(T, None), (T + 10000, 200)]


def test_delete_output_table_follows_dropped_child_tables(session: Session, harness: StreamHarness) -> None:
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create stream keep interval(10s) sliding(10s) from st partition by tbname into keep_out "
        "output_subtable(concat('k_', tbname)) as select _twstart, count(*) from %%trows;"
        "create stream gone interval(10s) sliding(10s) from st partition by tbname stream_options(delete_output_table) "
        "into gone_out output_subtable(concat('g_', tbname)) as select _twstart, count(*) from %%trows;"
        f"insert into a using st tags (1) values ({T}, 1) ({T + 10000}, 2)"
    )
    harness.run_until_idle()
    assert {r[0] for r in session.query("show tables").rows} >= {"a", "k_a", "g_a"}
    session.execute("drop table a")
    names = {r[0] for r in session.query("show tables").rows}
    assert "k_a" in names and "g_a" not in names and "a" not in names


def test_a_trigger_that_cannot_be_evaluated_is_a_stream_error_not_a_crash(
    session: Session, harness: StreamHarness
) -> None:
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int, c varchar(8));"
        "create stream ev event_window(start with ascii(c) > 3 end with v < 0) from t into ev_out "
        "as select _twstart, count(*) from %%trows;"
        "create stream ok state_window(v) from t into ok_out as select _twstart, count(*) n from %%trows"
    )
    session.execute(f"insert into t values ({T}, 1, 'abcd') ({T + 1000}, 2, 'x')")
    report = harness.run_until_idle()
    assert [f.split(":")[0] for f in report.failures] == ["d__ev__trigger"]  # its tick fails, the other stream ran
    assert output(session, "select * from ok_out") == [(T, 1)]
    query = "select stream_name, status, last_error from information_schema.ins_streams where db_name = 'd'"
    shown = {r[0]: (r[1], r[2]) for r in session.query(query).rows}
    assert shown["ok"] == ("Running", None)
    status, error = shown["ev"]
    assert (
        status == "Failed"
        and error.startswith("trigger tick failed: ")
        and "ascii() is not supported in trigger conditions (at line 1, column " in error
    )
    assert "d__ev__trigger" in report.skipped and "cannot run" in report.skipped["d__ev__trigger"]


def test_low_latency_calc_computes_in_one_live_run_that_records_each_partition(
    session: Session, harness: StreamHarness
) -> None:
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream batched interval(10s) sliding(10s) from t into b_out as select _twstart, sum(v) s from %%trows;"
        "create stream quick interval(10s) sliding(10s) from t stream_options(low_latency_calc) into q_out "
        "as select _twstart, sum(v) s from %%trows"
    )
    session.execute(f"insert into t values ({T}, 1) ({T + 10000}, 2) ({T + 20000}, 3) ({T + 30000}, 4)")
    report = harness.run_until_idle()
    assert report.failures == []
    expected = [(T, 1), (T + 10000, 2), (T + 20000, 3)]
    assert output(session, "select * from b_out") == output(session, "select * from q_out") == expected
    runs = harness.instance.get_runs()
    batched = [run for run in runs if run.tags.get("tdstream/stream") == "d.batched"]
    live = [run for run in runs if run.tags.get("tdstream/live") == "d.quick"]
    assert len(batched) == 1 and batched[0].tags["tdstream/pool"] == "batch"  # one run for the three windows
    assert len(live) == 1 and live[0].tags["tdstream/mode"] == "live" and "tdstream/stream" not in live[0].tags
    # the live run recorded the windows it computed as materializations of their partition
    records = harness.instance.fetch_materializations(AssetKey(["tdstream", "d", "q_out"]), limit=10).records
    assert [r.asset_materialization.partition for r in records] == ["2023-11-14-22:00"]
    assert records[0].asset_materialization.metadata["tdstream/windows_computed"].value == 3
    assert records[0].run_id == live[0].run_id
    # more rows later: the next live run takes them from where the last one stopped
    session.execute(f"insert into t values ({T + 40000}, 5)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from q_out") == [*expected, (T + 30000, 4)]
