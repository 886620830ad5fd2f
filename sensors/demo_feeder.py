"""Demo feeder: writes smart-meter readings while the Dagster daemon runs, so a newcomer sees
the trigger sensor tick, runs launch and partitions fill without writing data by hand."""

import math
import time

from dagster import DefaultSensorStatus, SensorEvaluationContext, SkipReason, sensor

from dagster_tdstream import Session
from dagster_tdstream.orchestration.resources import TDStreamWarehouse

DEVICES = ("d1001", "d1002", "d1003", "d1004")
READINGS_PER_TICK = 3  # one reading every 5 s per device for a 15 s tick


@sensor(minimum_interval_seconds=15, default_status=DefaultSensorStatus.RUNNING)
def demo_meter_feeder(context: SensorEvaluationContext, tdstream_warehouse: TDStreamWarehouse) -> SkipReason:
    """Insert readings for the last 15 seconds of every demo device into power.meters."""
    now_ms = time.time_ns() // 1_000_000
    rows = []
    for device_index, device in enumerate(DEVICES):
        values = []
        for step in range(READINGS_PER_TICK):
            ts = now_ms - (READINGS_PER_TICK - 1 - step) * 5_000
            phase = ts / 60_000 + device_index
            current = round(10 + 2 * math.sin(phase), 3)
            voltage = 218 + (ts // 5_000 + device_index) % 7
            values.append(f"({ts}, {current}, {voltage}, {round(0.3 + 0.02 * math.cos(phase), 3)})")
        rows.append(f"{device} values {' '.join(values)}")
    Session(tdstream_warehouse.get()).execute("insert into power." + " power.".join(rows))
    return SkipReason(f"wrote {READINGS_PER_TICK * len(DEVICES)} readings into power.meters")
