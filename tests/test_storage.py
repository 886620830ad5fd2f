"""Tables on Delta Lake through SQL: writes, TDengine update semantics, deletes, tags,
precisions, rejected writes and the catalog. No Spark here: rows are read back with delta-rs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from dagster_tdstream import CatalogError, Session, TDStreamError, Warehouse, WriteRejectedError
from dagster_tdstream.storage import append

SCHEMA = (
    "create database d; use d;"
    "create stable st (ts timestamp, v int, f double, s varchar(8)) tags (g int, loc varchar(16));"
    "create table c1 using st tags (1, 'north');"
    "create table nt (ts timestamp, v bigint);"
)


def rows(warehouse: Warehouse, table: str, db: str = "d") -> list[dict[str, object]]:
    data = warehouse.read_table(warehouse.table(db, table))
    key = ["tbname", "ts"] if "tbname" in data.column_names else ["ts"]
    return sorted(data.to_pylist(), key=lambda r: tuple(r[k] for k in key))


def operations(warehouse: Warehouse, table: str, db: str = "d") -> list[str]:
    history = DeltaTable(warehouse.delta.uri(db, table)).history()
    return [entry["operation"] for entry in reversed(history)]


def test_ordered_appends_do_not_merge_and_rewrites_replace_rows(sql_session: Session, warehouse: Warehouse) -> None:
    sql_session.execute(SCHEMA)
    sql_session.execute("insert into c1 values (1000, 1, 1.5, 'a') (2000, 2, 2.5, 'b')")
    sql_session.execute("insert into c1 values (3000, 3, 3.5, 'c')")
    # a second child table writes older timestamps than c1: still an append, per child table
    sql_session.execute("insert into c2 using st tags (2, 'south') values (500, 9, 0.5, 'z')")
    assert operations(warehouse, "st") == ["CREATE TABLE", "WRITE", "WRITE", "WRITE"]

    result = sql_session.execute("insert into c1 values (2000, 20, null, 'B') (4000, 4, 4.5, 'd')")[0]
    assert result.affected == 2
    assert operations(warehouse, "st")[-1] == "MERGE"
    assert [(r["tbname"], r["ts"], r["v"], r["f"], r["s"], r["g"]) for r in rows(warehouse, "st")] == [
        ("c1", 1000, 1, 1.5, "a", 1),
        ("c1", 2000, 20, None, "B", 1),
        ("c1", 3000, 3, 3.5, "c", 1),
        ("c1", 4000, 4, 4.5, "d", 1),
        ("c2", 500, 9, 0.5, "z", 2),
    ]


def test_same_timestamp_twice_in_one_statement_keeps_the_last(sql_session: Session, warehouse: Warehouse) -> None:
    sql_session.execute(SCHEMA)
    sql_session.execute("insert into nt values (1, 1) (1, 2) (2, 3) nt values (1, 4)")
    assert [(r["ts"], r["v"]) for r in rows(warehouse, "nt")] == [(1, 4), (2, 3)]


def test_each_commit_is_a_wal_offset_with_a_change_feed(sql_session: Session, warehouse: Warehouse) -> None:
    sql_session.execute(SCHEMA)
    sql_session.execute("insert into c1 values (1000, 1, 1.0, 'a')")
    sql_session.execute("insert into c1 values (1000, 5, 1.0, 'a')")
    sql_session.execute("delete from c1 where ts = 1000")
    assert warehouse.delta.version("d", "st") == 3
    feed = warehouse.delta.change_feed("d", "st", 1).to_pylist()
    changes = sorted((r["_commit_version"], r["_change_type"], r["v"]) for r in feed)
    assert changes == [
        (1, "insert", 1),
        (2, "update_postimage", 5),
        (2, "update_preimage", 1),
        (3, "delete", 5),
    ]


def test_watermarks_are_rebuilt_after_a_commit_the_catalog_did_not_see(
    sql_session: Session, warehouse: Warehouse
) -> None:
    sql_session.execute(SCHEMA)
    sql_session.execute("insert into nt values (1000, 1)")
    # another writer (or a crash between commit and catalog record) adds a row at 5000
    write_deltalake(warehouse.delta.uri("d", "nt"), pa.table({"ts": [5000], "v": [50]}), mode="append")
    sql_session.execute("insert into nt values (5000, 55)")
    assert operations(warehouse, "nt")[-1] == "MERGE"
    assert [(r["ts"], r["v"]) for r in rows(warehouse, "nt")] == [(1000, 1), (5000, 55)]


@pytest.mark.parametrize(
    ("statement", "message"),
    [
        ("insert into c1 values (10, 1, 1.0, 'x') c1 values (11, 2)", "expected 4 value(s) for table c1, got 2"),
        ("insert into c1 values ('2025-13-01 00:00:00', 1, 1.0, 'x')", "invalid timestamp"),
        ("insert into c1 values (10, 'abc', 1.0, 'x')", "needs an integer"),
        ("insert into c1 values (10, 3000000000, 1.0, 'x')", "out of range"),
        ("insert into c1 values (10, 1, 1.0, 'much too long')", "longer than VARCHAR(8)"),
        ("insert into c1 values (null, 1, 1.0, 'x')", "cannot be NULL"),
        ("insert into c1 (v) values (1)", "must include the primary key"),
        ("insert into nope values (10, 1)", "does not exist"),
        ("insert into st values (10, 1, 1.0, 'x')", "is a super table"),
        ("insert into c9 using st tags (1, 'x', 3) values (10, 1, 1.0, 'x')", "2 tag(s) named here but 3"),
        ("insert into c9 using st tags (1, 'y') values (10, 1, 1.0, 'x') nt values (1)", "expected 2 value(s)"),
    ],
)
def test_rejected_writes_change_nothing(
    sql_session: Session, warehouse: Warehouse, statement: str, message: str
) -> None:
    sql_session.execute(SCHEMA)
    sql_session.execute("insert into c1 values (1, 1, 1.0, 'a')")
    before = {t: warehouse.delta.version("d", t) for t in ("st", "nt")}
    tables_before = [t.name for t in warehouse.catalog.list_tables("d", ["child", "normal", "super"])]
    with pytest.raises(TDStreamError) as info:
        sql_session.execute(statement)
    assert message in str(info.value)
    assert str(info.value).startswith("error at line 1, column ")
    assert {t: warehouse.delta.version("d", t) for t in ("st", "nt")} == before
    assert [t.name for t in warehouse.catalog.list_tables("d", ["child", "normal", "super"])] == tables_before
    assert [r["v"] for r in rows(warehouse, "st")] == [1]


def test_insert_using_creates_the_child_table_with_tags(sql_session: Session, warehouse: Warehouse) -> None:
    sql_session.execute(SCHEMA)
    sql_session.execute("insert into c7 using st (loc) tags ('east') values (1, 7, 7.0, 'x')")
    child = warehouse.table("d", "c7")
    assert (child.kind, child.stable, child.tag_values) == ("child", "st", {"g": None, "loc": "east"})
    # an existing child table keeps its tags: USING only creates
    sql_session.execute("insert into c7 using st tags (9, 'west') values (2, 8, 8.0, 'y')")
    assert warehouse.table("d", "c7").tag_values == {"g": None, "loc": "east"}


def test_deletes_touch_only_the_named_child_table(sql_session: Session, warehouse: Warehouse) -> None:
    sql_session.execute(SCHEMA)
    sql_session.execute(
        "insert into c1 values (1000, 1, 0, 'a') (2000, 2, 0, 'a') (3000, 3, 0, 'a')"
        " c2 using st tags (2, 's') values (1000, 10, 0, 'a') (2000, 20, 0, 'a')"
    )
    result = sql_session.execute("delete from c1 where ts >= '1970-01-01 00:00:02' and v < 3")[0]
    assert result.affected == 1
    assert [(r["tbname"], r["ts"]) for r in rows(warehouse, "st")] == [
        ("c1", 1000),
        ("c1", 3000),
        ("c2", 1000),
        ("c2", 2000),
    ]
    sql_session.execute("delete from st where tbname = 'c2' and ts between 0 and 1500")
    assert [(r["tbname"], r["ts"]) for r in rows(warehouse, "st")] == [("c1", 1000), ("c1", 3000), ("c2", 2000)]
    with pytest.raises(WriteRejectedError, match="not the tag g"):
        sql_session.execute("delete from st where g = 1")
    # a constant CAST, as TDengine's scripts write the key
    assert sql_session.execute("delete from c1 where ts = cast(3000 as timestamp)")[0].affected == 1
    with pytest.raises(WriteRejectedError, match="cannot cast 'x' to BOOL"):
        sql_session.execute("delete from c1 where ts = cast('x' as bool)")


def test_tag_changes(sql_session: Session, warehouse: Warehouse) -> None:
    sql_session.execute(SCHEMA)
    sql_session.execute("insert into c1 values (1, 1, 1.0, 'a'); alter table c1 set tag loc = 'west', g = 5")
    assert {(r["g"], r["loc"]) for r in rows(warehouse, "st")} == {(5, "west")}
    with pytest.raises(CatalogError, match="has no tag nope"):
        sql_session.execute("alter table c1 set tag nope = 1")
    with pytest.raises(CatalogError, match="not a child table"):
        sql_session.execute("alter table nt set tag g = 1")


@pytest.mark.parametrize(
    ("precision", "literal", "expected"),
    [
        ("ms", "'2025-01-01 00:00:00.123'", 1735689600123),
        ("us", "'2025-01-01 00:00:00.123456'", 1735689600123456),
        ("ns", "'2025-01-01 00:00:00.123456789'", 1735689600123456789),
        ("ns", "1735689600123456789", 1735689600123456789),
        ("ms", "'1735689600123'", 1735689600123),  # a quoted epoch, as TDengine's tests write them
    ],
)
def test_precisions_keep_every_digit(
    sql_session: Session, warehouse: Warehouse, precision: str, literal: str, expected: int
) -> None:
    sql_session.execute(f"create database p precision '{precision}'; use p; create table t (ts timestamp, v int)")
    sql_session.execute(f"insert into t values ({literal}, 1)")
    assert rows(warehouse, "t", "p") == [{"ts": expected, "v": 1}]


def test_now_arithmetic_uses_the_precision(warehouse: Warehouse) -> None:
    now_ns = 1_735_689_600_000_000_000
    session = Session(warehouse, timezone="UTC", clock=lambda: now_ns)
    session.execute("create database p precision 'us'; use p; create table t (ts timestamp, v int)")
    session.execute("insert into t values (now, 1) (now + 1s, 2) (now - 1a, 3)")
    assert [r["ts"] for r in rows(warehouse, "t", "p")] == [
        now_ns // 1000 - 1000,
        now_ns // 1000,
        now_ns // 1000 + 1_000_000,
    ]


def test_session_time_zone_reads_timestamp_strings(warehouse: Warehouse) -> None:
    session = Session(warehouse, timezone="Asia/Shanghai")
    session.execute("create database d; use d; create table t (ts timestamp, v int)")
    session.execute("insert into t values ('2022-04-01 13:33:30', 1) ('2022-04-01 13:33:31+00:00', 2)")
    assert [r["ts"] for r in rows(warehouse, "t")] == [1648791210000, 1648820011000]


def test_show_describe_and_drop(sql_session: Session, warehouse: Warehouse) -> None:
    sql_session.execute(SCHEMA)
    assert [r[0] for r in sql_session.query("show databases").rows] == ["information_schema", "performance_schema", "d"]
    with pytest.raises(CatalogError, match="database performance_schema is a system database") as refused:
        sql_session.execute("create database performance_schema")
    assert (refused.value.line, refused.value.column) == (1, 1)
    assert sql_session.execute("use performance_schema")[0].message == "Database changed to performance_schema"
    # a system database shows what it holds: no stables, streams or TSMAs of a user's
    for what in ("tables", "stables", "streams", "tsmas"):
        assert sql_session.query(f"show {what}").rows == [], what
    system_tables = sql_session.query("show information_schema.tables").rows
    assert {r[0] for r in system_tables} >= {"ins_tables", "ins_tsmas", "ins_streams"}
    assert {(r[1], r[6]) for r in system_tables} == {("information_schema", "SYSTEM_TABLE")}
    sql_session.execute("use d")
    assert [(r[0], r[3], r[4]) for r in sql_session.query("show stables").rows] == [("st", 4, 2)]
    assert [(r[0], r[4], r[6]) for r in sql_session.query("show d.tables").rows] == [
        ("c1", "st", "CHILD_TABLE"),
        ("nt", None, "NORMAL_TABLE"),
    ]
    assert sql_session.query("describe st").rows == [
        ("ts", "TIMESTAMP", 8, ""),
        ("v", "INT", 4, ""),
        ("f", "DOUBLE", 8, ""),
        ("s", "VARCHAR", 8, ""),
        ("g", "INT", 4, "TAG"),
        ("loc", "VARCHAR", 16, "TAG"),
    ]
    sql_session.execute("insert into c1 values (1, 1, 1.0, 'a'); drop table c1")
    assert rows(warehouse, "st") == []
    stable_path = Path(warehouse.delta.uri("d", "st"))
    sql_session.execute("drop stable st")
    assert not stable_path.exists()
    assert warehouse.find_table("d", "c1") is None
    with pytest.raises(CatalogError, match="use DROP STABLE"):
        sql_session.execute("create stable s2 (ts timestamp, v int) tags (g int); drop table s2")
    sql_session.execute("drop database d")
    assert sql_session.database is None
    assert not Path(warehouse.uri, "d").exists()
    sql_session.execute("drop database if exists d")
    with pytest.raises(CatalogError, match="does not exist"):
        sql_session.execute("drop database d")


def test_ddl_errors(sql_session: Session) -> None:
    with pytest.raises(CatalogError, match="no database selected"):
        sql_session.execute("create table t (ts timestamp, v int)")
    sql_session.execute("create database d; use d")
    with pytest.raises(CatalogError, match="must be a TIMESTAMP"):
        sql_session.execute("create table t (v int, ts timestamp)")
    with pytest.raises(CatalogError, match="duplicate or reserved column name v"):
        sql_session.execute("create table t (ts timestamp, v int, v int)")
    sql_session.execute("create table t (ts timestamp, v int); create table if not exists t (ts timestamp, v int)")
    with pytest.raises(CatalogError, match="already exists"):
        sql_session.execute("create table t (ts timestamp, v int)")


def test_drop_if_exists_without_a_database_selected_drops_nothing_and_succeeds(sql_session: Session) -> None:
    # TDengine's scripts clean up with DROP … IF EXISTS before their CREATE DATABASE / USE
    sql_session.execute("create database d; create table d.t (ts timestamp, v int)")
    sql_session.execute("drop stable if exists t; drop table if exists t")
    assert sql_session.warehouse.find_table("d", "t") is not None  # not a table of some database
    with pytest.raises(CatalogError, match="no database selected"):
        sql_session.execute("drop table t")


_COERCED_TYPES = [
    "TINYINT", "SMALLINT", "INT", "BIGINT", "TINYINT UNSIGNED", "INT UNSIGNED", "TIMESTAMP",
    "FLOAT", "DOUBLE", "BOOL", "VARCHAR(3)", "NCHAR(2)", "VARBINARY(4)",
]  # fmt: skip
_COERCED_COLUMNS = [
    pa.array([1, None, -128, 127], pa.int64()),
    pa.array([300, 2**40], pa.int64()),
    pa.array([-1, 0], pa.int32()),
    pa.array([1.0, 2.5, -2.5, None], pa.float64()),
    pa.array([1.25, 3e38], pa.float32()),
    pa.array([float("nan"), 1.0], pa.float64()),
    pa.array([float("inf")], pa.float64()),
    pa.array([1e300], pa.float64()),
    pa.array([True, False, None]),
    pa.array(["ab", "abc", None]),
    pa.array(["abcd"]),
    pa.array(["中文"]),
    pa.array(["12", " 7 ", "x"]),
    pa.array([b"\x00\x01"], pa.binary()),
]


@pytest.mark.parametrize("computed", [True, False])
@pytest.mark.parametrize("type_name", _COERCED_TYPES)
def test_a_column_is_coerced_as_its_values_are_one_by_one(type_name: str, computed: bool) -> None:
    """``coerce_array`` (stream results written column-wise) gives what ``coerce`` gives per
    value — the same values and types, or the same rejection."""
    from dagster_tdstream.sql.ast import DataType
    from dagster_tdstream.storage.types import ValueTypeError, arrow_type, coerce, coerce_array

    name, _, length = type_name.partition("(")
    dtype = DataType(name, int(length.rstrip(")")) if length else None)
    for column in _COERCED_COLUMNS:
        try:
            expected = pa.array(
                [coerce(v, dtype, "c", computed=computed) for v in column.to_pylist()], arrow_type(dtype)
            )
        except ValueTypeError as error:
            with pytest.raises(ValueTypeError, match=re.escape(str(error))):
                coerce_array(column, dtype, "c", computed=computed)
            continue
        got = coerce_array(column, dtype, "c", computed=computed)
        # compared as text: NaN is a value here, equal to itself
        assert got.type == expected.type and repr(got.to_pylist()) == repr(expected.to_pylist()), (column, type_name)


def test_child_tables_are_registered_together_existing_and_repeated_names_once(
    sql_session: Session, warehouse: Warehouse
) -> None:
    """A history run's output registers a child table per group in one catalog statement:
    names that exist are skipped, a name given twice is created once, the rest in order."""
    sql_session.execute("create database d; use d; create stable st (ts timestamp, v int) tags (g int, h varchar(8))")
    sql_session.execute("create table c1 using st tags (1, 'old')")
    stable = warehouse.table("d", "st")
    children = [warehouse.new_child("d", f"c{i}", stable, {"g": i, "h": f"h{i}"}) for i in (3, 1, 2, 3)]
    created = warehouse.create_child_tables(children)
    assert [child.name for child in created] == ["c3", "c2"]
    assert {name: info.tag_values for name, info in warehouse.catalog.get_tables("d", ["c1", "c2", "c3"]).items()} == {
        "c1": {"g": 1, "h": "old"},
        "c2": {"g": 2, "h": "h2"},
        "c3": {"g": 3, "h": "h3"},
    }
    assert warehouse.table("d", "c2").columns == stable.columns and warehouse.table("d", "c3").tags == stable.tags
    assert warehouse.create_child_tables(children) == []


def test_the_catalogs_plain_sqlite_reads_match_its_sqlalchemy_reads_and_see_other_processes_ddl(
    sql_session: Session, warehouse: Warehouse
) -> None:
    sql_session.execute(
        SCHEMA + "create vtable vt (ts timestamp, a int from c1.v); alter table c1 set tag loc = 'east';"
        "create table c2 using st tags (2, 'south')"
    )
    catalog = warehouse.catalog
    assert catalog._plain is not None  # a SQLite file: the INSERT path's reads skip SQLAlchemy
    names = ["c1", "c2", "nt", "st", "vt", "missing"] + [f"x{i}" for i in range(600)]  # two reads of ≤ 500
    plain = (catalog.get_tables("d", names), catalog.get_database("d"), catalog.get_database("nope"))
    assert sorted(plain[0]) == ["c1", "c2", "nt", "st", "vt"]
    assert plain[0]["c1"].tag_values == {"g": 1, "loc": "east"} and plain[0]["vt"].refs is not None
    assert [c.name for c in plain[0]["c2"].columns] == ["ts", "v", "f", "s"]  # a child's are its super table's
    reads, catalog._plain = catalog._plain, None
    try:
        assert (catalog.get_tables("d", names), catalog.get_database("d"), catalog.get_database("nope")) == plain
    finally:
        catalog._plain = reads
    # another process's DDL is seen at once: no read holds a snapshot
    other = Warehouse(warehouse.uri)
    Session(other, database="d", timezone="UTC").execute(
        "drop table c2; create table c3 using st tags (3, 'west'); alter table c1 set tag g = 7"
    )
    other.close()
    found = catalog.get_tables("d", ["c1", "c2", "c3"])
    assert sorted(found) == ["c1", "c3"] and found["c1"].tag_values["g"] == 7
    # a forked child reads on a connection of its own and leaves its parent's alone
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome is its exit code
        ok = sorted(catalog.get_tables("d", ["c1", "c3"])) == ["c1", "c3"]
        ok = ok and catalog._plain is not None and len(catalog._plain._inherited) == 1
        os._exit(0 if ok else 1)
    assert os.waitpid(child, 0)[1] == 0
    assert sorted(catalog.get_tables("d", ["c1", "c3"])) == ["c1", "c3"]


@pytest.mark.parametrize("in_memory", [True, False])
def test_a_data_file_is_recorded_with_its_size_and_statistics_whichever_way_it_is_written(
    sql_session: Session, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch, in_memory: bool
) -> None:
    # small files are encoded in memory and written with one open, larger ones stream to disk:
    # either way the add action names the file's real size (a reader seeks its footer by it)
    monkeypatch.setattr(append, "_SMALL_FILE_BYTES", 1 << 30 if in_memory else 0)
    sql_session.execute(SCHEMA)
    sql_session.execute("insert into c1 values (1000, 1, 0.5, 'a') (2000, 3, 1.5, 'é') (3000, 2, null, 'b')")
    table = DeltaTable(warehouse.delta.uri("d", "st"))
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert len(adds) == 1
    path = Path(warehouse.delta.uri("d", "st").removeprefix("file://")) / adds[0]["path"]
    assert adds[0]["size_bytes"] == path.stat().st_size
    assert (adds[0]["num_records"], adds[0]["min.ts"], adds[0]["max.ts"], adds[0]["max.s"]) == (3, 1000, 3000, "é")
    assert adds[0]["null_count.f"] == 1
    assert [(r["ts"], r["v"], r["f"], r["s"]) for r in rows(warehouse, "st")] == [
        (1000, 1, 0.5, "a"),
        (2000, 3, 1.5, "é"),
        (3000, 2, None, "b"),
    ]


def _child_read_plan(warehouse: Warehouse) -> str:
    """SQLite's plan for the catalog's read of a super table's children."""
    from dagster_tdstream.storage.catalog import _CHILD_UIDS

    engine = warehouse.catalog.engine
    statement = str(_CHILD_UIDS.compile(dialect=engine.dialect))
    with engine.connect() as conn:
        return " ".join(str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", ("d", "st")))


def test_a_super_tables_children_are_read_through_an_index_also_in_a_catalog_written_before_it(
    tmp_path: Path,
) -> None:
    import sqlite3
    from contextlib import closing

    root = tmp_path / "wh"
    warehouse = Warehouse(str(root))
    Session(warehouse).execute(
        SCHEMA + "create stable other (ts timestamp, v int) tags (g int);"
        "create table c2 using st tags (2, 'south'); create table o1 using other tags (1);"
    )
    assert warehouse.catalog.child_uids("d", "st").keys() == {"c1", "c2"}
    # found by (db, stable), in name order, without visiting the database's other tables
    plan = _child_read_plan(warehouse)
    assert "USING INDEX tds_tables_children (db=? AND stable=?)" in plan
    assert "TEMP B-TREE" not in plan
    warehouse.close()
    with closing(sqlite3.connect(root / "catalog.sqlite")) as conn:  # as an earlier version left it
        conn.execute("DROP INDEX tds_tables_children")
        conn.commit()
    warehouse = Warehouse(str(root))
    try:
        assert "tds_tables_children" in _child_read_plan(warehouse)
        assert list(warehouse.catalog.child_uids("d", "st")) == ["c1", "c2"]
        assert list(warehouse.catalog.child_uids("d", "other")) == ["o1"]
    finally:
        warehouse.close()
