"""The live worker: one long-lived Dagster run that computes the small batches of every
data-triggered stream on the warm Spark session.

Without it each batch of fired windows is a run of its own, and a run pays a process, the
code location's imports and a Spark session (seconds) before it computes anything; with a
few dozen streams the runs also queue behind each other. The trigger sensors still read the
WAL and queue what fired (checkpointed state, as before); the worker run (job
``tdstream_live_worker``, kept alive by the sensor of the same name) polls the trigger queue
a few times a second, computes each stream's pending triggers in one Spark job, finishes them
with their notifications in one catalog transaction, delivers those at once, and records each
computed window as a materialization of its partition of the stream's asset — in the UI like
any other materialization, naming the worker's run.

A trigger sensor leaves its pending triggers to the worker while one is running and the batch
is small (``serves``); otherwise — no worker, a large catch-up batch, a stream whose last
computation failed (its error is on the stream), a stream with a batch run or a backfill
going — the batch path of ``sensors.py`` runs as before, with its retries and failed runs in
the UI. Both paths finish triggers idempotently (``live.py``), so a race between them
computes a batch twice at worst and records it once. ``LOW_LATENCY_CALC`` streams have live
runs of their own (``live.py``) that also read the WAL; PERIOD streams have schedules.
Stopping a stream, switching its sensor off, or terminating or switching off the worker in
the UI, takes the stream, or everything, out of the worker.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

from dagster import (
    AssetKey,
    Config,
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    JobDefinition,
    OpExecutionContext,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    TimeWindowPartitionsDefinition,
    in_process_executor,
    job,
    op,
    sensor,
)

from ..compute.run import rows_span
from ..compute.shared_rows import share_rows
from ..errors import SparkUnavailableError, TDStreamError
from ..names import sensor_name
from ..storage.registry import StreamDefinition, load_stream, load_streams
from ..storage.warehouse import Warehouse
from .control import switched_states
from .instance import tick_instance
from .live import LIVE_RUN_SECONDS, POLL_SECONDS, active_live_run, compute_batch, is_live, live_request
from .notifications import TDStreamNotifier
from .partitions import partitions_for
from .resources import TDStreamSpark, TDStreamWarehouse
from .tags import ACTIVE_STATUSES, BATCH_POOL, POOL_TAG, STREAM_TAG, UNTIL_IDLE_TAG
from .translator import DagsterTDStreamTranslator, code_version

WORKER = "tdstream_live_worker"  # the job, its keeper sensor and the LIVE_TAG of its runs
WORKER_OP = "serve_streams"  # the job's one op (its config: WorkerConfig)
# a larger backlog (catching up after downtime, a burst) is a batch run of its own: it shows
# as one run in the UI and does not hold up the other streams' small batches
MAX_WORKER_TRIGGERS = 2000
REFRESH_SECONDS = 1.0  # how old the worker's view of switches and batch runs may be


def serves(stream: StreamDefinition) -> bool:
    """Whether the worker computes this stream's small batches (when a worker runs)."""
    return (
        stream.stmt.trigger.kind != "PERIOD"
        and not is_live(stream)
        and not stream.info.last_error  # failed: the batch path retries it, visibly
        and not stream.info.paused
        and stream.info.status != "Stopped"
    )


def is_small(pending: int) -> bool:
    """Whether a batch of this many pending triggers is the worker's (larger: a batch run)."""
    return pending <= MAX_WORKER_TRIGGERS


def worker_run_id(instance: DagsterInstance) -> str | None:
    """The queued or running worker run, if any."""
    run = active_live_run(instance, WORKER)
    return None if run is None else run.run_id


class WorkerConfig(Config):
    seconds: float = LIVE_RUN_SECONDS  # then the keeper sensor starts a fresh run
    poll_seconds: float = POLL_SECONDS


@dataclass
class _Served:
    """What the worker knows of a stream between polls."""

    version: str  # the statement's code version: a dropped and re-created stream is new
    asset_key: AssetKey
    partitions: TimeWindowPartitionsDefinition


class _View:
    """The Dagster side of the worker's decisions, refreshed at most once a second: which
    sensors are switched off, which streams have a batch run or backfill going, whether the
    worker itself was switched off or is being terminated."""

    def __init__(self, instance: DagsterInstance, run_id: str) -> None:
        self.instance, self.run_id = instance, run_id
        self.at = -REFRESH_SECONDS
        self.switched: dict[str, str] = {}
        self.busy: set[str] = set()
        self.ending = False

    def refresh(self) -> None:
        if time.monotonic() - self.at < REFRESH_SECONDS:
            return
        self.switched = switched_states(self.instance)
        runs = self.instance.get_runs(filters=RunsFilter(tags={POOL_TAG: BATCH_POOL}, statuses=ACTIVE_STATUSES))
        self.busy = {run.tags[STREAM_TAG] for run in runs if STREAM_TAG in run.tags}
        own = self.instance.get_run_by_id(self.run_id)
        canceling = own is not None and own.status in (DagsterRunStatus.CANCELING, DagsterRunStatus.CANCELED)
        self.ending = canceling or self.switched.get(WORKER) == "Stopped"
        self.at = time.monotonic()


