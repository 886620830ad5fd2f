"""TSMAs: the statements and their rules, the guards on the table, and the stream that keeps
each TSMA's intermediate states (real Spark, Delta and Dagster runs through the harness)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from dagster import AssetCheckKey, AssetKey

from dagster_tdstream import Session, StreamHarness, TDStreamProject, build_definitions
from dagster_tdstream.cli.main import main
from dagster_tdstream.errors import TDStreamError
from dagster_tdstream.sql.timeunits import parse_duration
from dagster_tdstream.sql.tsma import recursive_interval_allowed
from dagster_tdstream.storage.system import system_table

from .conftest import assert_rejected, output

T0 = 1_537_146_000_000  # 2018-09-17 01:00:00 UTC, a whole hour
MINUTE = 60_000


def _setup(session: Session) -> None:
    session.execute(
        "create database tm; use tm;"
        "create stable meters (ts timestamp, c1 int, c2 double, c3 varchar(10)) tags (t1 int, t2 varchar(8));"
        "create table d1 using meters tags (1, 'a'); create table d2 using meters tags (2, 'b');"
        "create table nt (ts timestamp, v int);"
    )


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("create tsma x on meters function(avg(c1, c2)) interval(5m)", "Invalid tsma func param, only one non-tag column allowed"),
        ("create tsma x on meters function(avg(c1 + 1)) interval(5m)", "Invalid tsma func param"),
        ("create tsma x on meters function(count(_wstart)) interval(5m)", "Invalid tsma func param"),
        ("create tsma x on meters function(avg(t1)) interval(5m)", "t1 is a tag of meters"),
        ("create tsma x on meters function(count(*)) interval(5m)", "count(*) is kept as count(ts)"),
        ("create tsma x on meters function(avg(ts)) interval(5m)", "Invalid function para type"),
        ("create tsma x on meters function(sum(c3)) interval(5m)", "Invalid function para type"),
        ("create tsma x on meters function(abs(c1)) interval(5m)", "Tsma func not supported: abs"),
        ("create tsma x on meters function(last_row(c1)) interval(5m)", "Tsma func not supported: last_row"),
        ("create tsma x on meters function(avg(nope)) interval(5m)", "has no column nope"),
        ("create tsma x on d1 function(avg(c1)) interval(5m)", "only stable or normal table allowed"),
        ("create tsma x on meters function() interval(5m)", "expected an aggregate function"),
        ("create tsma x on meters function(avg(c1)+avg(c2)) interval(5m)", "expected ',' or ')' after a function"),
        ("create tsma x on meters function(avg(c1)) interval(10)", "a duration with its unit"),
        ("create tsma x on meters function(avg(c1)) interval(30s)", "a TSMA's window is 1m to 1y"),
        ("create tsma x on meters function(avg(c1)) interval(2y)", "a TSMA's window is 1m to 1y"),
        ("create tsma tsma on meters function(avg(c1)) interval(5m)", "a keyword cannot name a TSMA"),
        ("create tsma bool on meters function(avg(c1)) interval(5m)", "a keyword cannot name a TSMA"),
        ("create tsma Select on meters function(avg(c1)) interval(5m)", "a keyword cannot name a TSMA"),
        ("create tsma " + "n" * 179 + " on meters function(avg(c1)) interval(5m)", "Tsma name too long: 179 characters, at most 178"),
        ("create recursive tsma r on tm.x function(avg(c1)) interval(5m)", "a recursive TSMA keeps the functions"),
        ("create recursive tsma r on tm.nothing interval(15m)", "TSMA tm.nothing does not exist"),
        ("drop tsma tm.nothing", "TSMA tm.nothing does not exist"),
    ],
)  # fmt: skip
def test_tsma_rules_reject_with_a_position_and_create_nothing(
    sql_session: Session, statement: str, message: str
) -> None:
    _setup(sql_session)
    assert_rejected(sql_session, statement, message)
    assert system_table(sql_session.warehouse, "ins_tsmas").num_rows == 0
    assert [t.name for t in sql_session.warehouse.catalog.list_tables("tm", ["super"])] == ["meters"]


@pytest.mark.parametrize(
    ("base", "interval", "allowed"),
    [
        ("5m", "15m", True), ("5m", "20m", True), ("5m", "1m", False), ("5m", "7m", False), ("5m", "5m", False),
        ("20m", "30m", False), ("20m", "40m", True), ("10m", "1h", True), ("10m", "1d", True),
        ("1m", "120s", True), ("1h", "1d", True), ("1h", "1n", True), ("1h", "1y", True), ("12h", "1y", False),
        ("12n", "1y", False), ("2d", "1n", False), ("55m", "55h", False), ("7m", "7d", False),
    ],
)  # fmt: skip
def test_recursive_interval_follows_tdengine(base: str, interval: str, allowed: bool) -> None:
    assert recursive_interval_allowed(parse_duration(base), parse_duration(interval)) is allowed


def test_tsma_keeps_states_per_window_and_child_table_and_recalculates(
    session: Session, harness: StreamHarness
) -> None:
    """History first, then new rows; a late row, an update and a delete recalculate their
    windows; the states merge into exactly the raw aggregates, also through a recursive TSMA."""
    _setup(session)
    rows = " ".join(
        f"{child} values " + " ".join(f"({T0 + i * 20_000}, {i + k}, {i * 0.5 + k}, 'x')" for i in range(30))
        for k, child in ((0, "d1"), (100, "d2"))
    )
    session.execute(f"insert into {rows}")  # 10 minutes of rows: the history
    session.execute(
        "create tsma t5 on tm.meters function(avg(c1), max(c1), stddev(c2), count(ts), first(c2)) interval(5m)"
    )
    session.execute("create recursive tsma t15 on tm.t5 interval(15m)")
    session.execute(
        f"insert into d1 values ({T0 + 16 * MINUTE}, 7, 7.0, 'y') d2 values ({T0 + 16 * MINUTE}, 8, 8.0, 'y')"
    )
    assert harness.run_until_idle().failures == []

    def states(table: str) -> list[tuple[object, ...]]:
        return sorted(
            output(
                session,
                f"select tsma_tbname, wstart, sum_c1, count_c1, max_c1, count_ts, first_c2, sumsq_c2 from tm.{table}",
            )
        )

    def raw(interval: str) -> list[tuple[object, ...]]:
        return sorted(
            output(
                session,
                f"select tbname, _wstart, sum(c1), count(c1), max(c1), count(*), first(c2), sum(c2 * c2) "
                f"from meters partition by tbname interval({interval})",
            )
        )

    # the base's windows that closed (the rows at 16 min close 0-5 and 5-10 min)
    assert states("t5_tsma_res_stb_") == [r for r in raw("5m") if r[1] < T0 + 15 * MINUTE]
    # a late row, an update of an existing row and a delete, all in closed windows
    session.execute(f"insert into d1 values ({T0 + 1000}, 1000, 1.0, 'z') ({T0 + 20_000}, 50, 2.0, 'z')")
    session.execute(f"delete from d2 where ts = {T0 + 5 * MINUTE}")
    session.execute(
        f"insert into d1 values ({T0 + 31 * MINUTE}, 1, 1.0, 'y') d2 values ({T0 + 31 * MINUTE}, 1, 1.0, 'y')"
    )
    assert harness.run_until_idle().failures == []
    assert states("t5_tsma_res_stb_") == [r for r in raw("5m") if r[1] < T0 + 30 * MINUTE]
    # the recursive TSMA merges the base's states into 15-minute windows; its windows close as
    # the base's do (the base's 30-35 min window, closed by rows at 36 min, closes 15-30 min)
    assert states("t15_tsma_res_stb_") == [r for r in raw("15m") if r[1] < T0 + 15 * MINUTE]
    session.execute(
        f"insert into d1 values ({T0 + 36 * MINUTE}, 1, 1.0, 'y') d2 values ({T0 + 36 * MINUTE}, 1, 1.0, 'y')"
    )
    assert harness.run_until_idle().failures == []
    assert states("t15_tsma_res_stb_") == [r for r in raw("15m") if r[1] < T0 + 30 * MINUTE]
    # the tags of the table travel with each child table's states
    assert sorted(set(output(session, "select tsma_tbname, t1, t2 from tm.t5_tsma_res_stb_"))) == [
        ("d1", 1, "a"),
        ("d2", 2, "b"),
    ]


def test_show_tsmas_ins_tsmas_and_the_hidden_output(session: Session) -> None:
    _setup(session)
    session.execute("create tsma t5 on meters function(avg(c1), avg(c1), count(ts)) interval(5m)")
    session.execute("create recursive tsma t1h on t5 interval(1h)")
    session.execute("create tsma tn on tm.nt function(sum(v)) interval(10m)")
    rows = output(
        session,
        "select tsma_name, db_name, table_name, target_db, target_stb, stream_name, `interval`, func_list "
        "from information_schema.ins_tsmas",
    )
    assert sorted(rows) == [
        ("t1h", "tm", "meters", "tm", "t1h_tsma_res_stb_", "t1h", "1h", "avg(c1),count(ts)"),
        ("t5", "tm", "meters", "tm", "t5_tsma_res_stb_", "t5", "5m", "avg(c1),count(ts)"),
        ("tn", "tm", "nt", "tm", "tn_tsma_res_stb_", "tn", "10m", "sum(v)"),
    ]
    assert len(output(session, "show tm.tsmas")) == 3
    assert [r[0] for r in output(session, "show stables")] == ["meters"]
    # each TSMA is a stream under its own name (SHOW STREAMS, its Dagster asset)
    assert sorted(r[0] for r in output(session, "show streams")) == ["t1h", "t5", "tn"]
    # the names are unique across databases, and at most maxTsmaNum exist: a server option,
    # 10 by default as in TDengine 3.3.7, lowered here for every session of the warehouse
    session.execute("create database other; create table other.nt (ts timestamp, v int)")
    with pytest.raises(TDStreamError, match="SMA already exists"):
        session.execute("create tsma T5 on other.nt function(sum(v)) interval(10m)")
    assert output(session, "show variables like 'maxtsma%'") == [("maxTsmaNum", "10", "server")]
    session.execute("alter all dnodes 'maxTsmaNum' '3'")
    other = Session(warehouse=session.warehouse, spark=session.spark)
    assert output(other, "show dnode 1 variables like 'maxTsmaNum'") == [(1, "maxTsmaNum", "3", "server")]
    with pytest.raises(TDStreamError, match="Tsma num exceeded: at most 3") as refused:
        other.execute("create tsma t4 on other.nt function(sum(v)) interval(10m)")
    assert (refused.value.line, refused.value.column) == (1, 1)
    session.execute("alter dnode 1 'maxTsmaNum 4'")
    other.execute("create tsma t4 on other.nt function(sum(v)) interval(10m)")
    assert len(output(session, "select * from information_schema.ins_tsmas")) == 4
    for statement, error in (
        ("alter all dnodes 'maxTsmaNum' '11'", "maxTsmaNum is a whole number from 0 to 10, got '11'"),
        ("alter dnode 1 'maxTsmaNum' 'many'", "maxTsmaNum is a whole number from 0 to 10"),
        ("alter dnode 2 'maxTsmaNum' '5'", "Dnode does not exist: dnode 2"),
        ("alter all dnodes 'noSuchOption' '1'", "Invalid config option: 'noSuchOption'"),
        ("show dnode 3 variables", "Dnode does not exist: dnode 3"),
    ):
        with pytest.raises(TDStreamError, match=error):
            session.execute(statement)
    assert output(session, "show variables") == [("maxTsmaNum", "4", "server")]


def test_a_back_quoted_tsma_name_with_any_characters_runs_and_queries_read_it(
    session: Session, harness: StreamHarness
) -> None:
    """`129_T*\\-sma` may name a TSMA (TDengine's test): its hidden table is a directory of its
    own and its stream an asset Dagster accepts."""
    _setup(session)
    session.execute(f"insert into d1 values ({T0}, 1, 1.0, 'x') ({T0 + MINUTE}, 3, 1.0, 'x')")
    session.execute("create tsma `129_T*\\-sma` on meters function(sum(c1)) interval(5m)")
    assert harness.run_until_idle().failures == []
    assert [job.asset.key.path for job in harness._definitions()] == [
        ["tdstream", "tm", "129_t_x2a__x5c_-sma_tsma_res_stb_"]
    ]
    session.execute("alter local 'querySmaOptimize' '1'")
    result = session.query(f"select sum(c1) from meters where ts >= {T0} and ts < {T0 + 5 * MINUTE}")
    assert result.rows == [(4,)]
    assert result.table is not None and result.table.schema.metadata[b"tdstream.tsma"] == b"tm.129_t*\\-sma"
    session.execute("drop tsma tm.`129_T*\\-sma`")
    assert output(session, "show tm.tsmas") == []


def test_a_tsma_guards_its_table_until_it_is_dropped(session: Session) -> None:
    _setup(session)
    session.execute("create tsma t5 on meters function(avg(c1)) interval(5m)")
    session.execute("create recursive tsma t15 on t5 interval(15m)")
    session.execute("create tsma tn on nt function(sum(v)) interval(10m)")
    refused = {
        "drop table nt": "Tsma must be dropped first: tm.tn reads tm.nt",
        "drop stable meters": "Tsma must be dropped first: tm.t5 reads tm.meters",
        "alter stable meters drop tag t2": "Stream must be dropped first: tag t2",
        "alter table d1 set tag t1 = 5": "Stream must be dropped first: tag values of tm.d1",
        "drop stream t5": "Tsma must be dropped first: stream tm.t5 keeps TSMA t5",
        "drop tsma t5": "Invalid drop base tsma, drop recursive tsma first: tm.t15",
        "drop stable t5_tsma_res_stb_": "is a TSMA's output",
    }
    for statement, message in refused.items():
        with pytest.raises(TDStreamError, match=re.escape(message)):
            session.execute(statement)
    # a tag added after the TSMA is not kept by it: it can go again; child tables can be dropped
    session.execute("alter stable meters add tag t3 int; alter stable meters drop tag t3; drop table d2")
    session.execute("drop tsma t15; drop tsma t5; drop tsma tm.tn")
    assert output(session, "select count(*) from information_schema.ins_tsmas") == [(0,)]
    assert session.warehouse.find_table("tm", "t5_tsma_res_stb_") is None
    session.execute("drop table nt; alter stable meters drop tag t2; drop stable meters")
    # the name is free again
    session.execute("create table nt (ts timestamp, v int); create tsma t5 on nt function(count(ts)) interval(1m)")


def test_a_tsma_made_run_and_read_from_the_cli_is_an_asset_with_its_lag_check(tmp_path: Path, spark: object) -> None:
    wh = str(tmp_path / "wh")

    def sql(statements: str) -> list[str]:
        result = CliRunner().invoke(main, ["sql", "--warehouse", wh, "--timezone", "UTC", statements])
        assert result.exit_code == 0, result.output
        return result.stdout.splitlines()

    t = 1_700_000_040_000  # 22:14:00 UTC, a whole minute
    assert (
        sql(
            "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
            f"insert into c1 using st tags (1) values ({t}, 1) ({t + 30_000}, 2) ({t + 60_000}, 3) ({t + 120_000}, 4)"
            f" c2 using st tags (2) values ({t}, 10) ({t + 120_000}, 20);"
            "create tsma m1 on st function(sum(v), count(ts)) interval(1m)"
        )[-1]
        == "Create OK"
    )
    graph = build_definitions(TDStreamProject(warehouse=wh, timezone="UTC")).resolve_asset_graph()
    key = AssetKey(["tdstream", "d", "m1_tsma_res_stb_"])
    assert graph.get(key).partitions_def is not None  # the TSMA's stream is an asset like any stream's
    assert AssetCheckKey(key, "stream_lag") in graph.asset_check_keys
    run = CliRunner().invoke(main, ["run", "--until-idle", "--warehouse", wh])
    assert run.exit_code == 0 and run.stdout.splitlines()[0].endswith(" 1 run(s)"), run.output
    query = "select _wstart, sum(v), count(*) from d.st interval(1m)"
    read = sql(f"alter local 'querySmaOptimize' '1'; {query}")
    assert read[1:] == [
        "_wstart                 | sum(v) | count(*)",
        "===========================================",
        "2023-11-14 22:14:00.000 | 13     | 3",
        "2023-11-14 22:15:00.000 | 3      | 1",
        "2023-11-14 22:16:00.000 | 24     | 2",
        "Query OK, 3 row(s) in set (read from TSMA d.m1)",
    ]
    raw = sql(f"alter local 'querySmaOptimize' '1'; {query.replace('select', 'select /*+ skip_tsma() */')}")
    assert raw[1:-1] == read[1:-1] and raw[-1] == "Query OK, 3 row(s) in set"
