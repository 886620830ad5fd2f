"""Event-time partitions of a stream's asset.

A window belongs to the partition holding its start. Partitions are coarse (hourly for
windows under an hour, monthly for windows of four weeks or more — months, years —, daily
otherwise) so many windows share one and the asset stays far below Dagster's partition
limits; they start at the day (the month) of the trigger table's earliest row (or the
stream's creation) and run one bucket past today.
"""

from __future__ import annotations

from datetime import UTC, datetime

from dagster import TimeWindowPartitionsDefinition

from ..sql.timeunits import PRECISIONS
from ..storage.registry import StreamDefinition
from ..storage.warehouse import Warehouse
from ..triggers.engine import WindowTrigger
from ..triggers.period import PeriodTrigger
from ..triggers.plan import stream_trigger
from ..triggers.sliding import SlidingPointTrigger

HOURLY, DAILY, MONTHLY = "hourly", "daily", "monthly"
_FORMATS = {HOURLY: "%Y-%m-%d-%H:%M", DAILY: "%Y-%m-%d", MONTHLY: "%Y-%m"}
_CRONS = {HOURLY: "0 * * * *", DAILY: "0 0 * * *", MONTHLY: "0 0 1 * *"}
_HOUR_NANOS = 3600 * 10**9
# a window this long gets monthly partitions: with daily ones a run could take only a window
# or two (a run spans at most sensors.MAX_RUN_PARTITIONS partitions), so years of history of
# a 1n or 1y stream took a run per window
_MONTHLY_NANOS = 28 * 86400 * 10**9
# the shortest partition of each grain: a run's span in these never covers more partitions
SHORTEST_PARTITION_NANOS = {HOURLY: _HOUR_NANOS, DAILY: 86400 * 10**9, MONTHLY: _MONTHLY_NANOS}


def partition_grain(stream: StreamDefinition) -> str:
    """Hourly for INTERVAL windows under an hour, monthly for windows of four weeks or more;
    daily otherwise (row windows have no fixed length, so the coarser bucket keeps the
    partition count low)."""
    trigger = stream_trigger(stream)
    if isinstance(trigger, PeriodTrigger):
        return HOURLY if trigger.spec.step < _HOUR_NANOS else DAILY
    if isinstance(trigger, SlidingPointTrigger):
        length = trigger.spec.step
    elif isinstance(trigger, WindowTrigger):
        length = trigger.spec.reach
    else:
        return DAILY
    nanos = length * PRECISIONS[stream.precision]
    if nanos < _HOUR_NANOS:
        return HOURLY
    return MONTHLY if nanos >= _MONTHLY_NANOS else DAILY


def event_time_bounds(warehouse: Warehouse, stream: StreamDefinition) -> tuple[int, int] | None:
    """The trigger table's earliest and latest timestamps (Delta statistics, no data scan)."""
    return warehouse.key_bounds(stream.trigger_table) if stream.trigger_table is not None else None


def earliest_event_time(warehouse: Warehouse, stream: StreamDefinition) -> datetime:
    """The trigger table's earliest timestamp, or the stream's creation if earlier or unknown."""
    created = datetime.fromtimestamp(stream.info.created_at / 1000, UTC)
    bounds = event_time_bounds(warehouse, stream)
    if bounds is None:
        return created
    return min(to_datetime(bounds[0], stream.precision), created)


def partitions_for(
    warehouse: Warehouse, stream: StreamDefinition, grain: str | None = None
) -> TimeWindowPartitionsDefinition:
    grain = grain or partition_grain(stream)
    start = earliest_event_time(warehouse, stream).replace(hour=0, minute=0, second=0, microsecond=0)
    if grain == MONTHLY:
        start = start.replace(day=1)
    return TimeWindowPartitionsDefinition(
        start=start, fmt=_FORMATS[grain], cron_schedule=_CRONS[grain], timezone="UTC", end_offset=1
    )


def partition_key(partitions: TimeWindowPartitionsDefinition, precision: str, value: int) -> str:
    """The partition holding event time ``value``, clamped into the defined range (a window
    before the first partition or after the last one goes to that end)."""
    last_key = partitions.get_last_partition_key()
    assert last_key is not None  # partitions start at or before today and run past it
    low_bound = partitions.start.timestamp()
    high_bound = partitions.time_window_for_partition_key(last_key).start.timestamp()
    stamp = min(max(to_datetime(value, precision).timestamp(), low_bound), high_bound)
    return partitions.get_partition_key_for_timestamp(stamp)


def to_event_time(value: datetime, precision: str) -> int:
    return int(value.timestamp()) * 10**9 // PRECISIONS[precision]


def to_datetime(value: int, precision: str) -> datetime:
    return datetime.fromtimestamp(value * PRECISIONS[precision] // 10**9, UTC)
