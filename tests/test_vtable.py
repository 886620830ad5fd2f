"""Virtual tables (TDengine 3.3.6+): a virtual normal, child or super table reads other tables'
columns, joined on the timestamp — through SQL, with TDengine's rules and its documented
example's exact rows; read by a stream's query and run through Dagster."""

from __future__ import annotations

import re

import pytest

from dagster_tdstream import Session, StreamHarness
from dagster_tdstream.errors import TDStreamError
from dagster_tdstream.storage.registry import load_streams

from .conftest import output

# TDengine's documented example: t1 has rows at 1 s and 4 s, t2 at 2, 4 and 5 s, t3 at 3 and 5 s
SOURCES = (
    "create database d; use d; create table t1 (ts timestamp, value int); create table t2 (ts timestamp, value int);"
    "create table t3 (ts timestamp, value1 int, value2 int);"
    "insert into t1 values (1000, 1) (4000, 4); insert into t2 values (2000, 20) (4000, 40) (5000, 50);"
    "insert into t3 values (3000, 300, 3000) (5000, 500, 5000);"
)
V1 = "create vtable v1 (ts timestamp, c1 int from t1.value, c2 int from t2.value, c3 int from d.t3.value1, "
V1 += "c4 int from t3.value2, c5 int)"


def test_a_virtual_table_joins_its_sources_on_the_timestamp(session: Session) -> None:
    session.execute(SOURCES + V1)
    assert output(session, "select * from v1") == [
        (1000, 1, None, None, None, None),
        (2000, None, 20, None, None, None),
        (3000, None, None, 300, 3000, None),
        (4000, 4, 40, None, None, None),
        (5000, None, 50, 500, 5000, None),
    ]
    # only the sources of the columns a query names give timestamps: t3's 3 s is not a row here
    assert output(session, "select ts, c1, c2 from v1") == [
        (1000, 1, None), (2000, None, 20), (4000, 4, 40), (5000, None, 50),
    ]  # fmt: skip
    assert output(session, "select count(*), sum(c3), max(c2) from v1 where ts >= 2000") == [(4, 800, 50)]
    assert output(session, "select _wstart, count(c1), count(c2) from v1 interval(3s)") == [(0, 1, 1), (3000, 1, 2)]
    # a source written later is read as it is now
    session.execute("insert into t1 values (6000, 6)")
    assert output(session, "select ts, c1 from v1 where ts > 4000") == [(6000, 6)]
    described = session.execute("describe v1")[0].table
    assert described is not None and described.column("ref").to_pylist() == [
        "", "d.t1.value", "d.t2.value", "d.t3.value1", "d.t3.value2", "",
    ]  # fmt: skip
    assert output(session, "show vtables") == [("v1",)]
    assert [r[0] for r in output(session, "show tables")] == ["t1", "t2", "t3"]
    assert output(session, "select type from information_schema.ins_tables where table_name = 'v1'") == [
        ("VIRTUAL_NORMAL_TABLE",)
    ]


def test_virtual_child_tables_of_a_virtual_super_table(session: Session) -> None:
    session.execute(
        SOURCES + "create stable vs (ts timestamp, a int, b int) tags (g int) virtual 1;"
        "create vtable vc1 (a from t1.value, b from t2.value) using vs tags (1);"
        "create vtable vc2 (t3.value1, t3.value2) using vs tags (2);"  # in column order
        "create vtable if not exists vc3 (b from t2.value) using vs (g) tags (1)"
    )
    assert output(session, "select tbname, g, ts, a, b from vs order by tbname, ts") == [
        ("vc1", 1, 1000, 1, None), ("vc1", 1, 2000, None, 20), ("vc1", 1, 4000, 4, 40), ("vc1", 1, 5000, None, 50),
        ("vc2", 2, 3000, 300, 3000), ("vc2", 2, 5000, 500, 5000),
        ("vc3", 1, 2000, None, 20), ("vc3", 1, 4000, None, 40), ("vc3", 1, 5000, None, 50),
    ]  # fmt: skip
    # the query names b only: vc1's rows are t2's timestamps (t1's 1 s is not one of them)
    assert output(session, "select g, count(*), sum(b) from vs partition by g order by g") == [
        (1, 6, 220),
        (2, 2, 8000),
    ]
    assert output(session, "select * from vc2") == [(3000, 300, 3000), (5000, 500, 5000)]
    assert output(session, "show child vtables") == [("vc1",), ("vc2",), ("vc3",)]
    assert output(session, "select stable_name, isvirtual from information_schema.ins_stables") == [("vs", True)]
    # a virtual super table goes with its child tables
    session.execute("drop stable vs")
    assert output(session, "show vtables") == []


