"""Virtual tables (TDengine 3.3.6+): a virtual normal, child or super table reads other tables'
columns, joined on the timestamp — through SQL, with TDengine's rules and its documented
example's exact rows; read by a stream's query and run through Dagster."""

from __future__ import annotations

import re

import pytest

from dagster_tdstream import Session, StreamHarness, Warehouse
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


def test_a_stream_triggers_on_a_virtual_table(session: Session, harness: StreamHarness) -> None:
    """A virtual table as the trigger table: its rows are the sources' rows joined on the
    timestamp, and a source's row at a timestamp another source wrote earlier completes that
    row (the feed updates it) instead of adding one."""
    session.execute(
        SOURCES + V1 + ";create stream s interval(2s) sliding(2s) from v1 into o as "
        "select _twstart, count(*) n, sum(c1) s1, sum(c2) s2, sum(c3) s3 from %%trows"
    )
    session.execute("insert into t1 values (6000, 6); insert into t3 values (6500, 650, 6500)")
    assert harness.run_until_idle().failures == []
    session.execute("insert into t2 values (6000, 60) (7000, 70); insert into t1 values (8000, 8)")
    session.execute("insert into t3 values (10000, 1, 1)")  # closes [8 s, 10 s)
    assert harness.run_until_idle().failures == []
    # the rows before the stream (up to 5 s) are not its: no FILL_HISTORY
    assert output(session, "select * from o order by 1") == [(6000, 3, 6, 130, 650), (8000, 1, 8, None, None)]
    # nothing new in the sources: the feed takes no commit, the stream reads nothing
    warehouse = session.warehouse
    table = warehouse.table("d", "v1")
    version = warehouse.delta.version("d", table.storage_name)
    assert harness.run_until_idle().failures == [] and warehouse.delta.version("d", table.storage_name) == version
    # the feed's name is reserved
    with pytest.raises(TDStreamError, match=re.escape("names starting with '.' are reserved")):
        session.execute("create table `.vfeed.v1` (ts timestamp, v int)")
    # dropping the virtual table drops its feed
    session.execute("drop stream s; drop vtable v1")
    assert not warehouse.delta.exists("d", table.storage_name)


def test_a_virtual_trigger_table_fills_history_and_follows_deletes(session: Session, harness: StreamHarness) -> None:
    """FILL_HISTORY over a virtual table computes the windows of the rows it has when the
    stream starts (read from its feed as of that offset); a row deleted from a source leaves
    the virtual row with the other sources' values, or no row, and DELETE_RECALC recomputes."""
    session.execute(
        SOURCES + V1 + ";create stream s interval(2s) sliding(2s) from v1 "
        "stream_options(fill_history | delete_recalc) into o as "
        "select _twstart, count(*) n, sum(c1) s1, sum(c2) s2 from v1 where ts >= _twstart and ts < _twend"
    )
    session.execute("insert into t1 values (6000, 6)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from o order by 1") == [(0, 1, 1, None), (2000, 2, None, 20), (4000, 2, 4, 90)]
    session.execute("delete from t2 where ts = 4000; delete from t3 where ts = 3000")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from o order by 1") == [(0, 1, 1, None), (2000, 1, None, 20), (4000, 2, 4, 50)]
    feed = session.warehouse.read_table(session.warehouse.table("d", "v1"))
    assert sorted(zip(feed["ts"].to_pylist(), feed["c2"].to_pylist(), strict=True)) == [
        (1000, None), (2000, 20), (4000, None), (5000, 50), (6000, None),
    ]  # fmt: skip


