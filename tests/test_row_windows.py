"""STATE, SESSION, EVENT and COUNT windows: the engine's windows by hand, and streams end to
end (out-of-order rows re-derive windows; PRE_FILTER; information_schema)."""

from __future__ import annotations

from typing import Any

import pytest

from dagster_tdstream import Session, StreamHarness
from dagster_tdstream.sql import ast
from dagster_tdstream.sql.parser import parse_statement
from dagster_tdstream.triggers import conditions
from dagster_tdstream.triggers.engine import MAX_DELAY, WINDOW_CLOSE, WINDOW_OPEN
from dagster_tdstream.triggers.rows import CountTrigger, EventTrigger, RowChange, RowState, SessionTrigger, StateTrigger

from .conftest import output

T = 1_700_000_000_000


def rows(*values: tuple[int, dict[str, Any]]) -> list[RowChange]:
    return [RowChange(ts, "insert", v) for ts, v in values]


def closes(trigger: Any, changes: list[RowChange]) -> list[tuple[int, int, int]]:
    return [(f.start, f.end, f.row_count) for f in trigger.advance(RowState(), changes) if f.event == WINDOW_CLOSE]


def condition(sql: str) -> ast.Expr:
    stmt = parse_statement(f"select 1 from t where {sql}")
    assert isinstance(stmt, ast.Query) and stmt.select.where is not None
    return stmt.select.where


def test_state_windows_close_on_the_next_state_and_true_for_is_inclusive() -> None:
    data = rows(*((t, {"s": s}) for t, s in [(0, 1), (1, 1), (2, None), (3, 2), (8, 2), (9, 3), (10, 1)]))
    assert closes(StateTrigger(column="s"), data) == [(0, 2, 3), (3, 8, 2), (9, 9, 1)]
    assert closes(StateTrigger(column="s", true_for=5), data) == [(3, 8, 2)]
    fired = StateTrigger(column="s", events=(WINDOW_OPEN, WINDOW_CLOSE)).advance(RowState(), data[:4])
    assert [(f.event, f.start, f.detail) for f in fired] == [
        (WINDOW_OPEN, 0, {"prevState": None, "curState": 1}),
        (WINDOW_CLOSE, 0, {"curState": 1, "nextState": 2}),
        (WINDOW_OPEN, 3, {"prevState": 1, "curState": 2}),
    ]


def test_session_windows_split_on_gaps_larger_than_the_gap() -> None:
    data = rows(*((t, {}) for t in (0, 5, 10, 21, 30, 45)))
    assert closes(SessionTrigger(gap=10), data) == [(0, 10, 3), (21, 30, 2)]


def test_event_windows_one_row_windows_and_condition_lists() -> None:
    trigger = EventTrigger(starts=(condition("v >= 5"),), ends=(condition("v < 10 and w = 8"),))
    data = rows(
        *((t, {"v": v, "w": w}) for t, v, w in [(0, 1, 0), (2, 6, 8), (3, 7, 0), (4, 12, 0), (6, 9, 8), (7, 3, 0)])
    )
    # the row at 2 meets both conditions: a window of its own; [3..6] closes on the end row
    assert closes(trigger, data) == [(2, 2, 1), (3, 6, 3)]
    listed = EventTrigger(starts=(condition("v >= 90"), condition("v >= 60")))
    fired = listed.advance(RowState(), rows((0, {"v": 70}), (1, {"v": 95}), (2, {"v": 10}), (3, {"v": 90})))
    assert [(f.event, f.start, f.end, f.detail["conditionIndex"]) for f in fired] == [(WINDOW_CLOSE, 0, 1, 1)]


def test_state_windows_over_an_expression_simple_and_searched_case() -> None:
    searched = condition("case when v >= 10 then 'high' when v is not null then 'low' end")
    data = rows(*((t, {"v": v}) for t, v in [(0, 1), (1, 12), (2, None), (3, 15), (4, 2), (5, 30)]))
    # a NULL reading gives no state (no ELSE): it stays in the open window
    assert closes(StateTrigger(expr=searched), data) == [(0, 0, 1), (1, 3, 3), (4, 4, 1)]
    simple = condition("case v % 3 when 0 then 'x' when 1 then 'y' else 'z' end")
    assert closes(StateTrigger(expr=simple), rows((0, {"v": 3}), (1, {"v": 6}), (2, {"v": 4}), (3, {"v": 5}))) == [
        (0, 1, 2), (2, 2, 1),
    ]  # fmt: skip
    # the evaluator's full set is checked up front; NOT LIKE among it
    assert conditions.holds(condition("s not like 'a%'"), {"s": "bc"})
    with pytest.raises(conditions.ConditionError, match=r"sqrt\(\) is not supported here"):
        conditions.check(condition("case when sqrt(v) > 1 then 1 end"))


def test_count_windows_tumbling_sliding_and_column_lists() -> None:
    data = rows(*((t, {"c": None if t == 3 else t}) for t in range(10)))
    assert closes(CountTrigger(size=3, slide=3), data) == [(0, 2, 3), (3, 5, 3), (6, 8, 3)]
    # rows with NULL in every listed column do not count
    assert closes(CountTrigger(size=3, slide=3, columns=("c",)), data) == [(0, 2, 3), (4, 6, 3), (7, 9, 3)]
    # sliding windows are written only when full
    assert closes(CountTrigger(size=4, slide=2), data) == [(0, 3, 4), (2, 5, 4), (4, 7, 4), (6, 9, 4)]


