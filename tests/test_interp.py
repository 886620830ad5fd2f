"""INTERP in queries: each point of RANGE … EVERY takes the row at its time or what FILL derives
from the neighbouring rows, per partition; the values are worked out by hand from TDengine's
function reference (a row at the point is used even when its value is NULL, unless
ignore_null_values is 1; PREV/NEXT/LINEAR leave out the points they have no neighbour for)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dagster_tdstream import QueryError, Session
from dagster_tdstream.compute.spark import LazySpark
from dagster_tdstream.storage.warehouse import Warehouse

from .conftest import output

B = 1_700_000_000_000
S = 1000
RANGE = f"range({B}, {B + 9 * S}) every(1s)"


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory, spark: object) -> Iterator[Session]:
    """One warehouse for the module: every test only reads it."""
    warehouse = Warehouse(str(tmp_path_factory.mktemp("interp") / "warehouse"))
    session = Session(warehouse, timezone="UTC", spark=LazySpark(session=spark))
    session.execute(
        "create database ip; use ip;"
        "create stable st (ts timestamp, v int, f double) tags (site varchar(8));"
        "create table t1 using st tags ('a'); create table t2 using st tags ('b');"
        # t1: rows at 1, 3 (v NULL), 5 and 8 s
        f"insert into t1 values ({B + S}, 10, 1.0) ({B + 3 * S}, null, 3.0) ({B + 5 * S}, 50, 5.0) ({B + 8 * S}, 80, 8.0);"
        # t2: rows at 0 and 4 s
        f"insert into t2 values ({B}, 100, 0.5) ({B + 4 * S}, 140, 4.5)"
    )
    yield session
    warehouse.close()


def points(session: Session, sql: str) -> list[tuple[object, ...]]:
    """Rows with _irowts (the first column) as seconds after B."""
    return [((row[0] - B) // S, *row[1:]) for row in output(session, sql)]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("fill", "expected"),
    [
        # only the points a row is at (a NULL there is still the row's value)
        ("none", [(1, 10, False), (3, None, False), (5, 50, False), (8, 80, False)]),
        ("null", [(0, None, True), (1, 10, False), (2, None, True), (3, None, False), (4, None, True),
                  (5, 50, False), (6, None, True), (7, None, True), (8, 80, False), (9, None, True)]),
        ("value, -1", [(0, -1, True), (1, 10, False), (2, -1, True), (3, None, False), (4, -1, True),
                       (5, 50, False), (6, -1, True), (7, -1, True), (8, 80, False), (9, -1, True)]),
        # nothing before the first row; the row at 3 s carries its NULL forward
        ("prev", [(1, 10, False), (2, 10, True), (3, None, False), (4, None, True), (5, 50, False),
                  (6, 50, True), (7, 50, True), (8, 80, False), (9, 80, True)]),
        ("next", [(0, 10, True), (1, 10, False), (2, None, True), (3, None, False), (4, 50, True),
                  (5, 50, False), (6, 80, True), (7, 80, True), (8, 80, False)]),
        # the closer row; on a tie (2 s, 4 s) the earlier one
        ("near", [(0, 10, True), (1, 10, False), (2, 10, True), (3, None, False), (4, None, True),
                  (5, 50, False), (6, 50, True), (7, 80, True), (8, 80, False), (9, 80, True)]),
        # between two rows only; a NULL neighbour gives NULL; integers stay integers
        ("linear", [(1, 10, False), (2, None, True), (3, None, False), (4, None, True), (5, 50, False),
                    (6, 60, True), (7, 70, True), (8, 80, False)]),
    ],
)  # fmt: skip
def test_each_fill_mode_over_a_range(loaded: Session, fill: str, expected: list[tuple[object, ...]]) -> None:
    assert points(loaded, f"select _irowts, interp(v), _isfilled from t1 {RANGE} fill({fill})") == expected


def test_ignore_null_values_skips_null_rows_even_at_the_point(loaded: Session) -> None:
    sql = f"select _irowts, interp(v, 1), _isfilled from t1 {RANGE} fill(linear)"
    assert points(loaded, sql) == [
        (1, 10, False), (2, 20, True), (3, 30, True), (4, 40, True), (5, 50, False),
        (6, 60, True), (7, 70, True), (8, 80, False),
    ]  # fmt: skip
    sql = f"select _irowts, interp(v, 1) from t1 range({B + 3 * S}, {B + 4 * S}) every(1s) fill(prev)"
    assert points(loaded, sql) == [(3, 10), (4, 10)]


def test_several_columns_double_values_and_value_fill_per_column(loaded: Session) -> None:
    sql = f"select _irowts, interp(v), interp(f) from t1 range({B + 6 * S}, {B + 7 * S}) every(1s) fill(linear)"
    assert points(loaded, sql) == [(6, 60, 6.0), (7, 70, 7.0)]
    sql = f"select _irowts, interp(v), interp(f) from t1 range({B}, {B + S}) every(1s) fill(value, 7, 0.5)"
    assert points(loaded, sql) == [(0, 7, 0.5), (1, 10, 1.0)]
    # expressions over the interpolated values
    sql = f"select _irowts, interp(v) * 2 + 1 d from t1 range({B + 6 * S}) fill(linear)"
    assert points(loaded, sql) == [(6, 121)]


def test_partition_by_tbname_interpolates_each_table_and_limits_each(loaded: Session) -> None:
    sql = (
        f"select tbname, _irowts, interp(v) from st partition by tbname "
        f"range({B + 2 * S}, {B + 4 * S}) every(1s) fill(prev)"
    )
    rows = [(name, (ts - B) // S, v) for name, ts, v in output(loaded, sql)]  # type: ignore[operator]
    assert rows == [("t1", 2, 10), ("t1", 3, None), ("t1", 4, None), ("t2", 2, 100), ("t2", 3, 100), ("t2", 4, 140)]
    limited = output(loaded, sql + " limit 1")
    assert [(name, (ts - B) // S) for name, ts, _ in limited] == [("t1", 2), ("t2", 2)]  # type: ignore[operator]


def test_a_super_table_without_partition_interpolates_all_rows_in_time_order(loaded: Session) -> None:
    # rows at 0 (t2: 100), 1 (t1: 10), 3 (NULL), 4 (t2: 140), 5, 8
    sql = f"select _irowts, interp(v) from st range({B + 2 * S}, {B + 4 * S}) every(1s) fill(next)"
    assert points(loaded, sql) == [(2, None), (3, None), (4, 140)]


def test_where_filters_the_rows_interp_reads_and_order_by_desc(loaded: Session) -> None:
    sql = f"select _irowts, interp(v) from t1 where v > 20 {RANGE} fill(prev) order by _irowts desc limit 3"
    assert points(loaded, sql) == [(9, 80), (8, 80), (7, 50)]


def test_single_point_range_without_fill_and_the_origin_of_filled_values(loaded: Session) -> None:
    assert points(loaded, f"select _irowts, interp(v) from t1 range({B + 7 * S}) fill(linear)") == [(7, 70)]
    assert points(loaded, f"select _irowts, interp(v) from t1 range({B + 5 * S}, {B + 6 * S}) every(1s)") == [(5, 50)]
    rows = output(loaded, f"select _irowts, _irowts_origin, interp(v) from t1 range({B + 6 * S}) fill(near)")
    assert rows == [(B + 6 * S, B + 5 * S, 50)]
    # a timestamp string bound, in the session's time zone (UTC)
    assert points(loaded, "select _irowts, interp(v) from t1 range('2023-11-14 22:13:25') fill(prev)") == [(5, 50)]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("select interp(v) from t1", "INTERP needs RANGE(start, end) EVERY(interval)"),
        (f"select interp(v) from t1 range({B}, {B + S}) fill(prev)", "RANGE(start, end) needs EVERY(interval)"),
        (f"select interp(v) from t1 range({B + S}, {B}) every(1s) fill(prev)", "needs start <= end"),
        (f"select _irowts, v from t1 range({B}, {B + S}) every(1s)", "select INTERP(column)"),
        ("select _irowts from t1", "is a pseudo-column of INTERP"),
        (f"select interp(v), v from t1 range({B}) fill(prev)", "beside INTERP a query selects"),
        (f"select interp(v), count(*) from t1 range({B}) fill(prev)", "beside INTERP a query selects"),
        (f"select interp(v) from t1 range({B}, {B + S}) every(1s) fill(value, 1, 2)", "needs 1 value(s)"),
        (f"select interp(v, 2) from t1 range({B}) fill(prev)", "ignore_null_values is 0 or 1"),
        (f"select interp(site) from st range({B}) fill(prev)", "INTERP needs a number column"),
        (f"select _irowts_origin, interp(v) from t1 range({B}) fill(linear)", "_irowts_origin is selected with"),
        (f"select interp(v) from t1 range({B}, {B + 10**10}) every(1a) fill(null)", "over 1,000,000 points"),
        ("select count(*) from t1 interval(1s) fill(near)", "FILL(NEAR) fills INTERP's points"),
    ],
)
def test_misuse_is_refused_with_the_rule(loaded: Session, sql: str, message: str) -> None:
    with pytest.raises(QueryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        loaded.query(sql)
