"""FILL_HISTORY as one bulk run, recalculation that retracts windows which vanished, and the
Spark bulk path giving the same windows as the incremental engine."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow.compute as pc
import pytest
from dagster import AssetKey, DagsterRunStatus, RunsFilter
from sqlalchemy import select

from dagster_tdstream import Session, StreamHarness
from dagster_tdstream.compute import bulk as bulk_module
from dagster_tdstream.compute.bulk import DRIVER_ISLANDS, LOCAL_ROWS, derive_windows, time_ordered
from dagster_tdstream.compute.history import ONE_JOB, PLAN
from dagster_tdstream.storage.catalog import triggers_table
from dagster_tdstream.storage.registry import StreamDefinition, load_stream
from dagster_tdstream.triggers.engine import WINDOW_CLOSE, WINDOW_INVALIDATION
from dagster_tdstream.triggers.plan import stream_trigger
from dagster_tdstream.triggers.replay import replay
from dagster_tdstream.triggers.rows import RowChange

from .conftest import output

T = 1_700_000_000_000


def _runs_by_mode(harness: StreamHarness) -> list[str]:
    runs = harness.instance.get_runs(filters=RunsFilter(statuses=[DagsterRunStatus.SUCCESS]))
    return sorted(run.tags.get("tdstream/mode", "") for run in runs)


def test_fill_history_is_one_bulk_run_and_the_sensor_continues_its_open_windows(
    session: Session, harness: StreamHarness
) -> None:
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (2);"
        f"insert into a values ({T}, 1) ({T + 4000}, 2) ({T + 11000}, 3);"
        f"insert into b values ({T + 1000}, 10) ({T + 21000}, 20);"
        "create stream h interval(10s) sliding(10s) from st partition by tbname stream_options(fill_history) "
        "into h_out output_subtable(concat('h_', tbname)) as select _twstart, count(*) n, sum(v) s from %%trows"
    )
    report = harness.run_until_idle()
    assert report.failures == [] and _runs_by_mode(harness) == ["history"]
    # closed by the history: a's [T, T+10s); b's [T, T+10s) and its empty [T+10s, T+20s)
    assert output(session, "select * from h_a") == [(T, 2, 3)]
    assert output(session, "select * from h_b") == [(T, 1, 10), (T + 10000, 0, None)]
    # a's open window [T+10s, T+20s) holds a history row: the checkpoint carries it on
    session.execute(f"insert into a values ({T + 15000}, 4) ({T + 20000}, 5)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from h_a") == [(T, 2, 3), (T + 10000, 2, 7)]
    assert _runs_by_mode(harness) == ["history", "triggers"]


def test_fill_history_state_window_continues_across_the_history_boundary(
    session: Session, harness: StreamHarness
) -> None:
    session.execute(
        "create database d; use d; create table t (ts timestamp, s int);"
        f"insert into t values ({T}, 1) ({T + 1000}, 2) ({T + 2000}, 2);"
        "create stream h state_window(s) from t stream_options(fill_history_first) into h_out "
        "as select _twstart, _twend, count(*) n from %%trows"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from h_out") == [(T, T, 1)]
    session.execute(f"insert into t values ({T + 3000}, 2) ({T + 4000}, 3)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from h_out") == [(T, T, 1), (T + 1000, T + 3000, 3)]


def test_a_late_row_merging_two_sessions_invalidates_the_vanished_window(
    session: Session, harness: StreamHarness
) -> None:
    """The merged window is written again; the vanished one's row stays in a 3.3.7 stream's
    output (the spec: recalculation never deletes results already written) and leaves a
    legacy stream's, as the legacy engine deletes it."""
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream ss session(ts, 3s) from t into ss_out as select _twstart, _twend, count(*) n from %%trows;"
        "create stream ls trigger at_once ignore expired 0 into ls_out as select _wstart, _wend, count(*) n from t session(ts, 3s)"
    )
    session.execute(f"insert into t values ({T}, 1) ({T + 5000}, 2) ({T + 20000}, 3)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from ss_out") == [(T, T, 1), (T + 5000, T + 5000, 1)]
    session.execute(f"insert into t values ({T + 2500}, 9)")  # bridges the two sessions
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from ss_out") == [(T, T + 5000, 3), (T + 5000, T + 5000, 1)]
    assert output(session, "select `_wstart`, `_wend`, n from ls_out") == [(T, T + 5000, 3), (T + 20000, T + 20000, 1)]
    # the queue says what happened (notifications send it): the old window was invalidated
    with session.warehouse.catalog.engine.connect() as conn:
        queued = conn.execute(
            select(triggers_table.c.event, triggers_table.c.wstart, triggers_table.c.wend, triggers_table.c.status)
            .where(triggers_table.c.event != WINDOW_CLOSE, triggers_table.c.stream == "d.ss")
            .order_by(triggers_table.c.id)
        ).all()
    assert [tuple(r) for r in queued] == [
        (WINDOW_INVALIDATION, T + 5000, T + 5000, "done"),
        ("RECALC", T, T + 5000, "done"),
    ]


def _replayed(session: Session, stream: StreamDefinition, column: str, read: list[str]) -> tuple[list[Any], dict]:
    """The row-by-row replay of each group (the trigger table's rows by ``column``, in time
    order): its triggers as (group, event, start, end, rows, detail) and its final state."""
    data = session.warehouse.read_table(stream.trigger_table)  # type: ignore[arg-type]
    expected: list[Any] = []
    states: dict[str, Any] = {}
    for key in sorted(set(data.column(column).to_pylist())):
        _, rows = time_ordered(data.filter(pc.equal(data[column], key)), "ts", read)
        fired, state = replay(stream_trigger(stream), rows)
        group = json.dumps([key])
        expected += [(group, f.event, f.start, f.end, f.row_count, f.detail) for f in fired]
        states[group] = state.to_json()
    return expected, states


# the bulk paths of islands: found by Spark and replayed here or in the executors, or all here
ISLAND_PATHS = pytest.mark.parametrize(
    ("local_rows", "driver_islands"),
    [(0, DRIVER_ISLANDS), (0, 0), (LOCAL_ROWS, DRIVER_ISLANDS)],
    ids=["in-spark-replayed-here", "in-spark-replayed-in-executors", "in-process"],
)


def _bulk_as_replayed(
    session: Session, spark: object, key: str, column: str, read: list[str], **options: Any
) -> tuple[list[Any], dict[str, Any]]:
    """The stream's bulk derivation (``options``: derive_windows's), checked against the row
    replay of each group (``_replayed``): its triggers in that form and its final states."""
    stream = load_stream(session.warehouse, key)
    derived = derive_windows(spark, session.warehouse, stream, **options)
    expected, states = _replayed(session, stream, column, read)
    bulk = [
        (t["group_values"], t["event"], t["wstart"], t["wend"], t["row_count"], json.loads(t["detail"]))
        for t in derived.triggers
    ]
    assert sorted(bulk, key=str) == sorted(expected, key=str)
    assert derived.states == states
    return bulk, states