def test_virtual_table_rules_refuse_with_a_position_and_create_nothing(session: Session) -> None:
    session.execute(
        SOURCES + "create stable st (ts timestamp, v int) tags (g int); create table c1 using st tags (1);"
        "create stable vs (ts timestamp, a int) tags (g int) virtual 1;"
        "create database us precision 'us'; create table us.u (ts timestamp, value int);" + V1
    )
    refused = {
        "create vtable x (ts timestamp, c bigint from t1.value)": (
            "column c is BIGINT but its source d.t1.value is INT",
            46,
        ),
        "create vtable x (ts timestamp from t1.ts, c int)": ("the timestamp column ts takes no source", 36),
        "create vtable x (ts timestamp)": ("a virtual table needs a column besides its timestamp", 18),
        "create vtable x (ts timestamp, c int from nope.value)": ("source table d.nope does not exist", 43),
        "create vtable x (ts timestamp, c int from t1.nope)": ("d.t1 has no column nope", 43),
        "create vtable x (ts timestamp, c int from c1.g)": ("d.c1.g is a tag: a source is a data column", 43),
        "create vtable x (ts timestamp, c int from st.v)": ("d.st is a super table", 43),
        "create vtable x (ts timestamp, c int from v1.c1)": ("d.v1 is a virtual table", 43),
        "create vtable x (ts timestamp, c int from us.u.value)": (
            "a source must share the virtual table's precision",
            43,
        ),
        "create vtable x (a from t1.value) using st tags (1)": ("st is not a virtual super table", 41),
        "create vtable x (nope from t1.value) using vs tags (1)": ("vs has no column nope", 28),
        "create vtable x (t1.value, t2.value) using vs tags (1)": ("2 sources for the 1 column(s) of vs", 28),
        "create table x using vs tags (1)": ("vs is a virtual super table: its child tables are CREATE VTABLE", 1),
        "create vtable x (a from t1.value, t2.value) using vs tags (1)": ("names every source", 35),
    }
    for sql, (message, column) in refused.items():
        with pytest.raises(TDStreamError, match=re.escape(message)) as caught:
            session.execute(sql)
        assert (caught.value.line, caught.value.column) == (1, column), sql
    assert output(session, "show vtables") == [("v1",)]
    # a virtual table stores nothing: writes go to its sources, and nothing changes
    for sql in ("insert into v1 values (9000, 1, 2, 3, 4, 5)", "delete from v1"):
        with pytest.raises(TDStreamError, match=r"d\.v1 is a virtual table: it reads its sources' columns"):
            session.execute(sql)
    assert output(session, "select count(*) from v1") == [(5,)]
    with pytest.raises(TDStreamError, match="v1 is a virtual table: use DROP VTABLE"):
        session.execute("drop table v1")
    with pytest.raises(TDStreamError, match="Invalid table to create tsma: v1 is a virtual table"):
        session.execute("create tsma tm on v1 function(avg(c1)) interval(1m)")
    with pytest.raises(TDStreamError, match="a stream cannot trigger on it here") as caught:
        session.execute(
            "create stream s interval(1s) sliding(1s) from v1 into o as select _twstart, count(*) from %%trows"
        )
    assert caught.value.column == 47 and load_streams(session.warehouse) == []
    with pytest.raises(TDStreamError, match="t1 is not a virtual normal or child table: use DROP TABLE"):
        session.execute("drop vtable t1")
    # a source dropped: its columns read nothing, the other sources' rows remain
    session.execute("drop table t3")
    assert output(session, "select ts, c1, c3 from v1") == [(1000, 1, None), (4000, 4, None)]
    session.execute("drop vtable v1; drop vtable if exists v1")
    assert output(session, "show vtables") == []


def test_alter_vtable_points_a_column_at_another_source_and_sets_tags(session: Session) -> None:
    session.execute(
        SOURCES + V1 + ";create stable vs (ts timestamp, a int) tags (g int) virtual 1;"
        "create vtable vc (a from t1.value) using vs tags (1)"
    )
    session.execute("alter vtable v1 alter column c5 set t2.value")
    assert output(session, "select ts, c5 from v1") == [(2000, 20), (4000, 40), (5000, 50)]
    session.execute("alter vtable v1 alter column c1 set null")
    assert output(session, "select count(c1) from v1") == [(0,)]
    described = session.execute("describe v1")[0].table
    assert described is not None and described.column("ref").to_pylist()[1::4] == ["", "d.t2.value"]
    with pytest.raises(TDStreamError, match="the timestamp column ts takes no source") as caught:
        session.execute("alter vtable v1 alter column ts set t1.value")
    assert caught.value.column == 30
    with pytest.raises(TDStreamError, match="t1 is not a virtual normal or child table"):
        session.execute("alter vtable t1 alter column value set t2.value")
    session.execute("alter vtable vc alter column a set t3.value1; alter vtable vc set tag g = 5")
    assert output(session, "select g, ts, a from vs") == [(5, 3000, 300), (5, 5000, 500)]


def test_a_stream_query_reads_a_virtual_table(session: Session, harness: StreamHarness) -> None:
    """A stream triggers on a source table and its query reads the virtual table over the
    window: every source's rows in it, joined on the timestamp."""
    session.execute(
        SOURCES + V1 + ";create stream s interval(3s) sliding(3s) from t1 stream_options(fill_history) into o as "
        "select _twstart, count(c1) n1, count(c2) n2, sum(c3) s3 from v1 where ts >= _twstart and ts < _twend"
    )
    session.execute("insert into t1 values (7000, 7)")  # closes [3 s, 6 s)
    report = harness.run_until_idle()
    assert report.failures == []
    assert output(session, "select * from o order by 1") == [(0, 1, 1, None), (3000, 1, 2, 800)]
