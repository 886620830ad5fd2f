"""Legacy streams (TDengine 3.0–3.3.6): the old CREATE STREAM syntax, its rules, and its runs on
the one trigger engine (real Spark, Delta and Dagster runs through the harness)."""

from __future__ import annotations

import json
import re

import pytest

from dagster_tdstream import Session, StreamHarness, Warehouse
from dagster_tdstream.errors import TDStreamError
from dagster_tdstream.sql import ast
from dagster_tdstream.sql.legacy_stream import equivalent_stream
from dagster_tdstream.sql.parser import parse_statement
from dagster_tdstream.storage.registry import load_streams

from .conftest import assert_rejected, output

T0 = 1_648_791_213_000


def _setup(session: Session) -> None:
    session.execute(
        "create database lg; use lg;"
        "create stable st (ts timestamp, a int, b int) tags (ta int, tb int);"
        "create table t1 using st tags (1, 1); create table t2 using st tags (2, 2);"
    )


def test_legacy_statement_is_the_equivalent_3_3_7_stream() -> None:
    legacy = parse_statement(
        "create stream s trigger max_delay 5s watermark 2s ignore expired 0 fill_history 1 into out"
        " tags (grp varchar(10)) subtable(concat('sub-', grp)) as select count(*) n, _wend e"
        " from st where a > 0 partition by tbname as grp interval(10s) sliding(5s)"
    )
    assert isinstance(legacy, ast.CreateLegacyStream)
    stream = equivalent_stream(legacy, "ts", {})
    assert stream.trigger == ast.SlidingTrigger(
        sliding=ast.Duration(5, "s"), interval=ast.Duration(10, "s"), interval_offset=None
    )
    names = {option.name for option in stream.options}
    assert names == {
        "DELETE_RECALC", "FILL_HISTORY", "WATERMARK", "MAX_DELAY", "PRE_FILTER",
        ast.PARTITION_BY_VALUES, ast.LEGACY_OUTPUT, ast.RECALC_COUNT_WINDOW, "IGNORE_NODATA_TRIGGER",
        ast.WRITTEN_ROWS,  # IGNORE UPDATE 1, the default
        ast.RETRACT_WINDOWS,  # vanished windows leave the output, as the legacy engine deletes them
    }  # fmt: skip
    assert "IGNORE_DISORDER" not in names  # IGNORE EXPIRED 0: late rows recalculate
    # the window start first (the query did not put it there), _wend as the trigger's _twend
    assert [(item.alias, item.text) for item in stream.query.items] == [
        ("_wstart", "_wstart"),
        ("n", "count(*)"),
        ("e", "_wend"),
    ]  # type: ignore[union-attr]
    assert stream.query.items[2].expr == ast.Column("_twend")  # type: ignore[union-attr]
    assert stream.tags[0].expr == ast.Placeholder("1") and stream.output_subtable is not None
    assert ast.Placeholder("1") in stream.output_subtable.args  # type: ignore[union-attr]
    paused = parse_statement("pause stream if exists s")
    resumed = parse_statement("resume stream ignore untreated s")
    assert paused == ast.StopStream(ast.QualifiedName("s"), True)
    assert resumed == ast.StartStream(ast.QualifiedName("s"), False, True)


@pytest.mark.parametrize(
    ("items", "added"),
    [
        ("ca, _wstart, _wend, count(*)", "ts"),  # TDengine's basic3.sim: _wstart is taken
        ("count(*), max(ca)", "_wstart"),
        ("_wend ts, _wstart, count(*)", "ts_1"),  # both taken: TDengine's random name, here ts_1
    ],
)
def test_legacy_window_start_put_first_is_named_wstart_then_ts(items: str, added: str) -> None:
    """TDengine puts ``_wstart`` first when the query does not, naming it ``_wstart`` if no
    other column has that name, else ``ts``."""
    legacy = parse_statement(f"create stream s into o as select {items} from st partition by ca interval(60m)")
    assert isinstance(legacy, ast.CreateLegacyStream)
    stream = equivalent_stream(legacy, "ts", {})
    first = stream.query.items[0]  # type: ignore[union-attr]
    assert (first.expr, first.alias) == (ast.Column("_twstart"), added)
    assert len(stream.query.items) == len(items.split(", ")) + 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("create stream s into o as select _wstart, count(*) c, count(*) c from t1 interval(10s)", "duplicate output column name 'c'"),
        ("create stream s into o as select _wend, count(*) from st where _wstart > 0 interval(30s)", "_wstart is a window pseudo-column"),
        ("create stream s into o as select _wstart, count(*) from st session(ts, 5s) having count(*) > 2", "HAVING is allowed only with INTERVAL"),
        ("create stream s trigger max_delay 1s into o as select _wstart, count(*) from t1 interval(10s)", "MAX_DELAY 1s is shorter than the minimum 5s"),
        ("create stream s trigger force_window_close into o as select _wstart, count(*) from t1 interval(5s) sliding(6s)", "SLIDING 6s is longer than INTERVAL 5s"),
        ("create stream s trigger continuous_window_close into o as select _wstart, count(*) from st partition by tbname count_window(10)", "needs an INTERVAL window"),
        ("create stream s ignore expired 0 into o as select _wstart, count(*) from st state_window(a)", "needs PARTITION BY tbname"),
        ("create stream s into o as select _wstart, count(*) from t1 count_window(3)", "COUNT_WINDOW streams need a WATERMARK"),
        ("create stream s ignore expired 0 watermark 1s into o as select _wstart, count(*) from t1 count_window(3)", "COUNT_WINDOW streams need IGNORE EXPIRED 1"),
        ("create stream s into o as select _wstart, mavg(a, 2) from t1 interval(10s)", "function mavg() is not allowed in a stream"),
        ("create stream s into o as select count(*) from st group by ta", "GROUP BY is not allowed"),
        ("create stream s into o as select _wstart, count(*) from st partition by tbname session(ts, -9223372036854775809)", "SESSION's gap is a positive duration"),
        ("create stream s into o as select _wstart, count(*) from st partition by tbname session(ts, '')", "SESSION's gap is a positive duration"),
        ("create stream s into o as select _wstart, count(*) from st partition by tbname session(ts, 0s)", "SESSION's gap is a positive duration"),
        ("create stream s into o as select _wstart, count(*) from nope interval(10s)", "nope"),
        ("create stream s ignore update 2 into o as select _wstart, count(*) from t1 interval(10s)", "expected 0 or 1 after IGNORE UPDATE"),
        ("create stream s trigger at_once into o as select interp(a) from t1 range(1648791212000, 1648791215000) every(1s) fill(prev)", "a stream's INTERP has no RANGE"),
        ("create stream s into o as select interp(a) from t1 every(1s) fill(prev)", "INTERP in a stream needs TRIGGER AT_ONCE or FORCE_WINDOW_CLOSE, not WINDOW_CLOSE"),
        ("create stream s trigger at_once into o as select interp(a) from st every(1s) fill(prev)", "an INTERP stream over the super table st needs PARTITION BY tbname"),
        ("create stream s trigger at_once into o as select interp(a) from st partition by a every(1s) fill(prev)", "needs PARTITION BY tbname"),
        ("create stream s trigger force_window_close into o as select interp(a) from t1 every(1s) fill(next)", "FILL(NEXT) would need later rows"),
        ("create stream s trigger force_window_close into o as select _wstart, sum(a) from st interval(2s)", "TRIGGER FORCE_WINDOW_CLOSE over the super table st needs PARTITION BY tbname"),
        ("create stream s trigger window_close into o as select _wstart, twa(a) from st partition by tbname interval(2s)", "function twa() is not allowed"),
        ("create stream s into o(a, b primary key, c) as select count(*) c1, max(a), max(b) from st interval(10s)", "PRIMARY KEY marks the output column after the timestamp, not b"),
        ("create stream s into o(a, b, c) tags(c varchar(60)) as select _wstart, count(*), max(a) from st partition by tbname c interval(10s)", "duplicate output column name 'c'"),
        ("create stream `` into o as select count(*) from st interval(10s)", "a quoted name cannot be empty"),
        ("create stream s into o(a, b, c) as select count(*) c1, max(a) from st interval(10s)", "names 3 column(s), the query returns 2 (c1, max(a))"),
        ("create stream s into o as select _wstart, count(*), max(a) from t1 interval(10s) fill(value, 1)", "FILL(VALUE, …) needs 2 value(s)"),
        ("create stream s into o as select _wstart + 1s, count(*) from t1 interval(10s) fill(prev)", "selected as it is"),
        ("create stream s into o as select _wstart, count(*) from t1 interval(10s) fill(prev) having count(*) > 1", "FILL with HAVING"),
        ("create stream s into o tags(x varchar(10)) as select _wstart, count(*) from st partition by tbname, ta as dd interval(10s)", "fewer tags must each name a PARTITION BY alias"),
        ("create stream s into o as select _wstart, count(*) from st partition by sqrt(a) interval(10s)", "PARTITION BY sqrt(a): sqrt() is not supported"),
        ("create stream s trigger force_window_close into o as select _wstart, count(*) from st partition by tbname interval(10s) fill(linear)", "allows FILL PREV, NULL, NONE and VALUE"),
    ],
)  # fmt: skip
def test_legacy_rules_reject_with_a_position_and_create_nothing(
    sql_session: Session, statement: str, message: str
) -> None:
    _setup(sql_session)
    assert_rejected(sql_session, statement, message)
    assert sql_session.warehouse.find_table("lg", "o") is None


