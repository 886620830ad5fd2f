"""PERIOD(period[, offset]): processing-time ticks.

Ticks follow TDengine's grid (``PointSpec`` in nanoseconds of the stream's time zone: under a
day, from local midnight plus the offset, restarting daily; a day or more, one fixed grid) and
start after the stream exists. A tick fires one trigger per group: the single group without
a trigger table, otherwise every group the trigger table has shown (with rows since the last
tick, or all known groups unless IGNORE_NODATA_TRIGGER). ``%%trows`` are the trigger table's
rows written between the two ticks, i.e. the WAL records of the offsets the tick consumed.
The trigger sensor evaluates ticks on its own cadence: a best-effort timer, so a tick runs
when the sensor next runs at or after its time, and missed ticks collapse into the latest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .sliding import PointSpec

PERIOD_TICK = "ON_TIME"


@dataclass
class PeriodState:
    next_tick: int | None = None  # ns
    offset: int | None = None  # last WAL offset consumed by a tick
    groups: list[list[Any]] = field(default_factory=list)  # group values seen so far
    max_ts: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"next_tick": self.next_tick, "offset": self.offset, "groups": self.groups}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PeriodState:
        return cls(data.get("next_tick"), data.get("offset"), data.get("groups", []))


@dataclass(frozen=True)
class PeriodTrigger:
    spec: PointSpec  # in ns
    ignore_nodata: bool = False
    max_delay: int | None = None

    @staticmethod
    def new_state() -> PeriodState:
        return PeriodState()

    def due(self, state: PeriodState, now: int) -> int | None:
        """The tick to fire now (the latest one due), or None; schedules the next one."""
        if state.next_tick is None:
            state.next_tick = self.spec.first_at_or_after(now + 1)  # ticks start after CREATE
            return None
        if now < state.next_tick:
            return None
        tick = state.next_tick
        while self.spec.after(tick) <= now:  # missed ticks collapse into the latest
            tick = self.spec.after(tick)
        state.next_tick = self.spec.after(tick)
        return tick
