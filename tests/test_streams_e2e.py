"""A stream end to end: rows written, the trigger sensor ticked, the asset run through
Dagster, exact output values worked out by hand; recalculation as partition runs."""

from __future__ import annotations

from pathlib import Path
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest
from dagster import AssetCheckResult, DagsterInstance, DagsterRunStatus, RunsFilter, materialize
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.storage.tags import BACKFILL_ID_TAG
from dagster._core.test_utils import create_run_for_test

from dagster_tdstream import Session, StreamHarness, StreamValidationError, Warehouse
from dagster_tdstream.compute.query import span_width
from dagster_tdstream.compute.run import stream_scope
from dagster_tdstream.orchestration.tags import STREAM_TAG
from dagster_tdstream.sql.translate import SourceTable, SpanWidth, TranslationContext, translate_select
from dagster_tdstream.storage.registry import load_stream
from dagster_tdstream.storage.spark_read import SparkViews
from dagster_tdstream.triggers.tick import advance_stream

from .conftest import output

T = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC, a multiple of 5 s

SCHEMA = "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"


def test_interval_with_offset_overlapping_windows_groups_disorder_and_updates(
    session: Session, harness: StreamHarness
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1); create table b using st tags (2);"
        "create stream s1 interval(10s, 2s) sliding(5s) from st partition by tbname into out1 "
        "as select _twstart ws, _twend we, count(*) n, sum(v) total from %%trows"
    )
    # windows start at T + 2s + k*5s and last 10s; rows arrive out of order inside one tick
    session.execute(f"insert into a values ({T + 3000}, 1) ({T + 8000}, 2) ({T + 5000}, 3) b values ({T + 4000}, 10)")
    report = harness.run_until_idle()
    assert report.failures == [] and report.runs == 1
    # a's progress (T+8s) closed only [T-3s, T+7s); b's (T+4s) closed nothing
    assert output(session, "select tag_tbname, ws, we, n, total from out1") == [("a", T - 3000, T + 7000, 2, 4)]

    # the row at T+8s is rewritten while its windows are still open, then progress closes them
    session.execute(f"insert into a values ({T + 8000}, 20) ({T + 14000}, 4) b values ({T + 30000}, 30)")
    report = harness.run_until_idle()
    assert report.failures == [] and report.runs == 1
    assert output(session, "select tag_tbname, ws, we, n, total from out1 order by tag_tbname, ws") == [
        ("a", T - 3000, T + 7000, 2, 4),
        ("a", T + 2000, T + 12000, 3, 24),
        ("b", T - 3000, T + 7000, 1, 10),
        ("b", T + 2000, T + 12000, 1, 10),
        # windows the group's progress passed without rows still fire: count 0, sum NULL
        ("b", T + 7000, T + 17000, 0, None),
        ("b", T + 12000, T + 22000, 0, None),
        ("b", T + 17000, T + 27000, 0, None),
    ]
    assert session.query("describe out1").rows == [
        ("ws", "TIMESTAMP", 8, ""),
        ("we", "TIMESTAMP", 8, ""),
        ("n", "BIGINT", 8, ""),
        ("total", "BIGINT", 8, ""),
        ("tag_tbname", "VARCHAR", 270, "TAG"),
    ]


def test_query_on_another_table_grouped_by_tag_with_placeholders(session: Session, harness: StreamHarness) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1); create table b using st tags (1); create table c using st tags (2);"
        "create table q (ts timestamp, x double);"
        f"insert into q values ({T}, 1.5) ({T + 9999}, 2.5) ({T + 10000}, 100);"
        "create stream s2 interval(10s) sliding(10s) from st partition by g into out2 "
        "output_subtable(concat('grp_', cast(g as varchar(4)))) tags (grp int as g, gid bigint as _tgrpid) "
        "as select _twstart, %%1 g, count(*) n, avg(x) ax, _twrownum rn from q where ts >= _twstart and ts < _twend"
    )
    session.execute(
        f"insert into a values ({T + 1000}, 1) ({T + 11000}, 1) b values ({T + 2000}, 1) c values ({T + 12000}, 1)"
    )
    assert harness.run_until_idle().failures == []
    # group g=1 (a and b) closed [T, T+10s); g=2 has nothing closed yet
    rows = output(session, "select tbname, _twstart, g, n, ax, rn, grp from out2")
    assert rows == [("grp_1", T, 1, 2, 2.0, 2, 1)]
    gid = session.query("select gid from out2").rows[0][0]
    assert isinstance(gid, int) and gid > 0