def test_at_once_writes_each_window_as_rows_arrive_and_updates_recalculate(
    session: Session, harness: StreamHarness
) -> None:
    """TRIGGER AT_ONCE (the legacy default of most of TDengine's tests): the window's row is
    written with the first row and rewritten with every later one, before the window closes."""
    _setup(session)
    session.execute(
        "create stream s trigger at_once ignore expired 0 ignore update 0 into out as"
        " select _wstart, count(*) c1, sum(a) c3 from st partition by tbname interval(10s)"
    )
    session.execute(f"insert into t1 values ({T0}, 1, 1) t2 values ({T0}, 2, 2)")
    assert harness.run_until_idle().failures == []
    assert sorted(output(session, "select c1, c3 from out")) == [(1, 1), (1, 2)]
    session.execute(f"insert into t1 values ({T0 + 1000}, 5, 5)")
    assert harness.run_until_idle().failures == []
    assert sorted(output(session, "select c1, c3 from out")) == [(1, 2), (2, 6)]
    session.execute(f"insert into t1 values ({T0}, 10, 10)")  # an update of the first row
    assert harness.run_until_idle().failures == []
    assert sorted(output(session, "select c1, c3 from out")) == [(1, 2), (2, 15)]


def test_ignore_update_1_counts_a_row_written_again_as_one_more_row(session: Session, harness: StreamHarness) -> None:
    """IGNORE UPDATE 1 (the legacy default): a row written again at its timestamp is one more
    row of its window, as TDengine's legacy engine aggregates what was written — INTERVAL and
    row windows alike; IGNORE UPDATE 0 replaces it; a deleted row goes with all its writes; a
    trigger tick done again keeps each replaced row once."""
    from dagster_tdstream.storage import written
    from dagster_tdstream.storage.registry import load_stream
    from dagster_tdstream.triggers.tick import advance_stream

    _setup(session)
    session.execute(
        "create stream si trigger at_once into oi as select _wstart, count(*) n, sum(a) s from st"
        " partition by tbname interval(10s);"
        "create stream ss trigger at_once into os as select _wstart, count(*) n, max(a) m from t1 state_window(b);"
        "create stream s0 trigger at_once ignore update 0 into o0 as select _wstart, count(*) n, sum(a) s from st"
        " partition by tbname interval(10s)"
    )
    session.execute(f"insert into t1 values ({T0}, 1, 1); insert into t1 values ({T0}, 2, 1)")
    warehouse = session.warehouse
    stream = load_stream(warehouse, "lg.si")
    first, again = advance_stream(warehouse, stream, None), advance_stream(warehouse, stream, None)
    assert first.offset == again.offset and first.rows == again.rows == 3  # insert, pre- and post-image
    assert warehouse.delta.read("lg", written.storage_name("lg.si", written.WRITTEN)).column("a").to_pylist() == [1]
    assert harness.run_until_idle().failures == []
    session.execute(f"insert into t1 values ({T0}, 3, 1) ({T0 + 1000}, 4, 1)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select n, s from oi") == [(4, 10)]  # a = 1, 2, 3 at T0, 4 at T0 + 1 s
    assert output(session, "select n, m from os") == [(4, 4)]
    assert output(session, "select n, s from o0") == [(2, 7)]
    session.execute(f"delete from t1 where ts = {T0}")  # the legacy streams recalculate on deletes
    assert harness.run_until_idle().failures == []
    assert output(session, "select n, s from oi") == [(1, 4)]
    assert output(session, "select n, s from o0") == [(1, 4)]
    session.execute("drop stream si")
    assert not warehouse.delta.exists("lg", written.storage_name("lg.si", written.WRITTEN))


def test_ignore_expired_1_judges_each_child_tables_rows_against_that_table(
    session: Session, harness: StreamHarness
) -> None:
    """IGNORE EXPIRED 1 (the default) over a super table without PARTITION BY: a row is expired
    when its own child table has passed its window, as TDengine's legacy engine judges it, and
    an expired row is never aggregated — also when another table's row computes its window
    again from the table that stores it."""
    session.execute(
        "create database lx; use lx; create stable st (ts timestamp, a int) tags (k int);"
        "create table t1 using st tags (1); create table t2 using st tags (2); create table t3 using st tags (3);"
        "create stream s trigger at_once into o as select _wstart, count(*) n, sum(a) s from st interval(10s)"
    )
    session.execute(f"insert into t1 values ({W0 + 31_000}, 1)")
    assert harness.run_until_idle().failures == []
    # t2 has not passed [20 s, 30 s): its row counts there though t1 closed the window
    session.execute(f"insert into t2 values ({W0 + 21_000}, 2)")
    assert harness.run_until_idle().failures == []
    # t2 passed [0, 10 s), t1 too: both rows expired; t3 has not: its row counts, and alone
    session.execute(f"insert into t2 values ({W0 + 1000}, 4); insert into t1 values ({W0 + 5000}, 8)")
    assert harness.run_until_idle().failures == []
    session.execute(f"insert into t3 values ({W0 + 8000}, 16)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from o order by 1") == [
        (W0, 1, 16, 0), (W0 + 20_000, 1, 2, 0), (W0 + 30_000, 1, 1, 0),
    ]  # fmt: skip


