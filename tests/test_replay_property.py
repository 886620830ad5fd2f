"""Property: for every trigger type, feeding a group's rows to the incremental engine in any
split of batches — with late rows and rewrites where the trigger recalculates — ends with the
same windows as the bulk replay of the final data (the path Spark runs per group).

The incremental side is the sensor's own code (``tick._rederive`` for late rows of row
windows), with a dict standing in for the table; the outputs are what the runs would leave:
a window written on close or recalculation, retracted on invalidation."""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_tdstream.compute.bulk import fixed_interval_outcomes
from dagster_tdstream.sql import ast
from dagster_tdstream.sql.intervals import IntervalSpec
from dagster_tdstream.sql.parser import parse_statement
from dagster_tdstream.sql.timeunits import resolve_timezone
from dagster_tdstream.triggers.engine import (
    RECALC,
    WINDOW_CLOSE,
    WINDOW_INVALIDATION,
    WINDOW_OPEN,
    Change,
    Fired,
    WindowTrigger,
)
from dagster_tdstream.triggers.replay import (
    EventTimeTrigger,
    bucket_changes,
    fast_interval,
    interval_history,
    island_changes,
    replay,
    session_changes,
)
from dagster_tdstream.triggers.rows import (
    CountTrigger,
    EventTrigger,
    RowChange,
    RowWindowTrigger,
    SessionTrigger,
    StateTrigger,
)
from dagster_tdstream.triggers.sliding import PointSpec, SlidingPointTrigger
from dagster_tdstream.triggers.tick import _rederive


def _condition(sql: str) -> ast.Expr:
    stmt = parse_statement(f"select 1 from t where {sql}")
    assert isinstance(stmt, ast.Query) and stmt.select.where is not None
    return stmt.select.where


RECALCULATING: dict[str, EventTimeTrigger] = {
    "state": StateTrigger(column="s"),
    "state_true_for": StateTrigger(column="s", true_for=3),
    "session": SessionTrigger(gap=3),
    "event": EventTrigger(starts=(_condition("v > 5"),), ends=(_condition("v < 3"),), condition_columns=("v",)),
    "event_true_for": EventTrigger(
        starts=(_condition("v > 5"),), ends=(_condition("v < 3"),), condition_columns=("v",), true_for=2
    ),
    "interval_nodata_skipped": WindowTrigger(IntervalSpec(5, 5), ignore_nodata=True),
    "interval_sliding_nodata_skipped": WindowTrigger(IntervalSpec(6, 3), ignore_nodata=True),
}
IN_ORDER_ONLY: dict[str, EventTimeTrigger] = {
    "interval": WindowTrigger(IntervalSpec(5, 5)),
    "interval_watermark": WindowTrigger(IntervalSpec(5, 5), watermark=4),
    "count_tumbling": CountTrigger(size=3, slide=3),
    "count_sliding_columns": CountTrigger(size=3, slide=2, columns=("s",)),
    "sliding_points": SlidingPointTrigger(PointSpec(4, 0, "ms", resolve_timezone("UTC"))),
}

rows_strategy = st.lists(
    st.tuples(st.integers(0, 60), st.one_of(st.none(), st.integers(0, 3)), st.integers(0, 9)), min_size=1, max_size=40
)


def _outputs(fired: list[Any], into: dict[int, tuple[int, int]], exact_counts: bool) -> None:
    for f in fired:
        if f.event in (WINDOW_CLOSE, RECALC, "ON_TIME"):
            into[f.start] = (f.end, f.row_count if exact_counts else 0)
        elif f.event == WINDOW_INVALIDATION:
            into.pop(f.start, None)


def _incremental(trigger: EventTimeTrigger, batches: list[list[tuple[int, Any, int]]]) -> dict[int, Any]:
    table: dict[int, RowChange] = {}
    state = trigger.new_state()
    written: dict[int, tuple[int, int]] = {}
    exact = not isinstance(trigger, WindowTrigger)  # INTERVAL recalculations count at compute time
    for batch in batches:
        before = sorted(table.values(), key=lambda r: r.ts)
        changes = []
        commit = {ts: (ts, s, v) for ts, s, v in batch}  # a write keeps its last row per timestamp
        for ts, s, v in sorted(commit.values(), key=lambda r: r[0]):  # one commit: time order inside it
            kind = "update" if ts in table else "insert"
            table[ts] = RowChange(ts, "insert", {"s": s, "v": v})
            changes.append(RowChange(ts, kind, {"s": s, "v": v}))
        if isinstance(trigger, WindowTrigger):  # the sensor hands INTERVAL times and kinds (tick.py)
            changes = [Change(c.ts, c.kind) for c in changes]  # type: ignore[misc]
        fired = trigger.advance(state, changes)  # type: ignore[arg-type]
        if isinstance(trigger, RowWindowTrigger) and state.late_from is not None:  # type: ignore[union-attr]
            after = sorted(table.values(), key=lambda r: r.ts)
            state, fired = _rederive(trigger, before, after, state.late_from)  # type: ignore[union-attr]
        _outputs(fired, written, exact)
    if not exact:  # the run counts every window it computes from the table
        written = {start: (end, sum(1 for ts in table if start <= ts < end)) for start, (end, _) in written.items()}
    return written


