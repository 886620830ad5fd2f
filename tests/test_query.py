"""SELECT over tables and super tables, translated to Spark SQL and run on real Spark."""

from __future__ import annotations

import time
from datetime import UTC
from pathlib import Path

import pyarrow as pa
import pytest

from dagster_tdstream import QueryError, Session

METERS = (
    "create database power; use power;"
    "create stable meters (ts timestamp, current float, voltage int, phase float) tags (groupid int, location varchar(24));"
    "create table d1001 using meters tags (2, 'SF'); create table d1002 using meters tags (3, 'SF');"
    "create table d1003 using meters tags (2, 'LA');"
    "insert into d1001 values (1648791210000, 10.0, 219, 0.31) (1648791216000, 12.0, 220, 0.33)"
    " (1648791220000, 11.0, null, 0.32)"
    " d1002 values (1648791210000, 5.0, 221, 0.1) (1648791230000, 7.0, 222, 0.2)"
    " d1003 values (1648791215000, 1.0, 200, 0.9);"
)


def test_projection_where_on_columns_tags_and_tbname(session: Session) -> None:
    session.execute(METERS)
    result = session.query(
        "select ts, tbname, voltage, location from meters where location = 'SF' and voltage >= 220 order by ts, tbname"
    )
    assert result.columns == ["ts", "tbname", "voltage", "location"]
    assert result.display_rows(session.timezone) == [
        ["2022-04-01 05:33:30.000", "d1002", 221, "SF"],
        ["2022-04-01 05:33:36.000", "d1001", 220, "SF"],
        ["2022-04-01 05:33:50.000", "d1002", 222, "SF"],
    ]
    assert result.to_arrow().schema.field("ts").type == pa.timestamp("ms", tz="UTC")


def test_back_quoted_names_with_path_and_glob_characters_are_tables_of_their_own(session: Session) -> None:
    """A back-quoted name may hold / \\ * ? ~: each table keeps its own directory (Spark would
    read `a*` as a pattern over its neighbours, `a/b` as a folder inside `a`)."""
    names = ["a", "a*", "a/b", "a\\b", "a~2Fb", "a?"]
    session.execute("create database `we/ird`; use `we/ird`")
    for i, name in enumerate(names):
        session.execute(f"create table `{name}` (ts timestamp, v int); insert into `{name}` values ({i + 1}, {i})")
    assert [session.query(f"select v from `{name}`").rows for name in names] == [[(i,)] for i in range(len(names))]
    session.execute("drop table `a/b`")
    assert session.query("select v from `a`").rows == [(0,)]
    root = session.warehouse.delta.root
    assert sorted(p.name for p in (Path(root) / "we~2Fird").iterdir() if not p.name.startswith(".")) == [
        "a",
        "a~2A",
        "a~3F",
        "a~5Cb",
        "a~7E2fb",  # names are stored in lower case
    ]


def test_select_star_on_super_and_child_tables(session: Session) -> None:
    session.execute(METERS)
    assert session.query("select * from meters limit 1").columns == [
        "ts", "current", "voltage", "phase", "groupid", "location",
    ]  # fmt: skip
    child = session.query("select * from d1003")
    assert child.columns == ["ts", "current", "voltage", "phase"]
    # FLOAT prints as TDengine prints it: 0.9, not the double 0.8999999761581421 it widens to
    assert child.display_rows(session.timezone) == [["2022-04-01 05:33:35.000", 1.0, 200, 0.9]]


def test_aggregates_with_tdengine_null_rules(session: Session) -> None:
    session.execute(METERS)
    row = session.query(
        "select count(*), count(voltage), sum(voltage), avg(current), min(current), max(voltage), "
        "first(voltage), last(voltage), last_row(voltage), first(ts), last(_c0), spread(voltage) from d1001"
    ).rows[0]
    count_all, count_v, total, avg, low, high, first, last, last_row, first_ts, last_ts, spread = row
    assert (count_all, count_v, total, avg, low, high) == (3, 2, 439, 11.0, 10.0, 220)
    # first/last skip NULLs, last_row does not
    assert (first, last, last_row) == (219, 220, None)
    assert (first_ts.timestamp(), last_ts.timestamp(), spread) == (1648791210.0, 1648791220.0, 1.0)


