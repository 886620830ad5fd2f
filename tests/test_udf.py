"""User-defined functions: CREATE/DROP FUNCTION, SHOW FUNCTIONS and ins_functions, TDengine's
Python UDF interface running in Spark (scalar and aggregate, in queries and in a stream's
Dagster runs), the rules at CREATE, and C UDFs recorded but refused at a call."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_tdstream import Session, StreamHarness
from dagster_tdstream.errors import TDStreamError

from .conftest import output

T0 = 1_537_146_000_000  # 2018-09-17 01:00:00 UTC
MINUTE = 60_000

DOUBLE_IT = """
calls = []

def init():
    calls.append("init")

def process(block):
    rows, _ = block.shape()
    return [None if block.data(i, 0) is None else block.data(i, 0) * 2 for i in range(rows)]
"""

# strings reach a UDF as bytes and timestamps as integers, as TDengine's udfd hands them over
DESCRIBE = """
def process(block):
    rows, cols = block.shape()
    out = []
    for i in range(rows):
        name, ts = block.data(i, 0), block.data(i, 1)
        out.append(None if name is None else type(name).__name__ + ":" + name.decode().upper() + "@" + str(ts % 100000))
    return out
"""

# the first non-NULL value in time order: shows the rows arrive sorted by the timestamp
EARLIEST = """
import pickle

def start():
    return pickle.dumps(None)

def reduce(block, buf):
    seen = pickle.loads(buf)
    rows, _ = block.shape()
    for i in range(rows):
        if seen is None and block.data(i, 0) is not None:
            seen = block.data(i, 0)
    return pickle.dumps(seen)

def finish(buf):
    return pickle.loads(buf)
"""

SPREAD = """
import pickle

def start():
    return pickle.dumps((None, None))

def reduce(block, buf):
    low, high = pickle.loads(buf)
    rows, _ = block.shape()
    for i in range(rows):
        v = block.data(i, 0)
        if v is not None:
            low = v if low is None else min(low, v)
            high = v if high is None else max(high, v)
    return pickle.dumps((low, high))

def finish(buf):
    low, high = pickle.loads(buf)
    return None if low is None else float(high - low)
"""

# keeps every value it saw: its buffer outgrows a small BUFSIZE
HOARD = """
import pickle

def start():
    return pickle.dumps([])

def reduce(block, buf):
    rows, _ = block.shape()
    return pickle.dumps(pickle.loads(buf) + [block.data(i, 0) for i in range(rows)])

def finish(buf):
    return len(pickle.loads(buf))