@ISLAND_PATHS
def test_bulk_state_islands_equal_the_engine_replay(
    session: Session, spark: object, local_rows: int, driver_islands: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STATE_WINDOW in bulk (islands found by Spark, replayed per group here or, when there
    are many, in the executors) against the row replay: NULL states inside and before
    windows, TRUE_FOR, a child table with no state at all."""
    monkeypatch.setattr(bulk_module, "DRIVER_ISLANDS", driver_islands)
    session.execute(
        "create database d; use d; create stable st (ts timestamp, s int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (1); create table c using st tags (2);"
        f"insert into a values ({T}, NULL) ({T + 1000}, 1) ({T + 2000}, NULL) ({T + 3000}, 1) ({T + 4000}, 2)"
        f" ({T + 6000}, 2) ({T + 7000}, NULL) ({T + 9000}, 3);"
        f"insert into b values ({T + 1000}, 7) ({T + 5000}, 2) ({T + 6000}, 9) ({T + 7000}, NULL) ({T + 8000}, 3);"
        f"insert into c values ({T}, NULL) ({T + 1000}, NULL);"
        "create stream sw state_window(s) true_for(2s) from st partition by tbname stream_options(fill_history) "
        "into sw_out as select _twstart, count(*) from %%trows"
    )
    bulk, states = _bulk_as_replayed(session, spark, "d.sw", "tbname", ["s"], local_rows=local_rows)
    # by hand: a's 1 at T+1s..T+3s (3 rows, a NULL inside) and 2 at T+4s..T+7s (3 rows, 3 s)
    # close; b's windows last under 2 s (TRUE_FOR); c never has a state
    assert sorted(b[2:5] for b in bulk) == [(T + 1000, T + 3000, 3), (T + 4000, T + 7000, 3)]
    assert states['["c"]']["max_ts"] == T + 1000 and not states['["c"]']["open"]


@ISLAND_PATHS
def test_bulk_state_over_an_expression_equals_the_engine_replay(
    session: Session, spark: object, local_rows: int, driver_islands: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """STATE_WINDOW(CASE …) in bulk: Spark computes the state as queries compute it, the
    trigger task on each row; both give the same windows, states and details (a NULL
    reading keeps the state, as a NULL column does)."""
    monkeypatch.setattr(bulk_module, "DRIVER_ISLANDS", driver_islands)
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (2);"
        f"insert into a values ({T}, 3) ({T + 1000}, 12) ({T + 2000}, NULL) ({T + 3000}, 15) ({T + 4000}, 4)"
        f" ({T + 5000}, 2) ({T + 6000}, 30);"
        f"insert into b values ({T}, 50) ({T + 1000}, 60);"
        "create stream sx state_window(case when v >= 10 then 'high' when v is not null then 'low' end) from st "
        "partition by tbname stream_options(fill_history) into sx_out as select _twstart, count(*) from %%trows"
    )
    bulk, states = _bulk_as_replayed(session, spark, "d.sx", "tbname", ["v"], local_rows=local_rows)
    # by hand: a is low at T, high T+1s..T+3s (the NULL inside), low T+4s..T+5s, high from T+6s (open)
    closed = sorted((b[0], b[2], b[3], b[4], b[5]) for b in bulk if b[1] == "WINDOW_CLOSE")
    assert closed == [
        ('["a"]', T, T, 1, {"curState": "low", "nextState": "high"}),
        ('["a"]', T + 1000, T + 3000, 3, {"curState": "high", "nextState": "low"}),
        ('["a"]', T + 4000, T + 5000, 2, {"curState": "low", "nextState": "high"}),
    ]
    assert states['["b"]']["open"] and states['["b"]']["key"] == "high"


@ISLAND_PATHS
def test_bulk_sessions_equal_the_engine_replay(
    session: Session, spark: object, local_rows: int, driver_islands: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SESSION in bulk (sessions found by Spark, replayed per group) against the row replay,
    grouped by a tag: two child tables of one group write the same timestamps (counted once,
    as the trigger counts them); one session longer than the gap from its first row."""
    monkeypatch.setattr(bulk_module, "DRIVER_ISLANDS", driver_islands)
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (1); create table c using st tags (2);"
        f"insert into a values ({T}, 1) ({T + 2000}, 1) ({T + 4000}, 1) ({T + 10000}, 1) ({T + 30000}, 1);"
        f"insert into b values ({T + 2000}, 2) ({T + 5000}, 2) ({T + 20000}, 2);"
        f"insert into c values ({T}, 3) ({T + 9000}, 3);"
        "create stream ss session(ts, 3s) from st partition by g stream_options(fill_history) "
        "into ss_out as select _twstart, count(*) from %%trows"
    )
    bulk, _ = _bulk_as_replayed(session, spark, "d.ss", "g", [], local_rows=local_rows)
    # by hand, group 1: T, T+2s (twice), T+4s, T+5s is one session of 4 timestamps (5 s from its
    # first row); T+10s alone; T+20s alone; T+30s still open. Group 2: T alone, T+9s open
    assert sorted(b[2:5] for b in bulk) == [
        (T, T, 1), (T, T + 5000, 4), (T + 10000, T + 10000, 1), (T + 20000, T + 20000, 1)
    ]  # fmt: skip


