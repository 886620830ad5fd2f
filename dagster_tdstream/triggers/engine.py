"""Window triggers over a stream of rows, per group (see the package docstring).

``WindowTrigger.advance`` takes a group's state and the rows the WAL delivered since the
last call, and returns the triggers that fired. It is deterministic: the same state and rows
always give the same triggers, which is what lets a sensor tick replay from a checkpoint.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..sql.intervals import CalendarIntervalSpec, IntervalSpec

MAX_DELAY = "MAX_DELAY"  # an open window computed because MAX_DELAY passed (processing time)
WINDOW_OPEN = "WINDOW_OPEN"
WINDOW_CLOSE = "WINDOW_CLOSE"
RECALC = "RECALC"  # a closed window computed again (late row or update inside it)
# a closed window that recalculation showed no longer exists (its output row is retracted)
WINDOW_INVALIDATION = "WINDOW_INVALIDATION"


class TriggerTableMissingError(Exception):
    """The stream's trigger table was dropped: its trigger has nothing to read."""


@dataclass(frozen=True)
class Change:
    """One WAL record of the trigger table for a group: an inserted or updated row."""

    ts: int
    kind: str  # insert | update | delete
    # the rows this change stands for: bulk paths hand over a run of in-order rows that share
    # their windows as one change (0: a row that only moves the event time on)
    weight: int = 1
    table: str | None = None  # the row's child table, where expiry is judged per table


@dataclass(frozen=True)
class Fired:
    """A trigger: the window [start, end] (``end`` exclusive for INTERVAL, the last row's
    timestamp for row windows) and what notifications report about it (``detail``)."""

    event: str
    start: int
    end: int
    row_count: int
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class GroupState:
    """What a group remembers between ticks: the first window not yet closed, the newest
    event time seen, and the row counts of its open windows."""

    next_close: int | None = None
    max_ts: int | None = None
    counts: dict[int, int] = field(default_factory=dict)
    opened: set[int] = field(default_factory=set)
    # MAX_DELAY: processing time (ns) each open window's delay counts from, and the row count
    # it was last computed with (no re-send without new rows)
    opened_at: dict[int, int] = field(default_factory=dict)
    delayed: dict[int, int] = field(default_factory=dict)
    # the newest event time of each child table (``WindowTrigger.table_expiry``)
    table_max: dict[str, int] = field(default_factory=dict)
    # (table, timestamp) of the rows the last ``advance`` found expired (not checkpointed)
    expired: list[tuple[str, int]] = field(default_factory=list)
    # ``WindowTrigger.recalc_every``: closed windows waiting for the periodic recalculation,
    # and when (processing time, ns) the wait began
    deferred: set[int] = field(default_factory=set)
    deferred_since: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "next_close": self.next_close,
            "max_ts": self.max_ts,
            "counts": [[k, v] for k, v in sorted(self.counts.items())],
            "opened": sorted(self.opened),
            "opened_at": [[k, v] for k, v in sorted(self.opened_at.items())],
            "delayed": [[k, v] for k, v in sorted(self.delayed.items())],
            "table_max": self.table_max,
            "deferred": sorted(self.deferred),
            "deferred_since": self.deferred_since,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GroupState:
        return cls(
            data.get("next_close"),
            data.get("max_ts"),
            {int(k): int(v) for k, v in data.get("counts", [])},
            set(data.get("opened", [])),
            {int(k): int(v) for k, v in data.get("opened_at", [])},
            {int(k): int(v) for k, v in data.get("delayed", [])},
            {str(k): int(v) for k, v in data.get("table_max", {}).items()},
            deferred={int(s) for s in data.get("deferred", [])},
            deferred_since=data.get("deferred_since"),
        )


