"""TDengine 2.x continuous queries (CREATE TABLE … AS SELECT … INTERVAL) and table subscription,
through SQL, the Python API and the CLI, on real Spark, Delta and Dagster runs (the harness)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from dagster import DagsterInstance, build_sensor_context, job, op

from dagster_tdstream import (
    Session,
    StreamHarness,
    TDStreamWarehouse,
    Warehouse,
    subscription_rows,
    subscription_sensor,
)
from dagster_tdstream.cli.main import main
from dagster_tdstream.compute.spark import LazySpark
from dagster_tdstream.errors import StreamValidationError, SubscriptionError, TDStreamError
from dagster_tdstream.sql.intervals import IntervalSpec
from dagster_tdstream.sql.timeunits import Duration
from dagster_tdstream.storage.registry import load_streams
from dagster_tdstream.triggers.engine import Change, WindowTrigger

from .conftest import output

T0 = 1_626_739_200_000  # 2021-07-20 00:00:00 UTC, ms
MINUTE = 60_000
HOUR_NS = 3_600 * 10**9  # processing time is in ns


def _setup(session: Session) -> None:
    session.execute(
        "create database cq; use cq; create stable st (ts timestamp, v int, f float) tags (g int);"
        "create table c1 using st tags (1); create table c2 using st tags (-1)"
    )


def test_window_closes_by_the_clock_once_and_late_rows_never_recompute_it() -> None:
    """The engine option behind continuous queries: windows close when processing time
    passes their end (no later row needed), each once; a row for a closed window is ignored."""
    spec = IntervalSpec.from_durations(Duration(1, "m"), Duration(1, "m"), None, "ms")
    trigger = WindowTrigger(spec, ignore_nodata=True, ignore_disorder=True, clock_close=True)
    state = trigger.new_state()
    assert trigger.advance(state, [Change(T0 + 1, "insert"), Change(T0 + MINUTE + 5, "insert")]) == []
    assert trigger.clock_closed(state, T0 + MINUTE - 1) == []
    fired = trigger.clock_closed(state, T0 + MINUTE)
    assert [(f.event, f.start, f.row_count) for f in fired] == [("WINDOW_CLOSE", T0, 1)]
    assert trigger.advance(state, [Change(T0 + 2, "insert")]) == []  # late: no RECALC
    fired = trigger.clock_closed(state, T0 + 10 * MINUTE)
    assert [(f.start, f.row_count) for f in fired] == [(T0 + MINUTE, 1)]  # empty windows skipped
    assert trigger.clock_closed(state, T0 + 20 * MINUTE) == []


def test_continuous_query_computes_history_and_each_window_once(session: Session, harness: StreamHarness) -> None:
    _setup(session)
    session.execute(
        f"insert into c1 values ({T0}, 1, 1.5) ({T0 + MINUTE}, 3, 2.5) c2 values ({T0}, 10, 1.0);"
        "create table res as select avg(`v`), count(*), max(f) as mx from st where g >= 0 interval(1m) sliding(2m)"
    )
    # created at once, named as 2.x names result columns; SLIDING beyond INTERVAL is clamped
    assert session.query("describe res").display_rows(session.timezone) == [
        ["ts", "TIMESTAMP", 8, ""],
        ["avg__v__", "DOUBLE", 8, ""],
        ["count___", "BIGINT", 8, ""],
        ["mx", "FLOAT", 4, ""],
    ]
    harness.advance_clock(10)  # a continuous query first computes 10 s after CREATE
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from res") == [(T0, 1.0, 1, 1.5), (T0 + MINUTE, 3.0, 1, 2.5)]
    # a late row into a computed window never recomputes it (2.x), c2 is filtered by its tag
    session.execute(f"insert into c1 values ({T0 + 1}, 100, 9.0) c2 values ({T0 + 2 * MINUTE}, 7, 7.0)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from res") == [(T0, 1.0, 1, 1.5), (T0 + MINUTE, 3.0, 1, 2.5)]
    # it is a stream to everything else: listed, with its own text
    (stream,) = load_streams(session.warehouse)
    assert stream.family == "continuous_query"
    rows = session.query("show streams").display_rows(session.timezone)
    assert rows[0][0] == "res" and rows[0][3].startswith("create table res as select")


def test_open_window_waits_for_the_wall_clock(session: Session, warehouse: Warehouse) -> None:
    """A window still open by the wall clock is not computed, whatever rows arrive after it;
    once the clock passes its end it is computed once."""
    _setup(session)
    # processing time half an hour into the next hour, running on from there: read from the
    # wall clock as it is, a test begun in an hour's last seconds saw the next window close too
    real = time.time_ns()
    shift = (real // HOUR_NS + 1) * HOUR_NS + HOUR_NS // 2 - real
    now = (real + shift) // 10**6
    start = now - now % 3_600_000  # the window open at that time
    session.execute(
        f"insert into c1 values ({start}, 1, 1.0) ({start + 3_600_000 + 5}, 2, 2.0);"
        "create table hourly as select count(*) from c1 interval(1h)"
    )
    harness = StreamHarness(warehouse, timezone="UTC", clock=lambda: time.time_ns() + shift)
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from hourly") == []
    harness.advance_clock(3600)
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from hourly") == [(start, 1)]


def test_group_by_tbname_writes_one_child_table_per_group(session: Session, harness: StreamHarness) -> None:
    _setup(session)
    session.execute(
        f"insert into c1 values ({T0}, 1, 1) ({T0 + 1000}, 2, 2) c2 values ({T0}, 5, 5);"
        "create table per_table as select sum(v) from st interval(1m) group by tbname"
    )
    harness.advance_clock(10)  # a continuous query first computes 10 s after CREATE
    assert harness.run_until_idle().failures == []
    rows = sorted(output(session, "select ts, sum_v_, tag_tbname from per_table"), key=lambda r: r[2])
    assert rows == [(T0, 3, "c1"), (T0, 5, "c2")]


def test_time_range_where_bounds_the_query(session: Session, harness: StreamHarness) -> None:
    """``ts > now`` is the moment of CREATE: rows before it are not computed."""
    _setup(session)
    session.execute(f"insert into c1 values ({T0}, 1, 1)")
    session.execute("create table bounded as select count(*) from c1 where ts > now - 1h interval(1m)")
    harness.advance_clock(10)  # a continuous query first computes 10 s after CREATE
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from bounded") == []


def test_an_upper_time_bound_ends_the_query_once_its_last_window_is_computed(
    warehouse: Warehouse, spark: object
) -> None:
    """``ts <= now + 1m`` is the query's end: once the wall clock has closed the window that
    holds it and that window is written, the query stops by itself (2.x closes the stream): it
    leaves SHOW STREAMS, its result table stays, later rows change nothing."""
    created = (T0 + 5_000) * 10**6  # the clock of CREATE (ns): 5 s into a minute
    session = Session(warehouse, timezone="UTC", spark=LazySpark(session=spark), clock=lambda: created)
    harness = StreamHarness(warehouse, timezone="UTC", clock=lambda: created)
    _setup(session)
    session.execute(
        f"insert into c1 values ({T0}, 1, 1) ({T0 + MINUTE}, 2, 2) ({T0 + 2 * MINUTE}, 3, 3);"
        "create table ending as select count(*), sum(v) from c1 where ts <= now + 1m interval(1m)"
    )
    harness.advance_clock(10)  # the first computation: no window is over yet
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from ending") == []
    harness.advance_clock(60)  # T0 + 75 s: the first minute is over
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from ending") == [(T0, 1, 1)]
    assert [r[0] for r in output(session, "show streams")] == ["ending"]
    harness.advance_clock(60)  # T0 + 135 s: past the end of the window holding T0 + 65 s
    assert harness.run_until_idle().failures == []
    # the row at T0 + 2m is after the end time: never computed
    assert output(session, "select * from ending") == [(T0, 1, 1), (T0 + MINUTE, 1, 2)]
    assert output(session, "show streams") == []
    session.execute(f"insert into c1 values ({T0 + 1}, 10, 1)")
    harness.advance_clock(10 * 60)
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from ending") == [(T0, 1, 1), (T0 + MINUTE, 1, 2)]


def test_a_lower_time_bound_is_the_start_not_a_row_filter(session: Session, harness: StreamHarness) -> None:
    """2.x starts the query at its lower bound: no window before it, and the windows after it
    computed over their whole range — the row at the bound of ``ts > t`` counts, as does an
    earlier row of the bound's window (TDengine's stream_1970 test); an upper bound filters."""
    _setup(session)
    bound = T0 + 30_000
    session.execute(
        f"insert into c1 values ({T0 - MINUTE}, 1000, 1) ({T0 + 10_000}, 100, 1) ({bound}, 1, 1) "
        f"({T0 + MINUTE}, 2, 1) ({T0 + 2 * MINUTE}, 3, 1) ({T0 + 3 * MINUTE}, 4, 1);"
        f"create table started as select sum(v), count(*) from c1 where ts > {bound} and ts < {T0 + 3 * MINUTE} "
        "interval(1m)"
    )
    harness.advance_clock(10)  # a continuous query first computes 10 s after CREATE
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from started") == [(T0, 101, 2), (T0 + MINUTE, 2, 1), (T0 + 2 * MINUTE, 3, 1)]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("create table r as select count(*) from st", "needs INTERVAL"),
        ("create table r as select twa(v) from c1 interval(1m)", "twa() is not allowed"),
        ("create table r as select elapsed(ts) from st interval(1m) group by tbname", "elapsed() is not allowed"),
        ("create table r as select v from c1 interval(1m)", "aggregate"),
        ("create table r as select count(*) from c1 interval(5a)", "at least 10a"),
        ("create table r as select count(*) from nope interval(1m)", "nope"),
        ("create table r as select count(*) from c1 interval(1m) fill(prev)", "FILL"),
    ],
)
def test_invalid_continuous_queries_create_nothing(sql_session: Session, statement: str, message: str) -> None:
    _setup(sql_session)
    with pytest.raises(TDStreamError, match=re.escape(message)) as caught:
        sql_session.execute(statement)
    assert "line 1" in str(caught.value)
    assert sql_session.warehouse.find_table("cq", "r") is None
    assert load_streams(sql_session.warehouse) == []


def test_kill_stream_and_dropping_the_result_or_source_stop_it(sql_session: Session) -> None:
    _setup(sql_session)
    sql_session.execute(
        "create table a as select count(*) from c1 interval(1m);"
        "create table b as select count(*) from c2 interval(1m);"
        "create table c as select count(*) from st interval(1m)"
    )
    # by the id SHOW STREAMS shows (2.x's connId:streamId), or by name
    ids = {s.name: s.stream_id for s in sql_session.warehouse.catalog.list_streams()}
    assert ids == {"a": 1, "b": 2, "c": 3}
    with pytest.raises(TDStreamError, match=r"no continuous query stream id 9"):
        sql_session.execute("kill stream 5:9")
    with pytest.raises(TDStreamError, match=r"line 1, column 13: expected a stream id such as 3:1"):
        sql_session.execute("kill stream '1:x'")
    sql_session.execute("kill stream 7:1")
    assert sql_session.warehouse.find_table("cq", "a") is not None  # the result table stays
    sql_session.execute("kill stream b")
    assert [s.name for s in load_streams(sql_session.warehouse)] == ["c"]
    sql_session.execute("create table b2 as select count(*) from c2 interval(1m)")
    assert sql_session.warehouse.catalog.get_stream("cq", "b2").stream_id == 4  # type: ignore[union-attr]
    sql_session.execute("drop table b2")
    assert [s.name for s in load_streams(sql_session.warehouse)] == ["c"]
    sql_session.execute("drop table c1; drop table c2; drop stable st")
    assert load_streams(sql_session.warehouse) == []
    with pytest.raises(TDStreamError, match="no continuous query"):
        sql_session.execute("kill stream a")
    with pytest.raises(StreamValidationError):
        sql_session.execute("create table x as select count(*) from st")


def test_two_x_dialect_leads_interval_results_with_the_window_start(session: Session) -> None:
    _setup(session)
    session.execute(f"insert into c1 values ({T0}, 1, 1) ({T0 + 1}, 2, 2)")
    two_x = Session(session.warehouse, timezone="UTC", spark=session.spark, dialect="2.x", database="cq")
    assert output(two_x, "select count(*) from c1 interval(1d)") == [(T0, 2)]
    assert output(session, "select count(*) from c1 interval(1d)") == [(2,)]


def test_two_x_show_streams(session: Session, harness: StreamHarness) -> None:
    """SHOW STREAMS in the 2.x dialect: 2.x's columns; exec time the latest window computed,
    NULL until the first computation, 10 s after CREATE (2.x's streamCompStartDelay)."""
    _setup(session)
    session.execute(f"insert into c1 values ({T0}, 1, 1) ({T0 + MINUTE}, 2, 2)")
    session.execute("create table per_minute as select count(*) from c1 interval(1m)")
    two_x = Session(session.warehouse, timezone="UTC", spark=session.spark, dialect="2.x", database="cq")
    before = two_x.query("show streams")
    assert before.columns == [
        "streamId", "user", "dest table", "ip:port", "created time", "exec time", "time(us)", "sql", "cycles",
    ]  # fmt: skip
    assert before.display_rows(two_x.timezone)[0][5] is None
    # as in 2.x, nothing is computed until 10 s after CREATE: no exec time yet, no rows
    assert harness.run_until_idle().failures == []
    assert two_x.query("show streams").display_rows(two_x.timezone)[0][5] is None
    assert output(session, "select * from per_minute") == []
    harness.advance_clock(10)
    assert harness.run_until_idle().failures == []
    row = two_x.query("show streams").display_rows(two_x.timezone)[0]
    assert row[0] == "0:1" and row[2] == "cq.per_minute" and row[8] == 2
    assert row[5] == "2021-07-20 00:01:00.000"
    two_x.execute(f"kill stream {row[0]}")
    assert two_x.query("show streams").display_rows(two_x.timezone) == []


def test_subscription_consumes_new_and_updated_rows_and_resumes(sql_session: Session, tmp_path: Path) -> None:
    _setup(sql_session)
    sql_session.execute(f"insert into c1 values ({T0}, 1, 1) c2 values ({T0}, 2, 2)")
    progress = tmp_path / "progress.json"
    sub = sql_session.subscribe("select ts, v, tbname from st where g > 0", progress_file=progress)
    assert sub.consume() == [{"ts": T0, "v": 1, "tbname": "c1"}]
    assert sub.consume() == []
    sql_session.execute(f"insert into c1 values ({T0 + 1}, 3, 3) ({T0}, 4, 4) c2 values ({T0 + 1}, 9, 9)")
    assert sub.consume() == [{"ts": T0, "v": 4, "tbname": "c1"}, {"ts": T0 + 1, "v": 3, "tbname": "c1"}]
    sub.close()
    sql_session.execute(f"insert into c1 values ({T0 + 2}, 5, 5)")
    again = sql_session.subscribe("select ts, v, tbname from st where g > 0", progress_file=progress)
    assert again.consume() == [{"ts": T0 + 2, "v": 5, "tbname": "c1"}]
    again.close(keep_progress=False)
    assert not progress.exists()
    fresh = sql_session.subscribe("c1", start=T0 + 1, progress_file=progress)
    assert [r["v"] for r in fresh.consume()] == [3, 5]
    with pytest.raises(SubscriptionError, match="does not exist"):
        sql_session.subscribe("nope")
    with pytest.raises(SubscriptionError, match=r"belongs to a subscription of cq\.c1"):
        sql_session.subscribe("c2", progress_file=progress)


def test_cli_subscribe_prints_rows_and_resumes_after_kill(warehouse: Warehouse, tmp_path: Path) -> None:
    """``tdstream subscribe`` prints rows as they arrive; killed with SIGKILL and started
    again with the same progress file it loses and repeats nothing."""
    session = Session(warehouse, timezone="UTC")
    _setup(session)
    progress = tmp_path / "sub.json"
    command = [
        str(Path(sys.executable).parent / "tdstream"), "subscribe", "cq.c1", "--warehouse", warehouse.uri,
        "--progress-file", str(progress), "--interval", "100", "--format", "json",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    seen: list[int] = []
    for batch in range(3):
        session.execute(
            "insert into c1 values " + " ".join(f"({T0 + batch * 10 + i}, {batch * 10 + i}, 0)" for i in range(5))
        )
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
        try:
            assert proc.stdout is not None
            for _ in range(5):
                seen.append(json.loads(proc.stdout.readline())["v"])
            # the progress covers what was printed: the super table's newest WAL offset (its
            # rows are stored in it), reached before the kill
            newest = warehouse.delta.version("cq", "st")
            deadline = time.monotonic() + 10
            while (not progress.exists() or json.loads(progress.read_text())["version"] < newest) and (
                time.monotonic() < deadline
            ):
                time.sleep(0.05)
            assert json.loads(progress.read_text()) == {"table": "cq.c1", "version": newest}
        finally:  # killed whatever happened: a failed check must not leave the subscriber polling
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
    assert seen == [b * 10 + i for b in range(3) for i in range(5)]


def test_cli_subscribe_rejects_a_missing_table(warehouse: Warehouse) -> None:
    result = CliRunner().invoke(main, ["subscribe", "nodb.nope", "--warehouse", warehouse.uri, "--max-polls", "1"])
    assert result.exit_code != 0
    assert "does not exist" in result.output and "Traceback" not in result.output


def test_subscription_sensor_hands_each_batch_of_offsets_to_a_job(sql_session: Session) -> None:
    """The Dagster side: each tick requests one run for the offsets written since its cursor;
    the job reads exactly those rows."""
    warehouse = sql_session.warehouse
    _setup(sql_session)
    received: list[list[int]] = []

    @op
    def consume(context, tdstream_warehouse: TDStreamWarehouse) -> None:  # type: ignore[no-untyped-def]
        received.append([r["v"] for r in subscription_rows(context.run.tags, tdstream_warehouse.get())])

    @job
    def handle_rows() -> None:
        consume()

    watch = subscription_sensor("cq.st", handle_rows, where="g > 0")
    resource = TDStreamWarehouse(uri=warehouse.uri)
    instance = DagsterInstance.ephemeral()
    cursor = None
    for values in ([1, 2], [3]):
        sql_session.execute(
            "insert into c1 values " + " ".join(f"({T0 + v}, {v}, 0)" for v in values) + f" c2 values ({T0}, 99, 0)"
        )
        context = build_sensor_context(instance=instance, cursor=cursor, resources={"tdstream_warehouse": resource})
        result = watch(context)
        (request,) = result.run_requests
        cursor = result.cursor
        handle_rows.execute_in_process(instance=instance, tags=request.tags, resources={"tdstream_warehouse": resource})
    skipped = watch(build_sensor_context(instance=instance, cursor=cursor, resources={"tdstream_warehouse": resource}))
    assert received == [[1, 2], [3]]
    assert skipped.skip_message is not None and "no rows" in skipped.skip_message


def test_cli_sql_dialect_two_x(warehouse: Warehouse) -> None:
    session = Session(warehouse, timezone="UTC")
    _setup(session)
    session.execute(f"insert into c1 values ({T0}, 1, 1) ({T0 + 1}, 2, 2)")
    runner = CliRunner()
    args = ["sql", "-d", "cq", "--warehouse", warehouse.uri, "--timezone", "UTC", "--format", "csv"]
    two_x = runner.invoke(main, [*args, "--dialect", "2.x", "select count(*) from c1 interval(1d)"])
    assert two_x.exit_code == 0, two_x.output
    assert two_x.output.splitlines()[1:] == ["2021-07-20 00:00:00.000,2"]


def test_progress_older_than_the_retained_wal_is_an_error_not_a_gap(sql_session: Session) -> None:
    """Delta log cleanup removes WAL offsets a consumer has not read: its next consume says so
    instead of silently skipping them."""
    from deltalake import DeltaTable

    warehouse = sql_session.warehouse
    sql_session.execute("create database sub; use sub; create table t0 (ts timestamp, a int)")
    sql_session.execute("insert into t0 values (1000, 1)")
    sub = sql_session.subscribe("t0")
    assert sub.consume() == [{"ts": 1000, "a": 1}]
    for i in range(3):
        sql_session.execute(f"insert into t0 values ({2000 + i}, {i})")
    info = warehouse.table("sub", "t0")
    table = warehouse.delta.open("sub", info.storage_name)
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    table.create_checkpoint()
    time.sleep(1.1)  # cleanup keeps log files younger than the retention, to the second
    DeltaTable(table.table_uri).cleanup_metadata()
    with pytest.raises(SubscriptionError, match="older than the WAL the table retains"):
        sub.consume()


def test_a_stream_created_again_under_its_name_starts_over(session: Session, harness: StreamHarness) -> None:
    """2.x's stream1.py: a continuous query whose result table was dropped, created again under
    the same name, computes the history again; so does a 3.3.7 stream dropped and created
    again (its trigger sensor, of the same name, does not go on from the old one's cursor)."""
    session.execute(
        "create database cq; use cq; create stable m (ts timestamp, v int) tags (g int);"
        "create table c using m tags (1);"
        f"insert into c values ({T0}, 1) ({T0 + MINUTE}, 2) ({T0 + 3 * MINUTE}, 4);"
        "create table r as select count(*), sum(v) from c interval(2m);"
        "create stream s interval(2m) sliding(2m) from c stream_options(fill_history) into o as"
        " select _twstart, sum(v) from %%trows"
    )
    harness.advance_clock(10)  # a continuous query first computes 10 s after CREATE
    assert harness.run_until_idle().failures == []
    expected = [(T0, 2, 3), (T0 + 2 * MINUTE, 1, 4)]
    assert output(session, "select * from r") == expected
    assert output(session, "select * from o") == [(T0, 3)]  # [2m, 4m) is still open
    session.execute(
        "drop table r; create table r as select count(*), sum(v) from c interval(2m);"
        "drop stream s; drop table o; create stream s interval(2m) sliding(2m) from c stream_options(fill_history)"
        " into o as select _twstart, sum(v) from %%trows"
    )
    harness.advance_clock(10)  # a continuous query first computes 10 s after CREATE
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from r") == expected
    assert output(session, "select * from o") == [(T0, 3)]