def test_a_tumbling_count_windows_state_keeps_its_open_blocks_ends_and_resumes_an_older_checkpoint() -> None:
    """Without SLIDING the state keeps the open block's first and newest timestamps, not the
    last ``size``; a checkpoint written with the last ``size`` (before) resumes the same."""
    trigger = CountTrigger(size=4, slide=4, events=(WINDOW_CLOSE, MAX_DELAY))
    state = RowState()
    trigger.advance(state, rows(*((t, {}) for t in range(6))))
    assert (state.counted, state.recent) == (6, [4, 5])
    assert [(f.event, f.start, f.end, f.row_count) for f in trigger.open_windows(state)] == [(MAX_DELAY, 4, 5, 2)]
    assert [(f.start, f.end, f.row_count) for f in trigger.at_end(state)] == [(4, 5, 2)]
    trigger.advance(state, rows((6, {}), (7, {})))
    assert state.recent == []  # the block closed: nothing of it is read again
    for size, older, counted in ((4, [2, 3, 4, 5], 6), (2, [7, 8], 9), (5, [4, 5, 6, 7, 8], 9)):
        # as checkpoints kept them: the last ``size`` timestamps
        sized = CountTrigger(size=size, slide=size)
        resumed = RowState(counted=counted, recent=older, max_ts=older[-1])
        fresh = RowState()
        sized.advance(fresh, rows(*((t, {}) for t in range(older[-1] + 1))))
        late = rows(*((t, {}) for t in range(older[-1] + 1, older[-1] + 8)))
        assert [(f.start, f.end) for f in sized.advance(resumed, late)] == [
            (f.start, f.end) for f in sized.advance(fresh, late)
        ]
        assert resumed.recent == fresh.recent


def test_disorder_is_reported_not_silently_computed() -> None:
    state = RowState()
    trigger = StateTrigger(column="s")
    trigger.advance(state, rows((10, {"s": 1}), (20, {"s": 2})))
    trigger.advance(state, rows((15, {"s": 3})))
    assert state.late_from == 15
    ignoring = StateTrigger(column="s", ignore_disorder=True)
    quiet = RowState()
    ignoring.advance(quiet, rows((10, {"s": 1}), (20, {"s": 2})))
    ignoring.advance(quiet, rows((15, {"s": 3})))
    assert quiet.late_from is None
    # rewriting the newest row is disorder too: ignored under IGNORE_DISORDER, recalculated without
    ignoring.advance(quiet, [RowChange(20, "update", {"s": 5})])
    assert quiet.late_from is None
    trigger.advance(state, [RowChange(20, "update", {"s": 5})])
    assert state.late_from == 20
    # within the watermark a row is not disorder; at its edge it is
    watermarked = StateTrigger(column="s", ignore_disorder=True, watermark=5)
    marked = RowState()
    watermarked.advance(marked, rows((10, {"s": 1}), (20, {"s": 2})))
    watermarked.advance(marked, rows((16, {"s": 3})))
    assert marked.late_from == 16
    watermarked.advance(marked, rows((15, {"s": 3})))
    assert marked.late_from is None


def test_state_window_stream_with_late_row_and_pre_filter(session: Session, harness: StreamHarness) -> None:
    session.execute(
        "create database d; use d; create stable st (ts timestamp, s int, v int) tags (g int);"
        "create table a using st tags (1);"
        "create stream sw state_window(s) from st partition by tbname stream_options(pre_filter(v >= 0)) into sw_out "
        "output_subtable(concat('sw_', tbname)) as select _twstart, _twend, count(*) n, sum(v) total from %%trows"
    )
    session.execute(
        f"insert into a values ({T}, 1, 1) ({T + 1000}, 1, -50) ({T + 2000}, 1, 2) ({T + 3000}, 2, 3) ({T + 9000}, 3, 4)"
    )
    assert harness.run_until_idle().failures == []
    # the row with v < 0 is filtered before the trigger and out of %%trows
    assert output(session, "select * from sw_a") == [(T, T + 2000, 2, 3), (T + 3000, T + 3000, 1, 3)]
    # a late row with state 2 at T+5s extends the second window; its windows are re-derived
    session.execute(f"insert into a values ({T + 5000}, 2, 10)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from sw_a") == [(T, T + 2000, 2, 3), (T + 3000, T + 5000, 2, 13)]
    assert session.query(
        "select table_name, stable_name from information_schema.ins_tables where table_name like 'sw%'"
    ).rows == [("sw_a", "sw_out")]


def test_order_by_and_limit_apply_per_trigger(session: Session, harness: StreamHarness) -> None:
    session.execute(
        "create database d; use d; create stable st (cts timestamp, cint int) tags (tint int);"
        "create table c1 using st tags (1);"
        "create stream lim state_window(cint) from st partition by tbname into lim_out "
        "as select cts, cint from %%tbname where cts >= _twstart and cts <= _twend order by cts desc limit 2;"
        f"insert into c1 values ({T + 1000}, 1) ({T + 6000}, 2) ({T + 7000}, 2) ({T + 8000}, 2) ({T + 12000}, 3) ({T + 21000}, 4)"
    )
    assert harness.run_until_idle().failures == []
    # each window keeps its two newest rows: [01], [06 07 08] → 07 08, [12]
    assert [r[:2] for r in output(session, "select * from lim_out")] == [
        (T + 1000, 1), (T + 7000, 2), (T + 8000, 2), (T + 12000, 3),
    ]  # fmt: skip
