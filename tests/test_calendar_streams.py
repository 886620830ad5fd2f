"""Calendar INTERVAL triggers (n, y) end to end: a 3.3.7 stream's month-long windows every fixed
SLIDING, a legacy stream's and a TSMA's natural months — each on the stream's time zone,
written through Dagster runs, equal to the batch query over the same rows, recalculated
when a late row lands in a closed month."""

from __future__ import annotations

import itertools
from datetime import datetime
from zoneinfo import ZoneInfo

from dagster_tdstream import Session, StreamHarness, Warehouse
from dagster_tdstream.compute.spark import LazySpark

from .conftest import output

ZONE = "Asia/Shanghai"


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(ZONE)).timestamp() * 1000)


# local times: the last day of January, leap February, a month end in March, and beyond
STAMPS = ["2024-01-15 10:00:00", "2024-01-31 23:30:00", "2024-02-29 12:00:00", "2024-03-01 00:00:00",
          "2024-03-31 08:00:00", "2024-04-20 00:00:00", "2024-06-02 00:00:00"]  # fmt: skip


def _session(warehouse: Warehouse, spark: object) -> Session:
    return Session(warehouse, timezone=ZONE, spark=LazySpark(session=spark))  # type: ignore[arg-type]


def _insert(session: Session, table: str, stamps: list[str], first_value: int = 1) -> None:
    values = " ".join(f"({_ms(s)}, {first_value + i})" for i, s in enumerate(stamps))
    session.execute(f"insert into {table} values {values}")


def test_month_long_windows_every_fixed_sliding(warehouse: Warehouse, spark: object) -> None:
    session = _session(warehouse, spark)
    session.execute(
        "create database cal; use cal; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1);"
        "create stream s interval(1n) sliding(4w) from st partition by tbname into out "
        "as select _twstart ws, _twend we, count(*) n, sum(v) total from %%trows"
    )
    _insert(session, "a", STAMPS)
    harness = StreamHarness(warehouse, timezone=ZONE)
    assert harness.run_until_idle().failures == []
    # the windows the newest row (06-02) closed: those ending by then, as the batch query has them
    last = _ms(STAMPS[-1])
    batch = output(session, "select _wstart, _wend, count(*), sum(v) from a interval(1n) sliding(4w)")
    closed = [row for row in batch if row[1] <= last]
    assert len(closed) >= 5
    written = output(session, "select ws, we, n, total from out order by ws")
    assert written == closed
    local = [datetime.fromtimestamp(ws / 1000, ZoneInfo(ZONE)) for ws, *_ in written]
    # starts 28 days apart from Unix time 0 (08:00 in Shanghai), each window one calendar month
    assert {(w.hour, w.minute) for w in local} == {(8, 0)}
    assert all((b - a).days == 28 for a, b in itertools.pairwise(local))
    for ws, we, *_ in written:
        start, end = (datetime.fromtimestamp(t / 1000, ZoneInfo(ZONE)) for t in (ws, we))
        assert (end.year * 12 + end.month) - (start.year * 12 + start.month) == 1
        assert end.day == min(start.day, 29 if end.month == 2 else 30 if end.month in (4, 6, 9, 11) else 31)
    # a late row in a closed window: every window holding it is computed again
    _insert(session, "a", ["2024-02-10 00:00:00"], first_value=100)
    assert harness.run_until_idle().failures == []
    batch = output(session, "select _wstart, _wend, count(*), sum(v) from a interval(1n) sliding(4w)")
    assert output(session, "select ws, we, n, total from out order by ws") == [r for r in batch if r[1] <= last]


