"""Scalar functions on Spark against values worked out by hand (TDengine's semantics, NULL in →
NULL out), the CREATE-time rejection of what the translator cannot compute, and the generated
function list staying current."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from dagster_tdstream import QueryError, Session
from dagster_tdstream.sql.translate.functions import SCALARS, sql_support_markdown

from .conftest import output

ROOT = Path(__file__).resolve().parents[1]
T = 1700000000000


@pytest.fixture
def numbers(session: Session) -> Session:
    session.execute(
        "create database d; use d; create table t (ts timestamp, i int, f double, s varchar(20));"
        f"insert into t values ({T}, -7, 2.5, ' Ab c ') ({T + 1000}, NULL, NULL, NULL)"
    )
    return session


def _row(session: Session, exprs: str) -> list[tuple[object, ...]]:
    return session.query(f"select {exprs} from t order by ts").rows


def test_math_functions(numbers: Session) -> None:
    (row, nulls) = _row(
        numbers,
        "abs(i), ceil(f), floor(f), round(f), round(f, 0), sqrt(abs(i)), pow(f, 2), log(f), log(8, 2), "
        "mod(i, 3), sign(i), exp(0), pi(), degrees(pi()), cos(0), ceil(i)",
    )
    assert row[:5] == (7, 3.0, 2.0, 3.0, 3.0)
    assert math.isclose(row[5], math.sqrt(7)) and row[6] == 6.25 and math.isclose(row[7], math.log(2.5))
    assert math.isclose(row[8], 3.0) and row[9] == -1.0 and row[10] == -1
    assert row[11:15] == (1.0, math.pi, 180.0, 1.0) and row[15] == -7
    assert all(v is None for v in nulls[:8]) and nulls[9:11] == (None, None)


def test_float_kinds_stay_float(numbers: Session) -> None:
    table = numbers.query("select ceil(f) c, round(f) r, abs(i) a from t").to_arrow()
    assert str(table.schema.field("c").type) == "double" and str(table.schema.field("r").type) == "double"
    assert str(table.schema.field("a").type) == "int32"


def test_string_functions(numbers: Session) -> None:
    (row, nulls) = _row(
        numbers,
        "length(s), char_length(s), lower(s), upper(s), ltrim(s), rtrim(s), trim(s), substr(s, 2, 2), "
        "substring(s, 3), replace(s, 'b', 'B'), concat(s, '!'), concat_ws('-', 'x', s), ascii(s), repeat('ab', 2)",
    )
    assert row == (
        6, 6, " ab c ", " AB C ", "Ab c ", " Ab c", "Ab c", "Ab", "b c ", " AB c ", " Ab c !", "x- Ab c ", 32, "abab"
    )  # fmt: skip
    assert all(v is None for v in nulls[:11]) and nulls[13] == "abab"  # concat_ws skips NULLs (Spark)


def test_unsupported_functions_and_arguments_are_rejected_at_create_stream(numbers: Session) -> None:
    head = "create stream s interval(10s) sliding(10s) from t into o as select _twstart, "
    with pytest.raises(QueryError) as unknown:
        numbers.execute(head + "forecast(i) from %%trows")
    assert str(unknown.value).startswith(
        "error at line 1, column 78: function forecast() is not supported yet; supported:"
    )
    with pytest.raises(QueryError, match=r"INTERP is not computed in a 3\.3\.7 stream's query"):
        numbers.execute(head + "interp(i) from t range(_twstart) fill(prev)")
    assert "twa" in str(unknown.value) and "sqrt" in str(unknown.value)
    with pytest.raises(QueryError, match=r"column 83: sqrt\(\) needs a number, got a string value"):  # at `s`
        numbers.execute(head + "sqrt(s) from %%trows")
    with pytest.raises(QueryError, match=r"column 78: log\(\) takes 1 to 2 argument\(s\), got 3"):
        numbers.execute(head + "log(i, 2, 3) from %%trows")
    with pytest.raises(QueryError, match=r"upper\(\) needs a string, got a int value"):
        numbers.execute(head + "upper(i) from %%trows")
    with pytest.raises(QueryError, match=r"LIMIT/OFFSET beside time-series functions in a stream's query"):
        numbers.execute(head + "diff(i) from %%trows limit 1")
    # nothing was registered by the rejected statements
    assert numbers.query("show streams").rows == []
    numbers.execute(head + "sqrt(avg(f)) from %%trows")
    assert [r[0] for r in numbers.query("show streams").rows] == ["s"]


def test_every_scalar_has_a_spark_form_per_arity() -> None:
    for name, fn in SCALARS.items():
        for count in fn.arities:
            sql = fn.spark([f"a{i}" for i in range(count)])
            assert all(f"a{i}" in sql for i in range(count)), name


def test_the_function_list_in_docs_is_generated_from_the_code() -> None:
    assert (ROOT / "docs" / "sql-support.md").read_text() == sql_support_markdown(), (
        "docs/sql-support.md is stale: run .venv/bin/python scripts/sql_support.py"
    )


def test_statistical_aggregates(session: Session) -> None:
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int, w int);"
        f"insert into t values ({T}, 1, 7) ({T + 1000}, 2, 5) ({T + 2000}, 3, 7) ({T + 3000}, 4, 5) ({T + 4000}, NULL, NULL)"
    )
    ((std, var, p50, p0, p100, approx, distinct, mode, elapsed_ms, elapsed_s),) = session.query(
        "select stddev_pop(v), var_pop(v), percentile(v, 50), percentile(v, 0), percentile(v, 100), "
        "apercentile(v, 50), hyperloglog(w), mode(w), elapsed(ts), elapsed(ts, 1s) from t"
    ).rows
    assert math.isclose(std, math.sqrt(1.25)) and math.isclose(var, 1.25)
    assert (p50, p0, p100) == (2.5, 1.0, 4.0)  # exact, interpolated between 2 and 3
    assert approx == 2.0 and distinct == 2 and mode == 5  # TDengine's histogram: the bin 2.0 holds the half
    assert (elapsed_ms, elapsed_s) == (4000.0, 4.0)  # the NULL row still has a timestamp
    windows = session.query("select _wstart, var_pop(v), elapsed(ts, 1s) from t interval(2s)").rows
    assert [(w[1], w[2]) for w in windows] == [(0.25, 1.0), (0.25, 1.0), (None, 0.0)]
    with pytest.raises(QueryError, match="percentile from 0 to 100"):
        session.query("select percentile(v, 150) from t")
    # the exact percentile reads one table; a super table's children take apercentile
    session.execute(
        f"create stable st (ts timestamp, v int) tags (g int); insert into c1 using st tags (1) values ({T}, 1)"
    )
    with pytest.raises(QueryError, match="percentile is only supported in single table query") as caught:
        session.query("select count(*), percentile(v, 50) from st")
    assert caught.value.column == 18
    assert session.query("select percentile(v, 50) from c1").rows == [(1.0,)]
    with pytest.raises(QueryError, match=r"var_pop\(\) needs a numeric argument"):
        session.query("select var_pop(ts) from t")
    with pytest.raises(QueryError, match=r"elapsed\(\) needs the timestamp column"):
        session.query("select elapsed(v) from t")


def test_apercentile_is_tdengines_histogram_and_t_digest(session: Session) -> None:
    """apercentile's values as TDengine computes them (worked out from its thistogram.c and
    tdigest.c, and TDengine's own stream test's expected cells): the histogram's trapezoid
    between bins, the t-digest over the values in time order — which drops a value equal to
    the one just before it, so 3, 3, 3 count once."""
    session.execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        f"insert into t values ({T}, 1) ({T + 1}, 2) ({T + 2}, 4) ({T + 3}, 20) ({T + 4}, 3) ({T + 5}, 3)"
        f" ({T + 6}, 3) ({T + 7}, NULL) ({T + 60_000}, NULL)"
    )
    rows = session.query(
        "select apercentile(v, 30), apercentile(v, 70), apercentile(v, 20, 't-digest'), "
        "apercentile(v, 60, 't-digest'), apercentile(v, 0), apercentile(v, 100) from t interval(1m)"
    ).rows
    assert [tuple(round(x, 9) if x is not None else None for x in r) for r in rows] == [
        (2.091607978, 3.274823935, 1.5, 3.5, 1.0, 20.0),
        (None, None, None, None, None, None),
    ]


def test_apercentile_past_500_distinct_values_merges_bins() -> None:
    """Past 500 distinct values the histogram merges its closest bins (the answer then
    depends on the order, as in TDengine); up to 500 it does not. Either stays within the
    values and grows with p."""
    import random

    from dagster_tdstream.compute.apercentile import apercentile

    rng = random.Random(7)
    few = [float(rng.randrange(400)) for _ in range(3000)]
    assert apercentile(few, 37) == apercentile(sorted(few), 37) == apercentile(list(reversed(few)), 37)
    many = [rng.uniform(0, 1000) for _ in range(5000)]
    for algorithm in ("default", "t-digest"):
        answers = [apercentile(many, p, algorithm) for p in (1, 25, 50, 75, 99)]
        assert answers == sorted(answers) and min(many) <= answers[0] and answers[-1] <= max(many)
        assert abs(answers[2] - sorted(many)[2500]) < 25  # near the median
    assert apercentile(many, 50) != apercentile(sorted(many), 50)  # merged bins remember the order
    assert apercentile([], 50) is None


@pytest.mark.parametrize("zone", ["Asia/Shanghai", "America/New_York"])
def test_time_functions_in_the_session_time_zone(warehouse: object, spark: object, zone: str) -> None:
    from dagster_tdstream.compute.spark import LazySpark

    session = Session(warehouse, timezone=zone, spark=LazySpark(session=spark))  # type: ignore[arg-type]
    session.execute("create database d; use d; create table t (ts timestamp, s varchar(30))")
    # 2023-11-14 22:13:20 UTC: a Wednesday in Shanghai (Nov 15, 06:13), a Tuesday in New York (17:13)
    session.execute(f"insert into t values ({T}, '2023-11-15 06:13:20')")
    ((diff_s, diff_ms, neg, trunc_h, trunc_d, trunc_utc, weekday, dayofweek, week, iso, unix, tz),) = output(
        session,
        f"select timediff(ts, {T - 90_500}, 1s), timediff(ts, {T - 90_500}), timediff({T - 90_500}, ts, 1m), "
        "timetruncate(ts, 1h), timetruncate(ts, 1d), timetruncate(ts, 1d, 0), weekday(ts), dayofweek(ts), "
        "weekofyear(ts), to_iso8601(ts), to_unixtimestamp(s), timezone() from t",
    )
    assert (diff_s, diff_ms, neg) == (90, 90_500, -1)  # truncated toward zero
    assert trunc_h == T - T % 3_600_000 and trunc_utc == T - T % 86_400_000
    if zone == "Asia/Shanghai":
        assert trunc_d == 1699977600000  # 2023-11-15 00:00 +08:00
        assert (weekday, dayofweek, week) == (2, 4, 46)
        assert iso == "2023-11-15T06:13:20.000+08:00" and unix == T
        assert tz.startswith("Asia/Shanghai (CST, +0800)")
    else:
        assert trunc_d == 1699938000000  # 2023-11-14 00:00 -05:00
        assert (weekday, dayofweek, week) == (1, 3, 46)
        assert iso == "2023-11-14T17:13:20.000-05:00" and unix == T + 13 * 3_600_000  # the string read in New York
        assert tz.startswith("America/New_York (E")
    with pytest.raises(QueryError, match=r"weekday\(\) needs a timestamp"):
        session.query("select weekday(s) from t")
    with pytest.raises(QueryError, match="time unit such as 1s"):
        session.query("select timediff(ts, ts, 5) from t")


def test_time_series_functions(session: Session) -> None:
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int, f double, b bool) tags (g int);"
        "create table a using st tags (1); create table z using st tags (2);"
        f"insert into a values ({T}, 5, 1.0, true) ({T + 1000}, NULL, 2.0, false) ({T + 2000}, 3, NULL, true) "
        f"({T + 3000}, 8, 4.0, true) z values ({T}, 1, 1.0, true) ({T + 1000}, 2, 2.0, false)"
    )

    def rows(sql: str) -> list[tuple[object, ...]]:
        return [tuple(v - T if i == 0 else v for i, v in enumerate(r)) for r in output(session, sql)]

    # diff: against the nearest earlier non-NULL value (5 for the row at +2s); TDengine's options
    assert rows("select ts, diff(v) from a") == [(1000, None), (2000, -2), (3000, 5)]
    assert rows("select ts, diff(v, 1) from a") == [(1000, None), (2000, None), (3000, 5)]
    assert rows("select ts, diff(v, 2) from a") == [(2000, -2), (3000, 5)]
    assert rows("select ts, diff(v, 3) from a") == [(3000, 5)]
    assert rows("select ts, diff(b) from a") == [(1000, -1), (2000, 1), (3000, 0)]
    assert [r[0] for r in output(session, "select diff(ts) from a")] == [1000, 1000, 1000]
    assert rows("select ts, v, csum(v) from a") == [(0, 5, 5), (2000, 3, 8), (3000, 8, 16)]
    assert rows("select ts, mavg(f, 2) from a") == [(1000, 1.5), (3000, 3.0)]
    assert rows("select ts, diff(v) from a where v > 3") == [(3000, 3)]
    # a repeated item is computed once and output each time (hundreds of copies plan in time)
    repeated = [(1000, None, None, None, None), (2000, -2, -2, 3, 3), (3000, 5, 5, 8, 8)]
    assert rows("select ts, diff(v), diff(v), v, v from a") == repeated
    assert len(output(session, "select " + "v, " * 200 + "tail(v, 2), ts from a")) == 2
    by_table = output(session, "select tbname, diff(v) from st partition by tbname")
    assert by_table == [("a", None), ("a", -2), ("a", 5), ("z", 1)]  # per child table, each without its first row
    with pytest.raises(QueryError, match=r"diff\(\) must be a select item of its own"):
        session.query("select diff(v) + 1 from a")
    with pytest.raises(QueryError, match="csum and diff cannot be mixed"):
        session.query("select diff(v), csum(v) from a")
    with pytest.raises(QueryError, match="ignore_option is 0, 1, 2 or 3"):
        session.query("select diff(v, 5) from a")
    with pytest.raises(QueryError, match="cannot be combined with windows"):
        session.query("select _wstart, diff(v) from a interval(1s)")


def test_derivative_and_irate(session: Session) -> None:
    session.execute(
        "create database d; use d; create table c (ts timestamp, n int);"
        f"insert into c values ({T}, 10) ({T + 2000}, 30) ({T + 3000}, NULL) ({T + 4000}, 20) ({T + 8000}, 60)"
    )
    rates = [(ts - T, r) for ts, r in output(session, "select ts, derivative(n, 1s, 0) from c")]
    assert rates == [(2000, 10.0), (4000, -5.0), (8000, 10.0)]  # per second against the previous non-NULL value
    assert [r for _, r in output(session, "select ts, derivative(n, 1m, 1) from c")] == [600.0, 600.0]
    ((last_two,),) = output(session, "select irate(n) from c")
    assert last_two == 10.0  # (60 - 20) / 4 s
    ((reset,),) = output(session, f"select irate(n) from c where ts <= {T + 4000}")
    assert reset == 10.0  # 30 → 20 is a counter reset: 20 counts from zero, over 2 s
    with pytest.raises(QueryError, match="time interval is at least 1s"):
        session.query("select derivative(n, 10a, 0) from c")


def test_multi_row_selectors(session: Session) -> None:
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table a using st tags (1); create table z using st tags (2);"
        f"insert into a values ({T}, 5) ({T + 1000}, 9) ({T + 2000}, NULL) ({T + 3000}, 5) ({T + 4000}, 1) "
        f"z values ({T}, 7) ({T + 1000}, 8)"
    )

    def rows(sql: str) -> list[tuple[object, ...]]:
        return [(r[0] - T, *r[1:]) for r in output(session, sql)]

    assert rows("select ts, top(v, 2) from a") == [(0, 5), (1000, 9)]  # ties: the earlier row, time order
    assert rows("select ts, bottom(v, 2) from a") == [(0, 5), (4000, 1)]
    assert rows("select ts, tail(v, 2) from a") == [(3000, 5), (4000, 1)]
    assert rows("select ts, tail(v, 2, 1) from a") == [(2000, None), (3000, 5)]
    assert rows("select ts, unique(v) from a") == [(0, 5), (1000, 9), (2000, None), (4000, 1)]
    assert len(output(session, "select ts, sample(v, 3) from a")) == 3
    by_table = output(session, "select tbname, top(v, 1) from st partition by tbname")
    assert by_table == [("a", 9), ("z", 8)]
    with pytest.raises(QueryError, match=r"top\(\)'s k is a constant from 1 to 100"):
        session.query("select top(v, 0) from a")


def test_to_char_and_to_timestamp_with_tdengine_formats(warehouse: object, spark: object) -> None:
    from dagster_tdstream.compute.spark import LazySpark

    session = Session(warehouse, timezone="Asia/Shanghai", spark=LazySpark(session=spark))  # type: ignore[arg-type]
    session.execute("create database d; use d; create table t (ts timestamp, s varchar(30))")
    session.execute(f"insert into t values ({T + 7}, '2023-11-15 06:13:20.007')")
    ((numeric, named, upper, quoted, parsed),) = output(
        session,
        "select to_char(ts, 'yyyy-mm-dd hh24:mi:ss.ms'), to_char(ts, 'Month DD, YYYY (Dy) hh12 am'), "
        "to_char(ts, 'MON DAY'), to_char(ts, '\"day\" ddd'), to_timestamp(s, 'yyyy-mm-dd hh24:mi:ss.ms') from t",
    )
    assert numeric == "2023-11-15 06:13:20.007"
    assert named == "November 15, 2023 (Wed) 06 am"
    assert upper == "NOV WEDNESDAY"
    assert quoted == "day 319"
    assert parsed == T + 7
    with pytest.raises(QueryError, match="constant format string"):
        session.query("select to_char(ts, s) from t")


def test_leastsquares(session: Session) -> None:
    session.execute("create database d; use d; create table p (ts timestamp, y int)")
    session.execute(f"insert into p values ({T}, 3) ({T + 1000}, 5) ({T + 2000}, NULL) ({T + 3000}, 7) ({T + 4000}, 9)")
    # y against x = 1, 2, 3, 4 (the NULL row is skipped): y = 2x + 1
    assert output(session, "select leastsquares(y, 1, 1) from p") == [("{slop:2.000000, intercept:1.000000}",)]
    assert output(session, f"select leastsquares(y, 1, 1) from p where ts = {T}") == [(None,)]  # one point: no line


def test_twa_interpolates_to_interval_window_bounds(session: Session) -> None:
    """In an INTERVAL window twa() draws the line to the window's start from the row before it
    and to its last instant (end - 1) from the row after it, where the window's own row is not
    there already and both rows have a value; the rows are those the WHERE keeps, per timeline."""
    session.execute(
        "create database d; use d; create table s (ts timestamp, v int);"
        f"insert into s values ({T}, 5) ({T + 1000}, 7) ({T + 2000}, NULL) ({T + 3000}, 8) ({T + 4000}, 2) "
        f"({T + 5000}, 9) ({T + 6000}, 10)"
    )

    def twa(*points: tuple[int, float]) -> float:
        area = sum((a[1] + b[1]) / 2 * (b[0] - a[0]) for a, b in itertools.pairwise(points))
        return area / (points[-1][0] - points[0][0])

    rows = output(session, "select _wstart, twa(v) from s interval(2s)")
    assert [r[0] for r in rows] == [T, T + 2000, T + 4000, T + 6000]
    assert [r[1] for r in rows] == pytest.approx([
        6.0,  # no end point: the row after the window is NULL
        twa((3000, 8), (3999, 8 - 6 * 0.999)),  # its first row is NULL: no start point
        twa((4000, 2), (5000, 9), (5999, 9 + 0.999)),
        10.0,  # no row after the last window
    ])  # fmt: skip
    # windows offset by 500 ms: the start point comes from the row before the window
    rows = output(session, "select _wstart, twa(v) from s interval(2s, 500a)")
    assert rows[0] == (T - 1500, pytest.approx(twa((0, 5), (499, 5 + 2 * 0.499))))
    assert rows[1] == (T + 500, pytest.approx(twa((500, 6), (1000, 7))))
    # the WHERE's rows only: the row at T is not there to interpolate from
    assert output(session, f"select _wstart, twa(v) from s where ts > {T} interval(2s, 500a)")[0] == (T + 500, 7.0)
    # without a window: the values alone, as before
    ((whole,),) = output(session, "select twa(v) from s")
    assert whole == pytest.approx(41 / 6)
    # each child table is a timeline of its own
    session.execute(
        "create stable m (ts timestamp, v double) tags (g int); create table c1 using m tags (1);"
        f"create table c2 using m tags (2); insert into c1 values ({T + 1000}, 1) ({T + 3000}, 3)"
        f" c2 values ({T + 1500}, 100) ({T + 2500}, 200)"
    )
    rows = output(
        session, "select tbname, _wstart, twa(v) from m partition by tbname interval(2s) order by tbname, _wstart"
    )
    assert rows == [
        ("c1", T, pytest.approx(twa((1000, 1), (1999, 1 + 2 * 0.999 / 2)))),
        ("c1", T + 2000, pytest.approx(twa((2000, 2), (3000, 3)))),
        ("c2", T, pytest.approx(twa((1500, 100), (1999, 100 + 100 * 0.499)))),
        ("c2", T + 2000, pytest.approx(twa((2000, 100 + 100 * 0.5), (2500, 200)))),
    ]


def test_state_functions_twa_and_histogram(session: Session) -> None:
    session.execute(
        "create database d; use d; create table s (ts timestamp, v int);"
        f"insert into s values ({T}, 5) ({T + 1000}, 7) ({T + 2000}, NULL) ({T + 3000}, 8) ({T + 4000}, 2) "
        f"({T + 5000}, 9) ({T + 6000}, 10)"
    )
    # a NULL row gives NULL and leaves the run as it is; a row not meeting the condition gives -1
    assert [r[1] for r in output(session, "select ts, statecount(v, 'GT', 4) from s")] == [1, 2, None, 3, -1, 1, 2]
    assert [r[1] for r in output(session, "select ts, stateduration(v, 'gt', 4) from s")] == [
        0, 1000, None, 3000, -1, 0, 1000,
    ]  # fmt: skip
    assert [r[0] for r in output(session, "select stateduration(v, 'LE', 8, 1s) from s")] == [
        0, 1, None, 3, 4, -1, -1,
    ]  # fmt: skip
    with pytest.raises(QueryError, match="operator is one of 'LT', 'GT'"):
        session.query("select statecount(v, 'GREATER', 4) from s")
    # trapezoids between consecutive values over the 6 s they span: (6 + 15 + 5 + 5.5 + 9.5) / 6
    ((twa,),) = output(session, "select twa(v) from s")
    ((one_row,),) = output(session, f"select twa(v) from s where ts = {T}")
    assert twa == pytest.approx(41 / 6) and one_row == 5.0
    assert output(session, "select histogram(v, 'user_input', '[0, 5, 10]', 0) from s") == [
        ('{"lower_bin":0, "upper_bin":5, "count":2}',),
        ('{"lower_bin":5, "upper_bin":10, "count":4}',),
    ]
    assert output(session, "select histogram(v, 'user_input', '[0, 5, 10]', 1) from s") == [
        ('{"lower_bin":0, "upper_bin":5, "count":0.333333}',),
        ('{"lower_bin":5, "upper_bin":10, "count":0.666667}',),
    ]
    linear = output(
        session, """select histogram(v, 'linear_bin', '{"start":0, "width":5, "count":2, "infinity":true}', 0) from s"""
    )
    assert linear == [
        ('{"lower_bin":-inf, "upper_bin":0, "count":0}',),
        ('{"lower_bin":0, "upper_bin":5, "count":2}',),
        ('{"lower_bin":5, "upper_bin":10, "count":4}',),
        ('{"lower_bin":10, "upper_bin":inf, "count":0}',),
    ]
    with pytest.raises(QueryError, match="edges must increase strictly"):
        session.query("select histogram(v, 'user_input', '[5, 1]', 0) from s")


def test_query_range_pseudo_columns(session: Session) -> None:
    session.execute(f"create database d; use d; create table s (ts timestamp, v int); insert into s values ({T}, 1)")
    ((start, end, duration, count),) = output(
        session, f"select _qstart, _qend, _qduration, count(*) from s where ts >= {T} and v > 0 and ts < {T + 5000}"
    )
    assert (start, end, duration, count) == (T, T + 4999, 4999, 1)  # both ends included, as TDengine keeps them
    ((start, end),) = output(session, f"select _qstart, _qend from s where {T - 10} < ts")
    assert (start, end) == (T - 9, 2**63 - 1)  # an open end is the largest timestamp
