"""The bulk side of the window state machines: a group's windows from its rows, from scratch.

Owns the one function every non-incremental path runs per group — re-derivation after
disorder (``tick.py``, on the driver) and Spark's bulk paths (``compute/bulk.py``: FILL_HISTORY
and recalculation, inside executors) — and the rule of which rows reach a trigger at all.
Feeding a group's rows in time order to a fresh state is, by construction, what the sensor
computes incrementally over the same rows in any split of batches (``tests/test_replay_property.py``
holds that). Pure Python: no storage, no Spark, no Dagster.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..sql import ast
from ..sql.intervals import IntervalSpec
from ..sql.rowwindows import STATE_VALUE, QueryRowWindow, counted_value, end_flag, start_flag
from ..sql.walk import walk
from .conditions import holds
from .engine import WINDOW_CLOSE, Change, Fired, GroupState, WindowTrigger
from .period import PeriodTrigger
from .rows import CountTrigger, EventTrigger, RowChange, RowState, RowWindowTrigger, SessionTrigger, StateTrigger
from .sliding import PointState, SlidingPointTrigger

EventTimeTrigger = WindowTrigger | RowWindowTrigger | SlidingPointTrigger
TriggerState = GroupState | RowState | PointState


@dataclass(frozen=True)
class Admission:
    """Which rows reach the trigger: not before FILL_HISTORY's start, PRE_FILTER true."""

    history_start: int | None = None
    pre_filter: ast.Expr | None = None

    def admits(self, ts: int, values: dict[str, Any]) -> bool:
        if self.history_start is not None and ts < self.history_start:
            return False
        return self.pre_filter is None or holds(self.pre_filter, values)


def columns_read(trigger: EventTimeTrigger, admission: Admission) -> set[str]:
    """The row values a trigger and its admission rule look at (besides the timestamp): what a
    bulk path has to hand over per row."""
    names: set[str] = set()
    if isinstance(trigger, StateTrigger) and trigger.expr is not None:
        names.update(n.name.lower() for n in walk(trigger.expr) if isinstance(n, ast.Column))
    elif isinstance(trigger, StateTrigger):
        names.add(trigger.column)
    elif isinstance(trigger, EventTrigger):
        names.update(trigger.condition_columns)
    elif isinstance(trigger, CountTrigger):
        names.update(trigger.columns)
    if admission.pre_filter is not None:
        names.update(n.name.lower() for n in walk(admission.pre_filter) if isinstance(n, ast.Column))
    return names


def bucket_changes(buckets: Iterable[tuple[int, int, int]]) -> list[Change]:
    """An INTERVAL group's in-order rows handed over as runs that share their windows
    (``IntervalSpec.bucket``): each run (first row time, last row time, rows) is one change
    counting all its rows at its first row, and one moving the event time to its last row.
    Replayed, they fire the same windows and leave the same state as the rows one by one
    (``tests/test_replay_property.py``), at a cost per run instead of per row."""
    changes = []
    for first, last, rows in sorted(buckets):
        changes.append(Change(first, "insert", rows))
        if last != first:
            changes.append(Change(last, "insert", 0))
    return changes


def interval_history(
    trigger: WindowTrigger, runs: Iterable[tuple[int, int, int]]
) -> tuple[list[tuple[int, int, int]], GroupState]:
    """What ``replay(trigger, bucket_changes(runs))`` gives — a group's INTERVAL windows from
    its in-order runs of rows (first row time, last row time, rows), with the state left —
    computed in one pass over the runs instead of stepping the state machine change by change:
    rows in order never land in a closed window, so every window up to the last one the final
    event time (less the watermark) closes fires, in order, with its count. Fixed windows with
    WINDOW_CLOSE as the only event; anything else goes through the state machine
    (``fast_interval``). ``tests/test_replay_property.py`` holds the two equal. Every window
    it gives closes, so each is (start, end, rows), not a ``Fired``: building those was a third
    of a 166,000-window history's time here."""
    spec = trigger.spec
    assert isinstance(spec, IntervalSpec)
    ordered = sorted(runs)
    state = GroupState()
    if not ordered:
        return [], state
    counts: dict[int, int] = {}
    one_window = spec.sliding == spec.interval  # a row's one window starts at its floor: no range per run
    for first, _, rows in ordered:
        if rows:
            for start in (spec.floor(first),) if one_window else spec.starts(first):
                counts[start] = counts.get(start, 0) + rows
    state.next_close = spec.first_start(ordered[0][0])
    state.max_ts = max(last for _, last, _ in ordered)
    last = spec.last_closed(state.max_ts - trigger.watermark)
    closed: list[tuple[int, int, int]] = []
    if last >= state.next_close:
        if trigger.ignore_nodata:
            starts: Iterable[int] = sorted(start for start in counts if start <= last)
        else:
            starts = spec.between(state.next_close, last)
        closed = [(start, spec.end(start), counts.pop(start, 0)) for start in starts]
        state.next_close = spec.after(last)
    state.counts = counts  # the open windows
    if trigger.max_delay is not None:  # their delay counts from the replay's clock, 0
        state.opened_at = dict.fromkeys(counts, 0)
    return closed, state