def test_continuous_window_close_recalculates_late_rows_and_deletes_each_period(
    warehouse: Warehouse, spark: object
) -> None:
    """TRIGGER CONTINUOUS_WINDOW_CLOSE RECALCULATE t: a row in a window its own table has
    passed, and a delete, wait for the next period of t (processing time) to be recalculated;
    a row of a table that has not passed the window is computed at once."""
    session = Session(warehouse, timezone="UTC")
    _setup(session)
    session.execute(
        "create stream s trigger continuous_window_close recalculate 1m ignore update 0 ignore expired 0 into o as"
        " select _wstart, count(*) c, sum(a) s from st interval(10s)"
    )
    harness = StreamHarness(warehouse, timezone="UTC", clock=lambda: 1_800_000_000 * 10**9)
    session.execute(f"insert into t1 values ({W0}, 1, 1) ({W0 + 10_000}, 2, 2) ({W0 + 20_000}, 4, 4)")
    assert harness.run_until_idle().failures == []
    assert [r[:3] for r in output(session, "select * from o order by 1")] == [(W0, 1, 1), (W0 + 10_000, 1, 2)]
    session.execute(f"insert into t2 values ({W0 + 2000}, 8, 8)")  # t2 has not passed [W0, W0 + 10 s)
    session.execute(f"insert into t1 values ({W0 + 11_000}, 16, 16)")  # t1 has passed [W0 + 10 s, …)
    session.execute(f"delete from t1 where ts = {W0 + 10_000}")
    assert harness.run_until_idle().failures == []
    assert [r[:3] for r in output(session, "select * from o order by 1")] == [(W0, 2, 9), (W0 + 10_000, 1, 2)]
    harness.advance_clock(30)
    assert harness.run_until_idle().failures == []
    assert [r[:3] for r in output(session, "select * from o order by 1")] == [(W0, 2, 9), (W0 + 10_000, 1, 2)]
    harness.advance_clock(31)  # the period has passed: both windows are computed again
    assert harness.run_until_idle().failures == []
    assert [r[:3] for r in output(session, "select * from o order by 1")] == [(W0, 2, 9), (W0 + 10_000, 1, 16)]


def test_window_close_default_pause_and_resume(session: Session, harness: StreamHarness) -> None:
    """Without TRIGGER a legacy stream writes a window when a later row closes it; PAUSE STREAM
    holds its runs, RESUME [IGNORE UNTREATED] lets them go (or skips what was written since)."""
    _setup(session)
    session.execute("create stream s into out as select count(*) n, max(a) m from t1 interval(10s)")
    session.execute(f"insert into t1 values ({T0}, 1, 1) ({T0 + 10_000}, 2, 2)")
    assert harness.run_until_idle().failures == []
    # the output is a super table tagged with the group id (0: no PARTITION BY)
    assert output(session, "select * from out") == [(1648791210000, 1, 1, 0)]
    # legacy stream names are not per database: a session with none selected finds it
    Session(session.warehouse, timezone="UTC", spark=session.spark).execute("pause stream s")
    session.execute(f"insert into t1 values ({T0 + 20_000}, 3, 3)")
    harness.run_until_idle()
    assert len(output(session, "select * from out")) == 1
    session.execute("resume stream s")
    assert harness.run_until_idle().failures == []
    assert output(session, "select n, m from out") == [(1, 1), (1, 2)]
    assert session.query("show streams").rows[0][0] == "s"
    assert session.execute("create snode on dnode 1")[0].message.startswith("Create OK")


def test_partition_by_a_column_moves_updated_rows_and_names_outputs_as_tdengine(
    session: Session, harness: StreamHarness
) -> None:
    """PARTITION BY an ordinary column: each value its own timeline; a row updated to another
    value leaves its old group (recalculated, its window removed when empty) for the new one.
    The output super table exists from CREATE, tagged ``group_id``; SUBTABLE names get
    TDengine's ``_<stable>_<groupId>`` suffix when the stream is partitioned."""
    _setup(session)
    session.execute(
        "create stream s trigger at_once ignore expired 0 ignore update 0 into out subtable(concat('p-', 'x')) as"
        " select _wstart c1, count(*) c2, max(b) c3, _group_key(a) g from st partition by a interval(10s)"
    )
    assert output(session, "select * from out") == []  # created with the stream
    session.execute(f"insert into t1 values ({T0}, null, 1) t2 values ({T0}, null, 2)")
    assert harness.run_until_idle().failures == []
    tags = session.query("select tag_name from information_schema.ins_tags where stable_name = 'out'").rows
    assert [row[0] for row in tags] == ["group_id"]  # one child table so far, its one tag
    assert output(session, "select c2, c3, g from out") == [(2, 2, None)]
    session.execute(f"insert into t1 values ({T0}, 1, 5)")  # t1's row moves from a=NULL to a=1
    assert harness.run_until_idle().failures == []
    assert sorted(output(session, "select c2, c3, g from out"), key=str) == [(1, 2, None), (1, 5, 1)]
    session.execute(f"insert into t2 values ({T0}, 1, 7)")  # the NULL group is left empty
    assert harness.run_until_idle().failures == []
    assert output(session, "select c2, c3, g from out") == [(2, 7, 1)]
    names = [
        row[0]
        for row in session.query(
            "select table_name from information_schema.ins_tables where db_name = 'lg' and stable_name = 'out'"
        ).rows
    ]
    group_ids = [row[0] for row in session.query("select distinct group_id from out").rows]
    assert all(name.startswith("p-x_out_") for name in names) and len(group_ids) == 1
    assert f"p-x_out_{group_ids[0]}" in names


def test_a_partition_by_column_or_tbname_selected_bare_is_the_groups_value(
    session: Session, harness: StreamHarness
) -> None:
    # TDengine's scripts select the PARTITION BY column itself (basic3.sim, drop_stream.sim);
    # inside an aggregate the same column stays the rows' value
    _setup(session)
    session.execute(
        "create stream sx into outx as select tbname, _wstart, count(*) c from st partition by tbname interval(10s);"
        "create stream sa into outa as select a, _wstart, _wend, count(*) c, max(a) m from st"
        " partition by a session(ts, 5s);"
        "create stream sn into outn as select tbname tname, _wstart, count(*) c, sum(b) s from st"
        " partition by tbname interval(10s)"
    )

    session.execute(
        f"insert into t1 values ({T0}, 1, 1) ({T0 + 1000}, 2, 2) ({T0 + 20_000}, 1, 3)"
        f" t2 values ({T0}, 2, 4) ({T0 + 21_000}, 9, 5) ({T0 + 30_000}, 2, 6)"
    )
    assert harness.run_until_idle().failures == []
    # WINDOW_CLOSE: the windows the rows closed (each group's last session is still open)
    assert sorted(output(session, "select a, c, m from outa")) == [(1, 1, 1), (2, 2, 2)]
    assert sorted(output(session, "select tname, c, s from outn")) == [("t1", 2, 3), ("t2", 1, 4), ("t2", 1, 5)]
    # TDengine gives the output a data column named tbname (VARCHAR(270)); the name tbname in
    # a query stays the pseudo-column of the output's own child tables, `*` shows the column
    described = session.query("describe outx")
    assert described.rows[1][:3] == ("tbname", "VARCHAR", 270)
    starred = session.query("select * from outx")
    assert starred.columns[:4] == ["ts", "tbname", "_wstart", "c"]
    assert sorted((r[1], r[3]) for r in starred.rows) == [("t1", 2), ("t2", 1), ("t2", 1)]
    children = {
        r[0]
        for r in session.query("select table_name from information_schema.ins_tables where stable_name = 'outx'").rows
    }
    assert len(children) == 2 and {r[0] for r in session.query("select tbname from outx").rows} == children
    # a 2.x subscription reads the output the same way: `*` the data column, a named tbname
    # the child table's name
    starred_rows = session.subscribe("outx").consume()
    assert sorted((r["tbname"], r["c"]) for r in starred_rows) == [("t1", 2), ("t2", 1), ("t2", 1)]
    assert list(starred_rows[0]) == ["ts", "tbname", "_wstart", "c", "group_id"]
    named = session.subscribe("select c, tbname from outx").consume()
    assert {r["tbname"] for r in named} == children


