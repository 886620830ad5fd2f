"""Subscription as a Dagster sensor: new rows of a table handed to a user's job.

Owns ``subscription_sensor`` — each tick, the WAL offsets of the table written since the
sensor's cursor become one run request of the user's job (the offsets in its tags, the run key
naming them, so a retried tick launches nothing twice) and the cursor moves past them — and
``subscription_rows``, which the job calls to read exactly the rows of its run's offsets.
Reads the warehouse; writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import (
    JobDefinition,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    sensor,
)
from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

from ..errors import SubscriptionError
from ..session import Session
from ..storage import vfeed
from ..storage.warehouse import Warehouse
from ..subscription.consumer import rows_in_offsets
from .resources import TDStreamWarehouse

TABLE_TAG = "tdstream/subscription_table"
WHERE_TAG = "tdstream/subscription_where"
FROM_TAG = "tdstream/subscription_from"
TO_TAG = "tdstream/subscription_to"


def subscription_sensor(
    table: str,
    job: JobDefinition | UnresolvedAssetJobDefinition,
    *,
    where: str | None = None,
    name: str | None = None,
    minimum_interval_seconds: int = 5,
) -> SensorDefinition:
    """A sensor requesting a run of ``job`` for each batch of rows written to ``table``
    (``db.table``; a super table includes its child tables), optionally only rows matching
    ``where``; the job reads them with ``subscription_rows(context.run.tags, warehouse)``."""
    db, _, table_name = table.lower().partition(".")
    if not table_name:
        raise SubscriptionError(f"subscription_sensor needs db.table, got {table!r}")

    @sensor(
        name=name or f"{db}__{table_name}__subscription",
        job=job,
        minimum_interval_seconds=minimum_interval_seconds,
        description=f"Subscription to {table}: runs {job.name} with the rows written since the last run.",
    )
    def _subscription(context: SensorEvaluationContext, tdstream_warehouse: TDStreamWarehouse) -> Any:
        warehouse = tdstream_warehouse.get()
        info = warehouse.find_table(db, table_name) if warehouse.catalog.get_database(db) else None
        if info is None:
            return SkipReason(f"table {table} does not exist")
        current = vfeed.newest_version(warehouse, info)
        last = int(context.cursor) if context.cursor else -1
        if current <= last:
            return SkipReason(f"no rows written to {table} since WAL offset {last}")
        tags = {TABLE_TAG: f"{db}.{table_name}", FROM_TAG: str(last + 1), TO_TAG: str(current)}
        if where:
            tags[WHERE_TAG] = where
        request = RunRequest(run_key=f"{db}.{table_name}:{last + 1}-{current}", tags=tags)
        return SensorResult(run_requests=[request], cursor=str(current))

    return _subscription


def subscription_rows(tags: Mapping[str, str], warehouse: Warehouse) -> list[dict[str, Any]]:
    """In a run requested by ``subscription_sensor``: the rows inserted or updated in its WAL
    offsets, in commit order (a re-executed run reads the same rows)."""
    missing = [t for t in (TABLE_TAG, FROM_TAG, TO_TAG) if t not in tags]
    if missing:
        raise SubscriptionError(f"this run was not requested by a subscription sensor (no {', '.join(missing)} tag)")
    # the subscription the sensor stands for, as Session.subscribe builds it (``now`` in the
    # condition is the time the run reads)
    spec = Session(warehouse).subscribe(tags[TABLE_TAG], where=tags.get(WHERE_TAG)).spec
    return rows_in_offsets(warehouse, spec, int(tags[FROM_TAG]), int(tags[TO_TAG]))