def test_automatic_recalculation_of_a_closed_window(session: Session, harness: StreamHarness) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s3 interval(10s) sliding(10s) from a into out3 as select _twstart, count(*) n, sum(v) s from %%trows"
    )
    session.execute(f"insert into a values ({T}, 1) ({T + 10000}, 2)")
    harness.run_until_idle()
    assert output(session, "select * from out3") == [(T, 1, 1)]
    # a late row for the closed window [T, T+10s) recomputes it (no IGNORE_DISORDER)
    session.execute(f"insert into a values ({T + 5000}, 7)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out3") == [(T, 2, 8)]


def test_ignore_disorder_and_backfill_recalculates_a_partition(
    session: Session, harness: StreamHarness, warehouse: Warehouse
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s4 interval(10s) sliding(10s) from a stream_options(ignore_disorder) into out4 "
        "as select _twstart, count(*) n, sum(v) s from %%trows"
    )
    session.execute(f"insert into a values ({T}, 1) ({T + 10000}, 2) ({T + 20000}, 3)")
    harness.run_until_idle()
    assert output(session, "select * from out4") == [(T, 1, 1), (T + 10000, 1, 2)]
    # a correction of the source: the stream ignores it …
    session.execute(f"insert into a values ({T + 1000}, 40)")
    harness.run_until_idle()
    assert output(session, "select * from out4") == [(T, 1, 1), (T + 10000, 1, 2)]
    # … and materialising the partition holding those windows recomputes them from the data
    asset = harness._definitions()[0].asset
    result = materialize(
        [asset], instance=harness.instance, resources=harness.resources, partition_key="2023-11-14-22:00"
    )
    assert result.success
    assert output(session, "select * from out4") == [(T, 2, 41), (T + 10000, 1, 2)]
    materialization = result.asset_materializations_for_node(asset.node_def.name)[0]
    assert materialization.metadata["tdstream/windows_computed"].value == 2
    assert materialization.partition == "2023-11-14-22:00"


def test_replayed_ticks_queue_nothing_twice_and_reruns_give_the_same_table(
    session: Session, harness: StreamHarness, warehouse: Warehouse
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s5 interval(10s) sliding(10s) from a into out5 as select _twstart, count(*) n from %%trows"
    )
    session.execute(f"insert into a values ({T}, 1) ({T + 10000}, 2) ({T + 25000}, 3)")
    stream = load_stream(warehouse, "d.s5")
    first = advance_stream(warehouse, stream, None)
    assert (first.queued, first.pending) == (2, 2)
    # the tick dies before Dagster stores its cursor: the next tick starts from the old one
    again = advance_stream(warehouse, stream, None)
    assert (again.offset, again.queued, again.pending) == (first.offset, 0, 2)
    assert harness.run_until_idle().failures == []
    table = output(session, "select * from out5")
    assert table == [(T, 1), (T + 10000, 1)]
    # a run that committed but died before marking its triggers done is simply run again
    with warehouse.catalog.transaction() as conn:
        from dagster_tdstream.storage.catalog import triggers_table

        conn.execute(triggers_table.update().values(status="pending"))
    harness.cursors.clear()
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out5") == table


def test_back_pressure_while_a_run_of_the_stream_is_active(
    session: Session, harness: StreamHarness, warehouse: Warehouse
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s6 interval(10s) sliding(10s) from a into out6 as select _twstart, count(*) n from %%trows;"
        f"insert into a values ({T}, 1) ({T + 10000}, 2)"
    )
    create_run_for_test(harness.instance, job_name="busy", status=DagsterRunStatus.STARTED, tags={STREAM_TAG: "d.s6"})
    assert harness.tick() == []
    assert "wait for run" in next(iter(_skips(harness).values()))
    assert warehouse.catalog.count_pending("d.s6") == 1


def _skips(harness: StreamHarness) -> dict[str, str]:
    report = harness.run_until_idle(max_rounds=1)
    return report.skipped


def test_state_window_over_an_expression_live(session: Session, harness: StreamHarness) -> None:
    """STATE_WINDOW over a CASE expression, computed on each row as it arrives: a window closes
    on the first row of another state (a NULL reading is a state here: CASE gives it its
    ELSE), and the next write closes the window left open."""
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s7 state_window(case when v >= 10 then 1 else 0 end) from a "
        "into out7 as select _twstart, _twend, count(*) n, max(v) m from %%trows;"
        f"insert into a values ({T}, 1) ({T + 1000}, 2) ({T + 2000}, 12) ({T + 3000}, NULL) ({T + 4000}, 15)"
    )
    report = harness.run_until_idle()
    assert report.failures == []
    # CASE gives 0 for the NULL reading too: the NULL row ends the high window
    assert output(session, "select * from out7 order by 1") == [
        (T, T + 1000, 2, 2),
        (T + 2000, T + 2000, 1, 12),
        (T + 3000, T + 3000, 1, None),
    ]
    session.execute(f"insert into a values ({T + 5000}, 3)")
    harness.run_until_idle()
    assert output(session, "select * from out7 order by 1")[-1] == (T + 4000, T + 4000, 1, 15)