def test_at_once_writes_an_event_window_when_its_end_row_arrives_not_while_open(
    session: Session, harness: StreamHarness
) -> None:
    # event_window start with a = 0 end with a = 9 (TDengine's eventwindow tests): at once, but
    # only windows that met their end condition; other windows at once while open
    _setup(session)
    session.execute(
        "create stream se trigger at_once ignore expired 0 ignore update 0 into oute as"
        " select _wstart s, count(*) c, sum(b) sb from t1 event_window start with a = 0 end with a = 9;"
        "create stream sc trigger at_once ignore expired 0 ignore update 0 into outc as"
        " select _wstart s, count(*) c, sum(b) sb from t1 state_window(a)"
    )
    session.execute(f"insert into t1 values ({T0}, 0, 1) ({T0 + 1000}, 5, 2)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select c, sb from oute") == []  # open: no end row yet
    assert output(session, "select c, sb from outc") == [(1, 1), (1, 2)]  # the open state window too
    session.execute(f"insert into t1 values ({T0 + 2000}, 9, 3)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select c, sb from oute") == [(3, 6)]


def test_state_window_over_a_case_expression_at_once(session: Session, harness: StreamHarness) -> None:
    # TDengine's documented threshold state: state_window(case when … then 1 else 0 end)
    _setup(session)
    session.execute(
        "create stream sx trigger at_once into outx as select _wstart s, count(*) c, max(a) m from st"
        " partition by tbname state_window(case when a > 5 then 1 else 0 end);"
        f"insert into t1 values ({T0}, 1, 0) ({T0 + 1000}, 7, 0) ({T0 + 2000}, 8, 0) ({T0 + 3000}, 2, 0)"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select s, c, m from outx order by s") == [
        (T0, 1, 1), (T0 + 1000, 2, 8), (T0 + 3000, 1, 2),
    ]  # fmt: skip


def test_a_row_updated_out_of_the_where_filter_leaves_its_open_window_written_at_once(
    session: Session, harness: StreamHarness
) -> None:
    # TDengine's session/interval scripts: WHERE a > 5, the same row written with a = 6, then a = 2
    _setup(session)
    session.execute(
        "create stream ss trigger at_once ignore expired 0 ignore update 0 into outs as"
        " select _wstart s, count(*) c from t1 where a > 5 session(ts, 5s);"
        "create stream si trigger at_once ignore expired 0 ignore update 0 into outi as"
        " select _wstart s, count(*) c from t1 where a > 5 interval(10s)"
    )
    for a, expected in ((1, []), (6, [1]), (2, [])):
        session.execute(f"insert into t1 values ({T0}, {a}, 0)")
        assert harness.run_until_idle().failures == []
        assert [row[1] for row in output(session, "select * from outs")] == expected, a
        assert [row[1] for row in output(session, "select * from outi")] == expected, a
    # rows later in time close the emptied windows: they stay unwritten
    session.execute(f"insert into t1 values ({T0 + 10_000}, 10, 0) ({T0 + 20_000}, 10, 0)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select c from outs") == [(1,), (1,)]
    assert output(session, "select c from outi") == [(1,), (1,)]


def test_a_stream_without_a_window_writes_each_row_and_follows_its_updates(
    session: Session, harness: StreamHarness
) -> None:
    """No window clause: each written row, transformed by the query, is written at once (one
    row per row, keyed by its timestamp); an update rewrites it, into its new partition."""
    _setup(session)
    session.execute("create stream s into out as select ts c1, a, abs(b) c4 from t1 partition by a")
    session.execute(f"insert into t1 values ({T0}, 1, -1) ({T0 + 1}, 1, -2) ({T0 + 2}, 1, 3)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select c1, a, c4 from out order by c1") == [(T0, 1, 1), (T0 + 1, 1, 2), (T0 + 2, 1, 3)]
    session.execute(f"insert into t1 values ({T0 + 1}, 2, -11)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select c1, a, c4 from out order by c1") == [(T0, 1, 1), (T0 + 1, 2, 11), (T0 + 2, 1, 3)]
    with pytest.raises(TDStreamError, match=r"count\(\) aggregates: a stream without a window clause"):
        session.execute("create stream s2 into out2 as select ts, count(*) from t1")
    with pytest.raises(TDStreamError, match="a stream without a window over the super table st needs PARTITION BY"):
        session.execute("create stream s3 into out3 as select ts, a from st")