@ISLAND_PATHS
def test_bulk_sessions_of_one_table_per_group_equal_the_engine_replay(
    session: Session, spark: object, local_rows: int, driver_islands: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SESSION in bulk partitioned by tbname: each group is one table, whose rows are counted
    without a distinct count, the same as the row replay."""
    monkeypatch.setattr(bulk_module, "DRIVER_ISLANDS", driver_islands)
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (1);"
        f"insert into a values ({T}, 1) ({T + 2000}, 1) ({T + 4000}, 1) ({T + 10000}, 1) ({T + 30000}, 1);"
        f"insert into b values ({T + 2000}, 2) ({T + 5000}, 2) ({T + 20000}, 2);"
        "create stream ss session(ts, 3s) from st partition by tbname stream_options(fill_history) "
        "into ss_out as select _twstart, count(*) from %%trows"
    )
    bulk, _ = _bulk_as_replayed(session, spark, "d.ss", "tbname", [], local_rows=local_rows)
    # by hand: a's T..T+4s (3 rows) and T+10s close, T+30s open; b's T+2s..T+5s closes, T+20s open
    assert sorted(b[2:5] for b in bulk) == [(T, T + 4000, 3), (T + 2000, T + 5000, 2), (T + 10000, T + 10000, 1)]


@pytest.mark.parametrize(
    ("window", "events"),
    [
        ("count_window(3)", "window_close"),
        ("count_window(4, 2, v)", "window_open|window_close"),
        ("count_window(1)", "window_close"),
    ],
)
@pytest.mark.parametrize("local_rows", [0, LOCAL_ROWS], ids=["in-spark", "in-process"])
def test_bulk_count_windows_equal_the_engine_replay(
    session: Session, spark: object, local_rows: int, window: str, events: str
) -> None:
    """COUNT_WINDOW in bulk (row numbers in Spark, tumbling and sliding, counted columns,
    WINDOW_OPEN) against the row replay: windows, and states down to the last counted rows;
    a table whose rows never count still has its event time."""
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (1); create table c using st tags (2);"
        f"insert into a values ({T}, 1) ({T + 1000}, NULL) ({T + 2000}, 2) ({T + 3000}, 3) ({T + 4000}, 4)"
        f" ({T + 5000}, NULL) ({T + 6000}, 6) ({T + 7000}, 7) ({T + 8000}, 8) ({T + 9000}, 9);"
        f"insert into b values ({T + 500}, 5) ({T + 600}, 6);"
        f"insert into c values ({T}, NULL) ({T + 100}, NULL);"
        f"create stream sc {window} from st partition by tbname stream_options(fill_history|event_type({events})) "
        "into sc_out as select _twstart, count(*) from %%trows"
    )
    bulk, states = _bulk_as_replayed(session, spark, "d.sc", "tbname", ["v"], local_rows=local_rows)
    closed = sorted(b[2:5] for b in bulk if b[0] == '["a"]' and b[1] == "WINDOW_CLOSE")
    if window == "count_window(3)":  # every row counts: T..T+2s, T+3s..T+5s, T+6s..T+8s; T+9s open
        assert closed == [(T, T + 2000, 3), (T + 3000, T + 5000, 3), (T + 6000, T + 8000, 3)]
        assert states['["a"]']["recent"] == [T + 9000]  # the open block's first and newest: one row
    elif window == "count_window(4, 2, v)":  # the NULL rows do not count: T, +2, +3, +4, +6, +7, +8, +9
        assert closed == [(T, T + 4000, 4), (T + 3000, T + 7000, 4), (T + 6000, T + 9000, 4)]
        assert states['["c"]']["counted"] == 0 and states['["c"]']["max_ts"] == T + 100


@pytest.mark.parametrize("seed", range(4))
def test_bulk_count_windows_on_generated_data_equal_the_engine_replay(
    session: Session, spark: object, seed: int
) -> None:
    """Generated tables (gaps in time, NULLs in the counted column, tables shorter than a
    window) and a size and slide drawn at random: Spark's row numbers give the replay's
    windows and states."""
    rng = random.Random(seed)
    size = rng.randint(1, 6)
    slide = rng.randint(1, size)
    columns = rng.choice(["", ", v"])
    statements = ["create database d", "use d", "create stable st (ts timestamp, v int) tags (g int)"]
    for table in range(rng.randint(1, 4)):
        statements.append(f"create table t{table} using st tags ({table})")
        stamps = sorted(rng.sample(range(0, 60_000, 100), rng.randint(0, 40)))
        values = " ".join(f"({T + ts}, {rng.choice(['NULL', rng.randint(0, 9)])})" for ts in stamps)
        if values:
            statements.append(f"insert into t{table} values {values}")
    statements.append(
        f"create stream sg count_window({size}, {slide}{columns}) from st partition by tbname "
        "stream_options(fill_history|event_type(window_open|window_close)) into sg_out as select _twstart, count(*) from %%trows"
    )
    session.execute(";".join(statements))
    _bulk_as_replayed(session, spark, "d.sg", "tbname", ["v"], local_rows=0)


@pytest.mark.parametrize("local_rows", [0, LOCAL_ROWS], ids=["in-spark", "in-process"])
def test_bulk_event_windows_equal_the_engine_replay(session: Session, spark: object, local_rows: int) -> None:
    """EVENT_WINDOW … END WITH in bulk (segments between end rows found by Spark) against the
    row replay: a row meeting both conditions is a window of its own, an end row outside a
    window closes nothing, NULLs meet no condition, TRUE_FOR drops short windows, the last
    window stays open; WINDOW_OPEN and the conditions' values in the details."""
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int, w double) tags (g int);"
        "create table a using st tags (1); create table b using st tags (2);"
        f"insert into a values ({T}, 1, 0) ({T + 1000}, 9, 0) ({T + 2000}, 5, 1) ({T + 3000}, NULL, 0)"
        f" ({T + 4000}, 6, 0) ({T + 5000}, 7, 2) ({T + 6000}, 5, 8.5) ({T + 7000}, 2, 0) ({T + 9000}, 5, 0)"
        f" ({T + 9500}, 1, 0);"
        f"insert into b values ({T}, 5, 0) ({T + 1000}, 6, 9);"
        "create stream se event_window(start with v >= 5 end with w > 1 or v = 9) true_for(1s) from st partition by tbname "
        "stream_options(fill_history|event_type(window_open|window_close)) into se_out as select _twstart, count(*) from %%trows"
    )
    bulk, states = _bulk_as_replayed(session, spark, "d.se", "tbname", ["v", "w"], local_rows=local_rows)
    closed = sorted(b[2:6] for b in bulk if b[0] == '["a"]' and b[1] == "WINDOW_CLOSE")
    # by hand: T+1s opens and closes at once (v = 9; under 1 s: dropped); T+2s..T+5s (w = 2) closes;
    # T+6s alone (w = 8.5, dropped); T+9s opens, still open
    assert closed == [(T + 2000, T + 5000, 4, {"conditionIndex": 0, "fieldValue": {"v": 7, "w": 2.0}})]
    assert states['["a"]']["open"] and states['["a"]']["start"] == T + 9000 and states['["a"]']["count"] == 2
    # b's window lasts exactly TRUE_FOR (inclusive): written
    assert [b[2:5] for b in bulk if b[0] == '["b"]' and b[1] == "WINDOW_CLOSE"] == [(T, T + 1000, 2)]


@pytest.mark.parametrize("local_rows", [0, LOCAL_ROWS], ids=["in-spark", "in-process"])
def test_bulk_event_windows_without_end_equal_the_engine_replay(
    session: Session, spark: object, local_rows: int
) -> None:
    """EVENT_WINDOW without END WITH in bulk: a window lasts while a start condition holds and
    the first row none holds for closes it (detail: the opening condition's index)."""
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int); create table t using st tags (1);"
        f"insert into t values ({T}, 1) ({T + 1000}, 5) ({T + 2000}, 9) ({T + 3000}, NULL) ({T + 4000}, 7)"
        f" ({T + 5000}, 8);"
        "create stream sn event_window(start with (v >= 9, v >= 5)) from st partition by tbname "
        "stream_options(fill_history|event_type(window_open|window_close)) into sn_out as select _twstart, count(*) from %%trows"
    )
    bulk, states = _bulk_as_replayed(session, spark, "d.sn", "tbname", ["v"], local_rows=local_rows)
    assert [b[1:6] for b in bulk if b[1] == "WINDOW_CLOSE"] == [
        ("WINDOW_CLOSE", T + 1000, T + 2000, 2, {"conditionIndex": 1})
    ]  # fmt: skip
    assert states['["t"]']["open"] and states['["t"]']["start"] == T + 4000 and states['["t"]']["count"] == 2


@pytest.mark.parametrize("seed", range(6))
def test_bulk_event_windows_on_generated_data_equal_the_engine_replay(
    session: Session, spark: object, seed: int
) -> None:
    """Generated tables and conditions drawn at random (several start and end conditions or
    none — a window then lasts while a start condition holds —, NULLs, TRUE_FOR or not): the
    rows Spark finds opening and closing windows give the replay's windows, details and states."""
    rng = random.Random(seed)
    statements = ["create database d", "use d", "create stable st (ts timestamp, v int, w int) tags (g int)"]
    for table in range(rng.randint(1, 3)):
        statements.append(f"create table t{table} using st tags ({table})")
        stamps = sorted(rng.sample(range(0, 60_000, 100), rng.randint(0, 50)))
        values = " ".join(
            f"({T + ts}, {rng.choice(['NULL', rng.randint(0, 9)])}, {rng.choice(['NULL', rng.randint(0, 9)])})"
            for ts in stamps
        )
        if values:
            statements.append(f"insert into t{table} values {values}")

    def condition() -> str:
        return f"{rng.choice(['v', 'w'])} {rng.choice(['>', '<', '=', '>='])} {rng.randint(0, 9)}"

    starts = ", ".join(condition() for _ in range(rng.randint(1, 2)))
    ends = rng.choice(["", " end with (" + ", ".join(condition() for _ in range(rng.randint(1, 2))) + ")"])
    true_for = rng.choice(["", " true_for(500a)"])
    statements.append(
        f"create stream sg event_window(start with ({starts}){ends}){true_for} from st partition by tbname "
        "stream_options(fill_history|event_type(window_open|window_close)) into sg_out as select _twstart, count(*) from %%trows"
    )
    session.execute(";".join(statements))
    _bulk_as_replayed(session, spark, "d.sg", "tbname", ["v", "w"], local_rows=0)


