"""Headless mode: drive every registered stream's sensor and runs in-process.

``StreamHarness`` builds the same definitions a code location would, evaluates each trigger
sensor with Dagster's sensor context (keeping the cursors as the daemon would) and each PERIOD
schedule at the cron ticks the harness clock passed, and executes
the runs the sensors request with ``materialize`` against a Dagster instance, until no sensor
has anything left to do. Used by the tests, the conformance runner and ``tdstream run
--until-idle``. The processing-time clock is injectable for behaviour that depends on it.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from dagster import (
    AssetKey,
    AssetsDefinition,
    DagsterInstance,
    Definitions,
    RunRequest,
    ScheduleDefinition,
    build_schedule_context,
    build_sensor_context,
    materialize,
)
from dagster._core.execution.backfill import BulkActionStatus, PartitionBackfill
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    BACKFILL_ID_TAG,
)
from dagster._core.utils import make_new_backfill_id
from dagster._utils.schedules import schedule_execution_time_iterator

from ..orchestration.definitions import StreamJob, stream_definitions
from ..orchestration.live import has_work
from ..orchestration.notifications import NOTIFICATION_SENSOR, TDStreamNotifier, build_notification_sensor
from ..orchestration.resources import TDStreamSpark, TDStreamWarehouse, close_warehouse
from ..orchestration.sensors import CANNOT_RUN
from ..orchestration.tags import LIVE_MODE, MODE_TAG, UNTIL_IDLE_TAG
from ..orchestration.translator import DagsterTDStreamTranslator
from ..sql import ast
from ..storage.registry import load_stream, load_streams
from ..storage.warehouse import Warehouse


@dataclass
class HarnessReport:
    ticks: int = 0
    runs: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # sensor → last skip reason
    failures: list[str] = field(default_factory=list)
    backfills: list[tuple[str, str, str]] = field(default_factory=list)  # (asset, first, last partition)
    notifications: str = ""  # what the last delivery round said


def _instance_yaml(root: Path) -> str:
    # in its dagster.yaml, so a run process loading the instance by reference (the live worker)
    # sees the same storage; one event log database, not one per run: the harness makes many
    # short runs, and creating each run's database cost ~0.25 s. No compute log capture: the
    # instance is a temporary folder nobody browses, and capturing each run's stdout and
    # stderr started helper processes and waited on them, 0.12 s of a 0.59 s run
    return (
        "telemetry:\n  enabled: false\n"
        "event_log_storage:\n  module: dagster._core.storage.event_log\n"
        f"  class: ConsolidatedSqliteEventLogStorage\n  config:\n    base_dir: {root / 'history'}\n"
        "compute_logs:\n  module: dagster._core.storage.noop_compute_log_manager\n"
        "  class: NoOpComputeLogManager\n"
    )


@functools.cache
def _template() -> tempfile.TemporaryDirectory[str]:
    """An empty instance made once per process, copied for each harness: creating an
    instance's SQLite schemas took 0.9 s, a copy of the files opens in 0.17 s (the conformance
    runner and the tests make a harness per case)."""
    folder = tempfile.TemporaryDirectory(prefix="tdstream-dagster-template-")
    (Path(folder.name) / "dagster.yaml").write_text(_instance_yaml(Path(folder.name)))
    DagsterInstance.local_temp(folder.name).dispose()
    return folder


def _fresh_instance(root: Path) -> DagsterInstance:
    """An empty Dagster instance with its storage in ``root`` (created here)."""
    shutil.copytree(_template().name, root)
    (root / "dagster.yaml").write_text(_instance_yaml(root))
    return DagsterInstance.local_temp(str(root))


class StreamHarness:
    def __init__(
        self,
        warehouse: Warehouse,
        *,
        instance: DagsterInstance | None = None,
        spark_master: str | None = None,
        timezone: str | None = None,
        clock: Callable[[], int] = time.time_ns,
        translator: DagsterTDStreamTranslator | None = None,
        log_level: str = "WARNING",
        notifier: TDStreamNotifier | None = None,
    ) -> None:
        self.log_level = log_level
        self.warehouse = warehouse
        if instance is None:
            # a persistent instance in a temporary folder: schedule contexts load the instance
            # by reference, which an ephemeral one does not have
            self._instance_dir = tempfile.TemporaryDirectory(prefix="tdstream-dagster-")
            instance = _fresh_instance(Path(self._instance_dir.name) / "instance")
        self.instance = instance
        self._clock = clock
        self.skew_ns = 0  # processing time moved forward by ``advance_clock``
        self.translator = translator or DagsterTDStreamTranslator()
        self.resources: dict[str, Any] = {
            "tdstream_warehouse": TDStreamWarehouse(
                uri=warehouse.uri, metadata_url=warehouse.catalog.url, timezone=timezone
            ),
            "tdstream_spark": TDStreamSpark(master=spark_master, warehouse=warehouse.uri),
            "tdstream_notifier": notifier or TDStreamNotifier(),
        }
        self.cursors: dict[str, str | None] = {}
        self._notification_sensor = build_notification_sensor(
            tdstream_warehouse=self.resources["tdstream_warehouse"],
            tdstream_notifier=self.resources["tdstream_notifier"],
        )
        self.schedule_marks: dict[str, float] = {}  # schedule → processing time (s) last looked at
        self.periodic: set[AssetKey] = set()  # the assets of PERIOD streams, as of the last round

    def close(self) -> None:
        """Release what the runs opened in this process for the warehouse (the shared
        ``Warehouse`` of its location, its catalog connections); the warehouse passed in stays
        the caller's to close."""
        resource = self.resources["tdstream_warehouse"]
        close_warehouse(resource.uri, resource.metadata_url)

    def clock(self) -> int:
        """Processing time as the streams see it (ns)."""
        return self._clock() + self.skew_ns

    def advance_clock(self, seconds: float) -> None:
        """Move processing time forward, e.g. past a MAX_DELAY, without waiting."""
        self.skew_ns += int(seconds * 1e9)

    def _definitions(self) -> list[StreamJob]:
        # rebuilt every round: streams created or dropped meanwhile appear or go, as on a reload
        streams = load_streams(self.warehouse)
        jobs = stream_definitions(
            self.warehouse,
            streams,
            self.translator,
            clock=self.clock,
            tdstream_warehouse=self.resources["tdstream_warehouse"],
            tdstream_spark=self.resources["tdstream_spark"],
        )
        periodic = {s.key for s in streams if isinstance(s.stmt.trigger, ast.PeriodTrigger)}
        self.periodic = {job.asset.key for job in jobs if job.stream_key in periodic}
        return jobs

    def tick(self, report: HarnessReport | None = None) -> list[tuple[AssetsDefinition, RunRequest]]:
        """Evaluate every trigger sensor once, and every schedule at its latest cron tick since
        the previous round (missed cron ticks collapse, as the daemon does); return the runs they
        request."""
        report = report or HarnessReport()
        requests = []
        jobs = self._definitions()
        # the code location as the daemon sees it (sensors resolve asset selections against it)
        definitions = Definitions(
            assets=[job.asset for job in jobs],
            sensors=[job.sensor for job in jobs if job.sensor is not None],
            schedules=[job.schedule for job in jobs if job.schedule is not None],
            resources=self.resources,
        )
        # the outbox first, as the daemon's notification sensor would (a paused stream resumes
        # once its backlog is through)
        delivered = self._notification_sensor.evaluate_tick(
            build_sensor_context(
                instance=self.instance,
                sensor_name=NOTIFICATION_SENSOR,
                resources=self._required(self._notification_sensor.required_resource_keys),
            )
        )
        report.notifications = delivered.skip_message or ""
        for job in jobs:
            if job.sensor is not None:
                data = job.sensor.evaluate_tick(
                    build_sensor_context(
                        instance=self.instance,
                        cursor=self.cursors.get(job.sensor.name),
                        sensor_name=job.sensor.name,
                        resources=self._required(job.sensor.required_resource_keys),
                        definitions=definitions,
                    )
                )
                if data.cursor is not None:
                    self.cursors[job.sensor.name] = data.cursor
                name = job.sensor.name
            else:
                assert job.schedule is not None
                due = self._due_tick(job.schedule)
                if due is None:
                    continue
                data = job.schedule.evaluate_tick(
                    build_schedule_context(
                        instance=self.instance,
                        scheduled_execution_time=due,
                        resources=self._required(job.schedule.required_resource_keys),
                    )
                )
                name = job.schedule.name
            report.ticks += 1
            if data.skip_message and CANNOT_RUN in data.skip_message:
                # a tick that could not advance (``sensors.tick_failed``) is a failure, not a skip
                report.failures.append(f"{name}: {data.skip_message}")
            if data.skip_message:
                report.skipped[name] = data.skip_message
            else:
                report.skipped.pop(name, None)
            requests += [self._headless(job, request) for request in data.run_requests or []]
        return [request for request in requests if request is not None]

    def _required(self, keys: AbstractSet[str]) -> dict[str, Any]:
        """The resources a tick's context gets: those its sensor or schedule requires, as the
        daemon builds them (``dagster._grpc.impl``); building the others cost 50 ms a tick."""
        return {key: value for key, value in self.resources.items() if key in keys}

    def _headless(self, job: StreamJob, request: RunRequest) -> tuple[AssetsDefinition, RunRequest] | None:
        """A live run (LOW_LATENCY_CALC) headless: started only when it has something to do,
        and ending once it is idle rather than watching the WAL for an hour."""
        if request.tags.get(MODE_TAG) != LIVE_MODE:
            return job.asset, request
        if not has_work(self.warehouse, load_stream(self.warehouse, job.stream_key)):
            return None
        return job.asset, request.with_replaced_attrs(tags={**request.tags, UNTIL_IDLE_TAG: "true"})

    def _due_tick(self, schedule: ScheduleDefinition) -> datetime | None:
        """The latest cron tick after the schedule was last looked at, up to now; a schedule
        seen for the first time starts now (its stream's ticks start after it exists)."""
        now = self.clock() / 1e9
        last = self.schedule_marks.setdefault(schedule.name, now)
        self.schedule_marks[schedule.name] = now
        due = None
        for at in schedule_execution_time_iterator(last, schedule.cron_schedule, schedule.execution_timezone):
            if at.timestamp() > now:
                break
            if at.timestamp() > last:
                due = at
        return due

    def run(self, asset: AssetsDefinition, request: RunRequest, report: HarnessReport) -> None:
        tags = dict(request.tags)
        backfill = None
        if request.asset_graph_subset is not None:
            # a backfill (RECALCULATE): stored in the instance as the sensor daemon stores it,
            # and run as the backfill daemon would, one run over the partition range (the
            # asset's backfill policy is single-run)
            backfill = PartitionBackfill.from_asset_graph_subset(
                backfill_id=make_new_backfill_id(),
                dynamic_partitions_store=self.instance,
                backfill_timestamp=time.time(),
                asset_graph_subset=request.asset_graph_subset,
                tags=tags,
                title=None,
                description=None,
                run_config=None,
            )
            self.instance.add_backfill(backfill)
            keys = sorted(request.asset_graph_subset.partitions_subsets_by_asset_key[asset.key].get_partition_keys())
            tags.update({ASSET_PARTITION_RANGE_START_TAG: keys[0], ASSET_PARTITION_RANGE_END_TAG: keys[-1]})
            tags[BACKFILL_ID_TAG] = backfill.backfill_id
            report.backfills.append((asset.key.to_user_string(), keys[0], keys[-1]))
        result = materialize(
            [asset],
            instance=self.instance,
            resources=self.resources,
            tags=tags,
            raise_on_error=False,
            run_config={"loggers": {"console": {"config": {"log_level": self.log_level}}}},
        )
        report.runs += 1
        if backfill is not None:
            done = BulkActionStatus.COMPLETED_SUCCESS if result.success else BulkActionStatus.COMPLETED_FAILED
            self.instance.update_backfill(backfill.with_status(done).with_end_timestamp(time.time()))
        if not result.success:
            errors = []
            for event in result.get_step_failure_events():
                error = event.step_failure_data.error
                while error is not None and error.cause is not None:
                    error = error.cause  # the user code's error, not Dagster's wrapper
                if error is not None:
                    errors.append(error.message.strip())
            report.failures.append(f"{asset.key.to_user_string()}: {errors[0] if errors else 'run failed'}")

    def run_until_idle(self, max_rounds: int = 50) -> HarnessReport:
        """Tick and run until a round requests no run (bounded by ``max_rounds``). PERIOD
        ticks never stop: a round that only requests runs of PERIOD streams that have already
        run since the call began is idle too — their outputs are up to date, only the clock
        is left (the triggers requested stay queued for the next call)."""
        report = HarnessReport()
        ran: set[AssetKey] = set()
        for _ in range(max_rounds):
            requests = self.tick(report)
            if all(asset.key in ran and asset.key in self.periodic for asset, _ in requests):
                return report
            for asset, request in requests:
                self.run(asset, request, report)
                ran.add(asset.key)
            if report.failures:
                return report  # a failed run would be requested again with the same triggers
        report.failures.append(f"not idle after {max_rounds} rounds")
        return report
