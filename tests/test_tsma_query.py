"""Queries read TSMAs: with querySmaOptimize on and no skip_tsma() hint, a query a TSMA covers
reads its states (and the raw rows no final window holds) and returns exactly the raw query's
result; the result says which TSMA answered (real Spark, Delta and Dagster runs)."""

from __future__ import annotations

import math

import pytest

from dagster_tdstream import Session, StreamHarness
from dagster_tdstream.compute import query as query_module
from dagster_tdstream.compute import tsma_states
from dagster_tdstream.errors import TDStreamError
from dagster_tdstream.results import Result

T0 = 1_537_146_000_000  # 2018-09-17 01:00:00 UTC, a whole hour
MINUTE = 60_000


def _setup(session: Session, harness: StreamHarness) -> None:
    session.execute(
        "create database tq; use tq;"
        "create stable meters (ts timestamp, c1 int, c2 double, c3 varchar(10)) tags (t1 int, t2 varchar(8));"
        "create table d1 using meters tags (1, 'a'); create table d2 using meters tags (2, 'b');"
        "create table d3 using meters tags (3, 'a'); create table nt (ts timestamp, v int, w float);"
        "create table d4 using meters tags (NULL, NULL)"
    )
    # 47 minutes of rows every 20 s (some NULLs), d3 only in the last minute: its one window
    # never closes, so it is read from the raw rows
    values = {
        "d1": [(T0 + i * 20_000, i % 7, None if i % 11 == 0 else i * 0.25) for i in range(141)],
        "d2": [(T0 + i * 20_000 + 5_000, None if i % 5 == 0 else 100 - i, i * 1.5) for i in range(141)],
        "d3": [(T0 + 46 * MINUTE + 1_000, 9, 9.5)],
        "d4": [(T0 + i * 60_000 + 7_000, -i, None if i % 3 or i < 15 else -i / 8) for i in range(45)],  # NULL tags
    }
    for child, rows in values.items():
        text = " ".join(f"({ts}, {'NULL' if a is None else a}, {'NULL' if b is None else b}, 'x')" for ts, a, b in rows)
        session.execute(f"insert into {child} values {text}")
    session.execute("insert into nt values " + " ".join(f"({T0 + i * 30_000}, {i}, {i / 4})" for i in range(90)))
    session.execute(
        "create tsma t5 on meters function(avg(c1), max(c1), min(c1), sum(c1), count(ts), count(c1), first(c2),"
        " last(c2), spread(c1), stddev(c2)) interval(5m);"
        "create recursive tsma t15 on tq.t5 interval(15m);"
        "create tsma n2 on nt function(sum(v), avg(w), count(ts)) interval(2m)"
    )
    assert harness.run_until_idle().failures == []
    session.execute("alter local 'querySmaOptimize' '1'")


def _rows(result: Result, *, ordered: bool = False) -> list[tuple[object, ...]]:
    rows = [tuple(round(v, 9) if isinstance(v, float) and math.isfinite(v) else v for v in row) for row in result.rows]
    return rows if ordered else sorted(rows, key=repr)


def _same_as_raw(session: Session, query: str, raws: dict[str, Result] | None = None) -> str | None:
    """The query's rows equal the raw query's; the TSMA it read (None: the raw rows). ``raws``
    keeps raw answers across passes over unchanged data (the raw side is not under test)."""
    answer = session.query(query)
    _compare_with_raw(session, query, answer, {} if raws is None else raws)
    return answer.tsma_read


def _compare_with_raw(session: Session, query: str, answer: Result, raws: dict[str, Result]) -> Result:
    """The raw query's answer (kept in ``raws``), holding the same rows and columns."""
    if query not in raws:
        raws[query] = session.query(query.replace("select ", "select /*+ skip_tsma() */ ", 1))
    raw = raws[query]
    assert raw.tsma_read is None
    assert _rows(answer) == _rows(raw), query
    assert answer.columns == raw.columns
    return raw