def _bulk(trigger: EventTimeTrigger, rows: list[tuple[int, Any, int]]) -> dict[int, Any]:
    final: dict[int, RowChange] = {}
    for ts, s, v in rows:
        final[ts] = RowChange(ts, "insert", {"s": s, "v": v})
    fired, _ = replay(trigger, final.values())
    written: dict[int, tuple[int, int]] = {}
    _outputs(fired, written, True)
    return written


def _split(rows: list[Any], cuts: list[int]) -> list[list[Any]]:
    points = sorted({c % (len(rows) + 1) for c in cuts} | {0, len(rows)})
    return [rows[a:b] for a, b in itertools.pairwise(points) if b > a]


@settings(max_examples=300, deadline=None)
@given(rows=rows_strategy, cuts=st.lists(st.integers(0, 40), max_size=8), name=st.sampled_from(sorted(RECALCULATING)))
def test_any_batches_with_disorder_give_the_bulk_windows(rows: list[Any], cuts: list[int], name: str) -> None:
    trigger = RECALCULATING[name]
    assert _incremental(trigger, _split(rows, cuts)) == _bulk(trigger, rows)


@settings(max_examples=300, deadline=None)
@given(rows=rows_strategy, cuts=st.lists(st.integers(0, 40), max_size=8), name=st.sampled_from(sorted(IN_ORDER_ONLY)))
def test_any_batches_of_ordered_rows_give_the_bulk_windows(rows: list[Any], cuts: list[int], name: str) -> None:
    # these triggers ignore disorder and updates by TDengine's rules: the data arrives in order
    ordered = sorted({ts: (ts, s, v) for ts, s, v in rows}.values())
    trigger = IN_ORDER_ONLY[name]
    assert _incremental(trigger, _split(ordered, cuts)) == _bulk(trigger, ordered)


@settings(max_examples=400, deadline=None)
@given(
    stamps=st.lists(st.integers(0, 120), min_size=1, max_size=60),
    interval=st.integers(1, 12),
    sliding=st.integers(1, 12),
    offset=st.integers(0, 11),
    watermark=st.sampled_from([0, 3, 50]),
    ignore_nodata=st.booleans(),
    opens=st.booleans(),
    max_delay=st.sampled_from([None, 5]),
)
def test_interval_runs_replay_like_rows(
    stamps: list[int],
    interval: int,
    sliding: int,
    offset: int,
    watermark: int,
    ignore_nodata: bool,
    opens: bool,
    max_delay: int | None,
) -> None:
    """FILL_HISTORY's INTERVAL path hands the state machine runs of rows sharing their
    windows (``bucket_changes``), not rows — or, where the state machine adds nothing,
    computes the windows in one pass over the runs (``interval_history``): same triggers, in
    the same order, same state."""

    sliding = min(sliding, interval)
    spec = IntervalSpec(interval, sliding, offset % sliding)
    events = (WINDOW_OPEN, WINDOW_CLOSE) if opens else (WINDOW_CLOSE,)
    trigger = WindowTrigger(spec, watermark=watermark, ignore_nodata=ignore_nodata, events=events, max_delay=max_delay)
    ordered = sorted(stamps)
    runs: dict[tuple[int, int], list[int]] = {}
    for ts in ordered:
        runs.setdefault(spec.bucket(ts), []).append(ts)
    by_row = replay(trigger, [Change(ts, "insert") for ts in ordered])
    by_run = replay(trigger, bucket_changes((min(r), max(r), len(r)) for r in runs.values()))
    assert by_run[0] == by_row[0]
    assert by_run[1].to_json() == by_row[1].to_json()
    assert fast_interval(trigger) is not opens
    if not opens:
        closed, state = interval_history(trigger, [(min(r), max(r), len(r)) for r in runs.values()])
        assert [Fired(WINDOW_CLOSE, start, end, rows) for start, end, rows in closed] == by_row[0]
        assert state.to_json() == by_row[1].to_json()


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 120), st.one_of(st.none(), st.integers(0, 2))), min_size=1, max_size=60),
    true_for=st.sampled_from([None, 0, 4]),
    opens=st.booleans(),
    max_delay=st.sampled_from([None, 5]),
)
def test_state_islands_replay_like_rows(
    rows: list[tuple[int, int | None]], true_for: int | None, opens: bool, max_delay: int | None
) -> None:
    """FILL_HISTORY's STATE_WINDOW path hands the state machine islands — runs of rows whose
    state, a NULL carrying the one before it, stays the same (as Spark finds them with
    ``last(…, ignorenulls)``, ``lag`` and a running sum) — not rows: same triggers, same state.
    A timestamp seen again (two child tables of one group) counts once, as in the replay."""
    events = (WINDOW_OPEN, WINDOW_CLOSE) if opens else (WINDOW_CLOSE,)
    trigger = StateTrigger(column="s", true_for=true_for, events=events, max_delay=max_delay)
    ordered = sorted(rows, key=lambda row: row[0])
    by_row = replay(trigger, [RowChange(ts, "insert", {"s": s}) for ts, s in ordered])
    islands: list[list[Any]] = []  # [first, last, rows, state]
    carried, seen = None, None
    for ts, s in ordered:
        if ts == seen:
            continue
        seen, carried = ts, s if s is not None else carried
        if islands and islands[-1][3] == carried:
            islands[-1][1:3] = [ts, islands[-1][2] + 1]
        else:
            islands.append([ts, ts, 1, carried])
    by_island = replay(trigger, island_changes([(first, last, n, s) for first, last, n, s in islands], "s"))
    assert by_island[0] == by_row[0]
    assert by_island[1].to_json() == by_row[1].to_json()