def test_interval_sliding_windows_match_tdengine(session: Session) -> None:
    """The conformance case interval_sliding_overlap_equals_batch_query, by hand: rows at
    :30, :36, :40 and INTERVAL(10s) SLIDING(5s) give the four windows starting :25 … :40."""
    session.timezone = __import__("zoneinfo").ZoneInfo("Asia/Shanghai")
    session.execute(
        "create database sliding0; use sliding0;"
        "create stable st (ts timestamp, a int, b int, c int, d double) tags (ta int, tb int, tc int);"
        "create table t1 using st tags (1, 1, 1);"
        "insert into t1 values (1648791210000, 1, 2, 3, 1.0) (1648791216000, 2, 2, 3, 1.1) (1648791220000, 3, 2, 3, 2.1)"
    )
    result = session.query(
        "select _wstart, _wend, first(ts), last(ts), count(*) c1, sum(a) c3, max(b) c4, min(c) c5 "
        "from t1 interval(10s) sliding (5s);"
    )
    assert result.columns == ["_wstart", "_wend", "first(ts)", "last(ts)", "c1", "c3", "c4", "c5"]
    assert result.display_rows(session.timezone) == [
        ["2022-04-01 13:33:25.000", "2022-04-01 13:33:35.000", "2022-04-01 13:33:30.000", "2022-04-01 13:33:30.000", 1, 1, 2, 3],
        ["2022-04-01 13:33:30.000", "2022-04-01 13:33:40.000", "2022-04-01 13:33:30.000", "2022-04-01 13:33:36.000", 2, 3, 2, 3],
        ["2022-04-01 13:33:35.000", "2022-04-01 13:33:45.000", "2022-04-01 13:33:36.000", "2022-04-01 13:33:40.000", 2, 5, 2, 3],
        ["2022-04-01 13:33:40.000", "2022-04-01 13:33:50.000", "2022-04-01 13:33:40.000", "2022-04-01 13:33:40.000", 1, 3, 2, 3],
    ]  # fmt: skip


def test_interval_with_offset_partition_by_and_wduration(session: Session) -> None:
    session.execute(METERS)
    result = session.query(
        "select _wstart, _wduration, tbname, count(*) c, max(current) from meters "
        "partition by tbname interval(20s, 5s) order by tbname, _wstart"
    )
    starts = [(r[2], r[0].timestamp(), r[1], r[3], r[4]) for r in result.rows]
    # windows are [k*20s + 5s, …): d1001's rows at :30, :36, :40 all fall in [:25, :45)
    assert starts == [
        ("d1001", 1648791205.0, 20000, 3, 12.0),
        ("d1002", 1648791205.0, 20000, 1, 5.0),
        ("d1002", 1648791225.0, 20000, 1, 7.0),
        ("d1003", 1648791205.0, 20000, 1, 1.0),
    ]


def test_group_by_tag_order_and_limit(session: Session) -> None:
    session.execute(METERS)
    result = session.query("select groupid, count(*) n, avg(voltage) from meters group by groupid order by n desc")
    assert result.rows == [(2, 4, pytest.approx(213.0)), (3, 2, 221.5)]
    limited = session.query("select ts, voltage from meters order by voltage desc limit 2 offset 1")
    assert [r[1] for r in limited.rows] == [221, 220]


def test_tag_changes_are_visible_to_later_queries(session: Session) -> None:
    session.execute(METERS)
    session.execute("alter table d1003 set tag location = 'SF'")
    result = session.query("select count(*) from meters where location = 'SF'")
    assert result.rows == [(6,)]


def test_timestamp_strings_compare_in_the_session_time_zone(session: Session) -> None:
    session.execute(METERS)
    query = "select count(*) from meters where ts >= '2022-04-01 05:33:36' and ts < '2022-04-01 05:33:50'"
    assert session.query(query).rows == [(2,)]  # :36 and :40
    session.timezone = __import__("zoneinfo").ZoneInfo("Asia/Shanghai")
    query = "select count(*) from meters where ts between '2022-04-01 13:33:35' and '2022-04-01 13:33:50'"
    assert session.query(query).rows == [(4,)]  # :35, :36, :40, :50