def test_runs_go_through_a_persistent_dagster_instance(tmp_path: Path, warehouse: Warehouse, spark: object) -> None:
    session = Session(warehouse, timezone="UTC")
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s8 interval(10s) sliding(10s) from a into out8 as select _twstart, count(*) n from %%trows;"
        f"insert into a values ({T}, 1) ({T + 10000}, 2)"
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    # the instance settings the project ships (telemetry off, run concurrency for 2 cores)
    (home / "dagster.yaml").write_text((Path(__file__).parents[1] / "dagster.yaml").read_text())
    with DagsterInstance.from_config(str(home)) as instance:
        report = StreamHarness(warehouse, instance=instance, timezone="UTC").run_until_idle()
        assert report.runs == 1 and report.failures == []
        runs = instance.get_runs()
        assert [r.status for r in runs] == [DagsterRunStatus.SUCCESS]
        assert runs[0].tags[STREAM_TAG] == "d.s8"
        assert runs[0].tags["dagster/asset_partition_range_start"] == "2023-11-14-22:00"


def test_a_failed_batch_is_retried_a_bounded_number_of_times(
    session: Session, harness: StreamHarness, warehouse: Warehouse
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1); create table q (ts timestamp, x int);"
        "create stream s9 interval(10s) sliding(10s) from a into out9 as select _twstart, sum(x) from q "
        "where ts >= _twstart and ts < _twend;"
        f"insert into a values ({T}, 1) ({T + 10000}, 2)"
    )
    session.execute("drop table q")  # every computation of the batch now fails
    report = harness.run_until_idle()
    assert report.runs == 1 and "table d.q does not exist" in report.failures[0]
    for _ in range(2):  # two more attempts of the same batch
        requests = harness.tick()
        assert len(requests) == 1
        harness.run(*requests[0], report)
    assert harness.tick() == []
    reasons = harness.run_until_idle(max_rounds=1).skipped
    assert "failed 3 times" in reasons["d__s9__trigger"]
    assert warehouse.catalog.count_pending("d.s9") == 1


def test_a_stream_whose_trigger_table_was_dropped_keeps_loading(session: Session, harness: StreamHarness) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1); create table b using st tags (2);"
        "create stream on_a interval(10s) sliding(10s) from a into out_a as select _twstart, count(*) from %%trows;"
        "create stream on_b interval(10s) sliding(10s) from b into out_b as select _twstart, count(*) from %%trows;"
        f"insert into b values ({T}, 1) ({T + 10000}, 2); drop table a"
    )
    report = harness.run_until_idle()
    assert report.runs == 1  # on_b still runs; on_a's tick fails and says why
    assert [f for f in report.failures if not f.startswith("d__on_a__trigger: ")] == []
    assert "trigger table d.a was dropped" in report.skipped["d__on_a__trigger"]


def test_stream_status_shows_progress_lag_pending_and_recalculations(session: Session, harness: StreamHarness) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s interval(10s) sliding(10s) from st partition by tbname into out "
        "as select _twstart, count(*) n from %%trows"
    )
    columns = "status, trigger_table, output_table, progress, lag_ms, pending_triggers, recalculations, last_error"
    status = f"select {columns} from information_schema.ins_streams where stream_name = 's'"
    assert session.query(status).rows == [("Running", "d.st", "d.out", None, None, 0, 0, None)]
    session.execute(f"insert into a values ({T}, 1) ({T + 10000}, 2) ({T + 25000}, 3)")
    assert harness.run_until_idle().failures == []
    assert output(session, status) == [("Running", "d.st", "d.out", T + 25000, 0, 0, 0, None)]
    session.execute(f"insert into a values ({T + 2000}, 9) ({T + 40000}, 4)")  # a late row, and new data
    assert output(session, status)[0][3:6] == (T + 25000, 15000, 0)  # not processed yet: 15 s behind
    assert harness.run_until_idle().failures == []
    assert output(session, status) == [("Running", "d.st", "d.out", T + 40000, 0, 0, 1, None)]
    assert [r[0] for r in session.query("show d.streams").rows] == ["s"]