"""


def _file(tmp_path: Path, name: str, code: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    return str(path)


def _setup(session: Session, tmp_path: Path) -> None:
    session.execute(
        "create database u; use u;"
        "create stable st (ts timestamp, v int, name varchar(10)) tags (g int);"
        "create table c1 using st tags (1); create table c2 using st tags (2);"
        f"insert into c1 values ({T0 + 3000}, 5, 'b') ({T0 + 1000}, 1, 'a') ({T0 + MINUTE + 1000}, null, null)"
        f" c2 values ({T0 + 2000}, 40, 'y') ({T0 + 500}, 10, 'x');"
        f"create function double_it as '{_file(tmp_path, 'double_it', DOUBLE_IT)}' outputtype int language 'Python';"
        f"create function describe as '{_file(tmp_path, 'describe', DESCRIBE)}' outputtype varchar(40)"
        " language 'Python';"
        f"create aggregate function earliest as '{_file(tmp_path, 'earliest', EARLIEST)}' outputtype int"
        " bufsize 64 language 'python';"
        f"create aggregate function myspread as '{_file(tmp_path, 'myspread', SPREAD)}' outputtype double"
        " bufsize 64 language 'Python';"
    )


def test_scalar_python_udf_gets_tdengine_values_and_keeps_nulls(session: Session, tmp_path: Path) -> None:
    _setup(session, tmp_path)
    rows = output(session, "select ts, v, double_it(v), double_it(v) + 1, describe(name, ts) from c1 order by ts")
    assert rows == [
        (T0 + 1000, 1, 2, 3, "bytes:A@1000"),
        (T0 + 3000, 5, 10, 11, "bytes:B@3000"),
        (T0 + MINUTE + 1000, None, None, None, None),
    ]
    table = session.query("select double_it(v) from c1").to_arrow()
    assert str(table.schema.field(0).type) == "int32"  # OUTPUTTYPE int


def test_aggregate_python_udf_per_window_and_partition_matches_the_built_ins(session: Session, tmp_path: Path) -> None:
    _setup(session, tmp_path)
    by_table = output(
        session,
        "select tbname, myspread(v), spread(v), earliest(v), first(v) from st partition by tbname order by tbname",
    )
    assert by_table == [("c1", 4.0, 4.0, 1, 1), ("c2", 30.0, 30.0, 10, 10)]
    windows = output(
        session, "select _wstart, myspread(v), earliest(v), double_it(max(v)), count(*) from st interval(1m)"
    )
    assert windows == [(T0, 39.0, 10, 80, 4), (T0 + MINUTE, None, None, None, 1)]


def test_an_aggregate_over_its_bufsize_fails_the_query(session: Session, tmp_path: Path) -> None:
    _setup(session, tmp_path)
    session.execute(
        f"create aggregate function hoard as '{_file(tmp_path, 'hoard', HOARD)}' outputtype int bufsize 16"
        " language 'Python'"
    )
    with pytest.raises(TDStreamError, match="over its BUFSIZE 16"):
        session.query("select hoard(v) from st")


def test_create_rules_show_functions_and_drop(session: Session, tmp_path: Path) -> None:
    _setup(session, tmp_path)
    path = _file(tmp_path, "double_it", DOUBLE_IT)
    before = session.query("select create_time from information_schema.ins_functions where name = 'double_it'").rows
    rejected = [
        (f"create function abs as '{path}' outputtype int language 'Python'", "abs is a built-in function"),
        (f"create function double_it as '{path}' outputtype int language 'Python'", "Func already exists: double_it"),
        (f"create function f as '{tmp_path}/none.py' outputtype int language 'Python'", "is not a readable Python"),
        (
            f"create function f as '{_file(tmp_path, 'bad', 'def process(:')}' outputtype int language 'Python'",
            "line 1",
        ),
        (f"create aggregate function f as '{path}' outputtype int bufsize 8 language 'Python'", "no start, reduce"),
        (f"create function f as '{_file(tmp_path, 'agg', SPREAD)}' outputtype int language 'Python'", "no process()"),
        (f"create aggregate function f as '{path}' outputtype int language 'Python'", "needs BUFSIZE from 1"),
        (f"create function f as '{path}' outputtype int language 'Java'", "Invalid udf language"),
        ("drop function nothing", "Func not exist: nothing"),
    ]
    for statement, message in rejected:
        with pytest.raises(TDStreamError, match=message) as caught:
            session.execute(statement)
        assert "line 1" in str(caught.value), statement
    session.execute(f"create function if not exists double_it as '{path}' outputtype bigint language 'Python'")
    session.execute(f"create or replace function double_it as '{path}' outputtype bigint language 'Python'")
    shown = session.query("show functions").to_arrow().to_pylist()
    assert [f["name"] for f in shown] == ["describe", "double_it", "earliest", "myspread"]
    rows = session.query(
        "select name, aggregate, output_type, bufsize, func_language, func_version, code_len, create_time"
        " from information_schema.ins_functions where name in ('double_it', 'earliest') order by name"
    ).rows
    assert [row[:7] for row in rows] == [
        ("double_it", 0, "BIGINT", 0, "Python", 2, len(DOUBLE_IT.encode())),
        ("earliest", 1, "INT", 64, "Python", 1, len(EARLIEST.encode())),
    ]
    assert rows[0][7] == before[0][0]  # OR REPLACE keeps the creation time
    assert output(session, "select double_it(v) from c1 where v = 5") == [(10,)]
    session.execute("drop function double_it; drop function if exists double_it")
    with pytest.raises(TDStreamError, match=r"double_it\(\) is not supported"):
        session.query("select double_it(v) from c1")


def test_a_c_udf_is_recorded_its_call_refused_and_a_tsma_refuses_udfs(session: Session, tmp_path: Path) -> None:
    _setup(session, tmp_path)
    result = session.execute("create function udf1 as '/opt/udf/libudf1.so' outputtype int")[-1]
    assert "recorded, not loaded" in result.message
    row = session.query("select func_language, code_len, func_body from information_schema.ins_functions"
                        " where name = 'udf1'").rows  # fmt: skip
    assert row == [("C", 0, None)]
    with pytest.raises(TDStreamError, match=r"udf1\(\) is a C UDF") as caught:
        session.query("select udf1(v) from c1")
    assert "line 1, column 8" in str(caught.value)
    for function in ("udf1(v)", "myspread(v)"):
        with pytest.raises(TDStreamError, match="Tsma func not supported"):
            session.execute(f"create tsma t on st function({function}) interval(1m)")
    assert session.query("show tsmas").rows == []


def test_a_stream_computes_with_python_udfs_in_its_runs(
    session: Session, harness: StreamHarness, tmp_path: Path
) -> None:
    _setup(session, tmp_path)
    session.execute(
        "create stream s interval(1m) sliding(1m) from st partition by tbname stream_options(fill_history)"
        " into out as"
        " select _twstart ws, %%tbname tb, myspread(v) sp, double_it(max(v)) dm, describe(last(name), last(ts)) d"
        " from %%trows"
    )
    session.execute(f"insert into c1 values ({T0 + 2 * MINUTE}, 7, 'c') c2 values ({T0 + 2 * MINUTE}, 1, 'z')")
    assert harness.run_until_idle().failures == []
    assert output(session, "select tb, ws, sp, dm, d from out order by tb, ws") == [
        ("c1", T0, 4.0, 10, "bytes:B@3000"),
        ("c1", T0 + MINUTE, None, None, None),
        ("c2", T0, 30.0, 80, "bytes:Y@2000"),
        ("c2", T0 + MINUTE, None, None, None),  # a sliding window without rows: an empty %%trows
    ]


def test_the_cli_creates_calls_and_lists_a_python_udf(tmp_path: Path, spark: object) -> None:
    from click.testing import CliRunner

    from dagster_tdstream.cli.main import main

    wh = str(tmp_path / "wh")
    statements = (
        "create database d; use d; create table t (ts timestamp, v int);"
        "insert into t values (1000, 4) (2000, null);"
        f"create function double_it as '{_file(tmp_path, 'double_it', DOUBLE_IT)}' outputtype int language 'Python';"
        "select double_it(v) from t; show functions"
    )
    result = CliRunner().invoke(main, ["sql", "--warehouse", wh, "--format", "csv", statements])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[lines.index("double_it(v)") + 1 :][:2] == ["8", "NULL"]
    assert any(line.startswith("double_it,") for line in lines)
    result = CliRunner().invoke(main, ["sql", "--warehouse", wh, "-d", "d", "select double_it(*) from t"])
    assert result.exit_code == 1
    assert "line 1, column 8: double_it() takes columns or expressions" in result.output
    assert "Traceback" not in result.output


def test_a_legacy_stream_calls_udfs_per_child_table_and_refuses_a_udaf_across_them(
    session: Session, harness: StreamHarness, tmp_path: Path
) -> None:
    _setup(session, tmp_path)
    with pytest.raises(TDStreamError, match=r"aggregate UDF myspread\(\) over the super table st needs PARTITION BY"):
        session.execute(
            "create stream across trigger at_once into a_out as select _wstart, myspread(v) from st interval(1m)"
        )
    assert session.query("show streams").rows == []
    session.execute(
        "create stream ls trigger at_once fill_history 1 into l_out as"
        " select _wstart ws, myspread(v) sp, double_it(max(v)) dm, tbname tb from st partition by tbname interval(1m)"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select tb, ws, sp, dm from l_out order by tb, ws") == [
        ("c1", T0, 4.0, 10),
        ("c1", T0 + MINUTE, None, None),
        ("c2", T0, 30.0, 80),
    ]
