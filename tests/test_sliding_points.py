"""SLIDING without INTERVAL: event-time points with PERIOD's daily-reset rule, end to end."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pyarrow as pa

from dagster_tdstream import Session, StreamHarness, Warehouse
from dagster_tdstream.triggers.rows import RowChange
from dagster_tdstream.triggers.sliding import PointSpec, PointState, SlidingPointTrigger

SHANGHAI = ZoneInfo("Asia/Shanghai")
HOUR = 3_600_000


def ms(text: str, zone: ZoneInfo = SHANGHAI) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=zone).timestamp() * 1000)


def points(spec: PointSpec, start: int, count: int) -> list[int]:
    found = [spec.first_at_or_after(start)]
    while len(found) < count:
        found.append(spec.after(found[-1]))
    return found


def test_steps_under_a_day_restart_at_local_midnight_plus_offset() -> None:
    # the documentation's example: 5h30m with a 1 s offset → 00:00:01, 05:30:01, …, 22:00:01, then the next day
    spec = PointSpec(5 * HOUR + 30 * 60_000, 1000, "ms", SHANGHAI)
    got = points(spec, ms("2025-05-01 12:00:00"), 5)
    assert got == [
        ms("2025-05-01 16:30:01"),
        ms("2025-05-01 22:00:01"),
        ms("2025-05-02 00:00:01"),
        ms("2025-05-02 05:30:01"),
        ms("2025-05-02 11:00:01"),
    ]
    assert spec.before(ms("2025-05-02 00:00:01")) == ms("2025-05-01 22:00:01")


def test_points_fire_when_the_data_reaches_them() -> None:
    spec = PointSpec(1000, 0, "ms", ZoneInfo("UTC"))
    trigger = SlidingPointTrigger(spec)
    state = PointState()
    base = int(datetime(2025, 1, 1, tzinfo=UTC).timestamp() * 1000)
    fired = trigger.advance(state, [RowChange(base + t, "insert", {}) for t in (0, 400, 1000, 3500)])
    assert [(f.start - base, f.row_count, f.detail["prev"] - base) for f in fired] == [
        (0, 1, -1000), (1000, 2, 0), (2000, 0, 1000), (3000, 0, 2000),
    ]  # fmt: skip
    quiet = SlidingPointTrigger(spec, ignore_nodata=True)
    fired = quiet.advance(PointState(), [RowChange(base + t, "insert", {}) for t in (0, 400, 1000, 3500)])
    assert [f.start - base for f in fired] == [0, 1000]


def test_sliding_stream_with_current_point_and_trows(warehouse: Warehouse, spark: object) -> None:
    session = Session(warehouse, timezone="UTC")
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream sp sliding(10s) from t into sp_out as "
        "select _tcurrent_ts, _tprev_ts, count(*) n, sum(v) s from %%trows"
    )
    base = int(datetime(2025, 1, 1, tzinfo=UTC).timestamp() * 1000)
    session.execute(
        f"insert into t values ({base + 1000}, 1) ({base + 10000}, 2) ({base + 15000}, 3) ({base + 30000}, 4)"
    )
    assert StreamHarness(warehouse, timezone="UTC").run_until_idle().failures == []
    table = session.query("select * from sp_out").to_arrow()
    rows = list(
        zip(
            *(
                c.cast(pa.int64()).to_pylist() if pa.types.is_timestamp(c.type) else c.to_pylist()
                for c in table.columns
            ),
            strict=True,
        )
    )
    assert [(r[0] - base, r[1] - base, r[2], r[3]) for r in rows] == [
        (10000, 0, 2, 3),  # rows after 00:00:00 up to 00:00:10
        (20000, 10000, 1, 3),
        (30000, 20000, 1, 4),  # the row exactly on the point fires it
    ]