def test_start_ignore_untreated_skips_what_was_written_while_stopped(session: Session, harness: StreamHarness) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s interval(10s) sliding(10s) from a into out as select _twstart, count(*) n, sum(v) s "
        "from %%trows"
    )
    session.execute(f"insert into a values ({T}, 1) ({T + 10000}, 2)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == [(T, 1, 1)]
    session.execute("stop stream s")
    session.execute(f"insert into a values ({T + 20000}, 3) ({T + 30000}, 4)")  # untreated while stopped
    assert harness.run_until_idle().runs == 0
    session.execute("start stream ignore untreated s")
    assert harness.run_until_idle().runs == 0  # the skipped rows close nothing
    assert output(session, "select * from out") == [(T, 1, 1)]
    session.execute(f"insert into a values ({T + 45000}, 5)")  # new data goes on from the carried state
    assert harness.run_until_idle().failures == []
    # [T+10s, T+20s) was open before the stop and closes now; its rows are read from the table
    rows = output(session, "select * from out")
    assert rows[:2] == [(T, 1, 1), (T + 10000, 1, 2)] and len(rows) == 4


def test_the_lag_check_fails_when_the_stream_falls_behind(session: Session, harness: StreamHarness) -> None:
    from dagster_tdstream import TDStreamProject, build_definitions

    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s interval(10s) sliding(10s) from a into out as select _twstart, count(*) n from %%trows"
    )
    session.execute(f"insert into a values ({T}, 1) ({T + 10000}, 2)")
    assert harness.run_until_idle().failures == []
    defs = build_definitions(TDStreamProject(warehouse=session.warehouse.uri, max_lag_seconds=60))
    check = next(iter(defs.asset_checks or []))
    resources = {"tdstream_warehouse": harness.resources["tdstream_warehouse"]}

    def evaluate() -> AssetCheckResult:
        return check(**resources)  # direct invocation: the check's own function, its resource given

    ok = evaluate()
    assert ok.passed and ok.metadata["tdstream/lag_ms"].value == 0
    session.execute(f"insert into a values ({T + 90000}, 3)")  # 80 s of new data, not processed yet
    behind = evaluate()
    assert not behind.passed and behind.description == "80 s behind (bound 60 s)"
    assert harness.run_until_idle().failures == []
    assert evaluate().passed


def test_recalculate_stream_is_a_backfill_that_fixes_the_output(session: Session, harness: StreamHarness) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s interval(10s) sliding(10s) from a stream_options(ignore_disorder) into out "
        "as select _twstart, count(*) n, sum(v) s from %%trows"
    )
    session.execute(f"insert into a values ({T}, 1) ({T + 10000}, 2) ({T + 20000}, 3)")
    assert harness.run_until_idle().failures == []
    session.execute(f"insert into a values ({T + 1000}, 40)")  # an upstream correction the stream ignores
    assert harness.run_until_idle().runs == 0
    assert output(session, "select * from out") == [(T, 1, 1), (T + 10000, 1, 2)]
    message = session.execute(f"recalculate stream s from {T}")[0].message
    assert message.startswith("Recalculate OK")
    report = harness.run_until_idle()
    assert report.failures == [] and report.backfills == [("tdstream/d/out", "2023-11-14-22:00", "2023-11-14-22:00")]
    assert output(session, "select * from out") == [(T, 2, 41), (T + 10000, 1, 2)]
    # the same backfill the UI's backfill page lists, with the run it launched
    (backfill,) = harness.instance.get_backfills()
    assert backfill.status == BulkActionStatus.COMPLETED_SUCCESS
    subset = backfill.asset_backfill_data.target_subset
    assert [(k.asset_key.to_user_string(), k.partition_key) for k in subset.iterate_asset_partitions()] == [
        ("tdstream/d/out", "2023-11-14-22:00")
    ]
    (run,) = harness.instance.get_runs(filters=RunsFilter(tags={BACKFILL_ID_TAG: backfill.backfill_id}))
    assert run.status == DagsterRunStatus.SUCCESS
    assert harness.run_until_idle().runs == 0  # requested once
    with pytest.raises(StreamValidationError, match="TO must be after FROM"):
        session.execute(f"recalculate stream s from {T} to {T}")


