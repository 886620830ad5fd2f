"""The low-latency path: one long-lived run per ``LOW_LATENCY_CALC`` stream.

A batch run costs a launch (a process, the code location's imports, a Spark session) before it
computes anything, and the sensor daemon looks at the WAL every 5 s at best. A low-latency
stream instead has one run of its asset (tag ``tdstream/mode=live``) that stays up: it polls
the trigger table's Delta log every few hundred milliseconds, advances the trigger state there
(the same ``advance_stream`` the sensor calls, which the sensor then leaves alone), computes
what fired on its warm Spark session (``compute_batch``, which the shared worker of the other
streams calls too, ``worker.py``), and records each computed window in Dagster as a
materialization of that window's partition. The trigger sensor keeps such a run alive
(``live_request``); stopping the stream or its sensor, or terminating the run in the UI, ends it.

Exactly-once is the batch path's: trigger state is checkpointed per offset and triggers are
queued idempotently; output rows replace rows of the same key and notifications are keyed by
their trigger, so a loop that dies after its output commit and before finishing its triggers
computes the same rows again on restart and records nothing twice.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any
from zoneinfo import ZoneInfo

from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    DagsterRun,
    MetadataValue,
    OpExecutionContext,
    RunRequest,
    RunsFilter,
    SkipReason,
    TimeWindowPartitionsDefinition,
)

from ..compute.run import compute_triggers
from ..compute.shared_rows import SharedRows
from ..names import sensor_name
from ..notify.events import notification_events
from ..storage import vfeed
from ..storage.registry import StreamDefinition, load_stream
from ..storage.warehouse import Warehouse
from ..triggers.tick import advance_stream, first_unread
from .control import switched_states
from .notifications import TDStreamNotifier
from .partitions import partition_key
from .tags import ACTIVE_STATUSES, FAILED_STATUSES, LIVE_MODE, LIVE_TAG, MODE_TAG, POOL_TAG

POLL_SECONDS = 0.2
LIVE_RUN_SECONDS = 3600.0  # a live run hands over to a fresh one after this (bounded loop)
MAX_LIVE_FAILURES = 3
# a live run that failed this soon after it started is a crash loop; one that served longer
# and then ended badly (the daemon shut down, the machine rebooted) is replaced without counting
CRASH_LOOP_SECONDS = 60.0


def is_live(stream: StreamDefinition) -> bool:
    return stream.stmt.option("LOW_LATENCY_CALC") is not None and stream.stmt.trigger.kind != "PERIOD"


def active_live_run(instance: DagsterInstance, served: str) -> DagsterRun | None:
    """The queued or running live run serving ``served`` (a stream key, or the worker)."""
    runs = instance.get_runs(filters=RunsFilter(tags={LIVE_TAG: served}, statuses=ACTIVE_STATUSES), limit=1)
    return runs[0] if runs else None


def live_request(
    instance: DagsterInstance, served: str, tags: dict[str, str], **request: Any
) -> RunRequest | SkipReason:
    """The live run to start for ``served`` (a low-latency stream's asset, or the shared
    worker's job: ``request`` says which), or why none is needed: one is queued or running
    already, or the last ones failed soon after starting (then the reason names the last)."""
    active = active_live_run(instance, served)
    if active is not None:
        return SkipReason(f"{served} is computed live by run {active.run_id}")
    records = instance.get_run_records(filters=RunsFilter(tags={LIVE_TAG: served}), limit=MAX_LIVE_FAILURES)
    failed = 0
    for record in records:  # newest first: the crashes since the last live run that served
        if record.dagster_run.status not in FAILED_STATUSES:
            break
        started, ended = record.start_time, record.end_time
        if started is not None and ended is not None and ended - started >= CRASH_LOOP_SECONDS:
            break
        failed += 1
    if failed >= MAX_LIVE_FAILURES:
        return SkipReason(
            f"{served}: its live run failed {failed} times in a row within {CRASH_LOOP_SECONDS:g} s of starting "
            f"(last: run {records[0].dagster_run.run_id}); fix the cause, then rerun that run"
        )
    # the number of earlier live runs makes the key new for each launch, and the same for a
    # tick evaluated twice
    launched = instance.get_runs_count(filters=RunsFilter(tags={LIVE_TAG: served}))
    tags = {LIVE_TAG: served, POOL_TAG: LIVE_MODE, MODE_TAG: LIVE_MODE, **tags}
    return RunRequest(run_key=f"{served}:live:{launched}", tags=tags, **request)


def still_running(
    instance: DagsterInstance, warehouse: Warehouse, stream_key: str, every_seconds: float = 1.0
) -> Callable[[], bool]:
    """Whether the live loop goes on: the stream exists, is not stopped (STOP STREAM) and its
    trigger sensor is not switched off (the UI's toggle). Looked up at most once a second."""
    checked = {"at": -every_seconds, "answer": True}

    def wanted() -> bool:
        now = time.monotonic()
        if now - checked["at"] >= every_seconds:
            info = warehouse.catalog.get_stream(*stream_key.split(".", 1))
            switched = switched_states(instance).get(sensor_name(stream_key))
            checked["answer"] = info is not None and info.status != "Stopped" and switched != "Stopped"
            checked["at"] = now
        return bool(checked["answer"])

    return wanted


def has_work(warehouse: Warehouse, stream: StreamDefinition) -> bool:
    """Whether a live run would find something: pending triggers, or WAL offsets after the
    last checkpoint (headless drivers start a live run only then)."""
    if warehouse.catalog.count_pending(stream.key):
        return True
    table = stream.trigger_table
    if table is None:
        return False
    first = first_unread(stream, warehouse.catalog.latest_checkpoint_offset(stream.key))
    return vfeed.newest_version(warehouse, table) >= first


def run_live(
    context: AssetExecutionContext,
    spark: Any,
    warehouse: Warehouse,
    stream_key: str,
    zone: ZoneInfo,
    notifier: TDStreamNotifier,
    partitions: TimeWindowPartitionsDefinition,
    *,
    still_wanted: Callable[[], bool],
    until_idle: bool = False,
    clock: Callable[[], int] = time.time_ns,
    seconds: float = LIVE_RUN_SECONDS,
    poll_seconds: float = POLL_SECONDS,
) -> int:
    """The live loop; returns the number of windows it computed. Ends when ``still_wanted``
    says no (the stream or its sensor was stopped), after ``seconds``, or when the run is
    terminated (Dagster interrupts the step)."""
    asset_key = next(iter(context.assets_def.keys))
    deadline = time.monotonic() + seconds
    offset = warehouse.catalog.latest_checkpoint_offset(stream_key)
    windows = 0
    while time.monotonic() < deadline and still_wanted():
        stream = load_stream(warehouse, stream_key)
        started = time.perf_counter()
        tick = advance_stream(warehouse, stream, offset, clock=clock)
        advanced, offset = tick.offset != offset, tick.offset
        pending = warehouse.catalog.pending_triggers(stream.key) if tick.pending else []
        if not pending:
            if until_idle and not advanced:
                break
            if not advanced:
                time.sleep(poll_seconds)
            continue
        windows += compute_batch(
            context,
            spark,
            warehouse,
            stream,
            pending,
            zone,
            notifier,
            asset_key,
            partitions,
            offsets=f"{tick.start_offset}..{tick.offset}",
            tick_seconds=time.perf_counter() - started,
        )
    return windows


def compute_batch(
    context: OpExecutionContext,
    spark: Any,
    warehouse: Warehouse,
    stream: StreamDefinition,
    pending: list[dict[str, Any]],
    zone: ZoneInfo,
    notifier: TDStreamNotifier,
    asset_key: AssetKey,
    partitions: TimeWindowPartitionsDefinition,
    *,
    offsets: str,
    tick_seconds: float | None = None,
    shared: SharedRows | None = None,
) -> int:
    """Compute pending triggers on the warm session, finish them with their outbox rows in one
    catalog transaction, deliver the notifications at once and record each computed window's
    partition as a materialization of the stream's asset; returns the windows computed."""
    started = time.perf_counter()
    outcome = compute_triggers(spark, warehouse, stream, pending, timezone=zone, shared=shared)
    events = notification_events(stream, pending, outcome.results, history=False, source="q")
    warehouse.catalog.finish_triggers([int(t["id"]) for t in pending], context.run.run_id, events)
    computed = time.perf_counter()
    if events:
        notifier.deliver(warehouse, [stream.key])
    metadata: dict[str, Any] = {
        MODE_TAG: LIVE_MODE,
        "tdstream/rows_written": outcome.rows_written,
        "tdstream/output_version": outcome.output_version if outcome.output_version is not None else -1,
        "tdstream/offsets": MetadataValue.text(offsets),
        "tdstream/compute_seconds": round(computed - started, 3),
    }
    if tick_seconds is not None:  # the live run's own WAL tick (the worker's batches were the sensor's)
        metadata["tdstream/tick_seconds"] = round(tick_seconds, 3)
    for partition, count in _partitions(partitions, stream, pending).items():
        context.log_event(
            AssetMaterialization(
                asset_key=asset_key,
                partition=partition,
                metadata=metadata | {"tdstream/windows_computed": count},
            )
        )
    return outcome.windows


def _partitions(
    partitions: TimeWindowPartitionsDefinition, stream: StreamDefinition, triggers: list[dict[str, Any]]
) -> dict[str, int]:
    """The partitions of the computed windows' starts, with how many windows each holds."""
    counts: dict[str, int] = defaultdict(int)
    for trigger in triggers:
        if trigger["wstart"] is not None:
            counts[partition_key(partitions, stream.precision, int(trigger["wstart"]))] += 1
    return dict(counts)