def test_legacy_and_tsma_natural_months(warehouse: Warehouse, spark: object) -> None:
    session = _session(warehouse, spark)
    session.execute(
        "create database calm; use calm; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (2);"
        "create stream m trigger at_once into months as select _wstart ws, count(*) n, sum(v) total from st "
        "partition by tbname interval(1n);"
        "create stream q trigger window_close into quarters as select _wstart ws, count(*) n from st interval(3n)"
    )
    _insert(session, "a", STAMPS)
    _insert(session, "b", STAMPS[2:5], first_value=10)
    harness = StreamHarness(warehouse, timezone=ZONE)
    assert harness.run_until_idle().failures == []
    # AT_ONCE: every month with rows, the open June one included, per child table
    months = sorted(output(session, "select ws, n, total from months"))
    assert months == sorted(
        output(session, "select _wstart, count(*), sum(v) from st partition by tbname interval(1n)")
    )
    a_months = sorted(output(session, "select _wstart, count(*) from a interval(1n)"))
    starts = [datetime.fromtimestamp(ws / 1000, ZoneInfo(ZONE)) for ws, _ in a_months]
    assert [(w.month, w.day, w.hour) for w in starts] == [(1, 1, 0), (2, 1, 0), (3, 1, 0), (4, 1, 0), (6, 1, 0)]
    assert [n for _, n in a_months] == [2, 1, 2, 1, 1] and len(months) == 5 + 2
    # WINDOW_CLOSE: the quarters June's rows closed (Q1 and nothing else: Q2 ends 07-01)
    quarters = output(session, "select ws, n from quarters")
    assert quarters == [(_ms("2024-01-01 00:00:00"), 8)]
    # a TSMA over months answers the month query from its states, equal to the raw rows
    session.execute("create tsma tm on st function(sum(v), count(ts)) interval(1n)")
    assert harness.run_until_idle().failures == []
    session.execute("alter local 'querySmaOptimize' '1'")
    query = "select _wstart, sum(v), count(*) from st interval(1n)"
    answer = session.query(query)
    raw = session.query(query.replace("select ", "select /*+ skip_tsma() */ ", 1))
    assert answer.rows == raw.rows and len(answer.rows) == 5
    metadata = answer.table.schema.metadata if answer.table is not None else None
    assert metadata is not None and metadata.get(b"tdstream.tsma") == b"calm.tm"


def test_years_of_monthly_windows_are_monthly_partitions_and_a_few_runs(warehouse: Warehouse, spark: object) -> None:
    """A 1n stream's asset is partitioned by month: a run may span 32 partitions, so four
    years of month windows take two runs, not one per window or two (daily partitions)."""
    session = _session(warehouse, spark)
    stamps = [f"{2020 + m // 12}-{m % 12 + 1:02d}-10 00:00:00" for m in range(49)]  # 2020-01 … 2024-01
    session.execute(
        "create database calr; use calr; create table t (ts timestamp, v int);"
        "create stream m trigger window_close into months as select _wstart ws, count(*) n from t interval(1n)"
    )
    _insert(session, "t", stamps)
    harness = StreamHarness(warehouse, timezone=ZONE)
    report = harness.run_until_idle()
    assert report.failures == [] and report.runs <= 3
    assert len(output(session, "select * from months")) == 48  # January 2024 is still open
    (job,) = harness._definitions()
    partitions = job.asset.partitions_def
    assert partitions is not None and partitions.get_first_partition_key() == "2020-01"


# UTC instants on both sides of 00:00 UTC and of 16:00 UTC (Shanghai's midnight), a week apart
DAY_ROWS = ["2025-01-01 15:50:00", "2025-01-01 16:10:00", "2025-01-01 23:50:00", "2025-01-02 00:10:00",
            "2025-01-08 15:59:59", "2025-01-08 16:00:00"]  # fmt: skip


def _utc_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo("UTC")).timestamp() * 1000)