def test_stream_tasks_show_reader_trigger_and_runner(session: Session, harness: StreamHarness) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1); create table b using st tags (2);"
        "create stream s interval(10s) sliding(10s) from st partition by tbname into out "
        "as select _twstart, count(*) n from %%trows;"
        "create stream p period(1m) into p_out as select cast(_tlocaltime / 1000000 as timestamp) ts, 1 one;"
        "create stream gone interval(10s) sliding(10s) from b into out_b as select _twstart, count(*) from %%trows"
    )
    columns = "stream_name, task_id, type, node_type, node_id, status, extra_info, message"
    tasks = f"select {columns} from information_schema.ins_stream_tasks order by stream_name, task_id"
    assert session.query(tasks).rows == [
        ("gone", 0, "Reader", "delta", "d.st", "Running", "WAL nothing read yet, latest version 0", None),
        ("gone", 1, "Trigger", "sensor", "d__gone__trigger", "Running", "0 pending trigger(s)", None),
        (
            "gone",
            2,
            "Runner",
            "asset",
            "d__gone",
            "Running",
            "0 window(s) recalculated, 0 recalculation(s) waiting",
            None,
        ),
        ("p", 0, "Trigger", "schedule", "d__p__period", "Running", "0 pending trigger(s)", None),
        ("p", 1, "Runner", "asset", "d__p", "Running", "0 window(s) recalculated, 0 recalculation(s) waiting", None),
        ("s", 0, "Reader", "delta", "d.st", "Running", "WAL nothing read yet, latest version 0", None),
        ("s", 1, "Trigger", "sensor", "d__s__trigger", "Running", "0 pending trigger(s)", None),
        ("s", 2, "Runner", "asset", "d__s", "Running", "0 window(s) recalculated, 0 recalculation(s) waiting", None),
    ]
    session.execute(f"insert into a values ({T}, 1) ({T + 10000}, 2) ({T + 25000}, 3); drop table b")
    session.execute("stop stream p")
    assert harness.run_until_idle().failures == []
    rows = {(r[0], r[2]): r for r in session.query(tasks).rows}
    assert rows[("s", "Reader")][5:] == ("Running", "WAL read to version 1, latest version 1", None)
    assert rows[("p", "Trigger")][5] == "Stopped" and rows[("p", "Runner")][5] == "Stopped"
    assert rows[("gone", "Reader")][3:] == ("delta", "d.b", "Failed", None, "trigger table d.b was dropped")
    assert rows[("gone", "Trigger")][5] == "Failed" and "trigger table d.b was dropped" in rows[("gone", "Trigger")][7]
    (updated,) = session.query(
        "select last_update from information_schema.ins_stream_tasks where stream_name = 's' and type = 'Trigger'"
    ).rows
    assert updated[0] is not None


