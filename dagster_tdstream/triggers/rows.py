"""Row windows: STATE_WINDOW, SESSION, EVENT_WINDOW and COUNT_WINDOW, per group, in time order.

A row window spans rows, so its end is the timestamp of its last row (``_twend`` inclusive,
as TDengine's tests pin down) and it closes on a row: the first row of another state (that
row opens the next window), a row beyond the session gap, the row meeting the end condition
(included), the n-th counted row. TRUE_FOR keeps windows whose last-minus-first timestamp is
at least the duration (inclusive). Rows arriving out of order are reported through
``RowState.late_from``: the tick re-derives the group's windows from the table (see tick.py);
COUNT_WINDOW ignores disorder, as TDengine does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..sql import ast
from . import conditions
from .conditions import holds
from .engine import MAX_DELAY, WINDOW_CLOSE, WINDOW_OPEN, Fired


@dataclass(frozen=True)
class RowChange:
    ts: int
    kind: str  # insert | update | delete
    values: dict[str, Any]
    # the rows this change stands for: the bulk paths hand over an island of rows (in one
    # state, or one session) as its first row and one change at its last row for the others
    weight: int = 1
    # that last change: it continues the open window whatever lies between (a session's
    # rows are each within the gap of the one before, not of the island's first)
    continues: bool = False


@dataclass
class RowState:
    open: bool = False
    start: int = 0
    last: int = 0
    count: int = 0
    key: Any = None  # the open window's state value / start condition index
    prev: Any = None  # the previous window's state value (notifications' prevState)
    max_ts: int | None = None
    counted: int = 0  # COUNT_WINDOW: counted rows so far
    # COUNT_WINDOW: timestamps of the last n counted rows; without SLIDING only the open
    # block's first and newest (``CountTrigger.kept``)
    recent: list[int] = field(default_factory=list)
    opened_at: int = 0  # MAX_DELAY: processing time (ns) the delay counts from
    delayed_count: int = 0  # MAX_DELAY: the row count the open window was last computed with
    late_from: int | None = None  # smallest out-of-order timestamp seen in this call
    now: int = 0  # processing time of this call

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("late_from", "now")}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RowState:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class RowWindowTrigger:
    """Shared machinery: time order, disorder detection, TRUE_FOR, open/close events."""

    true_for: int | None = None
    events: tuple[str, ...] = (WINDOW_CLOSE,)
    ignore_disorder: bool = False
    # WATERMARK: how far behind the group's newest row a row may come and still not be
    # disorder (TDengine: "超过该时长的数据会被当做乱序数据"); IGNORE_DISORDER drops only those
    watermark: int = 0
    max_delay: int | None = None  # processing time, ns
    delete_recalc: bool = False
    # the legacy TRIGGER AT_ONCE: an open window it wrote is retracted when re-derivation finds
    # no window there any more (a 3.3.7 MAX_DELAY result of an open window stays, as TDengine's)
    at_once: bool = False
    # out-of-order rows, updates and (with DELETE_RECALC) deletes re-derive the windows
    recalculates: bool = True
    # the legacy IGNORE UPDATE 1: a row written again into the open window is one more row of
    # it (``ast.WRITTEN_ROWS``), which MAX_DELAY / AT_ONCE computes again
    counts_rewrites: bool = False

    @staticmethod
    def new_state() -> RowState:
        return RowState()

    def delayed(self, state: RowState, now: int) -> list[Fired]:
        """MAX_DELAY: the open windows, when the delay passed and rows arrived since they were
        last computed (TRUE_FOR does not hold them back, as TDengine documents)."""
        rows = self._rows_taken(state)
        if self.max_delay is None or rows is None or rows == state.delayed_count:
            return []
        if now - state.opened_at < self.max_delay:
            return []
        state.delayed_count, state.opened_at = rows, now
        return self._open_windows(state)

    def open_windows(self, state: RowState) -> list[Fired]:
        """The windows still open, as MAX_DELAY (and the legacy AT_ONCE) writes them."""
        return [] if self._rows_taken(state) is None else self._open_windows(state)

    def _rows_taken(self, state: RowState) -> int | None:
        """The rows the open windows have taken (None: no window is open)."""
        return state.count if state.open else None

    def _open_windows(self, state: RowState) -> list[Fired]:
        return [Fired(MAX_DELAY, state.start, state.last, state.count, {})]

    def advance(self, state: RowState, changes: Iterable[RowChange], now: int = 0) -> list[Fired]:
        fired: list[Fired] = []
        state.late_from, state.now = None, now
        # disorder is judged against the newest row before this batch of changes (TDengine's
        # trigger task moves its progress after a block)
        newest_before = state.max_ts
        for change in changes:
            if change.kind == "delete":
                if self.delete_recalc and self.recalculates and state.max_ts is not None:
                    state.late_from = change.ts if state.late_from is None else min(state.late_from, change.ts)
                continue
            if state.max_ts is not None and change.ts <= state.max_ts:
                if self.counts_rewrites and change.kind == "update" and state.open and change.ts >= state.start:
                    state.count += 1
                    continue
                # a row at or before the newest one minus the watermark is disorder: that
                # includes rewriting the newest row itself (TDengine's tests: an update of the
                # latest timestamp changes nothing under IGNORE_DISORDER)
                tolerated = newest_before is None or change.ts > newest_before - self.watermark
                if self.recalculates and (tolerated or not self.ignore_disorder):
                    state.late_from = change.ts if state.late_from is None else min(state.late_from, change.ts)
                continue
            state.max_ts = change.ts
            self.step(state, change, fired)
        return fired

    def step(self, state: RowState, change: RowChange, fired: list[Fired]) -> None:  # pragma: no cover
        raise NotImplementedError

    def open(self, state: RowState, change: RowChange, key: Any, fired: list[Fired], detail: dict[str, Any]) -> None:
        state.open, state.start, state.last, state.count, state.key = True, change.ts, change.ts, 1, key
        state.opened_at, state.delayed_count = state.now, 0
        if WINDOW_OPEN in self.events:
            fired.append(Fired(WINDOW_OPEN, change.ts, change.ts, 0, detail))

    def close(self, state: RowState, fired: list[Fired], detail: dict[str, Any]) -> None:
        state.open = False
        if WINDOW_CLOSE in self.events and (self.true_for is None or state.last - state.start >= self.true_for):
            fired.append(Fired(WINDOW_CLOSE, state.start, state.last, state.count, detail))

    def at_end(self, state: RowState) -> list[Fired]:
        """The window the end of the data closes, for a query (a stream keeps it open): a
        state or session window ends with the data's last row."""
        fired: list[Fired] = []
        if state.open:
            self.close(state, fired, {})
        return fired