def test_nanosecond_results_keep_their_precision(session: Session) -> None:
    session.execute(
        "create database n precision 'ns'; use n; create table t (ts timestamp, v int);"
        "insert into t values ('2025-01-01 00:00:00.000000001', 1) ('2025-01-01 00:00:00.000000002', 2)"
    )
    result = session.query("select ts, v, _rowts from t where ts > '2025-01-01 00:00:00.000000001'")
    table = result.to_arrow()
    assert table.schema.field("ts").type == pa.timestamp("ns", tz="UTC")
    assert table.column("ts").cast(pa.int64()).to_pylist() == [1735689600000000002]
    assert result.display_rows(session.timezone)[0][0] == "2025-01-01 00:00:00.000000002"
    frame = result.to_pandas()
    assert list(frame["v"]) == [2]


def test_integer_division_is_exact_beyond_double_precision(session: Session) -> None:
    session.execute("create database q; use q; create table t (ts timestamp, v bigint);")
    session.execute("insert into t values (1735689600000, 1764080180490000000) (1735689601000, -7)")
    result = session.query("select v / 1000000, cast(v / 1000000 as timestamp), v / 2, v / 0 from t order by ts")
    first, second = result.rows
    # as doubles, 1764080180490000000 / 1e6 is 1764080180489.9998 and casts a millisecond early
    assert first[0] == 1764080180490.0
    assert int(first[1].timestamp() * 1000) == 1764080180490
    assert second[0] == -7e-06 and second[2] == -3.5 and second[3] is None


def test_fill_over_a_stray_row_years_away_is_refused_not_run_out_of_memory(session: Session) -> None:
    session.execute("create database q; use q; create table t (ts timestamp, v int);")
    session.execute("insert into t values (1000, 1) (1700000000000, 3)")  # 53 years of 10 s windows
    with pytest.raises(QueryError, match="FILL would produce more than 1000000 windows in one group"):
        session.query("select _wstart, avg(v) from t interval(10s) fill(prev)")
    narrowed = session.query("select _wstart, avg(v) from t where ts < 30000 interval(10s) fill(prev)")
    assert [row[1] for row in narrowed.rows] == [1.0, 1.0, 1.0]
    # a timestamp computed beyond 64 bits is NULL rather than a failed query
    assert session.query("select now - 1e20, v from t where ts = 1000").rows == [(None, 1)]


def test_a_query_past_its_timeout_is_cancelled_and_the_session_goes_on(warehouse: object, spark: object) -> None:
    session = Session(warehouse, timezone="UTC", spark=spark, query_timeout=0.5)
    session.execute("create database q; use q; create stable st (ts timestamp, v int) tags (g int);")
    for g in range(4):
        session.execute(f"insert into c{g} using st tags ({g}) values (0, 1) (999000, 2)")
    started = time.monotonic()
    with pytest.raises(QueryError, match=r"query cancelled after 0.5 s \(the query timeout\)"):
        # 4 groups of 999,001 windows of 1 ms, each filled: seconds of Spark work
        session.query("select _wstart, last(v) from st partition by tbname interval(1a) fill(prev)")
    assert time.monotonic() - started < 30
    session.query_timeout = None  # the server and the session are still up
    assert session.query("select count(*) from st").rows == [(8,)]


def test_a_timeout_between_a_querys_spark_operations_still_cancels_it(warehouse: object, spark: object) -> None:
    # the timeout passes while the session windows' view is registered or before the main
    # query reaches the server: no Spark job runs at that instant, and the query still fails
    session = Session(warehouse, timezone="UTC", spark=spark, query_timeout=0.001)
    session.execute("create database qb; use qb; create table t (ts timestamp, v int);")
    session.execute("insert into t values (0, 1) (1000, 2) (60000, 3)")
    for sql in ("select _wstart, count(*) from t session(ts, 10s)", "select count(*) from t"):
        with pytest.raises(QueryError, match=r"query cancelled after 0.001 s \(the query timeout\)"):
            session.query(sql)
    session.query_timeout = None
    assert session.query("select _wstart, count(*) from t session(ts, 10s)").rows[0][1] == 2