def test_where_follows_updates_windows_without_rows_are_not_written_and_one_writer_per_table(
    session: Session, harness: StreamHarness
) -> None:
    """A row updated into the WHERE enters its window, one updated out of it leaves (the window
    goes when no row is left); windows without rows are not written (as an INTERVAL query);
    a second stream into the same table is refused."""
    _setup(session)
    session.execute(
        "create stream s trigger at_once ignore expired 0 ignore update 0 into out as"
        " select _wstart, count(*) c1 from t1 where a > 5 interval(10s)"
    )
    session.execute(f"insert into t1 values ({T0}, 1, 1)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == []
    session.execute(f"insert into t1 values ({T0}, 10, 1)")  # now inside the WHERE
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == [(T0 - 3000, 1, 0)]
    session.execute(f"insert into t1 values ({T0 + 60_000}, 10, 1)")  # five empty windows between
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == [(T0 - 3000, 1, 0), (T0 + 57_000, 1, 0)]
    session.execute(f"insert into t1 values ({T0}, 2, 1)")  # out of the WHERE again
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == [(T0 + 57_000, 1, 0)]
    with pytest.raises(TDStreamError, match=re.escape("stream lg.s already writes lg.out")):
        session.execute("create stream s2 into out as select _wstart, count(*) c1 from t2 interval(10s)")


def test_interp_at_once_writes_each_point_the_data_passes_per_child_table(
    session: Session, harness: StreamHarness
) -> None:
    """An INTERP stream (TRIGGER AT_ONCE … EVERY(1s) FILL(…)): each point on the EVERY grid is
    written once a row at or after it is, with the row there or the FILL value from its
    neighbours; each child table is its own timeline."""
    _setup(session)
    session.execute(
        "create stream sp trigger at_once into prev_out as"
        " select _irowts, interp(a) v, _isfilled f from st partition by tbname every(1s) fill(prev);"
        "create stream sl trigger at_once into linear_out as"
        " select interp(a) v, _isfilled f from t1 every(1s) fill(linear)"
    )
    session.execute(f"insert into t1 values ({T0}, 1, 0) ({T0 + 3000}, 4, 0) t2 values ({T0 + 1000}, 10, 0)")
    assert harness.run_until_idle().failures == []
    rows = sorted(output(session, "select tbname, _irowts, v, f from prev_out"))
    by_table = [(name.split("_")[-1] != "0", ts - T0, v, f) for name, ts, v, f in rows]  # type: ignore[operator]
    assert sorted((ts, v, f) for _, ts, v, f in by_table) == [
        (0, 1, False), (1000, 1, True), (1000, 10, False), (2000, 1, True), (3000, 4, False),
    ]  # fmt: skip
    # the query put no timestamp first: the point is written first as _irowts; integers stay integers
    assert output(session, "select _irowts, v, f from linear_out") == [
        (T0, 1, False), (T0 + 1000, 2, True), (T0 + 2000, 3, True), (T0 + 3000, 4, False),
    ]  # fmt: skip
    session.execute(f"insert into t1 values ({T0 + 5000}, 6, 0)")  # passes two more points
    assert harness.run_until_idle().failures == []
    assert output(session, "select v, f from linear_out where _irowts > " + str(T0 + 3000)) == [(5, True), (6, False)]


def test_interp_at_force_window_close_writes_every_tables_point_at_each_tick(session: Session) -> None:
    """TRIGGER FORCE_WINDOW_CLOSE INTERP: the points are the wall clock's; at each tick every
    child table gets the point with FILL's value from the rows written so far."""
    _setup(session)
    session.execute(
        "create stream sf trigger force_window_close into clock_out as"
        " select _irowts, interp(a) v from st partition by tbname every(1s) fill(prev)"
    )
    now_ms = 1_700_000_000_000
    clock = StreamHarness(session.warehouse, timezone="UTC", clock=lambda: now_ms * 10**6)
    assert clock.run_until_idle().runs == 0  # the clock's first point is after the stream exists
    session.execute(f"insert into t1 values ({now_ms - 500}, 7, 0) t2 values ({now_ms - 2000}, 9, 0)")
    clock.advance_clock(1)
    assert clock.run_until_idle().failures == []
    session.execute(f"insert into t1 values ({now_ms + 1500}, 8, 0)")
    clock.advance_clock(1)
    assert clock.run_until_idle().failures == []
    rows = output(session, "select tbname, _irowts, v from clock_out")
    assert sorted((ts - now_ms, v) for _, ts, v in rows) == [(1000, 7), (1000, 9), (2000, 8), (2000, 9)]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("window", "what"),
    [
        ("count_window(2)", "COUNT_WINDOW"),
        ("state_window(b)", "STATE_WINDOW"),
        ("event_window start with b > 1 end with b < 1", "EVENT_WINDOW"),
    ],
)
def test_row_windows_over_a_composite_primary_key_are_refused(sql_session: Session, window: str, what: str) -> None:
    sql_session.execute(
        "create database ck; use ck;"
        "create stable st (ts timestamp, a int primary key, b int) tags (ta int);"
        "create table t1 using st tags (1);"
    )
    assert_rejected(
        sql_session,
        "create stream s trigger at_once ignore expired 1 watermark 10s into out"
        f" as select _wstart, count(*) c from st partition by tbname {window}",
        f"{what} is not supported over st: its composite primary key (ts, a) allows several rows per timestamp",
    )


def test_over_a_composite_primary_key_intervals_and_rows_with_their_key_are_accepted(sql_session: Session) -> None:
    sql_session.execute(
        "create database ck; use ck;"
        "create stable st (ts timestamp, a int primary key, b int) tags (ta int);"
        "create table t1 using st tags (1);"
    )
    sql_session.execute(
        "create stream s into out as select _wstart, count(*) c from st partition by tbname interval(10s);"
        "create stream r trigger at_once into rows_out as select ts, a, b from t1"
    )
    assert sorted(stream.key for stream in load_streams(sql_session.warehouse)) == ["ck.r", "ck.s"]
    # a stream without a window keeps the key's second column right after the timestamp
    with pytest.raises(TDStreamError, match="over t1 must select its composite primary key column a second") as info:
        sql_session.execute("create stream r2 trigger at_once into rows_out2 as select ts, 1 one, b from t1")
    assert (info.value.line, info.value.column) == (1, 52)  # the query
    assert len(load_streams(sql_session.warehouse)) == 2


W0 = T0 - T0 % 10_000  # a whole 10 s window
FILLS = ["null", "value, -1, -2, -3", "prev", "next", "linear"]


def test_window_close_fills_the_windows_without_rows_as_the_query_does(
    session: Session, harness: StreamHarness
) -> None:
    """FILL in a legacy INTERVAL stream: the windows between a group's windows with rows are
    written with the later one (NEXT and LINEAR need it), equal to the batch query's FILL."""
    _setup(session)
    for i, fill in enumerate(FILLS):
        session.execute(
            f"create stream f{i} into fo{i} as select _wstart ws, count(*) c, sum(a) s, max(b) m from st "
            f"partition by tbname interval(10s) fill({fill})"
        )
    rows = [(1_000, 1, 7), (1_500, 2, 3), (42_000, 10, 1), (65_000, 4, 9)]
    session.execute("insert into t1 values " + " ".join(f"({W0 + t}, {a}, {b})" for t, a, b in rows))
    session.execute(f"insert into t2 values ({W0 + 5_000}, 100, 100) ({W0 + 31_000}, 50, 50)")
    assert harness.run_until_idle().failures == []
    # the progress (65 s) closed [0, 10) … [40, 50): the gap before 40 s is filled, [50, 60) is
    # not written until the window after it is
    firsts = _first_windows(session)
    for i, fill in enumerate(FILLS):
        written = _written_per_child(session, i, firsts)["t1"]
        assert [row[0] - W0 for row in written] == [0, 10_000, 20_000, 30_000, 40_000], fill
    session.execute(f"insert into t1 values ({W0 + 95_000}, 3, 3) t2 values ({W0 + 45_000}, 5, 5)")
    assert harness.run_until_idle().failures == []
    for i, fill in enumerate(FILLS):
        written = _written_per_child(session, i, firsts)
        for child, end in (("t1", W0 + 70_000), ("t2", W0 + 40_000)):
            query = f"select _wstart, count(*), sum(a), max(b) from {child} where ts < {end} interval(10s) fill({fill})"
            assert written[child] == output(session, query), (fill, child)


def test_a_late_window_refills_the_filled_windows_around_it(session: Session, harness: StreamHarness) -> None:
    """A late row that lands in a filled window, or makes a window real between filled ones:
    the filled windows on both sides are filled again against the windows that hold rows (the
    trigger table says which), equal to the batch query's FILL afterwards."""
    _setup(session)
    for i, fill in enumerate(FILLS):
        session.execute(
            f"create stream f{i} trigger window_close ignore expired 0 ignore update 0 into fo{i} as"
            f" select _wstart ws, count(*) c, sum(a) s, max(b) m from st partition by tbname interval(10s) fill({fill})"
        )
    session.execute(f"insert into t1 values ({W0}, 1, 1) ({W0 + 50_000}, 5, 50) ({W0 + 61_000}, 6, 60)")
    session.execute(f"insert into t2 values ({W0 + 3_000}, 2, 2) ({W0 + 40_000}, 4, 40) ({W0 + 55_000}, 9, 9)")
    assert harness.run_until_idle().failures == []
    # late rows: t1's in the middle of its filled windows, t2's next to its last real window
    session.execute(f"insert into t1 values ({W0 + 25_000}, 100, 100) t2 values ({W0 + 31_000}, 7, 7)")
    assert harness.run_until_idle().failures == []
    firsts = _first_windows(session)
    for i, fill in enumerate(FILLS):
        written = _written_per_child(session, i, firsts)
        for child, end in (("t1", W0 + 60_000), ("t2", W0 + 50_000)):
            query = f"select _wstart, count(*), sum(a), max(b) from {child} where ts < {end} interval(10s) fill({fill})"
            assert written[child] == output(session, query), (fill, child)