@dataclass(frozen=True)
class StateTrigger(RowWindowTrigger):
    column: str = ""
    expr: ast.Expr | None = None  # STATE_WINDOW(expression): the state computed on each row

    def step(self, state: RowState, change: RowChange, fired: list[Fired]) -> None:
        value = change.values.get(self.column) if self.expr is None else conditions.value(self.expr, change.values)
        if value is None:  # a NULL state changes nothing; it stays in an open window
            if state.open:
                state.last, state.count = change.ts, state.count + change.weight
            return
        if state.open and value == state.key:
            state.last, state.count = change.ts, state.count + change.weight
            return
        if state.open:
            self.close(state, fired, {"curState": state.key, "nextState": value})
            state.prev = state.key
        self.open(state, change, value, fired, {"prevState": state.prev, "curState": value})


@dataclass(frozen=True)
class SessionTrigger(RowWindowTrigger):
    gap: int = 0

    def step(self, state: RowState, change: RowChange, fired: list[Fired]) -> None:
        if state.open and (change.continues or change.ts - state.last <= self.gap):
            state.last, state.count = change.ts, state.count + change.weight
            return
        if state.open:
            self.close(state, fired, {})
        self.open(state, change, None, fired, {})


@dataclass(frozen=True)
class EventTrigger(RowWindowTrigger):
    starts: tuple[ast.Expr, ...] = ()
    ends: tuple[ast.Expr, ...] = ()
    condition_columns: tuple[str, ...] = ()

    def _fields(self, change: RowChange) -> dict[str, Any]:
        return {name: change.values.get(name) for name in self.condition_columns}

    def _open_windows(self, state: RowState) -> list[Fired]:
        # an open window's result (MAX_DELAY, the legacy AT_ONCE) is notified as closing it
        # with the start condition that opened it: TDengine's WINDOW_CLOSE of an event window
        # always names a triggerCondition
        return [Fired(MAX_DELAY, state.start, state.last, state.count, {"conditionIndex": state.key})]

    def step(self, state: RowState, change: RowChange, fired: list[Fired]) -> None:
        if state.open and not self.ends and not any(holds(c, change.values) for c in self.starts):
            # START WITH (c1, c2, …) without END WITH: the window lasts while a start condition holds
            self.close(state, fired, {"conditionIndex": state.key})
        if not state.open:
            index = next((i for i, c in enumerate(self.starts) if holds(c, change.values)), None)
            if index is None:
                return  # rows outside any window are not part of the stream's windows
            self.open(state, change, index, fired, {"conditionIndex": index, "fieldValue": self._fields(change)})
        else:
            state.last, state.count = change.ts, state.count + 1
        end = next((i for i, c in enumerate(self.ends) if holds(c, change.values)), None)
        if end is not None:  # the row meeting the end condition closes (and belongs to) the window
            self.close(state, fired, {"conditionIndex": end, "fieldValue": self._fields(change)})

    def at_end(self, state: RowState) -> list[Fired]:
        """An event window is a window only once its end condition holds (with END WITH), or
        once a row no longer meets a start condition (without): the data's end closes none."""
        return []