def test_recalculate_count_window_needs_both_ends_and_stays_within_progress(
    session: Session, harness: StreamHarness
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream c count_window(2) from a into out as select _twstart, count(*) n, sum(v) s from %%trows"
    )
    session.execute(f"insert into a values ({T}, 1) ({T + 1000}, 2) ({T + 2000}, 3) ({T + 3000}, 4) ({T + 4000}, 5)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == [(T, 2, 3), (T + 2000, 2, 7)]
    with pytest.raises(StreamValidationError, match="COUNT_WINDOW stream needs both FROM and TO"):
        session.execute(f"recalculate stream c from {T}")
    # progress is T+4s (the newest row read); a range past it is ignored as a whole
    (ignored,) = session.execute(f"recalculate stream c from {T} to {T + 60000}")
    assert ignored.message.startswith("Recalculate ignored: COUNT_WINDOW stream d.c recalculates only")
    assert harness.run_until_idle().backfills == []
    session.execute(f"insert into a values ({T + 1000}, 20)")  # an update: COUNT_WINDOW ignores it
    assert harness.run_until_idle().runs == 0
    (accepted,) = session.execute(f"recalculate stream c from {T} to {T + 4000}")
    assert accepted.message.startswith("Recalculate OK")
    report = harness.run_until_idle()
    assert report.failures == [] and report.backfills == [
        ("tdstream/d/out", "2023-11-14", "2023-11-14")
    ]  # daily for COUNT
    assert output(session, "select * from out") == [(T, 2, 21), (T + 2000, 2, 7)]


def test_trows_reads_the_batch_span_while_tbname_and_named_tables_read_everything(
    session: Session, harness: StreamHarness
) -> None:
    """A run narrows the trigger table to its windows' span for %%trows only: %%tbname and
    the trigger table named in FROM still see rows outside it."""
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"insert into a values ({T - 50000}, 100) ({T - 40000}, 200);"  # history, before the stream
        "create stream rows_only interval(10s) sliding(10s) from a into o1 as select _twstart, sum(v) from %%trows;"
        "create stream whole interval(10s) sliding(10s) from st partition by tbname into o2 "
        "as select _twstart, sum(v) from %%tbname;"
        "create stream named interval(10s) sliding(10s) from a into o3 "
        "as select _twstart, count(*) from d.a where ts < _twend;"
        f"insert into a values ({T}, 1) ({T + 10000}, 2)"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from o1") == [(T, 1)]
    assert output(session, "select _twstart, `sum(v)` from o2") == [(T, 303)]
    assert output(session, "select * from o3") == [(T, 3)]


def test_a_stream_query_selects_the_time_of_its_maximum(session: Session, harness: StreamHarness) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s interval(10s) sliding(10s) from a into out as select _twstart, max(v) peak, ts peak_at from %%trows;"
        f"insert into a values ({T}, 1) ({T + 3000}, 7) ({T + 6000}, 2) ({T + 10000}, 4)"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == [(T, 7, T + 3000)]


def test_a_stream_query_reads_a_subquery_of_its_trigger_rows(session: Session, harness: StreamHarness) -> None:
    """The subquery runs per trigger: its rows carry their trigger, the outer query
    aggregates each trigger's rows; a trigger whose subquery keeps no rows is still computed."""
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s interval(10s) sliding(10s) from a into out as "
        "select _twstart, count(*) n, sum(w) total from (select ts, v * 10 as w from %%trows where v > 1);"
        f"insert into a values ({T}, 1) ({T + 3000}, 7) ({T + 6000}, 2) ({T + 10000}, 1) ({T + 20000}, 5)"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == [(T, 2, 90), (T + 10000, 0, None)]


def test_time_series_functions_in_a_stream_query_run_per_trigger(session: Session, harness: StreamHarness) -> None:
    """diff and csum over each trigger's rows: the first row of a window has no previous
    value, however many windows one run computes."""
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream d interval(10s) sliding(10s) from a into diffs as select ts, diff(v) dv from %%trows;"
        "create stream c interval(10s) sliding(10s) from a into sums as select ts, _twstart, csum(v) cv from %%trows;"
        f"insert into a values ({T}, 1) ({T + 3000}, 7) ({T + 6000}, 2) ({T + 10000}, 4) ({T + 12000}, 10)"
        f" ({T + 20000}, 5)"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from diffs") == [(T + 3000, 6), (T + 6000, -5), (T + 12000, 6)]
    assert output(session, "select * from sums") == [
        (T, T, 1), (T + 3000, T, 8), (T + 6000, T, 10), (T + 10000, T + 10000, 4), (T + 12000, T + 10000, 14),
    ]  # fmt: skip


def test_row_windows_inside_a_stream_query_split_each_trigger(session: Session, harness: StreamHarness) -> None:
    """STATE_WINDOW within each 10 s trigger window: a state run crossing the trigger's end
    is cut there, as the query sees only its trigger's rows."""
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s interval(10s) sliding(10s) from a into runs as "
        "select _wstart, _wend, count(*) n, first(v) state from %%trows state_window(v);"
        f"insert into a values ({T}, 1) ({T + 3000}, 1) ({T + 6000}, 2) ({T + 9000}, 2) ({T + 11000}, 2)"
        f" ({T + 14000}, 3) ({T + 20000}, 3)"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from runs") == [
        (T, T + 3000, 2, 1), (T + 6000, T + 9000, 2, 2), (T + 11000, T + 11000, 1, 2), (T + 14000, T + 14000, 1, 3),
    ]  # fmt: skip


def test_fill_inside_a_stream_query_fills_each_trigger_window(session: Session, harness: StreamHarness) -> None:
    """INTERVAL(2s) FILL(PREV) within each 10 s trigger window: the five 2 s windows of the
    trigger, filled from within that trigger only (the first window of the second trigger
    has no earlier value in it: NULL)."""
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s interval(10s) sliding(10s) from a into filled as "
        "select _wstart, _twstart tw, max(v) peak from %%trows interval(2s) fill(prev);"
        f"insert into a values ({T + 2000}, 1) ({T + 6000}, 7) ({T + 14000}, 3) ({T + 20000}, 5)"
    )
    assert harness.run_until_idle().failures == []
    first = [(T + s * 1000, T, v) for s, v in ((0, None), (2, 1), (4, 1), (6, 7), (8, 7))]
    second = [(T + s * 1000, T + 10000, v) for s, v in ((10, None), (12, None), (14, 3), (16, 3), (18, 3))]
    assert output(session, "select * from filled") == first + second