def test_query_errors_name_the_position_and_alternatives(session: Session) -> None:
    session.execute(METERS)
    with pytest.raises(QueryError) as info:
        session.query("select ts,\n nope from meters")
    assert (info.value.line, info.value.column) == (2, 2)
    assert "unknown column nope" in str(info.value)
    with pytest.raises(QueryError, match=r"function forecast\(\) is not supported yet; supported: .*avg"):
        session.query("select forecast(current) from d1001")
    with pytest.raises(QueryError, match="_wstart needs a window clause"):
        session.query("select _wstart, count(*) from d1001")
    with pytest.raises(QueryError) as loose:
        session.query("select count(*),\n  voltage from d1001")
    assert (loose.value.line, loose.value.column) == (2, 3)
    assert "voltage is neither aggregated nor grouped" in str(loose.value)
    with pytest.raises(QueryError, match="ts is neither aggregated nor grouped"):
        session.query("select max(voltage), min(voltage), ts from d1001")  # two selectors: no companion
    assert session.query("select max(voltage), ts from d1001").rows[0][0] == 220  # one selector: its row's ts


def test_interval_fill_modes(session: Session) -> None:
    T = 1700000000000
    session.execute(
        "create database fd; use fd; create stable st (ts timestamp, v int, f double) tags (g int);"
        "create table a using st tags (1); create table b using st tags (2);"
        f"insert into a values ({T}, 1, 1.0) ({T + 30000}, 4, 4.5) b values ({T + 10000}, 10, 10.0) ({T + 20000}, 20, 20.0)"
    )

    def filled(mode: str) -> list[tuple[object, ...]]:
        sql = f"select _wstart, tbname, sum(v), avg(f) from st partition by tbname interval(10s) fill({mode})"
        return [(int(r[0].timestamp() * 1000) - T, *r[1:]) for r in session.query(sql).rows]

    b = [(10000, "b", 10, 10.0), (20000, "b", 20, 20.0)]  # b has no gap: nothing to fill
    assert filled("null") == [
        (0, "a", 1, 1.0),
        (10000, "a", None, None),
        (20000, "a", None, None),
        (30000, "a", 4, 4.5),
        *b,
    ]
    assert filled("value, 0, -1") == [
        (0, "a", 1, 1.0),
        (10000, "a", 0, -1.0),
        (20000, "a", 0, -1.0),
        (30000, "a", 4, 4.5),
        *b,
    ]
    assert filled("prev") == [(0, "a", 1, 1.0), (10000, "a", 1, 1.0), (20000, "a", 1, 1.0), (30000, "a", 4, 4.5), *b]
    assert filled("next") == [(0, "a", 1, 1.0), (10000, "a", 4, 4.5), (20000, "a", 4, 4.5), (30000, "a", 4, 4.5), *b]
    # integers stay integers (truncated), doubles interpolate exactly
    assert filled("linear") == [(0, "a", 1, 1.0), (10000, "a", 2, pytest.approx(2 + 1 / 6)), (20000, "a", 3, pytest.approx(3 + 1 / 3)),
                                (30000, "a", 4, 4.5), *b]  # fmt: skip
    assert filled("none") == [(0, "a", 1, 1.0), (30000, "a", 4, 4.5), *b]
    ((_, total),) = session.query(
        f"select _wstart, count(*) from a where ts < {T + 10000} interval(10s) fill(prev)"
    ).rows
    assert total == 1
    # a WHERE time range is the range filled: windows before the first and after the last row
    ranged = session.query(
        f"select _wstart, sum(v) from a where ts >= {T - 20000} and ts < {T + 50000} interval(10s) fill(prev)"
    ).rows
    assert [(int(w.timestamp() * 1000) - T, v) for w, v in ranged] == [
        (-20000, None), (-10000, None), (0, 1), (10000, 1), (20000, 1), (30000, 4), (40000, 4),
    ]  # fmt: skip
    with pytest.raises(QueryError, match=r"FILL\(VALUE, …\) needs 2 value\(s\)"):
        session.query("select _wstart, sum(v), avg(f) from a interval(10s) fill(value, 0)")
    newest_first = session.query("select _wstart, sum(v) from a interval(10s) fill(prev) order by _wstart desc limit 3")
    assert [(int(w.timestamp() * 1000) - T, v) for w, v in newest_first.rows] == [(30000, 4), (20000, 1), (10000, 1)]
    assert [r[1] for r in session.query("select _wstart, sum(v) from a interval(10s) fill(null) limit 2 offset 1").rows] == [
        None, None,
    ]  # fmt: skip
    with pytest.raises(QueryError, match="FILL with HAVING"):
        session.query("select _wstart, sum(v) from a interval(10s) fill(null) having sum(v) > 1")


