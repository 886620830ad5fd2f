"""A stream's asset: its output table, computed on Spark.

A run started by the trigger sensor (tag ``tdstream/mode=triggers``) computes every pending
trigger of the stream in one Spark job and marks them done after the output commit. A history
run (``tdstream/mode=history``, FILL_HISTORY) derives every window of the data up to a WAL
offset in one bulk Spark job and checkpoints the trigger state there for the sensor. Any other
run of a partition or a range — a UI launch, a backfill, ``dagster asset materialize
--partition-range`` — recalculates: it re-derives every window whose start lies in the range
from the table data and overwrites that range of the output in one commit.
"""

import time
from collections.abc import Callable, Iterator
from typing import Any
from zoneinfo import ZoneInfo

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    AssetSpec,
    BackfillPolicy,
    MaterializeResult,
    MetadataValue,
    TimeWindowPartitionsDefinition,
    multi_asset,
)

from ..compute.bulk import derive_windows
from ..compute.history import ONE_JOB, TWO_STEPS, history_scan, recalculate
from ..compute.history import PLAN as HISTORY_PLAN
from ..compute.run import RunOutcome, compute_triggers
from ..compute.window_job import write_window_results
from ..faults import failpoint
from ..notify.events import notification_events
from ..storage.registry import StreamDefinition, load_stream
from ..storage.warehouse import Warehouse
from .live import run_live, still_running
from .notifications import TDStreamNotifier, build_notify_hook
from .partitions import to_event_time
from .resources import TDStreamSpark, TDStreamWarehouse
from .tags import BATCH_TAG, HISTORY_MODE, HISTORY_TAG, LIVE_MODE, MODE_TAG, STREAM_TAG, TRIGGERS_MODE, UNTIL_IDLE_TAG


def build_stream_asset(
    stream_key: str,
    spec: AssetSpec,
    partitions: TimeWindowPartitionsDefinition,
    op_name: str,
    *,
    notifies: bool = False,
    clock: Callable[[], int] = time.time_ns,
) -> AssetsDefinition:
    @multi_asset(
        name=op_name,
        # a live run records each window's partition as it lands and ends without one result
        specs=[spec.replace_attributes(skippable=True)],
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        op_tags={STREAM_TAG: stream_key},
        # delivers the notifications the run recorded, whatever launched it
        hooks={build_notify_hook(stream_key)} if notifies else None,
    )
    def stream_asset(
        context: AssetExecutionContext,
        tdstream_spark: TDStreamSpark,
        tdstream_warehouse: TDStreamWarehouse,
        tdstream_notifier: TDStreamNotifier,
    ) -> Iterator[MaterializeResult]:
        try:
            yield from _materialize(
                context, stream_key, spec, partitions, tdstream_spark, tdstream_warehouse, tdstream_notifier, clock
            )
        finally:
            tdstream_spark.release()

    return stream_asset


def _materialize(
    context: AssetExecutionContext,
    stream_key: str,
    spec: AssetSpec,
    partitions: TimeWindowPartitionsDefinition,
    tdstream_spark: TDStreamSpark,
    tdstream_warehouse: TDStreamWarehouse,
    tdstream_notifier: TDStreamNotifier,
    clock: Callable[[], int],
) -> Iterator[MaterializeResult]:
    """The run by its mode: live, pending triggers, history or a partition range."""
    warehouse = tdstream_warehouse.get()
    stream = load_stream(warehouse, stream_key)
    spark = tdstream_spark.spark_session
    zone = tdstream_warehouse.zone(stream)
    if context.run.tags.get(MODE_TAG) == LIVE_MODE:
        wanted = still_running(context.instance, warehouse, stream_key)
        windows = run_live(
            context,
            spark,
            warehouse,
            stream_key,
            zone,
            tdstream_notifier,
            partitions,
            still_wanted=wanted,
            until_idle=context.run.tags.get(UNTIL_IDLE_TAG) == "true",
            clock=clock,
        )
        context.log.info(f"stream {stream_key}: live run ends after {windows} window(s)")
        return
    try:
        outcome, metadata = _compute(context, spark, warehouse, stream, zone)
    except Exception as exc:
        # recorded on the stream (SHOW STREAMS: Failed, with the reason), then the run fails
        warehouse.catalog.set_stream_error(stream.key, f"run {context.run.run_id} failed: {exc}")
        raise
    if stream.info.last_error:
        warehouse.catalog.set_stream_error(stream.key, None)
    context.log.info(
        f"stream {stream.key}: {outcome.windows} window(s) computed, {outcome.rows_written} row(s) written"
    )
    metadata.update(
        {
            "tdstream/windows_computed": outcome.windows,
            "tdstream/rows_written": outcome.rows_written,
            "tdstream/output_version": outcome.output_version if outcome.output_version is not None else -1,
            "tdstream/offsets": MetadataValue.text(
                f"{outcome.offsets[0]}..{outcome.offsets[1]}" if outcome.offsets else "none"
            ),
        }
    )
    yield MaterializeResult(asset_key=spec.key, metadata=metadata)