@dataclass(frozen=True)
class WindowTrigger:
    """``[INTERVAL(i[, o])] SLIDING(s)`` with a trigger table: windows close when the group's
    event time, less the watermark, reaches their end (``_twend`` is exclusive); windows with
    no rows fire too unless IGNORE_NODATA_TRIGGER; a row that lands in a closed window
    re-fires it (recalculation) unless IGNORE_DISORDER.

    ``clock_close``: windows close when the processing time reaches their end instead
    (``clock_closed``), whatever the rows' event times — 2.x continuous queries and the legacy
    FORCE_WINDOW_CLOSE, which compute each window once, when it is over by the wall clock."""

    spec: IntervalSpec | CalendarIntervalSpec
    watermark: int = 0
    ignore_nodata: bool = False
    ignore_disorder: bool = False
    events: tuple[str, ...] = (WINDOW_CLOSE,)
    max_delay: int | None = None  # processing time, ns
    delete_recalc: bool = False
    clock_close: bool = False
    # not a 3.3.7 option: the legacy CONTINUOUS_WINDOW_CLOSE also closes a group's windows when
    # another group's rows move the stream's event time past them (``stream_closed``)
    stream_close: bool = False
    # the legacy TRIGGER AT_ONCE: every open window a write touches is computed at once, however
    # far the watermark holds its close back (TDengine's pauseAndResume: AT_ONCE WATERMARK 1d)
    at_once: bool = False
    # the legacy IGNORE EXPIRED 1 judges a row expired against its own child table's progress
    # (TDengine's legacy engine tracks each table's newest event time): a row of a table that
    # has not passed the window recalculates it even where other tables closed it
    table_expiry: bool = False
    # the legacy CONTINUOUS_WINDOW_CLOSE's periodic recalculation (processing time, ns): a row
    # in a window its own table has passed, or a delete, waits for the next period
    recalc_every: int | None = None

    @property
    def per_table(self) -> bool:
        """Whether rows are judged against their own child table's progress."""
        return self.table_expiry or self.recalc_every is not None

    @staticmethod
    def new_state() -> GroupState:
        return GroupState()

    def delayed(self, state: GroupState, now: int) -> list[Fired]:
        """MAX_DELAY: open windows (that the watermarked progress has reached) whose delay
        passed since they opened or were last computed, and that got rows since then; and
        the periodic recalculation's windows once its period has passed."""
        fired = []
        # (``_defer`` starts the period with the first deferred window: the two go together)
        since = state.deferred_since
        if self.recalc_every is not None and since is not None and now - since >= self.recalc_every:
            fired += [Fired(RECALC, start, self.spec.end(start), -1) for start in sorted(state.deferred)]
            state.deferred, state.deferred_since = set(), None
        if self.max_delay is None or state.max_ts is None:
            return fired
        progress = state.max_ts - (0 if self.at_once else self.watermark)
        for start in sorted(state.counts):
            count = state.counts[start]
            if start > progress or state.delayed.get(start) == count:
                continue
            if now - state.opened_at.setdefault(start, now) >= self.max_delay:
                fired.append(Fired(MAX_DELAY, start, self.spec.end(start), count))
                state.delayed[start] = count
                state.opened_at[start] = now
        return fired

    def advance(self, state: GroupState, changes: Iterable[Change], now: int = 0) -> list[Fired]:
        fired: list[Fired] = []
        recalculated: set[int] = set()
        state.expired = []
        # a row is expired when its window was closed before this batch of changes: windows its
        # own batch closes take it (TDengine's trigger task moves its progress after a block)
        closed_before = state.next_close
        for change in changes:
            if change.kind == "delete":
                if self.delete_recalc and state.next_close is not None:
                    fired += self._deleted(state, change.ts, recalculated, now)
                continue  # without DELETE_RECALC deletes do not trigger
            ts = change.ts
            if state.next_close is None:
                state.next_close = self.spec.first_start(ts)
            if state.max_ts is None or ts > state.max_ts:
                state.max_ts = ts
                # windows the new progress passes close before the row opens its own (the row
                # never falls in one of them: they end at or before ts - watermark), and a
                # window can close only once the progress passes the first open window's end
                if not self.clock_close and self.spec.end(state.next_close) <= ts - self.watermark:
                    fired.extend(self._close(state, ts - self.watermark))
            for start in self.spec.starts(ts):
                if start < state.next_close:
                    open_for_table = self._open_in_table(state, change, start)
                    closed_then = closed_before is not None and start < closed_before
                    expired = self.ignore_disorder and not open_for_table and closed_then
                    if expired and self.table_expiry and change.table is not None and change.kind != "delete":
                        state.expired.append((change.table, ts))
                    if not expired and self.recalc_every is not None and not open_for_table:
                        self._defer(state, start, now)
                        continue
                    if not expired and start not in recalculated:
                        recalculated.add(start)
                        fired.append(Fired(RECALC, start, self.spec.end(start), -1))
                    continue
                if change.kind == "update" and self.max_delay is not None:
                    state.delayed.pop(start, None)  # a row written again changes the open window
                if change.kind == "insert" and change.weight:
                    previous = state.counts.get(start, 0)
                    state.counts[start] = previous + change.weight
                    if self.max_delay is not None:
                        state.opened_at.setdefault(start, now)
                    if previous == 0 and WINDOW_OPEN in self.events and start not in state.opened:
                        state.opened.add(start)
                        fired.append(Fired(WINDOW_OPEN, start, self.spec.end(start), 0))
            if self.per_table and change.table is not None:
                state.table_max[change.table] = max(ts, state.table_max.get(change.table, ts))
        return fired

    def _defer(self, state: GroupState, start: int, now: int) -> None:
        """A closed window for the periodic recalculation (its period runs from the first)."""
        state.deferred.add(start)
        if state.deferred_since is None:
            state.deferred_since = now

    def _open_in_table(self, state: GroupState, change: Change, start: int) -> bool:
        """``table_expiry``: whether the window at ``start``, closed for the group, is still
        open for the row's own table (its newest event time, less the watermark, has not
        reached the window's end)."""
        if not self.per_table or change.table is None:
            return False
        newest = state.table_max.get(change.table)
        return newest is None or self.spec.end(start) > newest - self.watermark

    def _deleted(self, state: GroupState, ts: int, recalculated: set[int], now: int) -> list[Fired]:
        """DELETE_RECALC: closed windows holding the deleted row are computed again (at the
        next period of a periodic recalculation); open windows just count one row less."""
        assert state.next_close is not None
        fired = []
        for start in self.spec.starts(ts):
            if start < state.next_close:
                if self.recalc_every is not None:
                    self._defer(state, start, now)
                elif start not in recalculated:
                    recalculated.add(start)
                    fired.append(Fired(RECALC, start, self.spec.end(start), -1))
            elif state.counts.get(start):
                state.counts[start] -= 1
        return fired

    def stream_closed(self, state: GroupState, newest: int) -> list[Fired]:
        """``stream_close``: the windows the stream's newest event time ``newest`` (any group's),
        less the watermark, has passed."""
        if not self.stream_close or state.next_close is None:
            return []
        return self._close(state, newest - self.watermark)

    def clock_closed(self, state: GroupState, now: int) -> list[Fired]:
        """``clock_close``: the windows whose end the processing time ``now`` (in the table's
        precision) has reached."""
        if not self.clock_close or state.next_close is None:
            return []
        return self._close(state, now)

    def _close(self, state: GroupState, progress: int) -> list[Fired]:
        assert state.next_close is not None
        # the last window whose end the progress (event time less the watermark, or the
        # processing time) has reached
        last = self.spec.last_closed(progress)
        if last < state.next_close:
            return []
        if self.ignore_nodata:  # jump over empty windows instead of walking a long gap
            starts: Iterable[int] = sorted(s for s in state.counts if s <= last)
        else:
            starts = self.spec.between(state.next_close, last)
        fired = []
        for start in starts:
            count = state.counts.pop(start, 0)
            state.opened_at.pop(start, None)
            state.delayed.pop(start, None)
            if self.ignore_nodata and count == 0:
                # every row deleted before it closed: no window (MAX_DELAY retracted what it wrote)
                state.opened.discard(start)
                continue
            if WINDOW_OPEN in self.events and start not in state.opened:
                fired.append(Fired(WINDOW_OPEN, start, self.spec.end(start), 0))
            if WINDOW_CLOSE in self.events:
                fired.append(Fired(WINDOW_CLOSE, start, self.spec.end(start), count))
            state.opened.discard(start)
        state.next_close = self.spec.after(last)
        return fired