def test_selector_companions_and_tags_beside_aggregates(session: Session) -> None:
    T = 1700000000000
    session.execute(
        "create database cd; use cd; create stable st (ts timestamp, v int, w int) tags (g int, loc varchar(10));"
        "create table a using st tags (1, 'x'); create table b using st tags (2, 'y');"
        f"insert into a values ({T}, 5, 50) ({T + 1000}, 9, 90) ({T + 2000}, 3, NULL) b values ({T}, 1, 10) ({T + 1000}, 2, NULL)"
    )

    def rows(sql: str) -> list[tuple[object, ...]]:
        return [
            tuple(v.timestamp() * 1000 - T if hasattr(v, "timestamp") else v for v in r)
            for r in session.query(sql).rows
        ]

    assert rows("select max(v), ts, w from a") == [(9, 1000, 90)]  # the maximum's row
    assert rows("select min(v), _rowts from st") == [(1, 0)]
    assert rows("select last(w), ts from a") == [(90, 1000)]  # the newest non-NULL w
    assert rows("select last_row(w), ts from a") == [(None, 2000)]  # the newest row, NULL included
    assert rows("select tbname, loc, last(w), ts from st partition by tbname") == [
        ("a", "x", 90, 1000),
        ("b", "y", 10, 0),
    ]
    assert rows("select _wstart, _wend, max(v), ts from a interval(2s)") == [(0, 2000, 9, 1000), (2000, 4000, 3, 2000)]
    assert rows("select tbname, loc, avg(v) from st partition by tbname") == [("a", "x", 17 / 3), ("b", "y", 1.5)]
    # an expression of columns is a companion too: computed on the selector's row
    assert rows("select max(v), w + v, abs(w - 100) from a") == [(9, 99, 10)]
    assert rows("select tbname, loc, min(v), concat(loc, '-', cast(w as varchar(8))) from st partition by tbname") == [
        ("a", "x", 3, None),  # the minimum's row has no w
        ("b", "y", 1, "y-10"),
    ]


def test_slimit_soffset_and_partition_by_without_aggregates(session: Session) -> None:
    T = 1700000000000
    session.execute(
        "create database sl; use sl; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table b using st tags (2); create table c using st tags (3);"
        f"insert into a values ({T}, 1) ({T + 10000}, 2) b values ({T}, 10) c values ({T}, 100) ({T + 10000}, 200)"
    )
    assert session.query("select tbname, count(*) from st partition by tbname slimit 2").rows == [("a", 2), ("b", 1)]
    assert session.query("select tbname, count(*) from st partition by tbname slimit 1 soffset 1").rows == [("b", 1)]
    windows = session.query(
        "select _wstart, tbname, sum(v) from st partition by tbname interval(10s) slimit 2 soffset 1"
    )
    assert [(r[1], r[2]) for r in windows.rows] == [("b", 10), ("c", 100), ("c", 200)]
    # PARTITION BY without aggregates: the rows, ordered by group then time
    assert session.query("select tbname, v from st partition by tbname").rows == [
        ("a", 1),
        ("a", 2),
        ("b", 10),
        ("c", 100),
        ("c", 200),
    ]
    assert session.query("select tbname, v from st partition by tbname slimit 1 soffset 2").rows == [
        ("c", 100),
        ("c", 200),
    ]
    # with PARTITION BY, LIMIT/OFFSET slice each partition's rows
    assert session.query("select tbname, v from st partition by tbname limit 1").rows == [
        ("a", 1), ("b", 10), ("c", 100),
    ]  # fmt: skip
    latest = session.query("select _wstart, tbname, sum(v) from st partition by tbname interval(10s) limit 1 offset 1")
    assert [(r[1], r[2]) for r in latest.rows] == [("a", 2), ("c", 200)]
    with pytest.raises(QueryError, match="SLIMIT/SOFFSET limit the groups"):
        session.query("select v from st slimit 1")


