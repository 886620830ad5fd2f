"""The run tags tdstream sets and reads, and the run statuses it groups: one vocabulary for
the sensors that request runs, the assets and the live loops that read them, dagster.yaml's
concurrency limits and the benchmark. Owns names only; no behaviour."""

from dagster import DagsterRunStatus

STREAM_TAG = "tdstream/stream"  # the stream a batch run computes (dagster.yaml: one at a time)
# when that stream was created: a stream dropped and created again under its name is another
# stream (its runs, run keys and failures are not the old one's)
CREATED_TAG = "tdstream/stream_created"
MODE_TAG = "tdstream/mode"  # what a run of a stream asset does, by the modes below
TRIGGERS_MODE = "triggers"  # the pending triggers named by BATCH_TAG
HISTORY_MODE = "history"  # FILL_HISTORY up to HISTORY_TAG
LIVE_MODE = "live"  # a long-lived run watching the WAL (``live.py``, ``worker.py``)
BATCH_TAG = "tdstream/batch"  # the ids of the triggers a run computes: "first-last"
HISTORY_TAG = "tdstream/history_offset"
LIVE_TAG = "tdstream/live"  # what a live run serves: a stream key, or the shared worker
POOL_TAG = "tdstream/pool"  # live | batch: dagster.yaml limits batch runs, not live ones
BATCH_POOL = "batch"
# headless runs (``tdstream run --until-idle``, the tests): a live run ends as soon as it has
# nothing to do, instead of waiting for more
UNTIL_IDLE_TAG = "tdstream/live_until_idle"

ACTIVE_STATUSES = [
    DagsterRunStatus.QUEUED,
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
]
FAILED_STATUSES = [DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED]
