"""Which trigger a CREATE STREAM describes, as an engine object.

Owns mapping the statement's trigger clause and STREAM_OPTIONS to a configured trigger
(``WindowTrigger`` today) and naming, in one place, what this build does not evaluate yet,
so that a stream using it fails loudly instead of computing something else.
"""

from __future__ import annotations

from ..sql import ast
from .engine import WINDOW_CLOSE, TriggerNotBuiltError, WindowTrigger
from .windows import IntervalSpec

# options the trigger engine does not evaluate yet; a stream using one is not run
_NOT_BUILT_OPTIONS = {
    "EXPIRED_TIME": "EXPIRED_TIME",
    "DELETE_RECALC": "DELETE_RECALC",
    "DELETE_OUTPUT_TABLE": "DELETE_OUTPUT_TABLE",
    "PRE_FILTER": "PRE_FILTER",
    "FORCE_OUTPUT": "FORCE_OUTPUT",
    "MAX_DELAY": "MAX_DELAY (processing-time firing of open windows)",
    "CALC_NOTIFY_ONLY": "CALC_NOTIFY_ONLY",
}


def not_built(stmt: ast.CreateStream) -> list[str]:
    """What the stream needs that this build does not evaluate yet (empty: it runs)."""
    missing = []
    trigger = stmt.trigger
    if not (isinstance(trigger, ast.SlidingTrigger) and trigger.interval is not None):
        missing.append(f"the {trigger.kind} trigger")
    elif trigger.interval.is_calendar:
        missing.append("calendar INTERVAL units (n, y) in triggers")
    for opt in stmt.options:
        if opt.name in _NOT_BUILT_OPTIONS:
            missing.append(_NOT_BUILT_OPTIONS[opt.name])
        if opt.name in ("FILL_HISTORY", "FILL_HISTORY_FIRST") and opt.start is not None:
            missing.append(f"{opt.name} with a start time")
    if stmt.notification is not None:
        missing.append("NOTIFY (notifications)")
    if stmt.query is None:
        missing.append("notify-only streams")
    return missing


def window_trigger_for(stmt: ast.CreateStream, precision: str) -> WindowTrigger:
    missing = not_built(stmt)
    if missing:
        raise TriggerNotBuiltError("not built yet: " + ", ".join(missing))
    trigger = stmt.trigger
    assert isinstance(trigger, ast.SlidingTrigger) and trigger.interval is not None
    spec = IntervalSpec.from_durations(trigger.interval, trigger.sliding, trigger.interval_offset, precision)
    watermark = stmt.option("WATERMARK")
    event_type = stmt.option("EVENT_TYPE")
    return WindowTrigger(
        spec=spec,
        watermark=watermark.duration.in_precision(precision) if watermark and watermark.duration else 0,
        ignore_nodata=stmt.option("IGNORE_NODATA_TRIGGER") is not None,
        ignore_disorder=stmt.option("IGNORE_DISORDER") is not None,
        events=event_type.event_types if event_type else (WINDOW_CLOSE,),
    )
