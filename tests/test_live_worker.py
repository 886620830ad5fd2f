"""The live worker: one long-lived Dagster run computes the small batches of every
data-triggered stream on the warm Spark, while the trigger sensors keep reading the WAL. The
worker runs for real (its job, in a process of its own, against the harness's Dagster instance); the
sensors are evaluated by the harness as the daemon would."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunRequest, SkipReason, build_sensor_context
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.dagster_run import DagsterRun

from dagster_tdstream import Session, StreamHarness
from dagster_tdstream.errors import CatalogError
from dagster_tdstream.orchestration import worker as worker_module
from dagster_tdstream.orchestration.live import live_request
from dagster_tdstream.orchestration.tags import LIVE_TAG, STREAM_TAG
from dagster_tdstream.orchestration.translator import DagsterTDStreamTranslator
from dagster_tdstream.orchestration.worker import WORKER, WORKER_OP, build_live_worker, worker_run_id
from dagster_tdstream.testing.harness import HarnessReport

from .conftest import output

T = 1_700_000_000_000
STREAMS = (
    "create database d; use d; create table t (ts timestamp, v int);"
    "create stream s1 interval(10s) sliding(10s) from t into o1 as select _twstart, sum(v) s from %%trows;"
    "create stream s2 interval(20s) sliding(20s) from t into o2 as select _twstart, count(*) n from %%trows;"
    "create stream quick interval(10s) sliding(10s) from t stream_options(low_latency_calc) into q "
    "as select _twstart, sum(v) s from %%trows"
)


def wait_for(condition: Any, what: str, seconds: float = 60.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds} s: {what}")


def landed(session: Session, table: str, rows: list[tuple[Any, ...]]) -> bool:
    """Whether the output table holds exactly ``rows`` (it is created by its first commit)."""
    try:
        return output(session, f"select * from {table}") == rows
    except CatalogError:
        return False


def _run_worker(instance_dir: str, resources: dict[str, tuple[type, dict[str, Any]]], max_triggers: int | None) -> None:
    """The worker job in its own process, as the daemon launches its run (two Dagster runs in
    threads of one process deadlock on the logging module's locks). Resources travel as their
    class and field values (Dagster's resource objects do not survive pickling)."""
    if max_triggers is not None:
        worker_module.MAX_WORKER_TRIGGERS = max_triggers
    built = {name: cls(**fields) for name, (cls, fields) in resources.items()}
    job, _ = build_live_worker(
        DagsterTDStreamTranslator(),
        tdstream_warehouse=built["tdstream_warehouse"],
        tdstream_spark=built["tdstream_spark"],
    )
    with DagsterInstance.from_ref(InstanceRef.from_dir(instance_dir)) as instance:
        job.execute_in_process(
            instance=instance,
            resources=built,
            run_config={"ops": {WORKER_OP: {"config": {"seconds": 120, "poll_seconds": 0.1}}}},
            tags={LIVE_TAG: WORKER},
            raise_on_error=False,
        )


class RunningWorker:
    """The worker job executed in a process of its own, against the harness's instance."""

    def __init__(self, harness: StreamHarness) -> None:
        self.harness = harness
        _, self.sensor = build_live_worker(
            DagsterTDStreamTranslator(),
            tdstream_warehouse=harness.resources["tdstream_warehouse"],
            tdstream_spark=harness.resources["tdstream_spark"],
        )
        self.process: Any = None

    def start(self, max_triggers: int | None = None) -> str:
        root = self.harness.instance.root_directory
        context = multiprocessing.get_context("spawn")
        resources = {name: (type(r), r.model_dump()) for name, r in self.harness.resources.items()}
        self.process = context.Process(target=_run_worker, args=(root, resources, max_triggers))
        self.process.start()
        return wait_for(self._started, "the worker run starts")

    def _started(self) -> str | None:
        """The worker's run id once the run has started: a cancel reported while it is still
        starting is overwritten by its RUN_START event, and the loop would then serve its full
        time."""
        run_id = worker_run_id(self.harness.instance)
        run = None if run_id is None else self.harness.instance.get_run_by_id(run_id)
        return run_id if run is not None and run.status == DagsterRunStatus.STARTED else None

    def alive(self) -> bool:
        return self.process is not None and self.process.is_alive()

    def stop(self, run_id: str) -> None:
        """Terminate it as the UI does: the loop sees the run canceling and ends."""
        run = self.harness.instance.get_run_by_id(run_id)
        assert run is not None
        self.harness.instance.report_run_canceling(run)
        self.process.join(timeout=60)  # the loop polls every 0.1 s; the process then exits
        assert not self.process.is_alive()


@pytest.fixture
def worker(harness: StreamHarness) -> Iterator[RunningWorker]:
    running = RunningWorker(harness)
    yield running
    if running.alive():  # a failed test: end it anyway
        run_id = worker_run_id(harness.instance)
        if run_id is not None:
            running.stop(run_id)
        if running.alive():
            running.process.kill()


def test_the_worker_computes_every_streams_small_batches_and_records_their_partitions(
    session: Session, harness: StreamHarness, worker: RunningWorker
) -> None:
    session.execute(STREAMS)
    run_id = worker.start()
    session.execute(f"insert into t values ({T}, 1) ({T + 10000}, 2) ({T + 20000}, 3) ({T + 40000}, 4)")
    report = HarnessReport()
    requests = harness.tick(report)
    # the sensors queued the fired windows and left them to the worker: no batch run
    assert [asset.key for asset, _ in requests] == [AssetKey(["tdstream", "d", "q"])]  # the live run's
    assert report.skipped["d__s1__trigger"].endswith(f"trigger(s) are computed by the live worker, run {run_id}")
    # [T+30s, T+40s) holds no row and still fires (no IGNORE_NODATA_TRIGGER)
    expected1 = [(T, 1), (T + 10000, 2), (T + 20000, 3), (T + 30000, None)]
    wait_for(lambda: landed(session, "o1", expected1), "s1's windows in o1")
    wait_for(lambda: landed(session, "o2", [(T, 2), (T + 20000, 1)]), "s2's windows in o2")
    # each computed window is a materialization of its partition, naming the worker's run
    records = harness.instance.fetch_materializations(AssetKey(["tdstream", "d", "o1"]), limit=10).records
    assert {r.run_id for r in records} == {run_id}
    assert {r.asset_materialization.partition for r in records} == {"2023-11-14-22:00"}
    assert sum(r.asset_materialization.metadata["tdstream/windows_computed"].value for r in records) == 4
    assert not [run for run in harness.instance.get_runs() if run.tags.get(STREAM_TAG) in ("d.s1", "d.s2")]
    # more rows: the same worker run takes them
    session.execute(f"insert into t values ({T + 50000}, 5)")
    harness.run_until_idle()
    wait_for(lambda: landed(session, "o1", [*expected1, (T + 40000, 4)]), "s1's next window")
    assert len({r.run_id for r in harness.instance.get_runs() if r.tags.get(LIVE_TAG) == WORKER}) == 1
    worker.stop(run_id)
    run = harness.instance.get_run_by_id(run_id)
    assert run is not None and run.status in (DagsterRunStatus.CANCELED, DagsterRunStatus.SUCCESS)


def test_without_a_worker_or_for_a_failed_or_large_batch_the_sensor_starts_a_batch_run(
    session: Session, harness: StreamHarness, worker: RunningWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    session.execute(STREAMS)
    session.execute(f"insert into t values ({T}, 1) ({T + 10000}, 2)")
    harness.run_until_idle()  # no worker: batch runs, as before
    assert output(session, "select * from o1") == [(T, 1)]
    assert [r.tags.get(STREAM_TAG) for r in harness.instance.get_runs() if STREAM_TAG in r.tags].count("d.s1") == 1
    monkeypatch.setattr(worker_module, "MAX_WORKER_TRIGGERS", 1)  # the sensors' side; start() the worker's
    run_id = worker.start(max_triggers=1)
    # a stream whose last computation failed is retried by the batch path, visibly
    harness.warehouse.catalog.set_stream_error("d.s2", "run x failed: boom")
    session.execute(f"insert into t values ({T + 20000}, 3) ({T + 30000}, 4) ({T + 40000}, 5)")
    report = harness.run_until_idle()
    batch = [r.tags.get(STREAM_TAG) for r in harness.instance.get_runs() if STREAM_TAG in r.tags]
    # s1 fired two windows: more than the worker takes (patched to 1), so a run of its own;
    # s2 is marked failed, so a run too, which clears the error
    assert batch.count("d.s1") == 2 and batch.count("d.s2") == 1
    assert report.failures == []
    assert output(session, "select * from o1") == [(T, 1), (T + 10000, 2), (T + 20000, 3), (T + 30000, 4)]
    assert output(session, "select * from o2") == [(T, 2), (T + 20000, 2)]
    assert harness.warehouse.catalog.get_stream("d", "s2").last_error is None  # type: ignore[union-attr]
    worker.stop(run_id)


def test_the_keeper_sensor_starts_one_worker_while_a_stream_needs_it(
    session: Session, harness: StreamHarness, worker: RunningWorker
) -> None:
    def tick() -> Any:
        context = build_sensor_context(instance=harness.instance, sensor_name=WORKER, resources=harness.resources)
        return worker.sensor(context)

    skipped = tick()
    assert isinstance(skipped, SkipReason) and "nothing for the worker" in (skipped.skip_message or "")
    session.execute(STREAMS)
    request = tick()
    assert isinstance(request, RunRequest) and request.tags[LIVE_TAG] == WORKER
    assert request.run_key == f"{WORKER}:live:0"
    run_id = worker.start()
    running = tick()
    assert isinstance(running, SkipReason) and run_id in (running.skip_message or "")
    worker.stop(run_id)
    again = tick()
    assert isinstance(again, RunRequest) and again.run_key == f"{WORKER}:live:1"


def test_only_live_runs_that_fail_soon_after_starting_stop_the_restarts() -> None:
    instance = DagsterInstance.ephemeral()

    def live_run(run_id: str, seconds: float) -> None:
        """A finished, failed live run of the worker that lived ``seconds``."""
        instance.add_run(
            DagsterRun(job_name=WORKER, run_id=run_id, status=DagsterRunStatus.NOT_STARTED, tags={LIVE_TAG: WORKER})
        )
        instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_START.value, job_name=WORKER), run_id)
        record = instance.get_run_record_by_id(run_id)
        assert record is not None and record.start_time is not None
        # the run storage takes the end time from the failure event's timestamp
        with patch("time.time", return_value=record.start_time + seconds):
            instance.report_dagster_event(DagsterEvent(DagsterEventType.RUN_FAILURE.value, job_name=WORKER), run_id)

    live_run("served-an-hour", 3600)  # then the daemon shut down: replaced, not counted
    for n in range(2):
        live_run(f"crash-{n}", 1)
    assert isinstance(live_request(instance, WORKER, {}, job_name=WORKER), RunRequest)
    live_run("crash-2", 1)
    refused = live_request(instance, WORKER, {}, job_name=WORKER)
    assert isinstance(refused, SkipReason) and "failed 3 times in a row within 60 s of starting" in str(
        refused.skip_message
    )
