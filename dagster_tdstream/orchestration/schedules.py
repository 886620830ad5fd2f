"""A PERIOD stream's schedule: TDengine's processing-time ticks as Dagster cron ticks.

Each evaluation is one tick (the scheduled execution time is ``_tlocaltime``): it consumes the
trigger table's WAL since the previous tick, queues one trigger per group (``triggers/``) and
requests the run that computes them, with the trigger sensor's back-pressure and retry rules.
Only grids cron can express get a schedule (``triggers.period.cron_schedules``); the others
stay on the trigger sensor's timer. The schedule keeps no cursor: the tick state lives in the
checkpoint table, so re-evaluating a tick fires nothing twice.
"""

from dagster import (
    AssetsDefinition,
    DefaultScheduleStatus,
    RunRequest,
    ScheduleDefinition,
    ScheduleEvaluationContext,
    SkipReason,
    TimeWindowPartitionsDefinition,
    schedule,
)

from ..triggers.tick import advance_stream
from .resources import TDStreamWarehouse
from .sensors import pending_runs, runnable_stream, tick_failed, tick_succeeded


def build_period_schedule(
    stream_key: str,
    asset: AssetsDefinition,
    partitions: TimeWindowPartitionsDefinition,
    name: str,
    crons: list[str],
    timezone: str,
    *,
    running: bool,
) -> ScheduleDefinition:
    @schedule(
        name=name,
        cron_schedule=crons if len(crons) > 1 else crons[0],
        execution_timezone=timezone,
        target=asset,
        default_status=DefaultScheduleStatus.RUNNING if running else DefaultScheduleStatus.STOPPED,
        description=f"PERIOD ticks of TDengine stream {stream_key}: each tick queues one trigger per group and "
        "requests the run that computes them.",
    )
    def period_schedule(
        context: ScheduleEvaluationContext, tdstream_warehouse: TDStreamWarehouse
    ) -> list[RunRequest] | SkipReason:
        warehouse = tdstream_warehouse.get()
        stream = runnable_stream(warehouse, stream_key, context.instance, name)
        if isinstance(stream, SkipReason):
            return stream
        tick = int(context.scheduled_execution_time.timestamp()) * 10**9
        last = warehouse.catalog.latest_checkpoint_offset(stream.key)
        try:
            advance_stream(warehouse, stream, last, tick_at=tick)
        except Exception as exc:
            return tick_failed(warehouse, stream_key, exc)
        tick_succeeded(warehouse, stream)
        return pending_runs(context.instance, warehouse, stream, partitions)

    return period_schedule
