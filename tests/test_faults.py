"""Fault injection: a headless run SIGKILLed at each failpoint of a run, then run again;
the output equals the batch query with no window twice, and every window's notification
arrives at least once under its stable triggerId."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from dagster_tdstream import Session, Warehouse
from dagster_tdstream.faults import FAILPOINT_ENV, FAILPOINTS

from .conftest import Receiver, output
from .test_notifications import SCHEMA, T


def headless_run(warehouse: Warehouse, failpoint: str | None = None) -> subprocess.CompletedProcess[str]:
    """``tdstream run --until-idle`` as its own process, as a user or cron runs it."""
    env = {key: value for key, value in os.environ.items() if key != FAILPOINT_ENV}
    if failpoint is not None:
        env[FAILPOINT_ENV] = failpoint
    tdstream = str(Path(sys.executable).parent / "tdstream")
    command = [tdstream, "run", "--until-idle", "--warehouse", warehouse.uri]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("failpoint", FAILPOINTS)
def test_a_run_killed_at_any_point_loses_and_repeats_nothing(
    session: Session, warehouse: Warehouse, receiver: Receiver, failpoint: str
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1); create table b using st tags (2);"
        f"create stream s interval(10s) sliding(10s) from st partition by tbname "
        f"notify('{receiver.url}') on (window_close) into out as select _twstart ts, count(*) n, sum(v) total "
        "from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 5000}, 2, 0) ({T + 10000}, 3, 0) ({T + 20000}, 4, 0)"
        f" b values ({T}, 10, 0) ({T + 10000}, 20, 0) ({T + 30000}, 30, 0)"
    )
    killed = headless_run(warehouse, failpoint)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    session.execute(f"insert into a values ({T + 40000}, 5, 0) b values ({T + 40000}, 40, 0)")
    finished = headless_run(warehouse)
    assert finished.returncode == 0, finished.stderr[-2000:]

    batch = output(
        session,
        f"select tbname, _wstart, count(*), sum(v) from st where ts < {T + 40000} partition by tbname interval(10s)",
    )
    written = output(session, "select tag_tbname, ts, n, total from out")
    assert len(set(written)) == len(written) == 8  # each window once: 4 per table, empty ones too
    assert sorted(row for row in written if row[2] > 0) == sorted(batch)

    events = receiver.events("s")
    delivered = Counter((e["triggerId"], e["eventType"]) for e in events)
    if failpoint == "notification-sent":
        # the batch on the wire when the process died is still claimed in the outbox (its lease
        # runs out before a deliverer takes it again): delivered once, not yet marked sent
        pending = warehouse.catalog.count_notifications("d.s", "pending")
        assert len(delivered) + pending >= 8
    else:
        assert len(delivered) == 8  # each window's close, under one triggerId however often sent
    assert {e["eventType"] for e in events} == {"WINDOW_CLOSE"}


@pytest.mark.parametrize("failpoint", ["feed-rows-computed", "after-feed-commit"])
def test_a_tick_killed_while_syncing_a_virtual_tables_feed_loses_and_repeats_nothing(
    session: Session, warehouse: Warehouse, failpoint: str
) -> None:
    """A stream on a virtual table, its process killed with the feed's rows computed and not
    committed, or committed and not checkpointed: run again, each window is written once with
    the rows the virtual table has, and the feed holds exactly its rows."""
    session.execute(
        "create database d; use d; create table t1 (ts timestamp, v int); create table t2 (ts timestamp, w int);"
        "create vtable v (ts timestamp, a int from t1.v, b int from t2.w);"
        "create stream s interval(10s) sliding(10s) from v into out as"
        " select _twstart ts, count(*) n, sum(a) sa, sum(b) sb from %%trows"
    )
    session.execute(
        f"insert into t1 values ({T}, 1) ({T + 5000}, 2) ({T + 12000}, 3);"
        f"insert into t2 values ({T}, 10) ({T + 12000}, 30) ({T + 21000}, 40)"
    )
    killed = headless_run(warehouse, failpoint)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    session.execute(f"insert into t1 values ({T + 30000}, 5)")
    finished = headless_run(warehouse)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert output(session, "select ts, n, sa, sb from out order by ts") == [
        (T, 2, 3, 10), (T + 10000, 1, 3, 30), (T + 20000, 1, None, 40),
    ]  # fmt: skip
    feed = warehouse.read_table(warehouse.table("d", "v")).to_pydict()
    assert sorted(zip(*feed.values(), strict=True)) == output(session, "select * from v")


def test_a_tick_killed_after_keeping_replaced_rows_keeps_them_once(session: Session, warehouse: Warehouse) -> None:
    """A legacy IGNORE UPDATE 1 stream (a rewrite is one more row) killed after its tick kept
    the replaced rows and before its checkpoint: the tick done again keeps none twice."""
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream s trigger window_close into out as select _wstart, count(*) n, sum(v) total from t interval(10s)"
    )
    session.execute(
        f"insert into t values ({T}, 1); insert into t values ({T}, 2); insert into t values ({T + 5000}, 3)"
    )
    killed = headless_run(warehouse, "after-written-commit")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    session.execute(f"insert into t values ({T + 10000}, 4)")  # closes [T, T + 10 s)
    finished = headless_run(warehouse)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert output(session, "select n, total from out") == [(3, 6)]  # 1 (replaced), 2 and 3