def test_days_and_weeks_start_at_the_time_zones_midnight(warehouse: Warehouse, spark: object) -> None:
    """TDengine's taosTimeTruncate: INTERVAL(1d) and (1w) windows start at local (standard)
    midnight, every other fixed unit — 24h included — on the UTC grid; a query, a legacy
    stream, a 3.3.7 trigger and a TSMA agree, and a TSMA whose hours do not fall on the
    query's days (UTC+5:30) is not read."""
    session = _session(warehouse, spark)
    session.execute(
        "create database cald; use cald; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1);"
        "create stream legacy trigger at_once into by_day as select _wstart ws, count(*) n from st interval(1d);"
        "create stream new interval(1d) sliding(1d) from st into by_day_new as "
        "select _twstart ws, count(*) n from %%trows"
    )
    values = " ".join(f"({_utc_ms(s)}, {i})" for i, s in enumerate(DAY_ROWS))
    session.execute(f"insert into a values {values}")
    # and the history of rows already written (the bulk derivation, in Spark)
    session.execute(
        "create stream hist interval(1d) sliding(1d) from st stream_options(fill_history) into by_day_hist as "
        "select _twstart ws, count(*) n from %%trows"
    )
    harness = StreamHarness(warehouse, timezone=ZONE)
    assert harness.run_until_idle().failures == []
    days = [(_ms(f"2025-01-{d:02d} 00:00:00"), n) for d, n in ((1, 1), (2, 3), (8, 1), (9, 1))]
    assert [r for r in output(session, "select ws, n from by_day_hist order by ws") if r[1]] == days[:3]
    assert output(session, "select _wstart, count(*) from a interval(1d)") == days
    # weeks from Thursday 00:00 local (1970-01-01 was a Thursday): 2025-01-02 and 01-09
    weeks = [(_ms(f"{d} 00:00:00"), n) for d, n in (("2024-12-26", 1), ("2025-01-02", 4), ("2025-01-09", 1))]
    assert output(session, "select _wstart, count(*) from a interval(1w)") == weeks
    utc_days = [(_utc_ms(f"2025-01-{d:02d} 00:00:00"), n) for d, n in ((1, 3), (2, 1), (8, 2))]
    assert output(session, "select _wstart, count(*) from a interval(24h)") == utc_days
    assert sorted(output(session, "select ws, n from by_day")) == days
    # the 3.3.7 trigger's closed windows: the newest row (01-09 00:00 local) closed 01-08's
    assert [r for r in output(session, "select ws, n from by_day_new order by ws") if r[1]] == days[:3]
    session.execute("create tsma td on st function(count(ts)) interval(1d)")
    assert harness.run_until_idle().failures == []
    session.execute("alter local 'querySmaOptimize' '1'")
    for query, reads in (
        ("select _wstart, count(*) from st interval(1d)", b"cald.td"),
        ("select _wstart, count(*) from st interval(1w)", b"cald.td"),
        ("select _wstart, count(*) from st interval(24h)", None),  # 16:00 UTC days do not make 24h ones
    ):
        answer = session.query(query)
        assert answer.rows == session.query(query.replace("select ", "select /*+ skip_tsma() */ ", 1)).rows
        metadata = (answer.table.schema.metadata or {}) if answer.table is not None else {}
        assert metadata.get(b"tdstream.tsma") == reads, query
    # in UTC+5:30 a day starts at half past an hour: an hourly TSMA answers 2h windows, not days
    kolkata = Session(warehouse, timezone="Asia/Kolkata", spark=LazySpark(session=spark))  # type: ignore[arg-type]
    kolkata.execute(
        "use cald; create tsma th on st function(count(ts)) interval(1h); alter local 'querySmaOptimize' '1'"
    )
    assert harness.run_until_idle().failures == []
    for query, reads in (
        ("select _wstart, count(*) from st interval(2h)", b"cald.th"),
        ("select _wstart, count(*) from st interval(1d)", None),
    ):
        answer = kolkata.query(query)
        assert answer.rows == kolkata.query(query.replace("select ", "select /*+ skip_tsma() */ ", 1)).rows
        metadata = (answer.table.schema.metadata or {}) if answer.table is not None else {}
        assert metadata.get(b"tdstream.tsma") == reads, query