# (query, the TSMA it reads; None: the raw rows)
CASES = [
    # no window: the largest TSMA covering the functions
    ("select avg(c1), max(c1), count(*), count(c1) from meters", "tq.t15"),
    ("select sum(c1) + sum(c1), first(c2), last(c2), spread(c1), stddev(c2) from meters", "tq.t15"),
    ("select avg(c1), tbname from meters partition by tbname", "tq.t15"),
    ("select t2, avg(c1) a from meters group by t2 having avg(c1) > 0 order by a", "tq.t15"),
    ("select substr(tbname, 1, 1) c, min(c1) from meters group by substr(tbname, 1, 1)", "tq.t15"),
    # a time range: whole windows inside it from the TSMA, its edges from the raw rows
    ("select avg(c1), count(*) from meters where ts >= '2018-09-17 01:07:10' and ts < '2018-09-17 01:38:00'",
     "tq.t15"),
    ("select avg(c1) from meters where ts between '2018-09-17 01:02:00' and '2018-09-17 01:03:00'", "tq.t15"),
    # windows the TSMA's interval divides; OFFSET and SLIDING count too
    ("select _wstart, avg(c1), max(c1), count(*) from meters interval(30m)", "tq.t15"),
    ("select _wstart, _wend, tbname, sum(c1) from meters partition by tbname interval(10m)", "tq.t5"),
    ("select _wstart, avg(c1) from meters interval(10m) sliding(5m)", "tq.t5"),
    ("select _wstart, avg(c1) from meters interval(15m, 5m)", "tq.t5"),
    ("select _wstart, count(*) from meters where t1 < 3 interval(5m) fill(value, 0)", "tq.t5"),
    ("select t2, t1, _wstart, _wduration, first(c2), last(c2), spread(c1), stddev(c2), min(c1), sum(c1)"
     " from meters partition by t2, t1 interval(15m)", "tq.t15"),
    ("select t2, count(c1), avg(c1) from meters group by t2", "tq.t15"),
    ("select _wstart, _wend, tbname, max(c1), first(c2) from meters where ts >= '2018-09-17 01:07:10'"
     " partition by tbname interval(15m, 5m) sliding(5m)", "tq.t5"),
    ("select _wstart, avg(c1), count(*) from meters interval(5m) order by _wstart desc limit 3 offset 1", "tq.t5"),
    ("select _wstart w, max(c1) from meters where ts < '2018-09-17 01:40:00' interval(10m) order by w limit 2",
     "tq.t5"),
    ("select _wstart, tbname, max(c1) from meters partition by tbname interval(10m) limit 2", "tq.t5"),
    ("select _wstart, avg(c1) a from meters interval(10m) order by a", "tq.t5"),
    # a child table reads its own states; a normal table its TSMA
    ("select avg(c1), last(c2) from d2", "tq.t15"),
    ("select sum(v), avg(w), count(*) from nt where ts > '2018-09-17 01:10:10'", "tq.n2"),
    # what no TSMA answers reads the raw rows
    ("select avg(c1) from meters where c1 > 2", None),
    ("select avg(c1) from meters partition by c3", None),
    ("select avg(c2) from meters", None),
    ("select avg(c1), last(ts) from meters", None),
    ("select _wstart, avg(c1) from meters interval(7m)", None),
    ("select _wstart, avg(c1) from meters interval(10m, 1m)", None),
    ("select avg(c1) from meters state_window(t1)", None),
    ("select c1 from meters", None),
]  # fmt: skip


# the plain lookups among CASES: finished in this process from the states it merged, no Spark job
FINISHED_HERE = {
    "select avg(c1), max(c1), count(*), count(c1) from meters",
    "select avg(c1), tbname from meters partition by tbname",
    "select avg(c1), count(*) from meters where ts >= '2018-09-17 01:07:10' and ts < '2018-09-17 01:38:00'",
    "select avg(c1) from meters where ts between '2018-09-17 01:02:00' and '2018-09-17 01:03:00'",
    "select _wstart, avg(c1), max(c1), count(*) from meters interval(30m)",
    "select _wstart, _wend, tbname, sum(c1) from meters partition by tbname interval(10m)",
    "select _wstart, avg(c1) from meters interval(10m) sliding(5m)",
    "select _wstart, avg(c1) from meters interval(15m, 5m)",
    "select t2, t1, _wstart, _wduration, first(c2), last(c2), spread(c1), stddev(c2), min(c1), sum(c1)"
    " from meters partition by t2, t1 interval(15m)",
    "select t2, count(c1), avg(c1) from meters group by t2",
    "select _wstart, _wend, tbname, max(c1), first(c2) from meters where ts >= '2018-09-17 01:07:10'"
    " partition by tbname interval(15m, 5m) sliding(5m)",
    "select _wstart, avg(c1), count(*) from meters interval(5m) order by _wstart desc limit 3 offset 1",
    "select _wstart w, max(c1) from meters where ts < '2018-09-17 01:40:00' interval(10m) order by w limit 2",
    "select avg(c1), last(c2) from d2",
    "select sum(v), avg(w), count(*) from nt where ts > '2018-09-17 01:10:10'",
}