def test_a_stream_over_a_virtual_super_table_keeps_its_child_tables(session: Session, harness: StreamHarness) -> None:
    """PARTITION BY tbname over a virtual super table: one group per virtual child table, its
    tags from the catalog; a child table created after the stream is ignored, as in TDengine."""
    session.execute(
        SOURCES + "create stable vs (ts timestamp, a int, b int) tags (g int) virtual 1;"
        "create vtable vc1 (a from t1.value, b from t2.value) using vs tags (1);"
        "create vtable vc2 (a from t3.value1) using vs tags (2);"
        "create stream s state_window(a) from vs partition by tbname, g into o output_subtable(concat('o_', tbname)) "
        "as select _twstart, _twend, count(*) n, sum(b) sb, first(%%2) g2 from %%trows"
    )
    session.execute(
        "insert into t1 values (6000, 7) (7000, 7) (8000, 8); insert into t2 values (7000, 70);"
        "insert into t3 values (6000, 1, 0) (7000, 2, 0)"
    )
    session.execute("create vtable vc3 (a from t1.value) using vs tags (3)")
    session.execute("insert into t1 values (9000, 9)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select tbname, _twstart, _twend, n, sb, g2 from o order by 1, 2") == [
        ("o_vc1", 6000, 7000, 2, 70, 1), ("o_vc1", 8000, 8000, 1, None, 1), ("o_vc2", 6000, 6000, 1, None, 2),
    ]  # fmt: skip


def test_legacy_stream_rules_over_a_virtual_table(session: Session, harness: StreamHarness) -> None:
    """The legacy streams' documented limits over a virtual table, each refused at its
    option; within them a legacy stream over one runs."""
    session.execute(SOURCES + V1)
    base = "create stream ls {} into lo as select _wstart, count(*), sum(c1) from v1 {}"
    for options, window, message, column in (
        ("watermark 1s", "interval(2s)", "needs WATERMARK 0", 18),
        ("ignore update 0", "interval(2s)", "needs IGNORE UPDATE 1", 18),
        ("ignore expired 0", "interval(2s)", "needs IGNORE EXPIRED 1", 18),
        ("fill_history 1", "interval(2s)", "needs FILL_HISTORY 0", 18),
        ("trigger max_delay 5s", "interval(2s)", "TRIGGER MAX_DELAY is not supported", 18),
        ("trigger force_window_close", "interval(2s)", "TRIGGER FORCE_WINDOW_CLOSE is not supported", 18),
        ("watermark 0s", "count_window(2)", "COUNT_WINDOW is not supported", None),
    ):
        with pytest.raises(TDStreamError, match=message) as caught:
            session.execute(base.format(options, window))
        assert column is None or caught.value.column == column, (options, caught.value.column)
        assert load_streams(session.warehouse) == []
    session.execute(base.format("trigger window_close watermark 0s", "interval(2s)"))
    session.execute("insert into t1 values (6000, 6); insert into t2 values (6000, 60) (8000, 80)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from lo order by 1") == [(6000, 1, 6, 0)]  # and the legacy group_id tag


@pytest.mark.parametrize("seed", [3, 11])
def test_a_virtual_tables_feed_equals_its_rows_after_any_change(session: Session, seed: int) -> None:
    """Property: after a sync, the feed of a virtual table holds exactly the rows a query of it
    gives (every source's columns, all of them naming timestamps), whatever the sources went
    through — inserts, updates, deletes, a column pointed at another source, a source dropped;
    a sync with nothing new commits nothing."""
    import random

    from dagster_tdstream.storage import vfeed

    rng = random.Random(seed)
    session.execute(
        SOURCES + V1 + ";create stable st (ts timestamp, x int) tags (k int); create table c1 using st tags (1);"
        "create table c2 using st tags (2); alter vtable v1 alter column c5 set c1.x"
    )
    warehouse = session.warehouse
    statements = [
        lambda: f"insert into {rng.choice(['t1', 't2'])} values ({rng.randrange(20) * 500}, {rng.randrange(100)})",
        lambda: f"insert into t3 values ({rng.randrange(20) * 500}, {rng.randrange(100)}, {rng.randrange(100)})",
        lambda: f"insert into {rng.choice(['c1', 'c2'])} values ({rng.randrange(20) * 500}, {rng.randrange(100)})",
        lambda: f"delete from {rng.choice(['t1', 't2', 't3', 'c1'])} where ts = {rng.randrange(20) * 500}",
        lambda: f"alter vtable v1 alter column c2 set {rng.choice(['t1.value', 't2.value'])}",
    ]

    def check() -> None:
        table = warehouse.table("d", "v1")
        version = vfeed.sync(warehouse, table)
        feed = warehouse.read_table(table).to_pydict()
        assert sorted(zip(*feed.values(), strict=True)) == output(session, "select * from v1")
        assert vfeed.sync(warehouse, table) == version

    for _ in range(24):
        session.execute(";".join(rng.choice(statements)() for _ in range(rng.randrange(1, 4))))
        if rng.random() < 0.6:
            check()
    session.execute("drop table t3")
    check()