def _first_windows(session: Session) -> dict[str, tuple[int, int]]:
    """Each source child table's first window and its sum(a): what names its output table."""
    firsts: dict[str, tuple[int, int]] = {}
    for child, start, total in output(
        session, "select tbname, _wstart, sum(a) from st partition by tbname interval(10s)"
    ):
        firsts[child] = min(firsts.get(child, (start, total)), (start, total))
    return firsts


def _written_per_child(
    session: Session, index: int, firsts: dict[str, tuple[int, int]]
) -> dict[str, list[tuple[object, ...]]]:
    """A stream's output rows per source child table (the output table holding the source's
    first window), in window order."""
    rows = output(session, f"select group_id, ws, c, s, m from fo{index} order by ws")
    group_of = {child: {g for g, ws, _, s, _ in rows if (ws, s) == first} for child, first in firsts.items()}
    assert all(len(groups) == 1 for groups in group_of.values()), group_of
    return {child: [row[1:] for row in rows if row[0] in groups] for child, groups in group_of.items()}


def test_force_window_close_fills_each_window_the_clock_closes(warehouse: object, spark: object) -> None:
    from dagster_tdstream.compute.spark import LazySpark

    now = [(W0 + 3_000) * 10**6]
    session = Session(warehouse, timezone="UTC", spark=LazySpark(session=spark), clock=lambda: now[0])  # type: ignore[arg-type]
    harness = StreamHarness(warehouse, timezone="UTC", clock=lambda: now[0])  # type: ignore[arg-type]
    _setup(session)
    session.execute(
        "create stream fp trigger force_window_close ignore expired 1 ignore update 1 into fpo as "
        "select _wstart ws, count(*) c, sum(a) s from t1 interval(10s) fill(prev);"
        "create stream fv trigger force_window_close ignore expired 1 ignore update 1 into fvo as "
        "select _wstart ws, count(*) c, sum(a) s from t1 interval(10s) fill(value, 0, -1)"
    )
    session.execute(f"insert into t1 values ({W0 + 1_000}, 1, 1) ({W0 + 2_000}, 2, 2)")
    assert harness.run_until_idle().failures == []
    now[0] = (W0 + 35_000) * 10**6  # the clock closes [0, 10), [10, 20), [20, 30): two without rows
    assert harness.run_until_idle().failures == []
    assert output(session, "select ws, c, s from fpo") == [(W0, 2, 3), (W0 + 10_000, 2, 3), (W0 + 20_000, 2, 3)]
    assert output(session, "select ws, c, s from fvo") == [(W0, 2, 3), (W0 + 10_000, 0, -1), (W0 + 20_000, 0, -1)]


def test_a_stream_without_partition_by_writes_into_an_existing_tagged_super_table(
    session: Session, harness: StreamHarness
) -> None:
    """As TDengine accepts it (udTableAndCol0.sim): the one group's child table, its tags NULL."""
    _setup(session)
    session.execute(
        "create table nt (ts timestamp, a int, b int);"
        "create stable rst (ts timestamp, a int, b int) tags (ta varchar(100));"
        "create stream s21 trigger at_once into rst as select ts, a, b from nt"
    )
    session.execute(f"insert into nt values ({T0}, 1, 2) ({T0 + 1000}, 3, 4)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select ts, a, b, ta from rst order by ts") == [(T0, 1, 2, None), (T0 + 1000, 3, 4, None)]


def test_tags_may_name_only_the_aliased_partitions(session: Session, harness: StreamHarness) -> None:
    """``partition by tbname, ta as dd`` with ``TAGS(dd …)``: one output table per partition,
    tagged with the aliased value (TDengine's continuous_window_close scripts)."""
    _setup(session)
    session.execute(
        "create stream s6 trigger at_once into o6 tags(dd varchar(100)) "
        "subtable(concat('s6-', cast(dd as varchar(10)))) as select _wstart ws, count(*) c1 from st "
        "partition by tbname, ta as dd interval(10s)"
    )
    session.execute(f"insert into t1 values ({T0}, 1, 1) t2 values ({T0}, 2, 2)")
    assert harness.run_until_idle().failures == []
    assert sorted(output(session, "select dd, c1 from o6")) == [("1", 1), ("2", 1)]
    names = sorted(
        r[0]
        for r in session.query("select table_name from information_schema.ins_tables where stable_name = 'o6'").rows
    )
    assert [n.split("_")[0] for n in names] == ["s6-1", "s6-2"]


def test_a_window_closed_and_emptied_in_one_batch_is_not_written(session: Session, harness: StreamHarness) -> None:
    """Rows written, closed by a later row and deleted before the stream runs: the window's
    close and its recalculation meet in one batch, and neither writes it (delete_interval_recalc)."""
    _setup(session)
    session.execute(
        "create stream s0 trigger at_once into o0 as select _wstart c1, count(*) c2, max(a) c3 from t1 interval(10s)"
    )
    w = W0 + 10_000
    session.execute(f"insert into t1 values ({w + 1}, 1, 1) ({w + 2}, 2, 2)")
    session.execute(f"insert into t1 values ({w + 10_001}, 5, 5)")  # closes [w, w + 10 s)
    session.execute(f"delete from t1 where ts >= {w} and ts < {w + 10_000}")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from o0") == [(w + 10_000, 1, 5, 0)]


def test_partition_by_an_expression_groups_rows_by_its_value(session: Session, harness: StreamHarness) -> None:
    """PARTITION BY a + b: each value its own timeline, computed alike by the trigger task, the
    history run (in this process and in Spark) and the query; an update moves its row."""
    from dagster_tdstream.compute.bulk import derive_windows

    _setup(session)
    session.execute(f"insert into t1 values ({W0}, 1, 1) ({W0 + 1000}, 2, 0) ({W0 + 2000}, 1, 2)")
    session.execute(
        "create stream pe trigger at_once fill_history 1 into pe_out as select _wstart ws, count(*) c, "
        "_group_key(a + b) k from st partition by a + b interval(10s)"
    )
    assert harness.run_until_idle().failures == []
    batch = "select _wstart, count(*), cast(a + b as double) from st partition by a + b interval(10s)"
    assert sorted(output(session, "select ws, c, k from pe_out")) == sorted(output(session, batch))
    assert sorted(output(session, "select ws, c, k from pe_out")) == [(W0, 1, 3.0), (W0, 2, 2.0)]
    session.execute(f"insert into t2 values ({W0 + 3000}, 2, 1) t1 values ({W0 + 2000}, 5, 5)")
    assert harness.run_until_idle().failures == []
    assert sorted(output(session, "select ws, c, k from pe_out")) == [(W0, 1, 3.0), (W0, 1, 10.0), (W0, 2, 2.0)]
    assert sorted(output(session, "select ws, c, k from pe_out")) == sorted(output(session, batch))
    # RECALCULATE derives the closed windows of every group from the table, keyed alike
    session.execute(f"insert into t2 values ({W0 + 20_000}, 1, 1) ({W0 + 21_000}, 1, 2) ({W0 + 22_000}, 5, 5)")
    assert harness.run_until_idle().failures == []
    assert session.execute(f"recalculate stream pe from {W0} to {W0 + 10_000}")[0].message.startswith("Recalculate OK")
    report = harness.run_until_idle()
    assert report.failures == [] and len(report.backfills) == 1
    # the windows AT_ONCE wrote while open stay, computed again as they stand
    assert sorted(output(session, "select ws, c, k from pe_out")) == sorted(output(session, batch))
    # the history derivation groups the same way in Spark as in this process
    stream = next(s for s in load_streams(session.warehouse) if s.name == "pe")
    spark = session.spark.get()
    local = derive_windows(spark, session.warehouse, stream)
    remote = derive_windows(spark, session.warehouse, stream, local_rows=0)
    assert sorted(local.states) == sorted(remote.states)
    assert sorted(json.loads(k)[0] for k in remote.states) == [2.0, 3.0, 10.0]