@pytest.mark.parametrize("partition", ["tbname", "g"])
@pytest.mark.parametrize("local_rows", [0, LOCAL_ROWS], ids=["in-spark", "in-process"])
def test_bulk_interval_windows_equal_the_engine_replay(
    session: Session, spark: object, local_rows: int, partition: str
) -> None:
    """INTERVAL in bulk (runs counted by Spark, replayed per group): the windows and final
    states of the row-by-row replay, grouped by tbname (read without tags) or by a tag; the
    rows a dropped child table left behind in an older version are not read."""
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (1); create table c using st tags (2);"
        "create table gone using st tags (2);"
        f"insert into a values ({T}, 1) ({T + 1500}, 1) ({T + 2500}, 2) ({T + 9100}, 3) ({T + 4000}, 3);"
        f"insert into b values ({T + 500}, 5) ({T + 6000}, 5) ({T + 6100}, 6);"
        f"insert into c values ({T + 200}, 7) ({T + 3300}, 8);"
        f"insert into gone values ({T + 100}, 9) ({T + 99000}, 9);"
        f"create stream iv interval(2s) sliding(1s) from st partition by {partition} stream_options(fill_history) "
        "into iv_out as select _twstart, count(*) from %%trows"
    )
    version = session.warehouse.delta.latest_version("d", "st")
    session.execute("drop table gone")
    bulk, states = _bulk_as_replayed(session, spark, "d.iv", partition, [], version=version, local_rows=local_rows)
    assert set(states) == ({'["a"]', '["b"]', '["c"]'} if partition == "tbname" else {"[1]", "[2]"})
    # by hand, group a (tbname) or 1 (tag): windows [T-1s, T+1s) … closed up to T+9.1s - 2s
    if partition == "tbname":
        assert [b[2:5] for b in sorted(bulk, key=str) if b[0] == '["a"]'][:3] == [
            (T - 1000, T + 1000, 1), (T, T + 2000, 2), (T + 1000, T + 3000, 2)
        ]  # fmt: skip
    else:  # a and b together: T, T+0.5s and T+1.5s in [T, T+2s)
        assert (T, T + 2000, 3) in [b[2:5] for b in bulk if b[0] == "[1]"]


def _derived_both_ways(session: Session, spark: object, stream_key: str) -> tuple[Any, Any]:
    """One stream's bulk derivation in Spark (whatever the table's size) and in this process."""
    stream = load_stream(session.warehouse, stream_key)
    in_spark = derive_windows(spark, session.warehouse, stream, local_rows=0)
    return in_spark, derive_windows(spark, session.warehouse, stream, local_rows=LOCAL_ROWS)


# two child tables, rows in and out of order across 2 s windows and time points
_TWO_TABLES = (
    "create database d; use d; create stable st (ts timestamp, s int) tags (g int);"
    "create table a using st tags (1); create table b using st tags (2);"
    f"insert into a values ({T}, 1) ({T + 1500}, 2) ({T + 4100}, 3) ({T + 9000}, 4);"
    f"insert into b values ({T + 200}, 5) ({T + 6000}, 6);"
)


@pytest.mark.parametrize(
    "trigger",
    [
        "interval(2s) sliding(1s)",
        "state_window(s)",
        "session(ts, 1500a)",
        "count_window(2)",
        "event_window(start with s >= 2 end with s = 3)",
    ],
)
def test_bulk_pre_filter_in_spark_equals_the_rows_the_trigger_admits(
    session: Session, spark: object, trigger: str
) -> None:
    """PRE_FILTER in bulk: Spark keeps the rows the condition holds for (NULL: not kept) and
    every trigger type derives from them what the in-process path gives, which admits row by
    row as the trigger task does."""
    session.execute(
        "create database d; use d; create stable st (ts timestamp, s int, k varchar(8)) tags (g int);"
        "create table a using st tags (1); create table b using st tags (2);"
        f"insert into a values ({T}, 1, 'x') ({T + 1000}, 2, 'y') ({T + 2000}, 2, NULL) ({T + 3000}, 3, 'x')"
        f" ({T + 5000}, 3, 'x') ({T + 6000}, 1, 'y') ({T + 7000}, 2, 'x') ({T + 9000}, 3, 'x');"
        f"insert into b values ({T}, 2, 'x') ({T + 1000}, 3, 'y') ({T + 4000}, 2, 'x');"
        f"create stream sp {trigger} from st partition by tbname "
        "stream_options(fill_history|pre_filter(k = 'x' or s > 2)) into sp_out as select _twstart, count(*) from %%trows"
    )
    in_spark, in_process = _derived_both_ways(session, spark, "d.sp")

    def fired(derived: Any) -> list[tuple[Any, ...]]:
        keys = ("group_values", "event", "wstart", "wend", "row_count", "detail")
        return sorted(tuple(t[k] for k in keys) for t in derived.triggers)

    assert fired(in_spark) == fired(in_process) and fired(in_spark)
    assert in_spark.states == in_process.states


@pytest.mark.parametrize("local_rows", [0, LOCAL_ROWS], ids=["in-spark", "in-process"])
def test_bulk_windows_equal_the_engine_replay(session: Session, spark: object, local_rows: int) -> None:
    """Both bulk paths (the Spark job for large tables, this process for small ones) run the
    per-group function over the same rows: the same windows as the sensor's replay."""
    session.execute(
        "create database d; use d; create stable st (ts timestamp, s int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (2);"
        f"insert into a values ({T}, 1) ({T + 3000}, 1) ({T + 1000}, 2) ({T + 7000}, 3) ({T + 8000}, 3);"
        f"insert into b values ({T}, 5) ({T + 1000}, 5) ({T + 2000}, 6);"
        "create stream sw state_window(s) true_for(1s) from st partition by tbname, g stream_options(fill_history) "
        "into sw_out as select _twstart, count(*) from %%trows"
    )
    stream = load_stream(session.warehouse, "d.sw")
    derived = derive_windows(spark, session.warehouse, stream, local_rows=local_rows)
    bulk = sorted(
        (t["group_values"], t["wstart"], t["wend"], t["row_count"])
        for t in derived.triggers
        if t["event"] == WINDOW_CLOSE
    )
    data = session.warehouse.read_table(stream.trigger_table).to_pylist()  # type: ignore[arg-type]
    expected = []
    for g in (1, 2):
        group_rows = [RowChange(r["ts"], "insert", r) for r in data if r["g"] == g]
        fired, _ = replay(stream_trigger(stream), group_rows)
        expected += [(f'["{"ab"[g - 1]}", {g}]', f.start, f.end, f.row_count) for f in fired if f.event == WINDOW_CLOSE]
    assert bulk == sorted(expected)
    # by hand: a is 1@T, 2@T+1s, 1@T+3s, 3@T+7s..8s (open); b is 5@T..T+1s, 6 (open); TRUE_FOR(1s)
    assert bulk == [('["b", 2]', T, T + 1000, 2)]
    assert set(derived.states) == {'["a", 1]', '["b", 2]'}
    assert WINDOW_INVALIDATION not in {t["event"] for t in derived.triggers}


