"""PERIOD(period[, offset]): processing-time ticks.

Ticks follow TDengine's grid (``PointSpec`` in nanoseconds of the stream's time zone: under a
day, from local midnight plus the offset, restarting daily; a day or more, one fixed grid) and
start after the stream exists. A tick fires one trigger per group: the single group without
a trigger table, otherwise every group the trigger table has shown (with rows since the last
tick, or all known groups unless IGNORE_NODATA_TRIGGER). ``%%trows`` are the trigger table's
rows written between the two ticks, i.e. the WAL records of the offsets the tick consumed.
Where cron can express the grid (whole minutes), ``cron_schedules`` gives the cron strings and
the stream runs as a Dagster schedule, one evaluation per tick (``PeriodTrigger.at``).
Otherwise (sub-minute periods, second offsets, multi-day steps cron cannot count) the trigger
sensor is the timer (``PeriodTrigger.due``): a tick runs when the sensor next runs at or after
its time, and ticks missed meanwhile fire too, each with its own ``_tlocaltime``, as TDengine's
do (its outputs keyed by ``_tlocaltime`` have no gaps, even at 10a) — up to
``MAX_MISSED_TICKS``, so that an outage of the daemon does not bury the live ticks under a
replay of every tick it missed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..sql.timeunits import DAY_NANOS
from .sliding import PointSpec

_MINUTE = 60 * 10**9
_WEEK = 7 * DAY_NANOS
_EPOCH_WEEKDAY = 4  # 1970-01-01, where the grid of steps of a day or more is anchored, was a Thursday

PERIOD_TICK = "ON_TIME"
MAX_MISSED_TICKS = 1000  # 10 s of PERIOD(10a), 16 min of PERIOD(1s)


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

    def due(self, state: PeriodState, now: int) -> list[int]:
        """The ticks to fire now, oldest first: every tick since the last one fired, at most
        ``MAX_MISSED_TICKS`` (the latest ones); schedules the next one."""
        if state.next_tick is None:
            state.next_tick = self.spec.first_at_or_after(now + 1)  # ticks start after CREATE
            return []
        ticks: deque[int] = deque(maxlen=MAX_MISSED_TICKS)
        # after a long outage, start near the ticks that are kept rather than walk every one
        tick = max(state.next_tick, self.spec.first_at_or_after(now - MAX_MISSED_TICKS * self.spec.step))
        while tick <= now:
            ticks.append(tick)
            tick = self.spec.after(tick)
        state.next_tick = tick
        return list(ticks)

    def at(self, state: PeriodState, tick: int) -> int | None:
        """A schedule's evaluation at ``tick``: fires it unless it already fired (a re-evaluated
        tick fires nothing twice); the next tick is the one after it."""
        if state.next_tick is not None and tick < state.next_tick:
            return None
        state.next_tick = self.spec.after(tick)
        return tick


def cron_schedules(spec: PointSpec) -> list[str] | None:
    """The cron strings (in the stream's time zone) firing exactly on the tick grid, or None
    when cron cannot express it: a step or offset that is not whole minutes, or a step of
    more than a day other than a week."""
    if spec.step % _MINUTE or spec.offset % _MINUTE:
        return None
    step, offset = spec.step // _MINUTE, spec.offset // _MINUTE
    day = DAY_NANOS // _MINUTE
    if spec.step >= DAY_NANOS:
        minute, hour = offset % 60, (offset // 60) % 24
        if spec.step == DAY_NANOS:
            return [f"{minute} {hour} * * *"]
        if spec.step == _WEEK:
            weekday = (_EPOCH_WEEKDAY + offset // day) % 7
            return [f"{minute} {hour} * * {weekday}"]
        return None
    # under a day: the grid restarts at each local midnight plus the offset
    minutes_of_day = sorted({(offset + k * step) % day for k in range(-(-day // step))})
    hours_by_minute: dict[int, list[int]] = {}
    for value in minutes_of_day:
        hours_by_minute.setdefault(value % 60, []).append(value // 60)
    minutes_by_hours: dict[tuple[int, ...], list[int]] = {}
    for minute, hours in sorted(hours_by_minute.items()):
        minutes_by_hours.setdefault(tuple(hours), []).append(minute)
    return [
        f"{_field(minutes, 60)} {_field(list(hours), 24)} * * *" for hours, minutes in sorted(minutes_by_hours.items())
    ]


def _field(values: list[int], size: int) -> str:
    return "*" if len(values) == size else ",".join(str(v) for v in values)