def test_trigger_windows_are_aggregated_before_the_join(session: Session, harness: StreamHarness) -> None:
    """INTERVAL %%trows meet their triggers on (group, window): the data is aggregated per
    key first, then joined. Empty windows keep TDengine's values (count 0, others NULL),
    HAVING and placeholders beside aggregates work as in the join-first plan."""
    session.execute(
        SCHEMA + "create table a using st tags (1); create table b using st tags (2);"
        "create stream s interval(10s) sliding(10s) from st partition by tbname into out as "
        "select _twstart, count(*) n, hyperloglog(v) h, sum(v) + 1 total, _twend - _twstart span from %%trows;"
        "create stream kept interval(10s) sliding(10s) from st partition by tbname into high as "
        "select _twstart, avg(v) m from %%trows having avg(v) > 4;"
        f"insert into a values ({T}, 1) ({T + 3000}, 7) ({T + 25000}, 2) ({T + 31000}, 0)"
        f" b values ({T + 1000}, 9) ({T + 12000}, 5) ({T + 22000}, 4)"
    )
    assert harness.run_until_idle().failures == []
    assert sorted(output(session, "select _twstart, n, h, total, span from out")) == [
        (T, 1, 1, 10, 10000), (T, 2, 2, 9, 10000),  # b, a
        (T + 10000, 0, 0, None, 10000), (T + 10000, 1, 1, 6, 10000),  # a's empty window, b
        (T + 20000, 1, 1, 3, 10000),  # a
    ]  # fmt: skip
    assert sorted(output(session, "select _twstart, m from high")) == [
        (T, 9.0),
        (T + 10000, 5.0),
    ]  # a's first avg is 4: not > 4
    stream = load_stream(session.warehouse, "d.s")
    plan = translate_select(stream.stmt.query, TranslationContext(_unused, ZoneInfo("UTC"), 0, stream=stream_scope(
        stream, "__triggers", SourceTable("d.st", "st_view", "super", stream.trigger_table.columns,
                                          stream.trigger_table.tags, "ms"))))  # fmt: skip
    assert "GROUP BY" in plan.sql.split("LEFT JOIN")[1], plan.sql  # the data side is aggregated before the join


def _unused(name: object) -> SourceTable:
    raise AssertionError(f"the stream query reads only %%trows, not {name}")


def test_a_time_range_on_another_table_joins_the_broadcast_triggers(session: Session, harness: StreamHarness) -> None:
    """``ts >= _twstart - 5s AND ts < _twend`` on another table: the data meets the broadcast
    triggers on buckets of time, aggregated per trigger before the triggers are joined back
    (a window with no rows in range still gets its row)."""
    session.execute(
        SCHEMA + "create table a using st tags (1); create table q (ts timestamp, x int);"
        f"insert into q values ({T - 4000}, 1) ({T + 2000}, 2) ({T + 9999}, 4) ({T + 15000}, 8) ({T + 40000}, 16);"
        "create stream s interval(10s) sliding(10s) from a into out as "
        "select _twstart, count(*) n, sum(x) total from q where ts >= _twstart - 5s and ts < _twend"
    )
    session.execute(f"insert into a values ({T + 1000}, 1) ({T + 31000}, 1)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == [
        (T, 3, 7), (T + 10000, 2, 12), (T + 20000, 1, 8),  # [T-5s, T+10s), [T+5s, T+20s), [T+15s, T+30s)
    ]  # fmt: skip
    stream = load_stream(session.warehouse, "d.s")
    q = session.warehouse.table("d", "q")

    def resolve(name: object) -> SourceTable:
        return SourceTable("d.q", "q_view", "normal", q.columns, (), "ms")

    trigger = stream.trigger_table
    assert trigger is not None
    source = SourceTable("d.a", "a_view", "child", trigger.columns, trigger.tags, "ms")
    scope = stream_scope(stream, "__triggers", source)
    plan = translate_select(stream.stmt.query, TranslationContext(resolve, ZoneInfo("UTC"), 0, stream=scope))
    assert "BROADCAST(__trig)" in plan.sql and "__bucket" in plan.sql, plan.sql
    assert len(plan.parameters) == 1  # the bucket width, evaluated before the query


def test_the_bucket_width_taken_from_the_trigger_rows_is_sparks(warehouse: Warehouse, spark: object) -> None:
    """Between two integer columns of the trigger rows this process registered, the widest
    span is computed here, as Spark's SQL would (an open end passed over, at least 1); any
    other span is left to Spark."""
    views = SparkViews(spark, warehouse, None)
    try:
        rows = pa.table({"_twstart": pa.array([0, 10, 50], pa.int64()), "_twend": pa.array([9, 40, None], pa.int64())})
        view = views.register_rows(rows, "triggers")
        spans = [("__trig._twstart", "__trig._twend"), ("__trig._twend", "__trig._twstart")]
        spans.append(("__trig._twstart - 5", "__trig._twend"))  # not two columns: Spark's
        for low, high in spans:
            span = SpanWidth(view, low, high)
            assert span_width(views, span) == views.sql(span.sql).collect()[0][0], span
        assert span_width(views, SpanWidth(view, "__trig._twstart", "__trig._twend")) == 30
    finally:
        views.close()