@pytest.mark.parametrize("options", ["event_type(window_open|window_close)", "max_delay(3s)", "watermark(2s)"])
def test_bulk_interval_runs_through_the_state_machine_or_in_one_pass_equal_the_row_replay(
    session: Session, spark: object, options: str
) -> None:
    """INTERVAL in bulk: Spark's runs are replayed here — in one pass when WINDOW_CLOSE is the
    only event (watermark), through the state machine otherwise (WINDOW_OPEN's detail,
    MAX_DELAY's open windows) — and give the queue rows and states of the in-process path,
    which replays each row."""
    session.execute(
        _TWO_TABLES + f"create stream si interval(2s) sliding(2s) from st partition by tbname "
        f"stream_options(fill_history|{options}) into si_out as select _twstart, count(*) from %%trows"
    )
    in_spark, in_process = _derived_both_ways(session, spark, "d.si")
    keys = ("group_values", "event", "wstart", "wend", "row_count", "detail", "group_id", "offset", "id")
    assert [tuple(t[k] for k in keys) for t in in_spark.triggers] == [
        tuple(t[k] for k in keys) for t in in_process.triggers
    ]
    closed = [
        (t["group_values"], t["wstart"], t["row_count"]) for t in in_spark.triggers if t["event"] == "WINDOW_CLOSE"
    ]
    assert ('["a"]', T, 2) in closed and ('["b"]', T, 1) in closed
    assert in_spark.states == in_process.states and set(in_spark.states) == {'["a"]', '["b"]'}


def test_bulk_sliding_points_in_the_executors_equal_the_in_process_replay(session: Session, spark: object) -> None:
    """SLIDING time points replay each group's rows in the executors' Arrow UDF: the same
    queue rows and states as this process's replay."""
    session.execute(
        _TWO_TABLES + "create stream sp sliding(2s) from st partition by tbname stream_options(fill_history) "
        "into sp_out as select _tcurrent_ts, count(*) from st"
    )
    in_spark, in_process = _derived_both_ways(session, spark, "d.sp")
    keys = ("group_values", "event", "wstart", "wend", "row_count", "detail")
    assert sorted(tuple(t[k] for k in keys) for t in in_spark.triggers) == sorted(
        tuple(t[k] for k in keys) for t in in_process.triggers
    )
    assert len(in_spark.triggers) >= 4 and in_spark.states == in_process.states


def _history_rows(database: str, seed: int) -> str:
    """Three child tables (two share a tag) with gaps of whole windows, NULLs, a row written
    twice and a deleted row: a history's windows full, empty, updated and thinned."""
    rng = random.Random(seed)
    statements = [
        f"create database {database}; use {database};"
        "create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (1); create table c using st tags (2);"
        "create table t (ts timestamp, v int)"
    ]
    for table in "abct":
        stamps = sorted(rng.sample(range(0, 120), 40))  # seconds: some 10 s windows stay empty
        values = " ".join(f"({T + s * 1000}, {rng.choice(['NULL', *map(str, range(6))])})" for s in stamps)
        statements.append(f"insert into {table} values {values}")
        statements.append(f"insert into {table} values ({T + stamps[3] * 1000}, 9)")  # written again
        statements.append(f"delete from {table} where ts = {T + stamps[5] * 1000}")
    return ";".join(statements)


TWO_STEPS = "derive, then query"  # the plan a history reports where one scan does not apply

