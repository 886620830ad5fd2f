"""A stream's trigger sensor: the trigger task of TDengine's engine as a Dagster sensor.

Each tick reads the trigger table's WAL from the offset in its cursor, in bounded steps and
within a time budget far inside Dagster's tick timeout, lets ``triggers/`` queue what fired,
and requests one run of the stream's asset when triggers are pending and no run of the
stream is queued or running (back-pressure: triggers that fire meanwhile wait and the next
run takes them all). The cursor is a small JSON record: the last WAL offset processed, which
is also the key of the checkpointed trigger state. A FILL_HISTORY stream first requests one
history run and waits for its checkpoint before reading the WAL after it.
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetsDefinition,
    DagsterInstance,
    DefaultSensorStatus,
    PartitionKeyRange,
    RunRequest,
    RunsFilter,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    TimeWindowPartitionsDefinition,
    sensor,
)
from dagster._core.definitions.assets.graph.asset_graph import AssetGraph
from dagster._core.definitions.assets.graph.asset_graph_subset import AssetGraphSubset
from dagster._core.definitions.events import AssetKeyPartitionKey
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from ..errors import SparkUnavailableError, TDStreamError
from ..sql.timeunits import PRECISIONS
from ..storage.catalog import TICK_ERROR
from ..storage.registry import StreamDefinition, load_stream
from ..storage.warehouse import Warehouse
from ..triggers.engine import TriggerTableMissingError
from ..triggers.tick import advance_stream, ends_at, first_launch
from .control import adopt_switch, switched_states
from .instance import tick_instance
from .live import is_live, live_request
from .partitions import SHORTEST_PARTITION_NANOS, event_time_bounds, partition_grain, partition_key
from .resources import TDStreamSpark, TDStreamWarehouse
from .tags import (
    ACTIVE_STATUSES,
    BATCH_POOL,
    BATCH_TAG,
    CREATED_TAG,
    FAILED_STATUSES,
    HISTORY_MODE,
    HISTORY_TAG,
    MODE_TAG,
    POOL_TAG,
    STREAM_TAG,
    TRIGGERS_MODE,
)
from .worker import is_small, serves, worker_run_id

MAX_ATTEMPTS = 3
# Partitions one run may span (see _first_batch and _history). Dagster plans and stores two
# events per partition of a run (about 50 ms each on SQLite storage): a run over a year of daily
# partitions paid 30 s of bookkeeping for windows computed in one second, about as much as
# 15 runs' fixed cost; 32 keeps a run's bookkeeping below its fixed cost.
MAX_RUN_PARTITIONS = 32


@dataclass(frozen=True)
class TriggerCursor:
    offset: int | None  # last WAL offset processed; None before the first tick
    history: int | None = None  # FILL_HISTORY: the last WAL offset the history run covers
    # the creation time of the stream it is the cursor of: the sensor of a stream dropped and
    # created again under its name (the same sensor name) must not go on from the old cursor
    created: int | None = None

    def dump(self) -> str:
        return json.dumps({"offset": self.offset, "history": self.history, "created": self.created})

    @classmethod
    def load(cls, text: str | None) -> "TriggerCursor":
        if not text:
            return cls(None)
        data = json.loads(text)
        return cls(data.get("offset"), data.get("history"), data.get("created"))


def build_trigger_sensor(
    stream_key: str,
    asset: AssetsDefinition,
    partitions: TimeWindowPartitionsDefinition,
    name: str,
    *,
    running: bool,
    tdstream_warehouse: TDStreamWarehouse,
    tdstream_spark: TDStreamSpark,
    # the daemon's loop already waits 5 s between passes, and it measures the interval from the
    # end of the last tick: a 5 s minimum would skip every other pass (a 10 s tick period)
    minimum_interval_seconds: int = 1,
    time_budget_seconds: float = 20.0,
    offsets_per_step: int = 50,
    clock: Callable[[], int] = time.time_ns,
) -> SensorDefinition:
    @sensor(
        name=name,
        asset_selection=[asset],  # an asset selection: backfill requests need one
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING if running else DefaultSensorStatus.STOPPED,
        description=f"Trigger task of TDengine stream {stream_key}: reads its trigger table's WAL and "
        "requests a run when windows fire.",
    )
    def trigger_sensor(context: SensorEvaluationContext) -> SensorResult | SkipReason:
        # the code location's own resource objects and the process's instance, not resource
        # parameters: those make Dagster build an instance per tick (``instance.py``)
        warehouse = tdstream_warehouse.get()
        instance = tick_instance(context)
        stream = runnable_stream(warehouse, stream_key, instance, name)
        if isinstance(stream, SkipReason):
            return stream
        launch, now = first_launch(stream), clock()
        if launch is not None and now < launch:
            return SkipReason(
                f"{stream_key} computes for the first time in {(launch - now) / 1e9:.1f} s "
                "(a continuous query waits 10 s after CREATE, as 2.x does)"
            )
        cursor = TriggerCursor.load(context.cursor)
        created = stream.info.created_at
        if not context.cursor or cursor.created != created:
            # a sensor without a cursor of this stream (a new headless run, a reset sensor, a
            # stream created again under its name) continues from the stream's checkpointed
            # progress: starting over would fire every window again
            cursor = TriggerCursor(warehouse.catalog.latest_checkpoint_offset(stream.key), created=created)
        if cursor.offset is None and stream.fills_history and stream.trigger_table is not None:
            cursor, waiting = _history(instance, warehouse, stream, cursor, partitions)
            if waiting is not None:
                return waiting
        if is_live(stream):
            return _keep_live(instance, warehouse, stream, asset, partitions, tdstream_spark, cursor, clock)
        deadline = time.monotonic() + time_budget_seconds
        offset = cursor.offset
        ticked_at = clock()
        try:
            while True:
                tick = advance_stream(warehouse, stream, offset, max_offsets=offsets_per_step, clock=clock)
                caught_up = tick.offset == offset
                offset = tick.offset
                if caught_up or time.monotonic() > deadline:
                    break
        except Exception as exc:
            return tick_failed(warehouse, stream_key, exc)
        tick_succeeded(warehouse, stream)
        end = ends_at(stream)
        if end is not None and ticked_at >= end and tick.pending == 0:
            # every window up to its end time was fired by these ticks and computed: 2.x closes
            # the continuous query (it leaves SHOW STREAMS; its result table stays)
            with warehouse.catalog.transaction() as conn:
                warehouse.catalog.drop_stream(conn, stream.info.db, stream.info.name)
            return SkipReason(f"{stream_key} computed every window up to its end time and stopped, as 2.x stops it")
        new_cursor = TriggerCursor(offset, created=created).dump()
        backfills = recalculation_backfills(warehouse, stream, asset, partitions)
        answer = pending_runs(instance, warehouse, stream, partitions)
        down = _spark_down(tdstream_spark) if not isinstance(answer, SkipReason) or backfills else None
        if down is not None:
            answer, backfills = down, []
        if isinstance(answer, SkipReason):
            if backfills:
                return SensorResult(run_requests=backfills, cursor=new_cursor)
            return SensorResult(skip_reason=answer, cursor=new_cursor)
        return SensorResult(run_requests=[*backfills, *answer], cursor=new_cursor)

    return trigger_sensor


def _keep_live(
    instance: DagsterInstance,
    warehouse: Warehouse,
    stream: StreamDefinition,
    asset: AssetsDefinition,
    partitions: TimeWindowPartitionsDefinition,
    spark: TDStreamSpark,
    cursor: TriggerCursor,
    clock: Callable[[], int],
) -> SensorResult:
    """LOW_LATENCY_CALC: the live run reads the WAL and computes (``live.py``); the tick only
    keeps one such run going and turns RECALCULATE requests into backfills."""
    backfills = recalculation_backfills(warehouse, stream, asset, partitions)
    now = clock() // PRECISIONS[stream.precision]
    # the lag check runs on its own schedule, not at the end of an hour-long run
    answer = live_request(
        instance,
        stream.key,
        _partition_range(partitions, stream.precision, now, now),
        asset_selection=[next(iter(asset.keys))],
        asset_check_keys=[],
    )
    down = _spark_down(spark) if isinstance(answer, RunRequest) or backfills else None
    if down is not None:
        return SensorResult(skip_reason=down, cursor=cursor.dump())
    if isinstance(answer, SkipReason) and not backfills:
        return SensorResult(skip_reason=answer, cursor=cursor.dump())
    live = [answer] if isinstance(answer, RunRequest) else []
    return SensorResult(run_requests=[*backfills, *live], cursor=cursor.dump())


def _spark_down(spark: TDStreamSpark) -> SkipReason | None:
    """Runs are requested only when their Spark answers (the local server is started here if it
    is down): otherwise the tick says why, and the triggers stay pending for the next tick."""
    try:
        spark.endpoint()
    except SparkUnavailableError as exc:
        return SkipReason(f"{exc.message}; the pending triggers wait")
    return None


def runnable_stream(
    warehouse: Warehouse, stream_key: str, instance: DagsterInstance, instigator: str
) -> StreamDefinition | SkipReason:
    """The stream a tick works on, or why the tick skips: it was dropped, or it is stopped. A
    stopped stream whose sensor or schedule was switched on by hand since (the UI's toggle)
    is started: the switch is START STREAM."""
    try:
        stream = load_stream(warehouse, stream_key)
    except TDStreamError as exc:
        return SkipReason(str(exc))
    if stream.info.status == "Stopped":
        if switched_states(instance).get(instigator) != "Running":
            return SkipReason(f"stream {stream_key} is stopped (START STREAM resumes it)")
        adopt_switch(warehouse, stream.info, "Running")
        stream = load_stream(warehouse, stream_key)
    return stream


CANNOT_RUN = " cannot run: "  # what a tick that failed says (the skip reason it reports)


def tick_failed(warehouse: Warehouse, stream_key: str, exc: Exception) -> SkipReason:
    """A tick that cannot advance (a dropped trigger table, a value the trigger cannot
    evaluate): recorded on the stream — SHOW STREAMS says Failed with the reason — and
    reported as the tick's skip reason, so the daemon goes on with the other streams."""
    reason = str(exc) if isinstance(exc, TDStreamError | TriggerTableMissingError) else f"{type(exc).__name__}: {exc}"
    warehouse.catalog.set_stream_error(stream_key, TICK_ERROR + reason)
    if isinstance(exc, TriggerTableMissingError):
        # TDengine ignores a dropped trigger table: the stream waits, nothing went wrong
        return SkipReason(f"stream {stream_key} has nothing to read: {reason}")
    return SkipReason(f"stream {stream_key}{CANNOT_RUN}{reason}")


def tick_succeeded(warehouse: Warehouse, stream: StreamDefinition) -> None:
    """A tick that advanced clears a tick error (a run's error stays until a run succeeds)."""
    if stream.info.last_error and stream.info.last_error.startswith(TICK_ERROR):
        warehouse.catalog.set_stream_error(stream.key, None)


def pending_runs(
    instance: DagsterInstance,
    warehouse: Warehouse,
    stream: StreamDefinition,
    partitions: TimeWindowPartitionsDefinition,
) -> list[RunRequest] | SkipReason:
    """The runs that compute the stream's pending triggers, or why there are none now. While
    the live worker runs it takes small batches (``worker.py``). Otherwise one run takes every
    pending trigger, and none starts while a run of the stream is
    active (back-pressure: the next run takes all that fired meanwhile). LOW_LATENCY_CALC: one
    run per trigger, at once, no batching. A batch whose run failed too often is not retried."""
    pending = warehouse.catalog.pending_triggers(stream.key)
    if not pending:
        return SkipReason("no pending triggers")
    if stream.info.paused:  # ON_FAILURE_PAUSE: nothing runs until the receivers take the backlog
        return SkipReason(f"stream {stream.key} is paused ({stream.info.paused}); {len(pending)} trigger(s) wait")
    low_latency = stream.stmt.option("LOW_LATENCY_CALC") is not None
    worker = None if low_latency else worker_run_id(instance)
    if worker is not None and serves(stream) and is_small(len(pending)):
        return SkipReason(f"{len(pending)} trigger(s) are computed by the live worker, run {worker}")
    active = _active_runs(instance, stream.key)
    if active and not low_latency:
        return SkipReason(f"{len(pending)} trigger(s) wait for run {active[0].run_id}")
    running = {run.tags.get(BATCH_TAG) for run in active}
    batches = [[t] for t in pending] if low_latency else [_first_batch(pending, stream)]
    requests, skipped = [], []
    for batch in batches:
        # the run key names the batch and the attempt: a retried tick launches nothing twice,
        # while a batch whose run failed is tried again, a bounded number of times
        name = f"{batch[0]['id']}-{batch[-1]['id']}"
        if name in running:
            continue
        failed = _failed_runs(instance, stream, name)
        if len(failed) >= MAX_ATTEMPTS:
            skipped.append(
                f"stream {stream.key}: the run for triggers {name} failed {len(failed)} times "
                f"(last: run {failed[0].run_id}); fix the cause, then write new data or rerun that run"
            )
            continue
        starts = [int(t["wstart"]) for t in batch if t["wstart"] is not None]
        tags = {**_stream_tags(stream), MODE_TAG: TRIGGERS_MODE, BATCH_TAG: name, POOL_TAG: BATCH_POOL}
        tags.update(_partition_range(partitions, stream.precision, min(starts), max(starts)))
        requests.append(RunRequest(run_key=f"{_run_key_prefix(stream)}:{name}:{len(failed)}", tags=tags))
    if requests:
        return requests
    return SkipReason("; ".join(skipped) or f"{len(pending)} trigger(s) wait for their runs")


def _first_batch(pending: list[dict[str, Any]], stream: StreamDefinition) -> list[dict[str, Any]]:
    """The pending triggers the next run takes: in firing order, as long as their windows
    stay within ``MAX_RUN_PARTITIONS`` partitions. A run's partition range is what Dagster
    plans and records per partition; windows scattered over decades (history from 1940) would
    make one run of tens of thousands of partitions. The rest go to the following runs."""
    span = _run_span(stream)
    low = high = None
    for count, trigger in enumerate(pending):
        if trigger["wstart"] is None:
            continue
        start = int(trigger["wstart"])
        low = start if low is None else min(low, start)
        high = start if high is None else max(high, start)
        if high - low > span:
            return pending[: max(count, 1)]
    return pending


def _run_span(stream: StreamDefinition) -> int:
    """``MAX_RUN_PARTITIONS`` partitions of the stream's asset, in its event-time precision."""
    return MAX_RUN_PARTITIONS * SHORTEST_PARTITION_NANOS[partition_grain(stream)] // PRECISIONS[stream.precision]


def recalculation_backfills(
    warehouse: Warehouse, stream: StreamDefinition, asset: AssetsDefinition, partitions: TimeWindowPartitionsDefinition
) -> list[RunRequest]:
    """RECALCULATE STREAM requests as Dagster asset backfills: the partitions covering each
    requested range — the same backfill a user launches by selecting those partitions in the
    UI. The daemon runs it; each run recalculates its range (``assets.py``)."""
    requests = []
    graph = AssetGraph.from_assets([asset])
    key = next(iter(asset.keys))
    pending = warehouse.catalog.pending_recalculations(stream.key)
    for _, start, end in pending:
        keys = _partition_range(partitions, stream.precision, start, max(start, end - 1))
        chosen = partitions.get_partition_keys_in_range(
            PartitionKeyRange(keys[ASSET_PARTITION_RANGE_START_TAG], keys[ASSET_PARTITION_RANGE_END_TAG])
        )
        subset = AssetGraphSubset.from_asset_partition_set({AssetKeyPartitionKey(key, p) for p in chosen}, graph)
        tags = {STREAM_TAG: stream.key, POOL_TAG: BATCH_POOL}
        requests.append(RunRequest.for_asset_graph_subset(subset, tags=tags))
    if pending:
        warehouse.catalog.mark_recalculation_requested([i for i, _, _ in pending])
    return requests


def _active_runs(instance: DagsterInstance, stream_key: str) -> list[Any]:
    """The stream's runs that are queued or running (back-pressure looks at these)."""
    return list(instance.get_runs(filters=RunsFilter(tags={STREAM_TAG: stream_key}, statuses=ACTIVE_STATUSES)))


def _failed_runs(instance: DagsterInstance, stream: StreamDefinition, batch: str) -> list[Any]:
    tags = {**_stream_tags(stream), BATCH_TAG: batch}
    return list(instance.get_runs(filters=RunsFilter(tags=tags, statuses=FAILED_STATUSES)))


def _stream_tags(stream: StreamDefinition) -> dict[str, str]:
    """The tags naming a stream's runs: its key and its creation (a stream created again under
    its name is another stream)."""
    return {STREAM_TAG: stream.key, CREATED_TAG: str(stream.info.created_at)}


def _run_key_prefix(stream: StreamDefinition) -> str:
    """Run keys name the stream and its creation: Dagster never launches a sensor's run key
    twice, and a stream created again under its name numbers its batches from trigger ids the
    old one may have used."""
    return f"{stream.key}@{stream.info.created_at}"


def _history(
    instance: DagsterInstance,
    warehouse: Warehouse,
    stream: StreamDefinition,
    cursor: TriggerCursor,
    partitions: TimeWindowPartitionsDefinition,
) -> tuple[TriggerCursor, SensorResult | SkipReason | None]:
    """FILL_HISTORY: before the first incremental tick, one run computes every window of the
    data up to the current WAL offset in bulk (``compute/bulk.py``) and checkpoints the trigger
    state there; the sensor then continues from that offset. Returns the cursor to go on with,
    or what to answer while the history run is requested, running or failing."""
    table = stream.trigger_table
    assert table is not None
    history = cursor.history
    if history is None:
        history = warehouse.delta.version(table.db, table.storage_name)
    if warehouse.catalog.load_checkpoint(stream.key, history) is not None:
        return TriggerCursor(history, created=cursor.created), None  # the history run finished: go on
    waiting = TriggerCursor(None, history, cursor.created).dump()
    active = _active_runs(instance, stream.key)
    if active:
        return cursor, SensorResult(
            skip_reason=SkipReason(f"history of {stream.key} is being computed by run {active[0].run_id}"),
            cursor=waiting,
        )
    batch = f"history-{history}"
    failed = _failed_runs(instance, stream, batch)
    if len(failed) >= MAX_ATTEMPTS:
        return cursor, SensorResult(
            skip_reason=SkipReason(
                f"stream {stream.key}: the history run failed {len(failed)} times (last: run "
                f"{failed[0].run_id}); fix the cause, then rerun that run"
            ),
            cursor=waiting,
        )
    tags = {
        **_stream_tags(stream),
        MODE_TAG: HISTORY_MODE,
        BATCH_TAG: batch,
        HISTORY_TAG: str(history),
        POOL_TAG: BATCH_POOL,
    }
    bounds = event_time_bounds(warehouse, stream)
    if bounds is not None:
        # Dagster plans and records a run's materializations per partition: history reaching
        # back a year (or decades: rows from 1940) would make the run hundreds or thousands of
        # partitions of bookkeeping. The run (which computes all of the history) records the
        # newest MAX_RUN_PARTITIONS of them.
        oldest = max(bounds[0], bounds[1] - _run_span(stream))
        tags.update(_partition_range(partitions, stream.precision, oldest, bounds[1]))
    else:
        first = partitions.get_first_partition_key()
        assert first is not None
        tags.update({ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: first})
    run = RunRequest(run_key=f"{_run_key_prefix(stream)}:{batch}:{len(failed)}", tags=tags)
    return cursor, SensorResult(run_requests=[run], cursor=waiting)


def _partition_range(
    partitions: TimeWindowPartitionsDefinition, precision: str, first: int, last: int
) -> dict[str, str]:
    """The partitions holding the pending windows' starts (each clamped into the range)."""
    return {
        ASSET_PARTITION_RANGE_START_TAG: partition_key(partitions, precision, first),
        ASSET_PARTITION_RANGE_END_TAG: partition_key(partitions, precision, last),
    }
