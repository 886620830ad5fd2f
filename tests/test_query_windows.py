"""SESSION, STATE_WINDOW, EVENT_WINDOW and COUNT_WINDOW in plain SELECTs: the windows the
stream triggers close over the same rows (one implementation), plus the window the end of
the data closes, checked against windows worked out by hand."""

from __future__ import annotations

import pytest

from dagster_tdstream import QueryError, Session

BASE = 1_700_000_000_000
# (second, state, value): NULL state at 4 s, NULL value at 3 s; gaps after 4 s and 11 s
ROWS = [(0, 1, 1), (1, 1, 2), (2, 2, 3), (3, 2, None), (4, None, 5), (10, 1, 6), (11, 3, 7), (30, 3, 8)]


def _load(session: Session) -> None:
    values = " ".join(
        f"({BASE + sec * 1000}, {'null' if s is None else s}, {'null' if v is None else v})" for sec, s, v in ROWS
    )
    session.execute(
        "create database w; use w;"
        "create stable st (ts timestamp, s int, v int) tags (site varchar(8));"
        "create table t1 using st tags ('a'); create table t2 using st tags ('b');"
        f"insert into t1 values {values};"
        # t2: the same rows five minutes later, each value doubled
        "insert into t2 values "
        + " ".join(f"({BASE + 300_000 + sec * 1000}, {s if s is not None else 'null'}, {v * 2 if v else 'null'})"
                   for sec, s, v in ROWS)
    )  # fmt: skip


def _windows(session: Session, sql: str) -> list[tuple[object, ...]]:
    """Window bounds as seconds after BASE, then the other columns."""
    rows = session.query(sql).rows
    return [
        tuple((int(v.timestamp() * 1000) - BASE) // 1000 if hasattr(v, "timestamp") else v for v in row) for row in rows
    ]


def test_state_window_null_state_stays_in_the_open_window(session: Session) -> None:
    _load(session)
    assert _windows(session, "select _wstart, _wend, count(*), sum(v), first(s) from t1 state_window(s)") == [
        (0, 1, 2, 3, 1),
        (2, 4, 3, 8, 2),
        (10, 10, 1, 6, 1),
        (11, 30, 2, 15, 3),
    ]
    # TRUE_FOR keeps windows lasting at least 2 s (last minus first row, inclusive)
    assert _windows(session, "select _wstart, count(*) from t1 state_window(s) true_for(2s)") == [(2, 3), (11, 2)]


def test_state_window_over_an_expression_and_a_where(session: Session) -> None:
    _load(session)
    # WHERE drops the rows first: the windows are over what it keeps
    sql = "select _wstart, _wduration, count(*) from t1 where v is not null state_window(case when v > 4 then 1 else 0 end)"
    assert _windows(session, sql) == [(0, 2000, 3), (4, 26000, 4)]


def test_session_window(session: Session) -> None:
    _load(session)
    assert _windows(session, "select _wstart, _wend, count(*), max(v) from t1 session(ts, 5s)") == [
        (0, 4, 5, 5),
        (10, 11, 2, 7),
        (30, 30, 1, 8),
    ]
    # a gap of exactly the tolerance stays in the session
    assert _windows(session, "select _wstart, count(*) from t1 session(ts, 6s)") == [(0, 7), (30, 1)]


def test_event_window_closes_only_on_its_end_condition(session: Session) -> None:
    _load(session)
    sql = "select _wstart, _wend, count(*), sum(v) from t1 event_window start with v >= 3 end with v >= 6"
    assert _windows(session, sql) == [(2, 10, 4, 14), (11, 11, 1, 7), (30, 30, 1, 8)]
    # an end condition never met: the open window at the end of the data is not a window
    assert _windows(session, "select _wstart, count(*) from t1 event_window start with v >= 7 end with v > 100") == []
    assert _windows(
        session, "select _wstart, count(*) from t1 event_window start with v >= 3 end with v >= 6 true_for(2s)"
    ) == [(2, 4)]


def test_count_window_tumbling_sliding_and_counted_columns(session: Session) -> None:
    _load(session)
    # the last window may hold fewer rows
    assert _windows(session, "select _wstart, _wend, count(*), sum(v) from t1 count_window(3)") == [
        (0, 2, 3, 6),
        (3, 10, 3, 11),
        (11, 30, 2, 15),
    ]
    # sliding by 2: windows from rows 0, 2, 4 and the partial one from row 6
    assert _windows(session, "select _wstart, _wend, count(*) from t1 count_window(3, 2)") == [
        (0, 2, 3),
        (2, 4, 3),
        (4, 11, 3),
        (11, 30, 2),
    ]
    # only rows with a value in v count (TDengine's COUNT_WINDOW(v, n)): a window runs from
    # its first to its last counted row, NULL rows between them inside, the one at 3 s in none
    assert _windows(session, "select _wstart, count(*), count(v) from t1 count_window(v, 3)") == [
        (0, 3, 3),
        (4, 3, 3),
        (30, 1, 1),
    ]


def test_row_windows_per_partition_and_merged_super_table(session: Session) -> None:
    _load(session)
    sql = (
        "select tbname, _wstart, count(*), sum(v) from st partition by tbname session(ts, 5s) order by tbname, _wstart"
    )
    assert _windows(session, sql) == [
        ("t1", 0, 5, 11), ("t1", 10, 2, 13), ("t1", 30, 1, 8),
        ("t2", 300, 5, 22), ("t2", 310, 2, 26), ("t2", 330, 1, 16),
    ]  # fmt: skip
    # without PARTITION BY the super table's rows are one time line: t2 follows t1
    assert _windows(session, "select _wstart, _wend, count(*) from st session(ts, 60s)") == [(0, 30, 8), (300, 330, 8)]


def test_row_window_from_a_subquery_and_in_a_subquery(session: Session) -> None:
    _load(session)
    inner = "select ts, v * 10 as w from t1 where v is not null"
    assert _windows(session, f"select _wstart, sum(w) from ({inner}) count_window(4)") == [(0, 110), (10, 210)]
    outer = "select max(n) from (select _wstart, count(*) as n from t1 session(ts, 5s))"
    assert session.query(outer).rows == [(5,)]


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("select count(*) from t1 state_window(v * 1.5)", "STATE_WINDOW needs an integer, boolean or string value"),
        ("select count(*) from t1 session(v, 5s)", "SESSION's first argument is the table's primary timestamp"),
        ("select count(*) from t1 session(ts, 5)", "SESSION's gap is a duration"),
        ("select count(*) from t1 count_window(1)", "COUNT_WINDOW takes a row count of at least 2"),
        ("select count(*) from t1 count_window(3, 4)", "COUNT_WINDOW takes a row count of at least 2"),
        ("select * from t1 state_window(s)", "not *"),
    ],
)
def test_row_window_errors(session: Session, sql: str, expected: str) -> None:
    _load(session)
    with pytest.raises(QueryError, match=expected):
        session.query(sql)