@settings(max_examples=300, deadline=None)
@given(
    stamps=st.lists(st.integers(0, 120), min_size=1, max_size=60),
    gap=st.integers(0, 9),
    true_for=st.sampled_from([None, 0, 4]),
    opens=st.booleans(),
    max_delay=st.sampled_from([None, 5]),
)
def test_session_islands_replay_like_rows(
    stamps: list[int], gap: int, true_for: int | None, opens: bool, max_delay: int | None
) -> None:
    """FILL_HISTORY's SESSION path hands the state machine islands — runs of rows each within
    the gap of the one before, as Spark finds them with ``lag`` and a running sum — counting
    distinct timestamps (a repeated one, two child tables of one group, counts once as in the
    replay): same triggers, same state."""
    events = (WINDOW_OPEN, WINDOW_CLOSE) if opens else (WINDOW_CLOSE,)
    trigger = SessionTrigger(gap=gap, true_for=true_for, events=events, max_delay=max_delay)
    ordered = sorted(stamps)
    by_row = replay(trigger, [RowChange(ts, "insert", {}) for ts in ordered])
    islands: list[list[Any]] = []  # [first, last, distinct timestamps]
    for ts in ordered:
        if islands and ts - islands[-1][1] <= gap:
            islands[-1][2] += ts != islands[-1][1]
            islands[-1][1] = ts
        else:
            islands.append([ts, ts, 1])
    by_island = replay(trigger, session_changes([(first, last, n) for first, last, n in islands]))
    assert by_island[0] == by_row[0]
    assert by_island[1].to_json() == by_row[1].to_json()


@settings(max_examples=300, deadline=None)
@given(
    groups=st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]), st.lists(st.integers(0, 120), min_size=1, max_size=40), max_size=4
    ),
    interval=st.integers(1, 12),
    offset=st.integers(0, 11),
    watermark=st.sampled_from([0, 3, 50]),
    ignore_nodata=st.booleans(),
    max_delay=st.sampled_from([None, 5]),
)
def test_fixed_windows_of_all_groups_at_once_equal_each_groups_one_pass(
    groups: dict[str, list[int]],
    interval: int,
    offset: int,
    watermark: int,
    ignore_nodata: bool,
    max_delay: int | None,
) -> None:
    """A history's fixed INTERVAL windows computed for every group at once with arrays
    (``bulk.fixed_interval_outcomes``) against ``interval_history`` group by group: the same
    groups in the same order, closed windows with their counts, and states — groups with
    empty windows inside their closed span or none closed, groups given in any order."""
    spec = IntervalSpec(interval, interval, offset % interval)
    trigger = WindowTrigger(spec, watermark=watermark, ignore_nodata=ignore_nodata, max_delay=max_delay)
    expected, columns = [], {"tbname": [], "__first": [], "__last": [], "__rows": []}
    for name in sorted(groups):
        runs: dict[int, list[int]] = {}
        for ts in sorted(groups[name]):
            runs.setdefault(spec.floor(ts), []).append(ts)
        group_runs = [(min(r), max(r), len(r)) for r in runs.values()]
        closed, state = interval_history(trigger, group_runs)
        expected.append((f'["{name}"]', [(WINDOW_CLOSE, s, e, n, "{}") for s, e, n in closed], state.to_json()))
        for first, last, rows in reversed(group_runs):  # handed over out of order
            for column, value in zip(columns, (name, first, last, rows), strict=True):
                columns[column].append(value)
    runs_table = pa.table(
        columns, schema=pa.schema([("tbname", pa.string())] + [(c, pa.int64()) for c in columns if c != "tbname"])
    )
    assert fixed_interval_outcomes(trigger, runs_table, ["tbname"], ["tbname"]) == expected