def fast_interval(trigger: EventTimeTrigger) -> bool:
    """Whether ``interval_history`` computes what the state machine would for ``trigger``."""
    return (
        isinstance(trigger, WindowTrigger)
        and isinstance(trigger.spec, IntervalSpec)
        and trigger.events == (WINDOW_CLOSE,)
        and not trigger.clock_close
    )


def session_changes(islands: Iterable[tuple[int, int, int]]) -> list[RowChange]:
    """A SESSION group's in-order rows handed over as islands: maximal runs of rows each
    within the gap of the one before (first row time, last row time, distinct timestamps —
    a timestamp seen again in a group of several child tables counts once, as in the row
    replay). Each island is its first row and one change at its last row continuing the
    session for the others: the same windows and state as the rows one by one."""
    changes = []
    for first, last, rows in sorted(islands):
        changes.append(RowChange(first, "insert", {}))
        if rows > 1:
            changes.append(RowChange(last, "insert", {}, rows - 1, continues=True))
    return changes


def island_changes(islands: Iterable[tuple[int, int, int, Any]], column: str) -> list[RowChange]:
    """A STATE_WINDOW group's in-order rows handed over as islands: maximal runs of rows whose
    state — a NULL taking the state before it — stays the same, each as (first row time, last
    row time, rows, state; NULL only for the rows before the first state). Each island is its
    first row, carrying the state, and one change at its last row standing for the others.
    Replayed, they fire the same windows and leave the same state as the rows one by one
    (``tests/test_replay_property.py``), at a cost per island instead of per row."""
    changes = []
    for first, last, rows, value in sorted(islands, key=lambda island: island[0]):
        changes.append(RowChange(first, "insert", {column: value}))
        if rows > 1:
            changes.append(RowChange(last, "insert", {column: value}, rows - 1))
    return changes


def replay(
    trigger: EventTimeTrigger | PeriodTrigger, rows: Iterable[RowChange | Change]
) -> tuple[list[Fired], TriggerState]:
    """Feed a group's rows, in time order, to a fresh state: every trigger they fire and the
    state left (the open window, the progress) for the sensor to continue from."""
    if isinstance(trigger, PeriodTrigger):
        raise TypeError("PERIOD fires on processing time: it has no windows to derive from data")
    state = trigger.new_state()
    ordered: list[Any] = sorted(rows, key=lambda row: row.ts)
    if isinstance(trigger, WindowTrigger):  # INTERVAL reads times and counts, not values
        ordered = [row if isinstance(row, Change) else Change(row.ts, row.kind) for row in ordered]
    fired = trigger.advance(state, ordered)
    return fired, state


def query_window_trigger(window: QueryRowWindow, gap: int | None, true_for: int | None) -> RowWindowTrigger:
    """A SELECT's SESSION/STATE_WINDOW/EVENT_WINDOW/COUNT_WINDOW as the stream trigger of the
    same name (``gap`` and ``true_for`` in the table's precision). The query computes what
    the trigger reads — the state value, each start/end condition, the counted columns — as
    the columns named above, so conditions are evaluated by Spark with the whole dialect."""
    if isinstance(window, ast.SessionWindow):
        assert gap is not None
        return SessionTrigger(gap=gap, ignore_disorder=True)
    if isinstance(window, ast.StateWindow):
        return StateTrigger(true_for=true_for, ignore_disorder=True, column=STATE_VALUE)
    if isinstance(window, ast.EventWindow):
        return EventTrigger(
            true_for=true_for,
            ignore_disorder=True,
            starts=tuple(ast.Column(start_flag(i)) for i in range(len(window.start))),
            ends=tuple(ast.Column(end_flag(i)) for i in range(len(window.end))),
            condition_columns=(),
        )
    return CountTrigger(
        ignore_disorder=True,
        size=window.count,
        slide=window.sliding or window.count,
        columns=tuple(counted_value(i) for i in range(len(window.columns))),
    )


def query_windows(trigger: RowWindowTrigger, rows: Iterable[RowChange]) -> list[Fired]:
    """A query's windows over a group's rows: what the stream trigger closes over them, and
    the window the end of the data closes (``at_end``)."""
    fired, state = replay(trigger, rows)
    assert isinstance(state, RowState)
    return [*fired, *trigger.at_end(state)]