_SHAPES = [  # (trigger and source, options, query), the plan that computes it
    # fixed INTERVAL windows, each with rows: the output computed beside the runs in one job
    ("interval(10s) sliding(10s) from st partition by tbname", "fill_history",
     "select _twstart, count(*) n, sum(v) s, max(v) m from %%trows", ONE_JOB),
    ("interval(10s) sliding(10s) from st partition by tbname", "fill_history|ignore_nodata_trigger",
     "select _twstart, _twend, _twduration, %%tbname tb, count(*) n, sum(v) s from %%trows", ONE_JOB),
    ("interval(10s) sliding(10s) from st partition by g", "fill_history",
     "select _twstart, _twend, count(*) n, avg(v) a, count(v) c from %%trows", ONE_JOB),
    ("interval(10s) sliding(10s) from st", "fill_history", "select _twstart, count(*) n, min(v) m from %%trows",
     ONE_JOB),
    ("interval(10s) sliding(10s) from t", "fill_history", "select _twstart, sum(v) + 1 s, count(*) n from %%trows",
     ONE_JOB),
    ("interval(10s, 3s) sliding(10s) from st partition by tbname", "fill_history|ignore_nodata_trigger|watermark(15s)",
     "select _twstart, count(*) n, spread(v) s from %%trows", ONE_JOB),
    ("interval(10s) sliding(10s) from st partition by tbname", "fill_history|ignore_nodata_trigger|pre_filter(v > 2)",
     "select _twstart, count(*) n, sum(v) s from %%trows", ONE_JOB),
    ("interval(10s) sliding(10s) from st partition by tbname", "fill_history|ignore_nodata_trigger",
     "select _twstart, count(*) n, max(v) m from %%trows", ONE_JOB),
    # HAVING drops a window's row, not its run: the open windows are still the group's state
    ("interval(10s) sliding(10s) from st partition by tbname", "fill_history|ignore_nodata_trigger",
     "select _twstart, count(*) n, sum(v) s from %%trows having sum(v) > 6", ONE_JOB),
    # closed windows without rows fire (no IGNORE_NODATA_TRIGGER): their rows are the query's
    # over no rows (count 0, NULL sums), HAVING applied to them too
    ("interval(10s, 3s) sliding(10s) from st partition by tbname", "fill_history|watermark(15s)",
     "select _twstart, count(*) n, spread(v) s from %%trows", ONE_JOB),
    ("interval(10s) sliding(10s) from st partition by tbname", "fill_history|pre_filter(v > 2)",
     "select _twstart, _twend, count(*) n, sum(v) s from %%trows", ONE_JOB),
    ("interval(10s) sliding(10s) from st partition by g", "fill_history|pre_filter(v > 3)",
     "select _twstart, count(*) n, sum(v) s from %%trows having count(*) < 3", ONE_JOB),
    # a history fires no MAX_DELAY: the open windows keep when their delay began
    ("interval(10s) sliding(10s) from st partition by tbname", "fill_history|ignore_nodata_trigger|max_delay(3s)",
     "select _twstart, count(*) n, sum(v) s from %%trows", ONE_JOB),
    # a trigger writes without rows (FORCE_OUTPUT): the triggers are handed over
    ("interval(10s) sliding(10s) from st partition by tbname", "fill_history|ignore_nodata_trigger|force_output",
     "select _twstart, count(*) n, sum(v) s from %%trows", PLAN),
    # the query's WHERE: its aggregates see fewer rows than the trigger, which derives first
    ("interval(10s) sliding(10s) from st partition by tbname", "fill_history",
     "select _twstart, count(*) n from %%trows where v > 2", TWO_STEPS),
    # overlapping windows: a row in two of them, derived first
    ("interval(20s) sliding(10s) from st partition by tbname", "fill_history",
     "select _twstart, count(*) n from %%trows", TWO_STEPS),
    # islands: a window is an island of rows in one state, or within the gap
    ("state_window(v) from st partition by tbname", "fill_history",
     "select _twstart, _twend, count(*) n, sum(v) s, count(v) c from %%trows", PLAN),
    ("state_window(v) true_for(3s) from t", "fill_history", "select _twstart, count(*) n, max(v) m from %%trows",
     PLAN),
    ("state_window(case when v >= 3 then 'high' when v is not null then 'low' end) from st partition by tbname",
     "fill_history", "select _twstart, _twend, count(*) n, sum(v) s from %%trows", PLAN),
    ("session(ts, 4s) from st partition by tbname", "fill_history",
     "select _twstart, _twend, count(*) n, avg(v) a from %%trows", PLAN),
    ("session(ts, 4s) from t", "fill_history|pre_filter(v > 1)",
     "select _twstart, _twend, count(*) n, min(v) m from %%trows", PLAN),
    # an open window's rows are bounded by no end; a group of several tables shares timestamps
    ("state_window(v) from st partition by tbname", "fill_history|event_type(window_open|window_close)",
     "select _twstart, count(*) n from %%trows", TWO_STEPS),
    # a session of several tables: rows sharing a timestamp count once to the trigger
    ("session(ts, 4s) from st partition by g", "fill_history",
     "select _twstart, _twend, count(*) n, sum(v) s from %%trows", PLAN),
    ("session(ts, 4s) from st", "fill_history", "select _twstart, count(*) n from %%trows", TWO_STEPS),
    # blocks: a COUNT window is a block of rows that neither overlaps nor skips one
    ("count_window(5) from st partition by tbname", "fill_history",
     "select _twstart, _twend, count(*) n, sum(v) s, max(v) m from %%trows", PLAN),
    ("count_window(4) from t", "fill_history|pre_filter(v > 1)", "select _twstart, _twend, avg(v) a from %%trows",
     PLAN),
    ("count_window(3, 3) from st partition by tbname", "fill_history|watermark(5s)",
     "select _twstart, count(*) n, min(v) m from %%trows", PLAN),
    ("count_window(5, 2) from st partition by tbname", "fill_history", "select _twstart, count(*) n from %%trows",
     TWO_STEPS),
    ("count_window(4, 4, v) from st partition by tbname", "fill_history", "select _twstart, count(*) n from %%trows",
     TWO_STEPS),
    # EVENT windows: the rows from a start row to the end row closing it, or a run a start holds for
    ("event_window(start with v >= 3 end with v = 0) from st partition by tbname", "fill_history",
     "select _twstart, _twend, count(*) n, sum(v) s from %%trows", PLAN),
    ("event_window(start with (v > 3, v is null) end with (v < 2, v = 3)) from t", "fill_history|pre_filter(v != 4)",
     "select _twstart, _twend, count(*) n, max(v) m from %%trows", PLAN),
    ("event_window(start with v >= 2) from st partition by tbname", "fill_history",
     "select _twstart, _twend, count(*) n, avg(v) a from %%trows", PLAN),
    ("event_window(start with (v > 3, v = 1)) true_for(2s) from t", "fill_history|watermark(5s)",
     "select _twstart, _twend, count(*) n, min(v) m from %%trows", PLAN),
    ("event_window(start with v >= 3 end with v = 0) from st partition by tbname",
     "fill_history|event_type(window_open|window_close)", "select _twstart, count(*) n from %%trows", TWO_STEPS),
]  # fmt: skip


@pytest.mark.parametrize(("trigger", "options", "query", "plan"), _SHAPES)
def test_a_history_in_one_scan_writes_what_deriving_then_querying_writes(
    session: Session,
    harness: StreamHarness,
    monkeypatch: pytest.MonkeyPatch,
    trigger: str,
    options: str,
    query: str,
    plan: str,
) -> None:
    """The same rows and stream in two databases: one history run with every table past the
    in-process size (one scan where the plan applies: windows, their states and the query's
    aggregates from one grouping; fixed INTERVAL windows' output in that one job), one derived
    in this process and queried after. The outputs, the checkpointed group states and the
    plan each run reports."""
    create = f"create stream h {trigger} stream_options({options}) into out as {query}"
    _history_both_ways(session, harness, monkeypatch, create, plan)


@pytest.mark.parametrize(
    "trigger", ["interval(10s) sliding(10s)", "state_window(v)", "count_window(3)", "event_window(start with v >= 1)"]
)
def test_a_history_in_one_scan_leaves_out_the_rows_a_dropped_child_table_left(
    session: Session, harness: StreamHarness, monkeypatch: pytest.MonkeyPatch, trigger: str
) -> None:
    """A child table dropped from the catalog whose rows are still in the table (a crash
    between the catalog's drop and the rows' delete): grouped by tbname, its groups are left
    out after the grouping — no window of it is written, no state of it checkpointed."""
    monkeypatch.setattr(bulk_module, "LOCAL_ROWS", 0)
    rows = " ".join(f"({T + s * 1000}, {s % 4})" for s in range(0, 60, 3))
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table gone using st tags (2);"
        f"insert into a values {rows}; insert into gone values {rows};"
        f"create stream h {trigger} from st partition by tbname stream_options(fill_history) into out "
        "output_subtable(concat('o_', tbname)) as select _twstart, count(*) n, sum(v) s from %%trows"
    )
    catalog = session.warehouse.catalog
    with catalog.transaction() as conn:  # the drop's first half: its rows' delete never ran
        catalog.drop_table(conn, "d", "gone")
    assert harness.run_until_idle().failures == []
    (event,) = [
        r.event_log_entry.asset_materialization
        for r in harness.instance.fetch_materializations(AssetKey(["tdstream", "d", "out"]), limit=10).records
    ]
    plan = ONE_JOB if trigger.startswith("interval") else PLAN
    assert event is not None and event.metadata["tdstream/history_plan"].value == plan
    assert [name for (name,) in output(session, "select distinct tbname from out")] == ["o_a"]
    assert len(output(session, "select * from o_a")) >= 3
    assert set(catalog.load_checkpoint("d.h", catalog.latest_checkpoint_offset("d.h"))) == {'["a"]'}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("create", "columns"),
    [
        ("create stream h trigger window_close watermark 5s fill_history 1 into out as "
         "select _wstart, count(*) n, sum(v) s from st partition by tbname interval(10s)", "`_wstart`, n, s"),
        ("create stream h trigger at_once fill_history 1 into out as "
         "select _wstart, count(*) n, max(v) m from t interval(10s)", "`_wstart`, n, m"),
        ("create stream h trigger window_close fill_history 1 into out as "
         "select _wstart, _wend, count(*) n, first(v) f from st partition by tbname state_window(v)",
         "`_wstart`, `_wend`, n, f"),
    ],
)  # fmt: skip
def test_a_legacy_streams_history_is_the_same_past_the_in_process_size(
    session: Session, harness: StreamHarness, monkeypatch: pytest.MonkeyPatch, create: str, columns: str
) -> None:
    """The legacy 3.x syntax maps onto the same trigger options and takes whichever history
    plan applies: the same rows and states either way (``columns``: the query's, without
    the legacy output's group id, which is per table and so per database)."""
    _history_both_ways(session, harness, monkeypatch, create, None, columns)