def test_continuous_window_close_closes_on_the_streams_event_time(session: Session, harness: StreamHarness) -> None:
    """CONTINUOUS_WINDOW_CLOSE: a group's window closes when any group's rows move the stream's
    event time past it; WINDOW_CLOSE waits for the group's own rows."""
    _setup(session)
    for name, mode in (("cw", "continuous_window_close"), ("wc", "window_close")):
        session.execute(
            f"create stream {name} trigger {mode} into {name}_out as select _wstart ws, count(*) c, b "
            "from st partition by b interval(10s)"
        )
    session.execute(f"insert into t1 values ({W0 + 1000}, 1, 1) ({W0 + 2000}, 2, 2) ({W0 + 11_000}, 3, 1)")
    session.execute(f"insert into t2 values ({W0 + 95_000}, 4, 2)")  # only group b = 2 moves on
    assert harness.run_until_idle().failures == []
    # b = 1's [10 s, 20 s) is closed by b = 2's row at 95 s under CONTINUOUS_WINDOW_CLOSE only
    assert sorted(output(session, "select ws, c, b from cw_out")) == [(W0, 1, 1), (W0, 1, 2), (W0 + 10_000, 1, 1)]
    assert sorted(output(session, "select ws, c, b from wc_out")) == [(W0, 1, 1), (W0, 1, 2)]


def test_keep_column_name_names_first_and_last_by_their_column_in_queries_and_streams(
    session: Session, harness: StreamHarness
) -> None:
    """``ALTER LOCAL 'keepColumnName' '1'`` (TDengine's client option, off by default): an
    unaliased first/last/last_row of a column is named by the column. A stream created with it
    keeps those names in the processes that run it, which parse its stored text again."""
    _setup(session)
    session.execute(f"insert into t1 values ({T0}, 1, 7) ({T0 + 1000}, 5, 8)")
    plain = session.query("select first(a), last(b), last_row(a) from t1")
    assert plain.columns == ["first(a)", "last(b)", "last_row(a)"]
    assert session.query("alter local 'keepColumnName' '1'").message == "keepColumnName set to 1"
    kept = session.query("select first(a), last(b), last_row(t1.a) x, max(a), last(*) from t1")
    assert kept.columns[:4] == ["a", "b", "x", "max(a)"] and kept.rows[0][:4] == (1, 8, 5, 5)
    # the column names clash, as TDengine's test basic3.sim expects
    assert_rejected(
        session,
        "create stream bad into bad_out as select _wstart, count(*), first(a), last(a) from t1 interval(10s)",
        "duplicate output column name 'a'",
    )
    session.execute(
        "create stream s trigger at_once into out as select _wstart, count(*) n, first(a), last(b) from t1 interval(10s)"
    )
    session.execute("alter local 'keepColumnName' '0'")  # the stream keeps the names it was created with
    session.execute(f"insert into t1 values ({T0 + 2000}, 3, 9)")
    assert harness.run_until_idle().failures == []
    result = session.query("select * from out")
    assert result.columns[1:4] == ["n", "a", "b"]
    # the window holds the rows written before the stream too
    assert output(session, "select n, a, b from out") == [(3, 1, 9)]
    with pytest.raises(TDStreamError, match="keepColumnName is 0 or 1, got '2'"):
        session.execute("alter local 'keepColumnName' '2'")


def test_legacy_stream_into_an_existing_super_table_maps_columns_and_tags_by_name(
    session: Session, harness: StreamHarness
) -> None:
    """TDengine's checkStreamSTable.sim: a column list names some columns of an existing super
    table in any order (the others stay NULL, BIGINT counts convert to INT), TAGS names its tags
    in any order with their types taken from the table, a SUBTABLE that gives NULL falls back to
    the default child name, and a text tag value written into an integer tag converts as
    TDengine's sink converts it ('t1' is 0)."""
    session.execute(
        "create database res; create database src; use src;"
        "create stable st (ts timestamp, a int, b int, c int) tags (ta int, tb int, tc int);"
        "create table t1 using st tags (1, 2, 3); create table t2 using st tags (4, 5, 6);"
        "create table res.cols (ts timestamp, a int, b int, c int, d int) tags (ta int, tb int, tc int);"
        "create table res.tagged (ts timestamp, a int, b int, c int, d int) tags (tg1 int, tg2 int, tg3 int);"
        "create table res.nulls (ts timestamp, a int, b int, c int, d int) tags (tg1 int, tg2 int, tg3 int);"
        "create table plain (ts timestamp, a int);"
        "create stream s1 trigger at_once into res.cols (ts, c, a, b) as"
        " select _wstart, count(*) c1, max(a), min(b) c2 from st interval(10s);"
        "create stream s2 trigger at_once into res.tagged (ts, c, a, b) tags (tg2, tg3, tg1)"
        " subtable(concat('tbl-', cast(tg1 as varchar(10)))) as select _wstart, count(*) c1, max(a), min(b) c2"
        " from st partition by ta + 1 as tg1, cast(tb as bigint) as tg2, tc as tg3 interval(10s);"
        "create stream s3 trigger at_once into res.nulls (ts, c, a, b) tags (tg2, tg3, tg1)"
        " subtable(concat('tbl-', cast(tg3 as varchar(10)))) as select _wstart, count(*) c1, max(a), min(b) c2"
        " from st partition by ta + 1 as tg1, cast(tb as bigint) as tg2, a as tg3 session(ts, 10s);"
        "create stream s4 trigger at_once into p8 as select _wstart ts, count(*) c1, count(a) c2, count(a) c3"
        " from plain partition by tbname interval(10s);"
        "drop stream s4;"
        "create stream s5 trigger at_once into p8 (ts, c2) tags (group_id) as select _wstart, count(*)"
        " from plain partition by tbname as group_id interval(10s);"
    )
    session.execute(f"insert into t1 values ({T0}, 10, 20, 30) t2 values ({T0}, 40, 50, 60) plain values ({T0}, 1)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from res.cols") == [(T0 - 3000, 40, 20, 2, None, None, None, None)]
    assert output(session, "select * from res.tagged order by tg1") == [
        (T0 - 3000, 10, 20, 1, None, 2, 2, 3), (T0 - 3000, 40, 50, 1, None, 5, 5, 6),
    ]  # fmt: skip
    names = [r[0] for r in output(session, "select tbname from res.tagged order by tg1")]
    # (ta + 1 is a DOUBLE, as TDengine's arithmetic gives: its text is the engine's)
    assert [re.match(r"tbl-([25])\S*_tagged_[0-9]{15,}$", n).group(1) for n in names] == ["2", "5"], names  # type: ignore[union-attr]
    session.execute(f"insert into t1 values ({T0 + 60_000}, NULL, NULL, NULL)")
    assert harness.run_until_idle().failures == []
    assert output(session, f"select * from res.nulls where ts = {T0 + 60_000}") == [
        (T0 + 60_000, None, None, 1, None, 2, 2, None)
    ]
    named = dict(output(session, "select tg3, tbname from res.nulls"))
    assert named[10].startswith("tbl-10_nulls_") and named[None].startswith("t_")
    assert output(session, "select * from p8") == [(T0 - 3000, None, 1, None, 0)]