def test_a_stream_query_joins_two_tables_in_its_window(session: Session, harness: StreamHarness) -> None:
    """A join on the timestamps inside a stream's query, bounded by the trigger's window."""
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create table temp (ts timestamp, v int); create table hum (ts timestamp, h int);"
        f"insert into temp values ({T}, 20) ({T + 1000}, 22) ({T + 12000}, 30)"
        f" hum values ({T}, 50) ({T + 1000}, 60) ({T + 12000}, 70) ({T + 13000}, 80);"
        "create stream s interval(10s) sliding(10s) from a into out as select _twstart, count(*) n, "
        "avg(t.v + h.h) s from temp t join hum h on t.ts = h.ts where t.ts >= _twstart and t.ts < _twend"
    )
    session.execute(f"insert into a values ({T}, 1) ({T + 10000}, 1) ({T + 20000}, 1)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == [(T, 2, 76.0), (T + 10000, 1, 100.0)]


def test_a_run_reads_the_tags_its_query_or_pre_filter_names_and_skips_them_otherwise(
    session: Session, harness: StreamHarness
) -> None:
    """A run reads the trigger table's rows without their tags unless the query, the grouping
    or PRE_FILTER names one (``run.reads_tags``): each stream gets exactly what it names."""
    session.execute(
        SCHEMA + "create table a using st tags (1); create table b using st tags (2); create table c using st tags (3);"
        "create stream tg interval(5s) sliding(5s) from st partition by tbname into tg_out "
        "as select _twstart, count(*) n, max(g) mg from %%trows;"
        "create stream pf interval(5s) sliding(5s) from st partition by tbname stream_options(pre_filter(g > 1)) "
        "into pf_out as select _twstart, count(*) n from %%trows;"
        "create stream no interval(5s) sliding(5s) from st partition by tbname into no_out "
        "as select _twstart, count(*) n, sum(v) s from %%trows"
    )
    session.execute(
        f"insert into a values ({T}, 1) ({T + 1000}, 2) ({T + 6000}, 3)"
        f" b values ({T + 2000}, 10) ({T + 7000}, 11) c values ({T + 5000}, 5)"
    )
    session.execute("drop table c")  # its rows are not read by any run
    assert harness.run_until_idle().failures == []
    assert output(session, "select tag_tbname, _c0, n, mg from tg_out order by tag_tbname") == [
        ("a", T, 2, 1),
        ("b", T, 1, 2),
    ]
    assert output(session, "select tag_tbname, _c0, n from pf_out order by tag_tbname") == [("b", T, 1)]
    assert output(session, "select tag_tbname, _c0, n, s from no_out order by tag_tbname") == [
        ("a", T, 2, 3),
        ("b", T, 1, 10),
    ]


@pytest.mark.parametrize("file_rows", [0, 10**9], ids=["as-a-file", "in-the-plan"])
def test_a_runs_triggers_reach_spark_as_a_file_or_in_the_plan_alike(
    session: Session, harness: StreamHarness, monkeypatch: pytest.MonkeyPatch, file_rows: int
) -> None:
    """A batch of many triggers goes to Spark as a Parquet file in the warehouse (removed when
    the run ends), a few in the query plan: the same results either way."""
    from dagster_tdstream.storage import spark_read
    from dagster_tdstream.storage.delta import local_path

    monkeypatch.setattr(spark_read, "FILE_ROWS", file_rows)
    session.execute(
        SCHEMA + "create table a using st tags (1); create table b using st tags (2);"
        "create stream f interval(5s) sliding(5s) from st partition by tbname into f_out "
        "as select _twstart, _twend, _twrownum, count(*) n, sum(v) s from %%trows"
    )
    session.execute(f"insert into a values ({T}, 1) ({T + 1000}, 2) ({T + 11000}, 3) b values ({T + 6000}, 10)")
    session.execute(f"insert into b values ({T + 12000}, 20)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select tag_tbname, _c0, _twend, _twrownum, n, s from f_out order by 1, 2") == [
        ("a", T, T + 5000, 2, 2, 3),
        ("a", T + 5000, T + 10000, 0, 0, None),
        ("b", T + 5000, T + 10000, 1, 1, 10),
    ]
    folder = local_path(session.warehouse.uri) / spark_read.SPARK_ROWS_DIR
    assert folder.exists() is (file_rows == 0) and not any(folder.glob("*"))  # used, then removed
