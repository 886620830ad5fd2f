"""SLIDING(s[, offset]) without INTERVAL: a time-point trigger on event time.

Points follow PERIOD's rule on event time: with a step under a day they start each local day
at midnight plus the offset and restart the next day (a step that divides the day gives one
even grid); a step of a day or more never restarts (one fixed grid). A point fires once the group's data has
reached it (a row exactly on the point fires it); ``_tcurrent_ts`` is the point,
``_tprev_ts``/``_tnext_ts`` its neighbours, and ``%%trows`` the rows after the previous point
up to this one. Disorder, updates and deletes are ignored, as TDengine does for SLIDING.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from ..sql.timeunits import DAY_NANOS, PRECISIONS
from .engine import Fired

ON_TIME = "ON_TIME"


@dataclass(frozen=True)
class PointSpec:
    step: int  # in the table's precision
    offset: int
    precision: str
    timezone: ZoneInfo

    def _midnight(self, ts: int) -> int:
        per = PRECISIONS[self.precision]
        local = datetime.fromtimestamp(ts * per / 1e9, self.timezone)
        midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
        return int(midnight.timestamp()) * 10**9 // per

    def _day(self) -> int:
        return DAY_NANOS // PRECISIONS[self.precision]

    def first_at_or_after(self, ts: int) -> int:
        """The first point at or after ``ts``."""
        day = self._day()
        if self.step >= day:
            # no daily restart: one fixed grid (anchored at the epoch's local midnight, where
            # TDengine anchors at the day the stream starts; the spacing is the same)
            base = self._midnight(0) + self.offset
            return base + -(-(ts - base) // self.step) * self.step
        base = self._midnight(ts) + self.offset
        if ts < base:  # before today's first point: the point is on yesterday's grid
            base = self._midnight(ts - day) + self.offset
        next_base = self._midnight(base - self.offset + day + day // 2) + self.offset
        candidate = base + -(-(ts - base) // self.step) * self.step
        return candidate if candidate < next_base else next_base

    def after(self, point: int) -> int:
        return self.first_at_or_after(point + 1)

    def before(self, point: int) -> int:
        """The point preceding ``point`` (for ``_tprev_ts``)."""
        guess = point - self.step
        nxt = self.after(guess)
        while nxt < point:
            guess, nxt = nxt, self.after(nxt)
        return guess


@dataclass
class PointState:
    next_point: int | None = None
    rows: int = 0  # rows since the last point fired
    max_ts: int | None = None
    late_from: int | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"next_point": self.next_point, "rows": self.rows, "max_ts": self.max_ts}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PointState:
        return cls(data.get("next_point"), data.get("rows", 0), data.get("max_ts"))


@dataclass(frozen=True)
class SlidingPointTrigger:
    spec: PointSpec
    ignore_nodata: bool = False
    max_delay: int | None = None  # not a window trigger: MAX_DELAY does not apply

    @staticmethod
    def new_state() -> PointState:
        return PointState()

    def advance(self, state: PointState, changes: Iterable[Any], now: int = 0) -> list[Fired]:
        del now
        fired: list[Fired] = []
        for change in changes:
            if change.kind != "insert" or (state.max_ts is not None and change.ts <= state.max_ts):
                continue  # disorder, updates and deletes do not trigger a SLIDING stream
            if state.next_point is None:
                state.next_point = self.spec.first_at_or_after(change.ts)
            # points the data passed before this row; the row belongs to the next point
            while state.next_point < change.ts:
                self._fire(state, fired)
            state.rows += 1
            state.max_ts = change.ts
            if state.next_point == change.ts:
                self._fire(state, fired)
        return fired

    def _fire(self, state: PointState, fired: list[Fired]) -> None:
        assert state.next_point is not None
        point = state.next_point
        if state.rows or not self.ignore_nodata:
            detail = {"prev": self.spec.before(point), "next": self.spec.after(point)}
            fired.append(Fired(ON_TIME, point, point, state.rows, detail))
        state.rows = 0
        state.next_point = self.spec.after(point)

    def delayed(self, state: PointState, now: int) -> list[Fired]:
        return []
