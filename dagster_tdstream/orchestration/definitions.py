"""The ``Definitions`` builder: every registered stream as an asset and a trigger sensor (or,
for PERIOD streams on a whole-minute grid, a schedule), and the live worker that computes
the streams' small batches (``worker.py``).

``build_definitions`` applies the ``.sql`` files it is given (idempotently: CREATE … as
IF NOT EXISTS, so a code-location reload never fails on objects that exist), then builds
definitions from the warehouse's stream registry — streams created at run time with
``tdstream sql`` appear on the next reload like the ones in files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dagster import (
    AssetChecksDefinition,
    AssetsDefinition,
    Definitions,
    ScheduleDefinition,
    SensorDefinition,
    in_process_executor,
)

from ..names import definition_name, schedule_name, sensor_name
from ..session import Session
from ..sql.timeunits import resolve_timezone
from ..storage.registry import StreamDefinition, load_streams
from ..storage.warehouse import Warehouse
from ..triggers.plan import period_crons
from .assets import build_stream_asset
from .checks import build_lag_check
from .control import DagsterLink
from .notifications import TDStreamNotifier, build_notification_sensor
from .partitions import partitions_for
from .resources import TDStreamSpark, TDStreamWarehouse
from .schedules import build_period_schedule
from .sensors import build_trigger_sensor
from .translator import DagsterTDStreamTranslator
from .worker import build_live_worker

DEFAULT_MAX_LAG_SECONDS = 600.0


@dataclass
class TDStreamProject:
    """A warehouse plus the SQL files that set it up (schemas and streams)."""

    warehouse: str | None = None
    sql_files: Sequence[str | Path] = ()
    metadata_url: str | None = None
    # a Spark Connect URL, or the master of the warm local Connect server; None: the
    # TDSTREAM_SPARK_MASTER environment, then local[2]
    spark_master: str | None = None
    spark_config: dict[str, str] = field(default_factory=dict)
    timezone: str | None = None
    partition_grain: str | None = None  # hourly | daily | monthly; default chosen from each window
    max_lag_seconds: float = DEFAULT_MAX_LAG_SECONDS  # the lag check's bound (event time)
    notifier: TDStreamNotifier = field(default_factory=TDStreamNotifier)  # NOTIFY delivery settings

    def open_warehouse(self) -> Warehouse:
        return Warehouse(self.warehouse, metadata_url=self.metadata_url)

    def apply_sql_files(self, warehouse: Warehouse) -> None:
        session = Session(warehouse, timezone=self.timezone)
        for path in self.sql_files:
            session.apply(Path(path).read_text())


@dataclass(frozen=True)
class StreamJob:
    """A stream in Dagster: its asset and what starts its runs — the trigger sensor, or for a
    PERIOD that cron can express, a schedule."""

    stream_key: str
    asset: AssetsDefinition
    lag_check: AssetChecksDefinition
    notifies: bool
    sensor: SensorDefinition | None = None
    schedule: ScheduleDefinition | None = None


def stream_definitions(
    warehouse: Warehouse,
    streams: Iterable[StreamDefinition],
    translator: DagsterTDStreamTranslator,
    partition_grain: str | None = None,
    clock: Callable[[], int] = time.time_ns,
    max_lag_seconds: float = DEFAULT_MAX_LAG_SECONDS,
    *,
    tdstream_warehouse: TDStreamWarehouse,
    tdstream_spark: TDStreamSpark,
) -> list[StreamJob]:
    """Each stream's asset, lag check and sensor or schedule; the sensors use the given
    resources (the ones the definitions carry)."""
    jobs = []
    for stream in streams:
        spec = translator.get_asset_spec(stream)
        partitions = partitions_for(warehouse, stream, partition_grain)
        notifies = stream.stmt.notification is not None
        asset = build_stream_asset(
            stream.key, spec, partitions, definition_name(stream.key), notifies=notifies, clock=clock
        )
        running = stream.info.status != "Stopped"
        lag_check = build_lag_check(stream.key, spec.key, max_lag_seconds)
        crons = period_crons(stream)
        if crons is not None:
            zone = resolve_timezone(stream.info.timezone).key
            schedule = build_period_schedule(
                stream.key, asset, partitions, schedule_name(stream.key), crons, zone, running=running
            )
            jobs.append(StreamJob(stream.key, asset, lag_check, notifies, schedule=schedule))
            continue
        sensor = build_trigger_sensor(
            stream.key, asset, partitions, sensor_name(stream.key), running=running, clock=clock,
            tdstream_warehouse=tdstream_warehouse, tdstream_spark=tdstream_spark,
        )  # fmt: skip
        jobs.append(StreamJob(stream.key, asset, lag_check, notifies, sensor=sensor))
    return jobs


def build_definitions(
    project: TDStreamProject | None = None, *, translator: DagsterTDStreamTranslator | None = None
) -> Definitions:
    project = project or TDStreamProject()
    warehouse = project.open_warehouse()
    project.apply_sql_files(warehouse)
    # SQL sessions in other shells find this Dagster here (CREATE STREAM reloads us, STOP
    # STREAM switches our sensors)
    link = DagsterLink.from_environment()
    if link is not None:
        link.record(warehouse)
    translator = translator or DagsterTDStreamTranslator()
    warehouse_resource = TDStreamWarehouse(
        uri=warehouse.uri, metadata_url=project.metadata_url, timezone=project.timezone
    )
    spark = TDStreamSpark(master=project.spark_master, warehouse=warehouse.uri, spark_config=dict(project.spark_config))
    jobs = stream_definitions(
        warehouse,
        load_streams(warehouse),
        translator,
        project.partition_grain,
        max_lag_seconds=project.max_lag_seconds,
        tdstream_warehouse=warehouse_resource,
        tdstream_spark=spark,
    )
    worker_job, worker_sensor = build_live_worker(
        translator, project.partition_grain, tdstream_warehouse=warehouse_resource, tdstream_spark=spark
    )
    return Definitions(
        assets=[job.asset for job in jobs],
        asset_checks=[job.lag_check for job in jobs],
        jobs=[worker_job],
        sensors=[
            *(job.sensor for job in jobs if job.sensor is not None),
            worker_sensor,
            # the outbox's retries, where some stream notifies
            *(
                [build_notification_sensor(tdstream_warehouse=warehouse_resource, tdstream_notifier=project.notifier)]
                if any(job.notifies for job in jobs)
                else []
            ),
        ],
        schedules=[job.schedule for job in jobs if job.schedule is not None],
        # a stream's run is one Spark job on the warm server plus its lag check: a step
        # subprocess each would cost seconds of interpreter start and imports for nothing
        executor=in_process_executor,
        resources={
            "tdstream_warehouse": warehouse_resource,
            "tdstream_spark": spark,
            "tdstream_notifier": project.notifier,
        },
    )