JOINED = (
    "create database j; use j;"
    "create table temp (ts timestamp, v int); create table hum (ts timestamp, v int, note varchar(8));"
    "insert into temp values (1700000000000, 20) (1700000001000, 21) (1700000002000, 22)"
    " hum values (1700000000000, 50, 'a') (1700000002000, 52, 'c') (1700000003000, 53, 'd');"
)


def test_joins_on_the_primary_timestamp(session: Session) -> None:
    session.execute(JOINED)
    inner = session.query("select a.ts, a.v, b.v, note from temp a join hum b on a.ts = b.ts")
    assert inner.columns == ["ts", "v", "v", "note"]
    assert [(r[1], r[2], r[3]) for r in inner.rows] == [(20, 50, "a"), (22, 52, "c")]
    comma = session.query("select temp.v + hum.v from temp, hum where temp.ts = hum.ts and hum.v > 50")
    assert comma.rows == [(74,)]
    left = session.query("select a.v, b.v from temp a left join hum b on a.ts = b.ts")
    assert left.rows == [(20, 50), (21, None), (22, 52)]
    full = session.query("select a.v, b.v from temp a full join hum b on a.ts = b.ts order by b.v, a.v")
    assert full.rows == [(21, None), (20, 50), (22, 52), (None, 53)]
    # windows and aggregates over a join: the left table's timestamp is the result's
    windows = session.query(
        "select _wstart, count(*), avg(a.v + b.v) from temp a join hum b on a.ts = b.ts interval(2s)"
    )
    assert [(r[1], r[2]) for r in windows.rows] == [(1, 70.0), (1, 74.0)]
    star = session.query("select b.* from temp a join hum b on a.ts = b.ts")
    assert star.columns == ["ts", "v", "note"] and len(star.rows) == 2


def test_join_errors(session: Session) -> None:
    session.execute(JOINED)
    with pytest.raises(QueryError, match=r"column v is in more than one joined table: name its table \(t.v\)"):
        session.query("select v from temp a join hum b on a.ts = b.ts")
    with pytest.raises(QueryError, match=r"a join matches the tables' primary timestamps: add a\.ts = b\.ts to its ON"):
        session.query("select a.v from temp a join hum b on a.v = b.v")
    with pytest.raises(QueryError, match=r"add a\.ts = b\.ts to its WHERE"):
        session.query("select a.v from temp a, hum b")
    # a joined subquery without a timestamp column has nothing to match on
    with pytest.raises(QueryError, match=r"add a\.ts = b\.ts to its WHERE"):
        session.query("select a.v from temp a, (select v from hum) c where a.ts = c.v")