def _compute(
    context: AssetExecutionContext, spark: Any, warehouse: Warehouse, stream: StreamDefinition, zone: ZoneInfo
) -> tuple[RunOutcome, dict[str, Any]]:
    """The run's work by mode: pending triggers, the history, or a partition range."""
    metadata: dict[str, Any]
    if context.run.tags.get(MODE_TAG) == TRIGGERS_MODE:
        first, _, last = context.run.tags.get(BATCH_TAG, "-").partition("-")
        # the triggers the run was requested for (all pending when launched by hand)
        ids = (int(first), int(last)) if first and last else None
        pending = warehouse.catalog.pending_triggers(stream.key, ids=ids)
        outcome = compute_triggers(spark, warehouse, stream, pending, timezone=zone)
        # the outbox rows go in with the triggers' completion: both or neither
        events = notification_events(stream, pending, outcome.results, history=False, source="q")
        warehouse.catalog.finish_triggers([int(t["id"]) for t in pending], context.run.run_id, events)
        failpoint("after-triggers-finished")
        metadata = {MODE_TAG: TRIGGERS_MODE, "tdstream/notifications": len(events)}
    elif context.run.tags.get(MODE_TAG) == HISTORY_MODE:
        # FILL_HISTORY: every window of the data up to the offset, derived in bulk; the
        # checkpoint is written after the output commit, so a failed run is simply redone
        history = int(context.run.tags[HISTORY_TAG])
        started = time.perf_counter()
        with history_scan(spark, warehouse, stream, history, timezone=zone) as scan:
            # one scan for the windows and the query where the plan applies, else two
            derived = derive_windows(spark, warehouse, stream, version=history) if scan is None else scan.derived
            derived_at = time.perf_counter()
            windows = None if scan is None else scan.windows
            if windows is not None:  # computed with their runs: only the writing is left
                outcome = write_window_results(warehouse, stream, windows)
            else:
                prepared = None if scan is None else scan.prepared
                outcome = compute_triggers(spark, warehouse, stream, derived.triggers, timezone=zone, prepared=prepared)
        # keyed by the history offset: a retried history run records nothing twice
        events = notification_events(stream, derived.triggers, outcome.results, history=True, source=f"h{history}")
        warehouse.catalog.record_notifications(events)  # NOTIFY_HISTORY only; none otherwise
        warehouse.catalog.save_checkpoint(stream.key, history, derived.states)
        metadata = {MODE_TAG: HISTORY_MODE, "tdstream/history_offset": history}
        plan = HISTORY_PLAN if windows is None else ONE_JOB
        metadata["tdstream/history_plan"] = plan if scan is not None else TWO_STEPS
        metadata["tdstream/groups"] = len(derived.states)
        starts = [int(t["wstart"]) for t in derived.triggers if t["wstart"] is not None]
        first = windows.first_start if windows is not None else min(starts, default=None)
        if first is not None:  # the run's partitions are at most the newest MAX_RUN_PARTITIONS of them
            metadata["tdstream/first_window_start"] = first
        metadata["tdstream/derive_seconds"] = round(derived_at - started, 2)
        metadata["tdstream/compute_seconds"] = round(time.perf_counter() - derived_at, 2)
    else:
        window = context.partition_time_window
        start, end = to_event_time(window.start, stream.precision), to_event_time(window.end, stream.precision)
        outcome, triggers, plan = recalculate(spark, warehouse, stream, (start, end), timezone=zone)
        events = notification_events(stream, triggers, outcome.results, history=True, source=context.run.run_id)
        warehouse.catalog.record_notifications(events)  # NOTIFY_HISTORY only; none otherwise
        metadata = {MODE_TAG: "recalculation", "tdstream/range": f"[{window.start}, {window.end})"}
        metadata["tdstream/recalculation_plan"] = plan
    return outcome, metadata