def test_a_subscription_to_a_virtual_table(session: Session) -> None:
    """A 2.x subscription reads a virtual table's rows and then what its sources change: a
    source's value at a timestamp another source wrote comes as that row, updated."""
    session.execute(SOURCES + V1)
    sub = session.subscribe("select ts, c1, c2 from v1 where ts >= 4000")
    assert sub.consume() == [{"ts": 4000, "c1": 4, "c2": 40}, {"ts": 5000, "c1": None, "c2": 50}]
    session.execute("insert into t1 values (5000, 5) (6000, 6); insert into t3 values (7000, 0, 0)")
    assert sub.consume() == [
        {"ts": 5000, "c1": 5, "c2": 50}, {"ts": 6000, "c1": 6, "c2": None}, {"ts": 7000, "c1": None, "c2": None},
    ]  # fmt: skip
    assert sub.consume() == []


def test_a_period_stream_over_a_virtual_child_table_reads_the_rows_written_between_ticks(
    warehouse: Warehouse, spark: object
) -> None:
    """PERIOD with a virtual child table as its trigger table: each tick's %%trows are the
    virtual rows its sources wrote since the last tick (the child's rows of its super table's
    feed, not its sibling's), a completed row counted where it now stands."""
    session = Session(warehouse, timezone="UTC")
    session.execute(
        SOURCES + "create stable vs (ts timestamp, a int, b int) tags (g int) virtual 1;"
        "create vtable vc1 (a from t1.value, b from t2.value) using vs tags (1);"
        "create vtable vc2 (a from t3.value1) using vs tags (2);"
        "create stream p period(10s) from vc1 into p_out as select cast(_tlocaltime / 1000000 as timestamp) ts,"
        " count(*) c, sum(a) sa, sum(b) sb from %%trows"
    )
    base = 1_800_000_000 * 10**9
    harness = StreamHarness(warehouse, timezone="UTC", clock=lambda: base)
    assert harness.run_until_idle().runs == 0
    session.execute("insert into t1 values (6000, 6) (7000, 7); insert into t3 values (6000, 1, 1)")
    harness.advance_clock(10)
    assert harness.run_until_idle().failures == []
    session.execute("insert into t2 values (7000, 70) (8000, 80)")
    harness.advance_clock(10)
    assert harness.run_until_idle().failures == []
    ms = base // 10**6
    assert output(session, "select ts, c, sa, sb from p_out order by ts") == [
        (ms + 10000, 2, 13, None), (ms + 20000, 2, 7, 150),
    ]  # fmt: skip


def test_a_virtual_trigger_tables_source_of_another_type_fails_its_tick_with_both_types(
    session: Session, harness: StreamHarness
) -> None:
    """A source table created again with the column of another type: the stream's tick says
    which column reads what, as a query of the virtual table does, and writes nothing."""
    session.execute(
        SOURCES
        + V1
        + ";create stream s interval(2s) sliding(2s) from v1 into o as select _twstart, count(*) from %%trows;"
        "drop table t2; create table t2 (ts timestamp, value varchar(8)); insert into t2 values (8000, 'x')"
    )
    report = harness.run_until_idle()
    assert len(report.failures) == 1
    assert "column c2 reads d.t2.value, which is now VARCHAR (the column is INT)" in report.failures[0]
    with pytest.raises(TDStreamError, match="which is now VARCHAR"):
        session.query("select * from v1")