def serve(
    context: OpExecutionContext,
    spark: Any,
    warehouse: Warehouse,
    notifier: TDStreamNotifier,
    translator: DagsterTDStreamTranslator,
    zone: Callable[[StreamDefinition], ZoneInfo],
    *,
    partition_grain: str | None = None,
    until_idle: bool = False,
    seconds: float = LIVE_RUN_SECONDS,
    poll_seconds: float = POLL_SECONDS,
) -> int:
    """The worker's loop; returns the number of windows it computed. Ends after ``seconds``,
    when the worker is switched off or terminated, or (``until_idle``) when it has nothing to
    do."""
    view = _View(context.instance, context.run.run_id)
    known: dict[str, _Served] = {}
    deadline = time.monotonic() + seconds
    windows = 0
    while time.monotonic() < deadline:
        view.refresh()
        if view.ending:
            break
        batches = _round(warehouse, view)
        reads = [(s.key, s.trigger_table, span) for s, _, span in batches if span and s.trigger_table is not None]
        shared = share_rows(spark, warehouse, reads)
        computed = 0
        try:
            for stream, pending, _ in batches:
                served = _served(known, warehouse, stream, translator, partition_grain)
                try:
                    windows += compute_batch(
                        context, spark, warehouse, stream, pending, zone(stream), notifier, served.asset_key,
                        served.partitions, offsets=f"{pending[0]['offset']}..{pending[-1]['offset']}",
                        shared=shared.get(stream.key),
                    )  # fmt: skip
                except SparkUnavailableError:
                    raise  # every stream would fail the same way: the run fails, the sensors take over
                except Exception as exc:
                    # the stream says Failed with the reason (SHOW STREAMS, the UI's sensor) and
                    # its sensor retries the batch as a run of its own; the other streams go on
                    context.log.error(f"stream {stream.key}: computing {len(pending)} trigger(s) failed: {exc}")
                    warehouse.catalog.set_stream_error(stream.key, f"run {context.run.run_id} failed: {exc}")
                    continue
                computed += 1
        finally:
            for rows in {id(rows): rows for rows in shared.values()}.values():
                rows.release()
        if not computed:
            if until_idle:
                break
            time.sleep(poll_seconds)
    return windows


def _round(
    warehouse: Warehouse, view: _View
) -> list[tuple[StreamDefinition, list[dict[str, Any]], tuple[int, int] | None]]:
    """The batches of one round: each served stream with a small pending batch, its triggers
    and the span of rows they read (streams on one trigger table share that read)."""
    batches = []
    for key in warehouse.catalog.pending_streams():
        if key in view.busy or view.switched.get(sensor_name(key)) == "Stopped":
            continue
        try:
            stream = load_stream(warehouse, key)
        except TDStreamError:  # dropped meanwhile: its triggers go with it
            continue
        if not serves(stream):
            continue
        pending = warehouse.catalog.pending_triggers(key)
        if not pending or not is_small(len(pending)):
            continue
        batches.append((stream, pending, rows_span(stream, pending)))
    return batches


def _served(
    known: dict[str, _Served],
    warehouse: Warehouse,
    stream: StreamDefinition,
    translator: DagsterTDStreamTranslator,
    grain: str | None,
) -> _Served:
    """The stream's asset key and partitions as its code location defines them, worked out
    once per stream (the partitions' start reads the table)."""
    version = code_version(stream)
    served = known.get(stream.key)
    if served is None or served.version != version:
        spec = translator.get_asset_spec(stream)
        served = _Served(version, spec.key, partitions_for(warehouse, stream, grain))
        known[stream.key] = served
    return served


def build_live_worker(
    translator: DagsterTDStreamTranslator,
    partition_grain: str | None = None,
    *,
    tdstream_warehouse: TDStreamWarehouse,
    tdstream_spark: TDStreamSpark,
) -> tuple[JobDefinition, SensorDefinition]:
    """The worker's job and the sensor that keeps one run of it going."""

    @op(name=WORKER_OP, description="Computes the small batches of every data-triggered stream on the warm Spark.")
    def live_worker(
        context: OpExecutionContext,
        config: WorkerConfig,
        tdstream_spark: TDStreamSpark,
        tdstream_warehouse: TDStreamWarehouse,
        tdstream_notifier: TDStreamNotifier,
    ) -> None:
        try:
            windows = serve(
                context,
                tdstream_spark.spark_session,
                tdstream_warehouse.get(),
                tdstream_notifier,
                translator,
                tdstream_warehouse.zone,
                partition_grain=partition_grain,
                until_idle=context.run.tags.get(UNTIL_IDLE_TAG) == "true",
                seconds=config.seconds,
                poll_seconds=config.poll_seconds,
            )
        finally:
            tdstream_spark.release()
        context.log.info(f"live worker ends after {windows} window(s)")

    @job(name=WORKER, executor_def=in_process_executor, tags={POOL_TAG: "live"})
    def worker_job() -> None:
        live_worker()

    @sensor(
        name=WORKER,
        job=worker_job,
        minimum_interval_seconds=5,
        default_status=DefaultSensorStatus.RUNNING,
        description="Keeps one run of the live worker going while some data-triggered stream exists.",
    )
    def keeper(context: SensorEvaluationContext) -> RunRequest | SkipReason:
        # the given resources and the process's instance, as the trigger sensors (instance.py)
        return keep_worker(tick_instance(context), tdstream_warehouse.get(), tdstream_spark.endpoint)

    return worker_job, keeper


def keep_worker(
    instance: DagsterInstance, warehouse: Warehouse, endpoint: Callable[[], str]
) -> RunRequest | SkipReason:
    """The worker run to start, or why none: no stream needs one, one is going, the last ones
    failed, or Spark is down (checked last: it may start the local server)."""
    if not any(serves(stream) for stream in load_streams(warehouse)):
        return SkipReason("no running data-triggered stream without LOW_LATENCY_CALC: nothing for the worker")
    answer = live_request(instance, WORKER, {})
    if isinstance(answer, RunRequest):
        try:
            endpoint()
        except SparkUnavailableError as exc:
            return SkipReason(f"{exc.message}; the streams' sensors start batch runs once it answers")
    return answer