@dataclass(frozen=True)
class CountTrigger(RowWindowTrigger):
    size: int = 1
    slide: int = 1
    columns: tuple[str, ...] = ()
    # TDengine 3.3.7 ignores disorder, updates and deletes for COUNT_WINDOW (the legacy
    # COUNT_WINDOW recalculates: ``ast.RECALC_COUNT_WINDOW``)
    recalculates: bool = False

    @property
    def tumbling(self) -> bool:
        """Without SLIDING (or SLIDING equal to the count) a window is a block of ``size``
        rows: only the open block's first and newest timestamps are ever read again, so the
        state keeps those two instead of ``size`` (a checkpoint of 600 timestamps a group)."""
        return self.slide == self.size

    def step(self, state: RowState, change: RowChange, fired: list[Fired]) -> None:
        if self.columns and all(change.values.get(c) is None for c in self.columns):
            return  # only rows with a value in a listed column count
        index = state.counted
        if state.counted == state.delayed_count:  # MAX_DELAY counts from the first row not yet computed
            state.opened_at = state.now
        if self.tumbling:  # the open block's first row, if it has one, and this one
            state.recent = [*self.kept(state.recent, state.counted)[:1], change.ts]
        else:
            state.recent = [*state.recent, change.ts][-self.size :]
        state.counted += 1
        if index % self.slide == 0 and WINDOW_OPEN in self.events:
            fired.append(Fired(WINDOW_OPEN, change.ts, change.ts, 0, {}))
        first = index + 1 - self.size
        if first >= 0 and first % self.slide == 0 and WINDOW_CLOSE in self.events:
            # a sliding count window is written only when full
            fired.append(Fired(WINDOW_CLOSE, state.recent[0], change.ts, self.size, {}))
        if self.tumbling and state.counted % self.size == 0:
            state.recent = []  # the block is closed: the next row opens one

    def kept(self, recent: list[int], counted: int) -> list[int]:
        """What the state keeps (``RowState.recent``) after ``counted`` rows, of ``recent``:
        the timestamps of the group's last counted rows, oldest first — at least the open
        block's or the last ``size`` (the derivations in bulk, a checkpoint written before
        the state was compacted) — or a compacted state's open block ends, which it keeps."""
        if not self.tumbling:
            return recent[-self.size :]
        rows = counted % self.size
        block = recent[-rows:] if rows else []
        return [block[0], block[-1]] if len(block) > 1 else block

    def _span(self, state: RowState, rows: int) -> tuple[int, int]:
        """The first and newest timestamps of the last ``rows`` counted rows (a window not yet full)."""
        if self.tumbling:  # a tumbling window not yet full is the open block
            block = self.kept(state.recent, state.counted)
            return block[0], block[-1]
        return state.recent[-rows], state.recent[-1]

    def _rows_taken(self, state: RowState) -> int | None:
        return state.counted  # windows not yet full are open from the first counted row

    def _open_windows(self, state: RowState) -> list[Fired]:
        """Every window not yet full — several at once when SLIDING is below the size — oldest
        first (TRIGGER AT_ONCE writes them at every write, as TDengine's legacy streams do)."""
        sizes = []
        start = (state.counted - 1) // self.slide * self.slide  # the newest window start
        while start >= 0 and state.counted - start < self.size:
            sizes.append(state.counted - start)
            start -= self.slide
        return [Fired(MAX_DELAY, *self._span(state, rows), rows, {}) for rows in reversed(sizes)]

    def at_end(self, state: RowState) -> list[Fired]:
        """The last window of a query may hold fewer than ``size`` counted rows: the first
        window not yet full, unless a full window already reached the last row."""
        counted = state.counted
        # the first window start (a multiple of slide) whose window is not full: k·slide + size > counted
        first_open = max(0, (counted - self.size) // self.slide + 1) * self.slide
        previous_end = first_open - self.slide + self.size - 1
        if first_open >= counted or (first_open > 0 and previous_end >= counted - 1):
            return []
        rows = counted - first_open
        return [Fired(WINDOW_CLOSE, *self._span(state, rows), rows, {})]