def test_a_history_with_more_islands_than_this_process_takes_derives_them_in_the_executors(
    session: Session, harness: StreamHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Islands beyond ``bulk.DRIVER_ISLANDS`` (a state changing on nearly every row) are not
    brought to the run's process by the one scan: the run derives them as the two-step path
    does, in the executors, and writes the same rows."""
    monkeypatch.setattr(bulk_module, "DRIVER_ISLANDS", 3)
    create = (
        "create stream h state_window(v) from st partition by tbname stream_options(fill_history) into out "
        "as select _twstart, _twend, count(*) n, sum(v) s from %%trows"
    )
    _history_both_ways(session, harness, monkeypatch, create, TWO_STEPS)


def _history_both_ways(
    session: Session,
    harness: StreamHarness,
    monkeypatch: pytest.MonkeyPatch,
    create: str,
    plan: str | None,
    columns: str = "*",
) -> None:
    """``create`` in two databases over the same rows, its history with every table past the
    in-process size (``plan``: which plan that run must report; None: any), then
    derived in this process: the same output rows and checkpointed states."""
    plans = {}
    for database, size in (("one_scan", 0), ("two_steps", LOCAL_ROWS)):
        monkeypatch.setattr(bulk_module, "LOCAL_ROWS", size)
        session.execute(_history_rows(database, seed=len(create)))
        session.execute(create)
        assert harness.run_until_idle().failures == []
        events = harness.instance.fetch_materializations(AssetKey(["tdstream", database, "out"]), limit=100).records
        history = [
            e.asset_materialization.metadata["tdstream/history_plan"].value
            for e in (r.event_log_entry for r in events)
            if e.asset_materialization is not None and "tdstream/history_plan" in e.asset_materialization.metadata
        ]
        assert len(history) == 1
        plans[database] = history[0]
    assert plans["two_steps"] == TWO_STEPS
    if plan is not None:
        assert plans["one_scan"] == plan
    # (output subtables are named per database: the rows are compared, not their tables' names)
    written = [sorted(output(session, f"select {columns} from {database}.out"), key=str) for database in plans]
    assert written[0] == written[1] and len(written[0]) >= 2
    catalog = session.warehouse.catalog
    states = [
        catalog.load_checkpoint(key, catalog.latest_checkpoint_offset(key)) for key in ("one_scan.h", "two_steps.h")
    ]  # type: ignore[arg-type]
    for state in (group for checkpoint in states if checkpoint for group in checkpoint.values()):
        if isinstance(state.get("opened_at"), list):  # INTERVAL's open windows, by start
            # when their delay began is the processing clock's (a tick after the history)
            state["opened_at"] = [start for start, _ in state["opened_at"]]
    assert states[0] == states[1] and states[0]


_ROW_WINDOWS = ("state_window", "session", "count_window", "event_window")
# a recalculation takes the history's plans: fixed INTERVAL windows in one job (not MAX_DELAY,
# which writes a range's open windows again), the first of each row window's one-scan shapes
# (their range needs the whole history), and derives, then queries, where neither applies
_RANGE_SHAPES = [
    *((t, o, q, ONE_JOB if "max_delay" not in o else TWO_STEPS) for t, o, q, plan in _SHAPES if plan == ONE_JOB),
    *(next(shape for shape in _SHAPES if shape[0].startswith(kind) and shape[3] == PLAN) for kind in _ROW_WINDOWS),
    ("interval(10s) sliding(10s) from st partition by tbname", "fill_history|ignore_nodata_trigger|force_output",
     "select _twstart, count(*) n, sum(v) s from %%trows", TWO_STEPS),
]  # fmt: skip


@pytest.mark.parametrize(("trigger", "options", "query", "plan"), _RANGE_SHAPES)
def test_a_recalculated_range_in_the_history_scan_writes_what_deriving_then_querying_writes(
    session: Session,
    harness: StreamHarness,
    spark: object,
    monkeypatch: pytest.MonkeyPatch,
    trigger: str,
    options: str,
    query: str,
    plan: str,
) -> None:
    """The same rows and stream in two databases, their histories written, then the same
    changes to the rows the streams have not seen (late rows, an emptied window, a row that
    closes more windows). Each of several ranges — inside the data, across its start, across
    its end, all of it (each group's bounds then its runs') — is recalculated in one database
    as a partition run does (``recalculate``: in the history's scan where it applies), in the
    other by deriving its windows and querying them; afterwards both outputs are the same."""
    from zoneinfo import ZoneInfo

    from dagster_tdstream.compute.history import recalculate
    from dagster_tdstream.compute.run import compute_triggers, triggers_for_range

    monkeypatch.setattr(bulk_module, "LOCAL_ROWS", 0)  # every table past the in-process size
    create = f"create stream h {trigger} stream_options({options}) into out as {query}"
    for database in ("scan", "two_steps"):
        session.execute(_history_rows(database, seed=len(create)))
        session.execute(create)
    assert harness.run_until_idle().failures == []
    for database in ("scan", "two_steps"):
        session.execute(
            f"use {database}; insert into a values ({T + 33_000}, 7) ({T + 34_000}, 1) ({T + 150_000}, 2);"
            f"insert into t values ({T + 47_000}, 4) ({T + 160_000}, 5); insert into c values ({T + 95_000}, 3);"
            f"delete from b where ts >= {T + 40_000} and ts < {T + 60_000}"
        )
    warehouse, zone = session.warehouse, ZoneInfo("UTC")
    ranges = [(T + 20_000, T + 60_000), (T - 3_600_000, T + 45_000), (T + 50_000, T + 3_600_000), (T, T + 3_600_000)]
    for window_range in ranges:
        _, _, taken = recalculate(spark, warehouse, load_stream(warehouse, "scan.h"), window_range, timezone=zone)
        assert taken == plan
        stream = load_stream(warehouse, "two_steps.h")
        triggers = triggers_for_range(spark, warehouse, stream, *window_range)
        compute_triggers(spark, warehouse, stream, triggers, timezone=zone, replace_range=window_range)
        written = [
            sorted(output(session, f"select * from {database}.out"), key=str) for database in ("scan", "two_steps")
        ]
        assert written[0] == written[1] and len(written[0]) >= 2, window_range


def test_a_partition_backfill_of_fixed_windows_reports_the_one_job_and_replaces_its_range(
    session: Session, harness: StreamHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through Dagster: a partition run of a stream past the in-process size recalculates its
    windows in one job (its metadata says so), writing the rows the data holds now and
    removing the window the data no longer has."""
    from dagster import materialize

    monkeypatch.setattr(bulk_module, "LOCAL_ROWS", 0)
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (2);"
        "create stream s interval(10s) sliding(10s) from st partition by tbname "
        "stream_options(ignore_disorder|ignore_nodata_trigger) into out output_subtable(concat('o_', tbname)) "
        "as select _twstart, count(*) n, sum(v) s from %%trows;"
        f"insert into a values ({T}, 1) ({T + 12000}, 2) ({T + 31000}, 3);"
        f"insert into b values ({T + 1000}, 10) ({T + 15000}, 20) ({T + 32000}, 30);"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from o_a") == [(T, 1, 1), (T + 10000, 1, 2)]
    # corrections the stream ignores: a late row for a, b's second window emptied
    session.execute(f"insert into a values ({T + 5000}, 40); delete from b where ts = {T + 15000}")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from o_b") == [(T, 1, 10), (T + 10000, 1, 20)]
    asset = harness._definitions()[0].asset
    result = materialize(
        [asset], instance=harness.instance, resources=harness.resources, partition_key="2023-11-14-22:00"
    )
    assert result.success
    assert output(session, "select * from o_a") == [(T, 2, 41), (T + 10000, 1, 2)]
    assert output(session, "select * from o_b") == [(T, 1, 10)]
    metadata = result.asset_materializations_for_node(asset.node_def.name)[0].metadata
    assert metadata["tdstream/recalculation_plan"].value == ONE_JOB
    assert metadata["tdstream/windows_computed"].value == 3


@pytest.mark.parametrize("local_rows", [0, LOCAL_ROWS], ids=["history-scan", "derive-then-query"])
def test_a_recalculation_of_unchanged_rows_changes_nothing_under_pre_filter(
    session: Session, harness: StreamHarness, monkeypatch: pytest.MonkeyPatch, local_rows: int
) -> None:
    """Rows PRE_FILTER refuses never reach the trigger: they close no window and open no
    group's span of empty windows, live or recalculated. A partition run over rows the
    stream has seen writes what the stream wrote."""
    from dagster import materialize

    monkeypatch.setattr(bulk_module, "LOCAL_ROWS", local_rows)
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (2);"
        "create stream s interval(10s) sliding(10s) from st partition by tbname stream_options(pre_filter(v > 2)) "
        "into out output_subtable(concat('o_', tbname)) as select _twstart, count(*) n, sum(v) s from %%trows;"
        # a refused row first, then admitted ones; the newest rows of each table refused
        f"insert into a values ({T - 30000}, 1) ({T}, 5) ({T + 3000}, 1) ({T + 12000}, 6) ({T + 45000}, 1);"
        f"insert into b values ({T + 1000}, 7) ({T + 21000}, 8) ({T + 33000}, 2)"
    )
    assert harness.run_until_idle().failures == []
    before = {name: output(session, f"select * from {name}") for name in ("o_a", "o_b")}
    assert before == {"o_a": [(T, 1, 5)], "o_b": [(T, 1, 7), (T + 10000, 0, None)]}
    asset = harness._definitions()[0].asset
    result = materialize(
        [asset], instance=harness.instance, resources=harness.resources, partition_key="2023-11-14-22:00"
    )
    assert result.success
    assert {name: output(session, f"select * from {name}") for name in ("o_a", "o_b")} == before


@pytest.mark.parametrize(
    ("trigger", "options"),
    [
        ("interval(10s) sliding(10s) from st partition by tbname", ""),
        ("interval(10s) sliding(10s) from st partition by tbname", "watermark(15s)"),
        ("interval(10s) sliding(10s) from st partition by g", "ignore_nodata_trigger"),
        ("interval(20s) sliding(10s) from st partition by tbname", ""),
        ("interval(10s) sliding(10s) from t", "max_delay(3s)"),
    ],
)
@pytest.mark.parametrize("local_rows", [0, LOCAL_ROWS], ids=["history-scan", "derive-then-query"])
def test_a_partition_run_over_rows_the_stream_has_seen_writes_what_it_wrote(
    session: Session,
    harness: StreamHarness,
    monkeypatch: pytest.MonkeyPatch,
    trigger: str,
    options: str,
    local_rows: int,
) -> None:
    """A recalculation of INTERVAL windows is the stream's own computation again: over the
    rows it has seen (written live, in several batches, an update and a delete among them,
    DELETE_RECALC so the delete is seen too), a run of the partition they lie in leaves its
    output as it was. (Not so for row windows, by the spec: a window a late row dissolves
    keeps its row in the stream's output — recalculation never deletes results — and COUNT
    windows ignore updates and deletes, while a partition run writes the data as it stands.)"""
    from dagster import TimeWindowPartitionsDefinition, materialize

    monkeypatch.setattr(bulk_module, "LOCAL_ROWS", local_rows)
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (1); create table c using st tags (2);"
        "create table t (ts timestamp, v int);"
        f"create stream s {trigger} stream_options({'|'.join(filter(None, [options, 'delete_recalc']))}) "
        "into out as select _twstart, count(*) n, sum(v) s from %%trows"
    )
    rng = random.Random(len(trigger) + len(options))
    for batch in range(3):  # the stream computes after each batch
        for table in "abct":
            stamps = sorted(rng.sample(range(batch * 40, batch * 40 + 40), 12))
            values = " ".join(f"({T + s * 1000}, {rng.choice(['NULL', *map(str, range(6))])})" for s in stamps)
            session.execute(f"insert into {table} values {values}")
        if batch == 1:
            # (inside b's rows: windows before a group's first row are not its own once
            # recalculated, while the stream keeps the ones it passed)
            session.execute(
                f"insert into a values ({T + 5000}, 9); delete from b where ts >= {T + 15000} and ts < {T + 32000}"
            )
        assert harness.run_until_idle().failures == []
        harness.advance_clock(5)
    assert harness.run_until_idle().failures == []
    before = sorted(output(session, "select * from out"), key=str)
    assert len(before) >= 3
    asset = harness._definitions()[0].asset
    partitions = asset.partitions_def
    assert isinstance(partitions, TimeWindowPartitionsDefinition)
    key = partitions.get_partition_key_for_timestamp(T / 1000)
    result = materialize([asset], instance=harness.instance, resources=harness.resources, partition_key=key)
    assert result.success
    assert sorted(output(session, "select * from out"), key=str) == before