def test_a_covered_query_reads_the_tsma_and_equals_the_raw_query(
    session: Session, harness: StreamHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each covered query equals the raw query three ways: its states merged in this process
    and the plain lookups finished there too, the rest run by Spark over those states, and
    (a table's raw rows too many for this process) states and raw rows both read by Spark."""
    _setup(session, harness)  # once: the TSMAs' history runs are the expensive part
    spark_queries: list[str] = []
    real = query_module.run_query
    monkeypatch.setattr(query_module, "run_query", lambda v, t, **k: spark_queries.append(t.sql) or real(v, t, **k))
    finished = set()
    raws: dict[str, Result] = {}
    read: dict[str, str | None] = {}
    for query, _ in CASES:
        spark_queries.clear()
        answer = session.query(query)
        by_spark = bool(spark_queries)
        raw = _compare_with_raw(session, query, answer, raws)
        read[query] = answer.tsma_read
        if not by_spark:  # finished here, in the raw query's order too (keys, NULL first, then windows)
            finished.add(query)
            assert _rows(answer, ordered=True) == _rows(raw, ordered=True), query
            assert answer.table is not None and raw.table is not None
            assert answer.table.schema.types == raw.table.schema.types, query
    assert finished == FINISHED_HERE
    assert read == dict(CASES)
    monkeypatch.setattr(tsma_states, "DRIVER_ROWS", 0)
    read = {query: _same_as_raw(session, query, raws) for query, _ in CASES}
    assert read == dict(CASES)
    # more states than this process holds: Spark reads them too, even for a plain lookup
    monkeypatch.setattr(tsma_states, "DRIVER_ROWS", 10**9)
    monkeypatch.setattr(tsma_states, "DRIVER_STATES", 0)
    spark_queries.clear()
    assert _same_as_raw(session, "select _wstart, avg(c1), max(c1), count(*) from meters interval(30m)") == "tq.t15"
    assert len(spark_queries) == 2  # the query and the raw one
    _tsma_use_follows_the_session_option_and_the_hint(session)


def _tsma_use_follows_the_session_option_and_the_hint(session: Session) -> None:
    query = "select avg(c1) from meters"
    result = session.query(query)
    assert result.tsma_read == "tq.t15" and "read from TSMA tq.t15" in result.message
    assert session.query("select /*+ skip_tsma() */ avg(c1) from meters").tsma_read is None
    session.execute("alter local 'querySmaOptimize 0'")
    assert session.query(query).tsma_read is None
    with pytest.raises(TDStreamError, match="unknown client option 'nope'"):
        session.execute("alter local 'nope' '1'")
    with pytest.raises(TDStreamError, match="maxTsmaCalcDelay is whole seconds from 600 to 86400"):
        session.execute("alter local 'maxTsmaCalcDelay' '10'")
    # a hint on a table without a TSMA runs on the raw rows without complaint
    assert session.query("select /*+ skip_tsma() */ count(*) from nt where v > 3").rows == [(86,)]


def test_rows_the_tsma_has_not_computed_are_read_raw(session: Session, harness: StreamHarness) -> None:
    """New rows, a late row and a delete not yet computed: the windows they touch are read
    from the raw rows (or the TSMA is not used), never stale states."""
    _setup(session, harness)
    session.execute(f"insert into d1 values ({T0 + 50 * MINUTE}, 50, 5.0, 'n')")  # new, not read yet
    assert _same_as_raw(session, "select avg(c1), count(*), max(c1) from meters") == "tq.t15"
    assert _same_as_raw(session, "select _wstart, sum(c1) from meters interval(15m)") == "tq.t15"
    session.execute(f"insert into d2 values ({T0 + 7 * MINUTE}, 1000, 1.0, 'late')")  # 43 min behind
    session.execute(f"delete from d1 where ts = {T0 + 20_000}")
    # the TSMA's progress is more than maxTsmaCalcDelay (600 s) behind: the raw rows answer
    assert _same_as_raw(session, "select avg(c1), max(c1), count(*) from meters") is None
    session.execute("alter local 'maxTsmaCalcDelay' '86400'")
    # within the delay: the windows before the late row from the TSMA, the rest raw
    assert _same_as_raw(session, "select avg(c1), max(c1), count(*) from meters") == "tq.t15"
    assert harness.run_until_idle().failures == []
    assert _same_as_raw(session, "select _wstart, max(c1), count(*) from meters interval(5m)") == "tq.t5"


def test_decimal_states_equal_the_raw_query(session: Session, harness: StreamHarness) -> None:
    """A DECIMAL column's sum keeps Spark's wider DECIMAL: the lookup is finished by Spark,
    with the raw query's values and types."""
    session.execute(
        "create database dq; use dq; create stable s (ts timestamp, d decimal(10,2)) tags (g int);"
        "create table c1 using s tags (1); create table c2 using s tags (2);"
        "insert into c1 values " + " ".join(f"({T0 + i * 20_000}, {i}.25)" for i in range(30)) + ";"
        "insert into c2 values " + " ".join(f"({T0 + i * 30_000}, -{i}.5)" for i in range(20)) + ";"
        "create tsma dt on s function(sum(d), max(d), count(ts)) interval(1m)"
    )
    assert harness.run_until_idle().failures == []
    session.execute("alter local 'querySmaOptimize' '1'")
    for query in ("select sum(d), max(d), count(*) from s", "select _wstart, sum(d) from s interval(5m)"):
        answer = session.query(query)
        raw = session.query(query.replace("select ", "select /*+ skip_tsma() */ ", 1))
        assert answer.tsma_read == "dq.dt"
        assert answer.rows == raw.rows and answer.rows
        assert answer.table is not None and raw.table is not None
        assert answer.table.schema.types == raw.table.schema.types
