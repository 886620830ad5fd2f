"""last_row()/last() queries answered from the newest data: the files holding only history are
not read (proven by removing them), and whatever the newest files cannot prove — a deleted
newest row, a NULL newest value, a condition on the rows — still gets the whole table's answer."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from dagster_tdstream import QueryError, Session, Warehouse

SCHEMA = (
    "create database lr; use lr;"
    "create stable st (ts timestamp, v int, w double) tags (site varchar(8), zone int);"
    "create table c0 using st tags ('a', 1); create table c1 using st tags ('a', 2);"
    "create table c2 using st tags ('b', 1); create table nt (ts timestamp, v int);"
)


def history_then_newest(session: Session) -> None:
    """An hour of history written in six commits, then each child table's newest rows."""
    session.execute(SCHEMA)
    for batch in range(6):
        values = " ".join(f"c{c} values ({batch * 600_000 + c * 1000}, {batch}, {batch}.5)" for c in range(3))
        session.execute(f"insert into {values}")
        session.execute(f"insert into nt values ({batch * 600_000}, {batch})")
    session.execute(
        "insert into c0 values (10000000, 100, 1.0) (10001000, 101, null)"
        " c1 values (10000500, 200, 2.0) c2 values (10002000, 300, null)"
    )
    session.execute("insert into nt values (10000000, 400)")


def remove_history_files(warehouse: Warehouse, table: str, below: int) -> int:
    """Delete the Parquet files whose rows are all older than ``below`` (still in the Delta
    log: reading them now fails)."""
    actions = pa.table(warehouse.delta.open("lr", table).get_add_actions(flatten=True))
    removed = 0
    for path, newest in zip(actions.column("path").to_pylist(), actions.column("max.ts").to_pylist(), strict=True):
        if newest < below:
            (Path(warehouse.delta.uri("lr", table).removeprefix("file://")) / path).unlink()
            removed += 1
    return removed


def test_last_row_per_child_table_reads_only_the_newest_files(session: Session, warehouse: Warehouse) -> None:
    history_then_newest(session)
    assert remove_history_files(warehouse, "st", 10_000_000) == 6
    assert remove_history_files(warehouse, "nt", 10_000_000) == 6
    rows = session.query("select tbname, last_row(v), last_row(ts) from st partition by tbname order by tbname").rows
    assert [(name, v, ts.timestamp()) for name, v, ts in rows] == [
        ("c0", 101, 10001.0),
        ("c1", 200, 10000.5),
        ("c2", 300, 10002.0),
    ]
    assert session.query("select last_row(*) from st").rows[0][1:] == (300, None)
    assert session.query("select site, last_row(v) from st where zone = 1 group by site order by site").rows == [
        ("a", 101),
        ("b", 300),
    ]
    assert session.query("select last(w), last_row(v) from c1").rows == [(2.0, 200)]
    newest_nt = session.query("select last(*) from nt")
    assert newest_nt.columns == ["last(ts)", "last(v)"] and newest_nt.rows[0][1] == 400
    newest_c2 = session.query("select last_row(v, w), last_row(*) from c2")
    assert newest_c2.columns == ["last_row(v)", "last_row(w)", "last_row(ts)", "last_row(v)", "last_row(w)"]
    assert newest_c2.rows[0][:2] == (300, None)
    # whatever needs history reads it, and finds the files gone
    with pytest.raises(QueryError):
        session.query("select last(w) from st partition by tbname")  # c0 and c2: newest w is NULL
    with pytest.raises(QueryError):
        session.query("select last_row(v) from st where v < 100")  # a condition on the rows


def test_what_the_newest_files_cannot_prove_gets_the_whole_answer(session: Session) -> None:
    history_then_newest(session)
    # last(): the newest non-NULL value is older than the newest row
    assert session.query("select tbname, last(w) from st partition by tbname order by tbname").rows == [
        ("c0", 1.0),
        ("c1", 2.0),
        ("c2", 5.5),
    ]
    # a deleted newest row: the child table's watermark no longer is a stored row
    session.execute("delete from c2 where ts >= 10000000")
    assert session.query("select tbname, last_row(v) from st partition by tbname order by tbname").rows == [
        ("c0", 101),
        ("c1", 200),
        ("c2", 5),
    ]
    session.execute("delete from c1")
    assert session.query("select tbname, last_row(v) from st partition by tbname order by tbname").rows == [
        ("c0", 101),
        ("c2", 5),
    ]
    assert session.query("select last_row(v) from st where v < 100").rows == [(5,)]