@pytest.mark.parametrize("trigger", ["interval(10s) sliding(10s)", "state_window(v)"])
def test_a_history_over_several_children_gives_each_group_its_child_tables_uid(
    session: Session, harness: StreamHarness, trigger: str
) -> None:
    """``_tgrpid`` of a history's windows, grouped by tbname: each child table's uid, as
    TDengine reports it, looked up for every group at once."""
    session.execute("create database d; use d; create stable st (ts timestamp, v int) tags (g int)")
    for i, name in enumerate(["a", "b", "c"]):
        session.execute(f"create table {name} using st tags ({i}); insert into {name} values ({T}, 1) ({T + 30000}, 2)")
    session.execute(
        f"create stream h {trigger} from st partition by tbname stream_options(fill_history) into h_out "
        "output_subtable(concat('h_', tbname)) as select _twstart, _tgrpid gid, count(*) n from %%trows"
    )
    assert harness.run_until_idle().failures == []
    uids = {name: session.warehouse.catalog.get_table("d", name).uid for name in "abc"}
    assert len(set(uids.values())) == 3
    for name, uid in uids.items():  # the first window holds the first row; every window the uid
        rows = output(session, f"select _twstart, gid, n from h_{name} order by _twstart")
        assert rows[0] == (T, uid, 1) and {gid for _, gid, _ in rows} == {uid}