@pytest.mark.parametrize(
    ("into", "message"),
    [
        ("res.cols (ts, c, e, b)", "the column list names e: not a column of res.cols (ts, a, b, c, d)"),
        ("res.cols (a, c, d, b)", "the first output column writes the primary key ts of res.cols, not a"),
        ("res.cols (ts, c, a)", "the column list names 3 columns, the query returns 4"),
        ("res.cols", "the existing output table res.cols has 5 columns, the query returns 4: name the table's"),
        ("res.cols (ts, c, a, b) tags (tx)", "TAGS names tx: the tags of the existing table res.cols are ta, tb, tc"),
        ("res.texts (ts, v, a, b)", "column v is VARCHAR(8), the query gives BIGINT, which does not convert to it"),
    ],
)
def test_legacy_stream_into_an_existing_super_table_is_checked_against_it(
    sql_session: Session, into: str, message: str
) -> None:
    sql_session.execute(
        "create database res; create database src; use src;"
        "create stable st (ts timestamp, a int, b int, c int) tags (ta int, tb int, tc int);"
        "create table res.cols (ts timestamp, a int, b int, c int, d int) tags (ta int, tb int, tc int);"
        "create table res.texts (ts timestamp, v varchar(8), a int, b int) tags (ta int, tb int, tc int);"
    )
    assert_rejected(
        sql_session,
        f"create stream s trigger at_once into {into} as select _wstart, count(*) c1, max(a), min(b) c2"
        " from st partition by ta as tx, tb, tc interval(10s)",
        message,
    )


def test_count_window_within_the_watermark_is_counted_again_and_beyond_it_ignored(
    session: Session, harness: StreamHarness
) -> None:
    """TDengine's count2.sim: a COUNT_WINDOW stream (IGNORE EXPIRED 1, WATERMARK 100s) takes a
    row older than the newest within the watermark as not expired — the windows are counted
    again from it, and the open window AT_ONCE wrote before is retracted — and ignores one
    beyond the watermark."""
    session.execute(
        "create database cw; use cw; create table t1 (ts timestamp, a int, b int);"
        "create stream s trigger at_once ignore expired 1 ignore update 0 watermark 100s into o as"
        " select _wstart as s, count(*) c1, sum(b) from t1 count_window(3)"
    )
    session.execute(f"insert into t1 values ({T0 + 1}, 9, 2) ({T0 + 9}, 0, 3)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from o") == [(T0 + 1, 2, 5, 0)]  # AT_ONCE: the open window
    session.execute(f"insert into t1 values ({T0}, 0, 1)")  # older, within the watermark
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from o") == [(T0, 3, 6, 0)]
    session.execute(f"insert into t1 values ({T0 + 10_000}, 0, 1) ({T0 + 10_001}, 9, 2) ({T0 + 10_009}, 0, 3)")
    session.execute(f"insert into t1 values ({T0 - 1000}, 0, 1)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from o order by 1") == [
        (T0 - 1000, 3, 4, 0), (T0 + 9, 3, 6, 0), (T0 + 10_009, 1, 3, 0),
    ]  # fmt: skip
    session.execute(f"insert into t1 values ({T0 - 200_000}, 0, 100)")  # beyond the watermark: expired
    assert harness.run_until_idle().failures == []
    assert output(session, "select count(*), sum(c1) from o") == [(3, 7)]


def test_fill_keeps_scalar_functions_of_no_column_and_the_output_keeps_wstart_as_a_column(
    session: Session, harness: StreamHarness
) -> None:
    """TDengine's fillIntervalValue.sim: FILL(NULL) writes a window without rows with NULL
    aggregates but the group's ``concat(tbname, 'aaa')`` and ``timezone()``; basic2.sim: the
    output's column named ``_wstart`` is read as a column (there is no window to be the
    pseudo-column of)."""
    _setup(session)
    session.execute(
        "create stream sf trigger at_once into fo as select _wstart, count(*) c1, concat(tbname, 'aaa') as pname,"
        " timezone() tz from st partition by tbname interval(10s) fill(null)"
    )
    session.execute(f"insert into t1 values ({W0}, 1, 1) ({W0 + 20_000}, 2, 2)")
    assert harness.run_until_idle().failures == []
    rows = output(session, "select `_wstart`, c1, pname, tz from fo order by `_wstart`")
    assert [r[:3] for r in rows] == [(W0, 1, "t1aaa"), (W0 + 10_000, None, "t1aaa"), (W0 + 20_000, 1, "t1aaa")]
    assert rows[1][3] == rows[0][3] is not None


def test_expiry_is_judged_against_the_progress_before_the_batch(session: Session, harness: StreamHarness) -> None:
    """IGNORE EXPIRED 1 (the default): a row is expired when its window was closed before the
    batch of writes it arrives in — TDengine's trigger task moves its progress after a block,
    so an out-of-order row written with newer ones in one batch still counts; one written in a
    later batch into a window closed by then is dropped."""
    _setup(session)
    session.execute(
        "create stream sx trigger at_once into xo as select _wstart, count(*) c, sum(a) s from t1 interval(1s)"
    )
    for ts, a in ((15_000, 1), (17_000, 2), (11_000, 3)):  # three statements, one batch
        session.execute(f"insert into t1 values ({W0 + ts}, {a}, 0)")
    assert harness.run_until_idle().failures == []
    assert output(session, "select _wstart, c, s from xo order by 1") == [
        (W0 + 11_000, 1, 3), (W0 + 15_000, 1, 1), (W0 + 17_000, 1, 2),
    ]  # fmt: skip
    session.execute(f"insert into t1 values ({W0 + 12_000}, 5, 0)")  # [12 s, 13 s) closed before
    assert harness.run_until_idle().failures == []
    assert output(session, "select count(*) from xo") == [(3,)]


def test_an_open_window_written_and_invalidated_in_one_batch_leaves_no_row(
    session: Session, harness: StreamHarness
) -> None:
    # AT_ONCE pushes the open state window at T0+1s; a late row (T0+0.5s, same state) arriving
    # before the push has run moves the window's start: the one batch holds the push and the
    # invalidation, and the invalidation wins (TDengine keeps one row per window)
    _setup(session)
    session.execute(
        "create stream s trigger at_once ignore update 0 ignore expired 0 into out as"
        " select _wstart, count(*) c from st partition by tbname state_window(a)"
    )
    session.execute(f"insert into t1 values ({T0}, 1, 0) ({T0 + 1000}, 2, 0)")
    assert harness.tick()  # the trigger task queues the push; its run has not run yet
    session.execute(f"insert into t1 values ({T0 + 500}, 2, 0)")
    assert harness.run_until_idle().failures == []
    assert sorted(output(session, "select cast(_wstart as bigint), c from out")) == [(T0, 1), (T0 + 500, 2)]
