"""A stream's lag check: a Dagster asset check on its asset that fails when the stream is
behind its trigger table's newest data by more than a bound, or when the stream has failed.

The figures are ``ins_streams``' (``storage.system.stream_status``): event-time progress from
the latest checkpoint, lag against the trigger table's newest timestamp, pending triggers,
recalculations, last error. Reads only.
"""

from dagster import AssetCheckResult, AssetChecksDefinition, AssetKey, MetadataValue, asset_check

from ..storage.system import stream_status
from .resources import TDStreamWarehouse


def build_lag_check(stream_key: str, asset_key: AssetKey, max_lag_seconds: float) -> AssetChecksDefinition:
    @asset_check(
        asset=asset_key,
        name="stream_lag",
        description=f"Stream {stream_key} is at most {max_lag_seconds:g} s of event time behind its trigger "
        "table and has no error.",
    )
    def stream_lag(tdstream_warehouse: TDStreamWarehouse) -> AssetCheckResult:
        warehouse = tdstream_warehouse.get()
        db, _, name = stream_key.partition(".")
        info = warehouse.catalog.get_stream(db, name)
        if info is None:
            return AssetCheckResult(passed=False, description=f"stream {stream_key} does not exist")
        status = stream_status(warehouse, info)
        behind = status.lag_ms is not None and status.lag_ms > max_lag_seconds * 1000
        passed = not behind and status.status != "Failed"
        reason = (
            f"failed: {status.last_error}"
            if status.status == "Failed"
            else f"{status.lag_ms / 1000:g} s behind (bound {max_lag_seconds:g} s)"
            if behind
            else "within bound"
        )
        return AssetCheckResult(
            passed=passed,
            description=reason,
            metadata={
                "tdstream/status": status.status,
                "tdstream/lag_ms": status.lag_ms if status.lag_ms is not None else -1,
                "tdstream/progress_ms": status.progress_ms if status.progress_ms is not None else -1,
                "tdstream/pending_triggers": status.pending,
                "tdstream/recalculations": status.recalculations,
                "tdstream/last_error": MetadataValue.text(status.last_error or ""),
                "tdstream/notify_pending": status.notify_pending,
                "tdstream/notify_dropped": status.notify_dropped,
            },
        )

    return stream_lag