def test_calendar_intervals_and_month_arithmetic(warehouse: object, spark: object) -> None:
    """INTERVAL(1n/3n/1y): natural months, quarters and years of the session time zone; a
    window is as long as its month. ts + 1n keeps the day, clamped to the month's length."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from dagster_tdstream.compute.spark import LazySpark

    def ms(text: str) -> int:
        return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)

    stamps = ["2024-01-15 10:00:00", "2024-01-31 12:00:00", "2024-02-10 00:00:00", "2024-03-31 23:00:00",
              "2024-05-02 00:00:00"]  # fmt: skip
    for zone, months in (("UTC", ["2024-01", "2024-02", "2024-03", "2024-05"]), ("Asia/Shanghai", None)):
        session = Session(warehouse, timezone=zone, spark=LazySpark(session=spark))  # type: ignore[arg-type]
        db = "cal_" + zone.replace("/", "_").lower()
        session.execute(f"create database {db}; use {db}; create table t (ts timestamp, v int)")
        session.execute("insert into t values " + " ".join(f"({ms(s)}, {i + 1})" for i, s in enumerate(stamps)))
        rows = session.query("select _wstart, _wend, _wduration, count(*), sum(v) from t interval(1n)").rows
        local = [r[0].astimezone(ZoneInfo(zone)) for r in rows]
        assert all((w.day, w.hour, w.minute) == (1, 0, 0) for w in local)  # local midnight of the 1st
        if months is not None:
            assert [w.strftime("%Y-%m") for w in local] == months
            assert [(r[2], r[3], r[4]) for r in rows] == [
                (31 * 86_400_000, 2, 3), (29 * 86_400_000, 1, 3), (31 * 86_400_000, 1, 4), (31 * 86_400_000, 1, 5),
            ]  # fmt: skip
        else:  # 2024-03-31 23:00 UTC is April 1st in Shanghai
            assert [w.strftime("%Y-%m") for w in local] == ["2024-01", "2024-02", "2024-04", "2024-05"]
        quarters = session.query("select _wstart, count(*) from t interval(3n)").rows
        assert [(q[0].astimezone(ZoneInfo(zone)).month, q[1]) for q in quarters] == (
            [(1, 4), (4, 1)] if months is not None else [(1, 3), (4, 2)]
        )
        assert session.query("select count(*) from t interval(1y)").rows == [(5,)]
    session = Session(warehouse, timezone="UTC", spark=LazySpark(session=spark))  # type: ignore[arg-type]
    session.execute("use cal_utc")
    shifted = session.query(f"select ts + 1n, ts - 1y from t where ts = {ms('2024-01-31 12:00:00')}").rows
    assert [(a.isoformat(), b.isoformat()) for a, b in shifted] == [
        ("2024-02-29T12:00:00+00:00", "2023-01-31T12:00:00+00:00")
    ]
    # a fixed SLIDING under a calendar INTERVAL: a month-long window every 4 weeks from Unix
    # time 0 (TDengine's own test: 2021-03-18 08:00 +08:00 to 2021-04-18 08:00)
    sliding = session.query("select _wstart, _wend, count(*) from t interval(1n) sliding(4w)").rows
    assert [(w.strftime("%m-%d"), e.strftime("%m-%d"), n) for w, e, n in sliding] == [
        ("12-21", "01-21", 1),
        ("01-18", "02-18", 2),
        ("03-14", "04-14", 1),
        ("04-11", "05-11", 1),
    ]  # fmt: skip (02-15 to 03-15 holds no row)
    with pytest.raises(QueryError, match="needs SLIDING equal to the INTERVAL"):
        session.query("select count(*) from t interval(1n) sliding(1d) fill(null)")
    # FILL over months: April has no rows (UTC); a WHERE range adds the months around the data
    filled = session.query("select _wstart, sum(v) from t interval(1n) fill(value, 0)").rows
    assert [(w.strftime("%Y-%m"), v) for w, v in filled] == [
        ("2024-01", 3), ("2024-02", 3), ("2024-03", 4), ("2024-04", 0), ("2024-05", 5),
    ]  # fmt: skip
    ranged = session.query(
        f"select _wstart, count(*) from t where ts >= {ms('2023-12-01 00:00:00')} and ts < {ms('2024-08-01 00:00:00')} "
        "interval(3n) fill(null)"
    ).rows
    assert [(w.strftime("%Y-%m"), n) for w, n in ranged] == [
        ("2023-10", None),
        ("2024-01", 4),
        ("2024-04", 1),
        ("2024-07", None),
    ]


def test_union_and_union_all_with_order_and_limit_over_the_whole(session: Session) -> None:
    session.execute(METERS)
    both = "select location, count(*) n from meters group by location union{} select 'SF', 3 from d1001 order by n desc, location"
    # the second SELECT gives one row per row of d1001: three times ('SF', 3)
    assert session.query(both.format(" all")).rows == [("SF", 5), ("SF", 3), ("SF", 3), ("SF", 3), ("LA", 1)]
    assert session.query(both.format("")).rows == [("SF", 5), ("SF", 3), ("LA", 1)]
    # UNION keeps each row once; ORDER BY and LIMIT after the last SELECT apply to the whole
    query = (
        "select voltage from d1001 union select voltage from d1001 union all select 222 from d1003 order by 1 limit 3"
    )
    assert session.query(query).rows == [(None,), (219,), (220,)]
    assert session.query(query.replace(" limit 3", " limit 2 offset 3")).rows == [(222,)]
    with pytest.raises(QueryError, match="as many columns: the first returns 1, SELECT 2 returns 2"):
        session.query("select voltage from d1001 union select voltage, ts from d1001")
    with pytest.raises(Exception, match="order and cut the whole UNION"):
        session.query("select voltage from d1001 limit 1 union select voltage from d1002")
