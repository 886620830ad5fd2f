"""Notification delivery in Dagster: an op hook on every stream asset and a sensor for retries.

A run records its notifications in the outbox in the same transaction that finishes its
triggers (``assets.py``); the hook then delivers the stream's outbox as soon as the step
succeeded — so sensor runs, UI launches and backfills all notify — and the sensor
``tdstream_notifications`` retries whatever is left with back-off (a receiver that was down,
a run whose hook never ran). Delivery settings are the ``TDStreamNotifier`` resource. Owns
no protocol: ``notify/`` does.
"""

from __future__ import annotations

from dagster import (
    ConfigurableResource,
    DefaultSensorStatus,
    HookContext,
    SensorDefinition,
    SensorEvaluationContext,
    SkipReason,
    sensor,
    success_hook,
)
from dagster._core.definitions.hook_definition import HookDefinition

from ..names import definition_name
from ..notify.delivery import DEFAULT_FRAME_BYTES, DEFAULT_MAX_ATTEMPTS, DeliveryReport, DeliverySettings, deliver
from ..notify.messages import DEFAULT_MESSAGE_BYTES
from ..storage.warehouse import Warehouse
from .resources import TDStreamWarehouse

NOTIFICATION_SENSOR = "tdstream_notifications"


class TDStreamNotifier(ConfigurableResource):
    """How notifications are delivered: TDengine's ``streamNotifyMessageSize`` (bytes per
    message) and ``streamNotifyFrameSize`` (bytes per WebSocket frame), the connection
    timeout, the attempts before the default policy drops, the first retry's back-off, and
    the trust store for ``wss://`` (the system's by default; certificates are always verified
    unless ``verify_tls`` is turned off)."""

    message_bytes: int = DEFAULT_MESSAGE_BYTES
    timeout_seconds: float = 10.0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    ca_file: str | None = None
    verify_tls: bool = True
    backoff_seconds: float = 1.0  # the first retry's delay; doubling per attempt, at most 60 s
    frame_bytes: int = DEFAULT_FRAME_BYTES  # TDengine's streamNotifyFrameSize

    def settings(self) -> DeliverySettings:
        return DeliverySettings(
            message_bytes=self.message_bytes,
            timeout_seconds=self.timeout_seconds,
            max_attempts=self.max_attempts,
            ca_file=self.ca_file,
            verify_tls=self.verify_tls,
            backoff_ms=int(self.backoff_seconds * 1000),
            frame_bytes=self.frame_bytes,
        )

    def deliver(self, warehouse: Warehouse, streams: list[str] | None = None) -> DeliveryReport:
        return deliver(warehouse, self.settings(), streams=streams)


def build_notify_hook(stream_key: str) -> HookDefinition:
    @success_hook(
        name=f"{definition_name(stream_key)}__notify",
        required_resource_keys={"tdstream_warehouse", "tdstream_notifier"},
    )
    def deliver_notifications(context: HookContext) -> None:
        warehouse = context.resources.tdstream_warehouse.get()
        report = context.resources.tdstream_notifier.deliver(warehouse, [stream_key])
        if report.sent or report.failed or report.dropped:
            context.log.info(f"stream {stream_key}: {report.summary()}")

    return deliver_notifications


def build_notification_sensor(
    *, tdstream_warehouse: TDStreamWarehouse, tdstream_notifier: TDStreamNotifier, minimum_interval_seconds: int = 5
) -> SensorDefinition:
    @sensor(
        name=NOTIFICATION_SENSOR,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=DefaultSensorStatus.RUNNING,
        description="Delivers stream notifications left in the outbox (retries with back-off; resumes streams "
        "paused by ON_FAILURE_PAUSE once their notifications are through).",
    )
    def tdstream_notifications(context: SensorEvaluationContext) -> SkipReason:
        # the given resources, not resource parameters: those build an instance per tick
        # (instance.py); delivery needs no instance
        report = tdstream_notifier.deliver(tdstream_warehouse.get())
        if report.errors:
            context.log.warning(report.summary())
        return SkipReason(report.summary())

    return tdstream_notifications
