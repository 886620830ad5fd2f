"""Which trigger a CREATE STREAM describes, as an engine object.

Owns mapping the statement's trigger clause and STREAM_OPTIONS to a configured trigger
(``WindowTrigger`` for INTERVAL, the row windows of ``rows.py``).
"""

from __future__ import annotations

from ..sql import ast
from ..sql.intervals import IntervalSpec
from ..sql.timeunits import resolve_timezone
from ..sql.walk import walk
from ..storage.registry import StreamDefinition
from .engine import WINDOW_CLOSE, WindowTrigger
from .period import PeriodTrigger, cron_schedules
from .replay import Admission
from .rows import CountTrigger, EventTrigger, RowWindowTrigger, SessionTrigger, StateTrigger
from .sliding import PointSpec, SlidingPointTrigger

Trigger = WindowTrigger | RowWindowTrigger | SlidingPointTrigger | PeriodTrigger


def computed_events(stmt: ast.CreateStream) -> tuple[str, ...]:
    """The window events the stream's query runs on: EVENT_TYPE, WINDOW_CLOSE by default."""
    event_type = stmt.option("EVENT_TYPE")
    return event_type.event_types if event_type else (WINDOW_CLOSE,)


def trigger_for(stmt: ast.CreateStream, precision: str, timezone: str | None = None) -> Trigger:
    trigger = stmt.trigger
    # the trigger fires what the query runs on and what NOTIFY … ON sends (an open only
    # notified is not computed: see compute/run.py)
    notified = stmt.notification.on if stmt.notification is not None else ()
    events = tuple(dict.fromkeys((*computed_events(stmt), *(e for e in notified if e != "ON_TIME"))))
    ignore_disorder = stmt.option("IGNORE_DISORDER") is not None
    delete_recalc = stmt.option("DELETE_RECALC") is not None
    max_delay_option = stmt.option("MAX_DELAY")
    max_delay = max_delay_option.duration.nanos if max_delay_option and max_delay_option.duration else None
    at_once = stmt.option(ast.AT_ONCE) is not None
    if at_once and not isinstance(trigger, ast.EventTrigger):
        # not a 3.3.7 option: the legacy TRIGGER AT_ONCE computes every window a write
        # touches at once, which is MAX_DELAY with no delay — except an event window, which
        # TDengine writes only once its end condition holds (at once then)
        max_delay = 0
    if isinstance(trigger, ast.PeriodTrigger):
        offset = trigger.offset.nanos if trigger.offset else 0
        ticks = PointSpec(trigger.period.nanos, offset, "ns", resolve_timezone(timezone))
        return PeriodTrigger(ticks, ignore_nodata=stmt.option("IGNORE_NODATA_TRIGGER") is not None)
    if isinstance(trigger, ast.SlidingTrigger) and trigger.interval is None:
        offset = trigger.sliding_offset.in_precision(precision) if trigger.sliding_offset else 0
        points = PointSpec(trigger.sliding.in_precision(precision), offset, precision, resolve_timezone(timezone))
        return SlidingPointTrigger(points, ignore_nodata=stmt.option("IGNORE_NODATA_TRIGGER") is not None)
    if isinstance(trigger, ast.SlidingTrigger):
        spec = IntervalSpec.from_durations(
            trigger.interval, trigger.sliding, trigger.interval_offset, precision, resolve_timezone(timezone).key
        )
        watermark = stmt.option("WATERMARK")
        recalc = stmt.option(ast.RECALC_PERIOD)
        return WindowTrigger(
            spec=spec,
            watermark=watermark.duration.in_precision(precision) if watermark and watermark.duration else 0,
            ignore_nodata=stmt.option("IGNORE_NODATA_TRIGGER") is not None,
            ignore_disorder=ignore_disorder,
            events=events,
            max_delay=max_delay,
            delete_recalc=delete_recalc,
            # not a 3.3.7 option: the statement families that close windows by the wall clock
            # (2.x continuous queries, legacy FORCE_WINDOW_CLOSE) map onto it
            clock_close=stmt.option(ast.FORCE_WINDOW_CLOSE) is not None,
            stream_close=stmt.option(ast.STREAM_EVENT_TIME) is not None,
            at_once=at_once,
            table_expiry=stmt.option(ast.TABLE_EXPIRY) is not None,
            recalc_every=recalc.duration.nanos if recalc is not None and recalc.duration else None,
        )
    watermark = stmt.option("WATERMARK")
    true_for = None
    if isinstance(trigger, ast.StateTrigger | ast.EventTrigger) and trigger.true_for is not None:
        true_for = trigger.true_for.in_precision(precision)
    common = {
        "true_for": true_for,
        "events": events,
        "ignore_disorder": ignore_disorder,
        "watermark": watermark.duration.in_precision(precision) if watermark and watermark.duration else 0,
        "max_delay": max_delay,
        "delete_recalc": delete_recalc,
        "at_once": at_once,
        "counts_rewrites": stmt.option(ast.WRITTEN_ROWS) is not None,
    }
    if isinstance(trigger, ast.StateTrigger):
        if isinstance(trigger.expr, ast.Column):
            return StateTrigger(**common, column=trigger.expr.name.lower())
        return StateTrigger(**common, expr=trigger.expr)
    if isinstance(trigger, ast.SessionTrigger):
        return SessionTrigger(**common, gap=trigger.gap.in_precision(precision))
    if isinstance(trigger, ast.EventTrigger):
        columns = tuple(
            dict.fromkeys(
                n.name.lower() for c in (*trigger.start, *trigger.end) for n in walk(c) if isinstance(n, ast.Column)
            )
        )
        return EventTrigger(**common, starts=trigger.start, ends=trigger.end, condition_columns=columns)
    assert isinstance(trigger, ast.CountTrigger)
    return CountTrigger(
        **common,
        size=trigger.count,
        slide=trigger.sliding or trigger.count,
        columns=tuple(c.name.lower() for c in trigger.columns),
        recalculates=stmt.option(ast.RECALC_COUNT_WINDOW) is not None,
    )


def stream_admission(stream: StreamDefinition) -> Admission:
    """Which of the trigger table's rows reach the stream's trigger."""
    pre_filter = stream.stmt.option("PRE_FILTER")
    return Admission(stream.history_start, pre_filter.expr if pre_filter is not None else None)


def period_crons(stream: StreamDefinition) -> list[str] | None:
    """Cron strings for a PERIOD stream whose grid cron can express (it runs on a schedule);
    None otherwise (other triggers, sub-minute periods: the trigger sensor's timer)."""
    trigger = stream_trigger(stream)
    return cron_schedules(trigger.spec) if isinstance(trigger, PeriodTrigger) else None


def stream_trigger(stream: StreamDefinition) -> Trigger:
    """The trigger of a registered stream (its time literals in the stream's time zone)."""
    return trigger_for(stream.stmt, stream.precision, stream.info.timezone)
