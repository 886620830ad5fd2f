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
from ..sql.walk import walk
from .conditions import holds
from .engine import Fired, GroupState, WindowTrigger
from .period import PeriodTrigger
from .rows import CountTrigger, EventTrigger, RowChange, RowState, RowWindowTrigger, StateTrigger
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
    if isinstance(trigger, StateTrigger):
        names.add(trigger.column)
    elif isinstance(trigger, EventTrigger):
        names.update(trigger.condition_columns)
    elif isinstance(trigger, CountTrigger):
        names.update(trigger.columns)
    if admission.pre_filter is not None:
        names.update(n.name.lower() for n in walk(admission.pre_filter) if isinstance(n, ast.Column))
    return names


def replay(trigger: EventTimeTrigger | PeriodTrigger, rows: Iterable[RowChange]) -> tuple[list[Fired], TriggerState]:
    """Feed a group's rows, in time order, to a fresh state: every trigger they fire and the
    state left (the open window, the progress) for the sensor to continue from."""
    if isinstance(trigger, PeriodTrigger):
        raise TypeError("PERIOD fires on processing time: it has no windows to derive from data")
    state = trigger.new_state()
    ordered = sorted(rows, key=lambda row: row.ts)
    fired = trigger.advance(state, ordered)  # type: ignore[arg-type]
    return fired, state
