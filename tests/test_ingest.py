"""The write path at speed: bulk VALUES lists read as columns, and the per-value rule they
must agree with. No Spark: rows are read back with delta-rs."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_tdstream import Session, TDStreamError, Warehouse, WriteRejectedError
from dagster_tdstream.families.insert import _literal_value, _vectorised
from dagster_tdstream.faults import FAILPOINT_ENV
from dagster_tdstream.sql import ast
from dagster_tdstream.sql.constants import ConstantContext
from dagster_tdstream.sql.timeunits import resolve_timezone
from dagster_tdstream.sql.tokens import Kind, tokenize
from dagster_tdstream.sql.values import block_columns
from dagster_tdstream.storage import append, keyspans

SCHEMA = (
    "create database d; use d;"
    "create stable st (ts timestamp, v int, f float, b bool, s varchar(6), n nchar(3)) tags (g int);"
    "create table c1 using st tags (1);"
)


def rows(warehouse: Warehouse, table: str = "st") -> list[tuple[object, ...]]:
    data = warehouse.read_table(warehouse.table("d", table))
    return sorted(tuple(r[c] for c in ("tbname", "ts", "v", "f", "b", "s", "n")) for r in data.to_pylist())


def test_a_bulk_values_list_is_one_token_and_stops_where_a_value_needs_the_grammar() -> None:
    sql = "insert into c1 values (1, 2) (3, 'a''b'),\n(now, 4) (5, 6) c2 values (7, 8) (9, NULL);"
    tokens = tokenize(sql)
    blocks = [t for t in tokens if t.kind is Kind.VALUES_BLOCK]
    assert [b.text for b in blocks] == ["(1, 2) (3, 'a''b'),", "(7, 8) (9, NULL)"]
    assert block_columns(blocks[0].text, 2) == [("1", "3"), ("2", "'a''b'")]
    # the tuple after the block is tokenised as usual, at its own line and column
    now = next(t for t in tokens if t.text == "now")
    assert (now.line, now.column) == (2, 2)
    # a single tuple stays with the grammar
    assert not [t for t in tokenize("insert into c1 values (1, 2)") if t.kind is Kind.VALUES_BLOCK]


_NUMBERS = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.sampled_from(["1.5", ".5", "-3.25e2", "1.", "1E+3", "0.0e-1", "-0", "007"]),
)
_WORDS = st.sampled_from(["null", "NULL", "Null", "true", "TRUE", "false", "False"])
_STRINGS = st.one_of(
    st.text("ab ,()'é", max_size=5).map(lambda t: "'" + t.replace("'", "''") + "'"),
    st.text('ab ,()"', max_size=5).map(lambda t: '"' + t.replace('"', '""') + '"'),
)


@settings(max_examples=150, deadline=None)
@given(
    width=st.integers(1, 4),
    data=st.data(),
    quoted=st.booleans(),
    inner=st.sampled_from([",", ", ", " ,", " , ", ",\n  "]),
    between=st.sampled_from([" ", "", ",", " , ", "\n", ",\n  "]),
    after=st.sampled_from(["", ";", " c2 values (1, 2)", " (now, 1)", "\n(1 + 1)"]),
)
def test_a_values_block_reads_as_the_literals_it_was_written_with(
    width: int, data: st.DataObject, quoted: bool, inner: str, between: str, after: str
) -> None:
    # the scan of unquoted tuples (one match that never backtracks) and the columns read by
    # splitting on punctuation must give what the tuples say, beside quoted strings too
    literal = st.one_of(_NUMBERS, _WORDS, _STRINGS) if quoted else st.one_of(_NUMBERS, _WORDS)
    tuples = data.draw(st.lists(st.lists(literal, min_size=width, max_size=width), min_size=2, max_size=6))
    block = between.join("(" + inner.join(row) + ")" for row in tuples)
    sql = f"insert into c1 values {block}{after}"
    tokens = tokenize(sql)
    found = [t for t in tokens if t.kind is Kind.VALUES_BLOCK]
    assert len(found) == 1
    expected = [[row[c] for row in tuples] for c in range(width)]
    assert [list(column) for column in block_columns(found[0].text, width)] == expected
    # the tokens after the block are the statement's own, whatever the block's spelling
    rest = tokens[tokens.index(found[0]) + 1 :]
    assert [t.text for t in rest] == [t.text for t in tokenize(after)]


def test_bulk_and_single_row_inserts_write_the_same_rows(sql_session: Session, warehouse: Warehouse) -> None:
    sql_session.execute(SCHEMA)
    values = [
        "(1000, 1, 1.5, true, 'ab', 'xyz')",
        "(2000, -2147483648, -3.25e2, FALSE, 'it''s', NULL)",
        '(3000, NULL, 1, 1, "q""", \'é\')',  # a number in BOOL, a double-quoted string
        "(4000, '7', '2.5', 'true', 12, 'n')",  # quoted numbers, a number in VARCHAR
        "('1970-01-01 00:00:05', 5, null, null, 'x', 'y')",  # a time string
        "(6000, 6, 6, false, '', '')",
    ]
    sql_session.execute(f"insert into c1 values {' '.join(values)}")
    sql_session.execute("create table c2 using st tags (2)")
    for value in values:
        sql_session.execute(f"insert into c2 values {value}")
    written = rows(warehouse)
    assert [r[1:] for r in written if r[0] == "c1"] == [r[1:] for r in written if r[0] == "c2"]
    assert [r[1:] for r in written if r[0] == "c1"] == [
        (1000, 1, 1.5, True, "ab", "xyz"),
        (2000, -2147483648, -325.0, False, "it's", None),
        (3000, None, 1.0, True, 'q"', "é"),
        (4000, 7, 2.5, True, "12", "n"),
        (5000, 5, None, None, "x", "y"),
        (6000, 6, 6.0, False, "", ""),
    ]


@pytest.mark.parametrize(
    "targets",
    [
        # one group read together (c1, c2, c3: same columns, same column list), c2 twice
        ["c1 values (1, 1, 1.5, true, 'a', 'b') (2, 2, 2.5, false, 'c', 'd')",
         "c2 values (1, 10, 0.5, true, 'x', 'y') (3, 30, 3.5, null, '', 'z')",
         "c3 values (5, 50, 5, TRUE, \"q\"\"\", 'é') (6, null, 6, False, 'it''s', 'n')",
         "c2 values (7, 70, 7, true, 'u', 'v') (8, 80, 8, true, 'w', 'x')"],
        # two column lists: (ts, f) read together; (ts, v) table by table, for the quoted
        # number in c2's INT column (not a plain parse: the per-value rule reads it)
        ["c1 (ts, v) values (1, 1) (2, 2)", "c2 (ts, v) values (1, '7') (2, 8)",
         "c3 (ts, f) values (1, 1.5) (2, 2.5)", "c1 (ts, f) values (3, 3) (4, 4)"],
    ],
)  # fmt: skip
def test_blocks_of_several_tables_write_what_each_table_written_alone_would(
    sql_session: Session, warehouse: Warehouse, targets: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagster_tdstream.families import insert

    tables = "create table c2 using st tags (2); create table c3 using st tags (3);"
    sql_session.execute(
        SCHEMA + tables + "create database e; use e;" + SCHEMA.split(";", 1)[1].replace("use d;", "") + tables
    )
    alone: list[str] = []
    read_alone = insert._block_arrays
    monkeypatch.setattr(insert, "_block_arrays", lambda block, *a: alone.append(block.text) or read_alone(block, *a))
    sql_session.execute("insert into " + " ".join(f"d.{target}" for target in targets))
    assert len(alone) == (0 if "'7'" not in targets[1] else 2)  # the blocks not read with others'
    for target in targets:
        sql_session.execute(f"insert into e.{target}")
    assert rows(warehouse) == sorted(
        tuple(r[c] for c in ("tbname", "ts", "v", "f", "b", "s", "n"))
        for r in warehouse.read_table(warehouse.table("e", "st")).to_pylist()
    )
    assert len(rows(warehouse)) == 8


def test_a_bad_value_in_one_of_several_tables_blocks_is_named_and_writes_nothing(
    sql_session: Session, warehouse: Warehouse
) -> None:
    sql_session.execute(SCHEMA + "create table c2 using st tags (2);")
    with pytest.raises(WriteRejectedError, match="out of range for column v") as caught:
        sql_session.execute("insert into c1 (ts, v) values (1, 1) (2, 2)\n c2 (ts, v) values (1, 3) (2, 2147483648)")
    assert (caught.value.line, caught.value.column) == (2, 31)
    assert rows(warehouse) == []


@pytest.mark.parametrize(
    ("values", "message", "where"),
    [
        ("(1, 1, 1, true, 'a', 'b')\n  (2, 2147483648, 1, true, 'a', 'b')", "out of range for column v", (2, 7)),
        ("(1, 1, 1, true, 'a', 'b') (NULL, 1, 1, true, 'a', 'b')", "cannot be NULL", (1, 50)),
        ("(1, 1, 1, true, 'a', 'b') (2, 1, 1, true, 'abcdefg', 'b')", "longer than VARCHAR(6)", (1, 65)),
        ("(1, 1, 1, true, 'a', 'b') (2, 1, 1e39, true, 'a', 'b')", "out of range for column f", (1, 56)),
        ("(1, 1, 1, true, 'a', 'b') (2, 1, 1, 'maybe', 'a', 'b')", "BOOL", (1, 59)),
        ("(1, 1, 1, true, 'a') (2, 1, 1, true, 'a')", "expected 6 value(s) for table c1, got 5", (1, 24)),
    ],
)
def test_a_bad_value_in_a_bulk_list_is_named_at_its_position_and_writes_nothing(
    sql_session: Session, warehouse: Warehouse, values: str, message: str, where: tuple[int, int]
) -> None:
    sql_session.execute(SCHEMA)
    sql_session.execute("insert into c1 values (0, 0, 0, true, 'ok', 'ok')")
    with pytest.raises(WriteRejectedError, match=re.escape(message)) as caught:
        sql_session.execute(f"insert into c1 values {values}")
    assert (caught.value.line, caught.value.column) == where
    assert len(rows(warehouse)) == 1


@pytest.mark.parametrize(
    "values",
    ["(-1648791211000, 1, 1, true, 'a', 'b')", "(-1648791211001, 1, 1, true, 'a', 'b') (1648791211001, 2, 1, true, 'a', 'b')",
     "(-5000 + 1s, 1, 1, true, 'a', 'b')"],
)  # fmt: skip
def test_a_negative_epoch_is_refused_by_the_3x_dialect_and_read_by_the_2x_one(
    sql_session: Session, warehouse: Warehouse, values: str
) -> None:
    three = sql_session
    three.execute(SCHEMA)
    with pytest.raises(WriteRejectedError, match="invalid timestamp format for ts: a negative epoch") as caught:
        three.execute(f"insert into c1 values {values}")
    assert (caught.value.line, caught.value.column) == (1, 24)
    assert rows(warehouse) == []  # the valid row of the statement is not written either
    # a time before 1970 written as a string is a time like any other
    three.execute("insert into c1 values ('1969-12-31 23:59:59', 1, 1, true, 'a', 'b')")
    assert [r[1] for r in rows(warehouse)] == [-1000]  # epoch milliseconds
    two = Session(warehouse, database="d", timezone="UTC", dialect="2.x")  # writes need no Spark
    two.execute(f"insert into c1 values {values}")
    assert min(r[1] for r in rows(warehouse)) < -1000


# ---------------------------------------------------------------- the vectorised reading

_CTX = ConstantContext("ms", resolve_timezone("UTC"), 0)
_COLUMNS = [
    ast.ColumnDef("c", ast.DataType(name, length))
    for name, length in [
        ("TIMESTAMP", None), ("INT", None), ("TINYINT UNSIGNED", None), ("BIGINT", None), ("FLOAT", None),
        ("DOUBLE", None), ("BOOL", None), ("VARCHAR", 4), ("NCHAR", 2), ("BINARY", 3),
    ]
]  # fmt: skip
_NULLS = st.sampled_from(["NULL", "null"])
_INTS = st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.sampled_from(["0", "-0", "255", "256", "-1", "2147483647", "2147483648", "-9223372036854775808"]),
)
_FLOATS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr).filter(lambda t: "inf" not in t),
    st.sampled_from(["1e309", "3.4e38", "3.5e38", "1.", ".5", "-0.0", "1E-5"]),
)
_STRINGS = st.one_of(
    st.sampled_from(["''", "'a''b'", '"x""y"', "'é€'", "'12'", "'true'", "'abcd'", "'abcde'"]),
    st.text("ab'é ", max_size=5).map(lambda t: "'" + t.replace("'", "''") + "'"),
)
_WORDS = st.sampled_from(["TRUE", "false", "True", "1", "0"])
# mostly one kind per column (as real INSERTs write), sometimes anything
_LISTS = st.one_of(
    *(st.lists(st.one_of(kind, _NULLS), min_size=1, max_size=6) for kind in (_INTS, _FLOATS, _STRINGS, _WORDS)),
    st.lists(st.one_of(_INTS, _FLOATS, _STRINGS, _WORDS, _NULLS), min_size=1, max_size=6),
)


@settings(max_examples=300, deadline=None)
@given(column=st.sampled_from(_COLUMNS), literals=_LISTS)
def test_the_vectorised_reading_agrees_with_the_per_value_rule(column: ast.ColumnDef, literals: list[str]) -> None:
    vector = _vectorised(pa.array(literals, pa.string()), column)
    if vector is None:
        return  # the per-value rule reads this column (and gives any error)
    # taken by the vectorised reading: the per-value rule accepts every literal, with the same value
    try:
        expected = [_literal_value(text, column, _CTX, lambda row: ast.NO_POS, i) for i, text in enumerate(literals)]
    except TDStreamError as exc:  # pragma: no cover - the failure this test exists to catch
        pytest.fail(f"vectorised reading accepted {literals} for {column.type}, the per-value rule: {exc}")
    got = vector.to_pylist()
    if column.type.name == "FLOAT":
        expected = pa.array(expected, pa.float32()).to_pylist()
    assert got == expected


# ---------------------------------------------------------------- exactly one row per key

_WRITER = """
import sys
import time
from pathlib import Path
from dagster_tdstream import Session, Warehouse
session = Session(Warehouse(sys.argv[1]), database="d", timezone="UTC")
for statement in sys.argv[2:]:
    session.execute(statement)
"""


def _write_in_process(warehouse: Warehouse, *statements: str, failpoint: str | None = None) -> int:
    """Run INSERTs in a process of their own (optionally SIGKILLed at a failpoint); its exit code."""
    env = {key: value for key, value in os.environ.items() if key != FAILPOINT_ENV}
    if failpoint is not None:
        env[FAILPOINT_ENV] = failpoint
    done = subprocess.run(
        [sys.executable, "-c", _WRITER, warehouse.uri, *statements], env=env, capture_output=True, timeout=120
    )
    return done.returncode


def _keys(warehouse: Warehouse) -> list[tuple[object, object]]:
    return sorted((r["tbname"], r["ts"]) for r in warehouse.read_table(warehouse.table("d", "st")).to_pylist())


def test_a_writer_killed_between_its_commit_and_its_catalog_update_leaves_no_duplicate_key(
    sql_session: Session, warehouse: Warehouse
) -> None:
    # issue 18's reproduction: the process dies right after the Delta commit of c2's rows
    sql_session.execute(
        SCHEMA + "create table c2 using st tags (2); insert into c1 values (1000, 1, 1, true, 'a', 'a')"
    )
    sql_session.execute("insert into c2 values (1000, 1, 1, true, 'a', 'a')")
    killed = _write_in_process(
        warehouse,
        "insert into c2 values (2000, 2, 2, true, 'b', 'b') (3000, 3, 3, true, 'c', 'c')",
        failpoint="after-data-commit",
    )
    assert killed == -signal.SIGKILL
    sql_session.execute("insert into c1 values (5000, 5, 5, true, 'e', 'e')")
    # the client retries the batch it never saw acknowledged
    sql_session.execute("insert into c2 values (2000, 2, 2, true, 'b', 'b') (3000, 3, 3, true, 'c', 'c')")
    assert _keys(warehouse) == [("c1", 1000), ("c1", 5000), ("c2", 1000), ("c2", 2000), ("c2", 3000)]


def test_concurrent_writers_of_one_child_table_keep_one_row_per_timestamp(
    sql_session: Session, warehouse: Warehouse
) -> None:
    sql_session.execute(SCHEMA)
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, warehouse.uri]
            + [f"insert into c1 values ({ts}, {w}, 0, true, 'w', 'w')" for ts in range(1000, 31000, 1000)]
        )
        for w in range(4)
    ]
    assert [writer.wait(timeout=180) for writer in writers] == [0, 0, 0, 0]
    written = warehouse.read_table(warehouse.table("d", "c1")).to_pylist()
    assert sorted(r["ts"] for r in written) == list(range(1000, 31000, 1000))  # each timestamp once
    assert {r["v"] for r in written} <= {0, 1, 2, 3}


def _operations(warehouse: Warehouse, since: int) -> list[str]:
    history = warehouse.delta.open("d", "st").history()
    return [h["operation"] for h in sorted(history, key=lambda h: h["version"]) if h["version"] > since]


def test_rows_arriving_into_a_gap_between_stored_keys_are_appended_and_updates_still_merge(
    sql_session: Session, warehouse: Warehouse
) -> None:
    sql_session.execute(SCHEMA + "insert into c1 values (1000, 1, 1, true, 'a', 'a') (9000, 9, 9, true, 'i', 'i')")
    sql_session.execute("insert into c1 values (500000, 5, 5, true, 'e', 'e')")
    before = warehouse.delta.latest_version("d", "st")
    # older than the newest key, but between stored keys: a second writer of c1, a replayed buffer
    sql_session.execute("insert into c1 values (5000, 50, 5, true, 'x', 'x')")
    sql_session.execute("insert into c1 values (200000, 20, 2, true, 'y', 'y') (300000, 30, 3, true, 'z', 'z')")
    assert _operations(warehouse, before) == ["WRITE", "WRITE"]
    # a key that is stored (inside the spans now) is an update: merged, one row per key
    sql_session.execute("insert into c1 values (5000, 51, 5, true, 'x', 'x')")
    sql_session.execute("insert into c1 values (250000, 25, 2, true, 'w', 'w') (300000, 31, 3, true, 'z', 'z')")
    assert _operations(warehouse, before + 2) == ["MERGE", "MERGE"]
    written = {r["ts"]: r["v"] for r in warehouse.read_table(warehouse.table("d", "c1")).to_pylist()}
    assert written == {1000: 1, 5000: 51, 9000: 9, 200000: 20, 250000: 25, 300000: 31, 500000: 5}
    assert len(warehouse.read_table(warehouse.table("d", "c1"))) == len(written)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(-50, 400), min_size=1, max_size=40), min_size=1, max_size=30))
def test_key_spans_cover_every_key_written_and_stay_few(batches: list[list[int]]) -> None:
    spans: keyspans.Spans = ()
    written: set[int] = set()
    for batch in batches:
        keys = np.array(batch, dtype=np.int64)
        if spans:  # the check a write makes: does any of its keys lie inside a span
            inside = any(low <= k <= high for k in batch for low, high in spans)
            assert keyspans.covers_any(spans, keys) == inside
        spans = keyspans.union(spans, keyspans.of_keys(keys))
        written |= set(batch)
        assert len(spans) <= keyspans.MAX_SPANS
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))  # sorted and disjoint
        # a key outside every span is never a stored one
        assert all(any(low <= k <= high for low, high in spans) for k in written)
    assert keyspans.decode(keyspans.encode(spans), 0) == spans


def test_rows_written_by_another_tool_are_accounted_for_before_the_next_write(
    sql_session: Session, warehouse: Warehouse
) -> None:
    sql_session.execute(
        SCHEMA + "create table c2 using st tags (2); insert into c1 values (1000, 1, 1, true, 'a', 'a')"
    )
    # a plain delta-rs append, with no marks in its commit: the catalog cannot tell its keys
    outside = pa.table(
        {"tbname": ["c2", "c2"], "ts": [4000, 9000], "v": pa.array([4, 9], pa.int32())},
    )
    full = warehouse.delta.read("d", "st").schema
    outside = pa.table(
        {
            name: outside[name] if name in outside.column_names else pa.nulls(2, full.field(name).type)
            for name in full.names
        },
        schema=full,
    )
    write_deltalake(warehouse.delta.uri("d", "st"), outside, mode="append")
    sql_session.execute("insert into c1 values (2000, 2, 2, true, 'b', 'b')")
    sql_session.execute("insert into c2 values (4000, 40, 4, true, 'd', 'd')")  # an update, not a second row
    assert _keys(warehouse) == [("c1", 1000), ("c1", 2000), ("c2", 4000), ("c2", 9000)]
    assert [r["v"] for r in warehouse.read_table(warehouse.table("d", "c2")).to_pylist() if r["ts"] == 4000] == [40]


# ---------------------------------------------------------------- bulk writes from Python


def test_a_dataframe_into_a_super_table_creates_child_tables_and_keeps_the_last_write(
    sql_session: Session, warehouse: Warehouse
) -> None:
    import pandas as pd

    sql_session.execute(SCHEMA)
    frame = pd.DataFrame(
        {
            "tbname": ["c1", "d7", "d7", "D8"],
            "ts": pd.to_datetime([1000, 1000, 2000, 1000], unit="ms"),
            "v": [1, 2, 3, 4],
            "s": ["a", "b", None, "d"],
            "g": [1, 70, 70, 80],
        }
    )
    assert sql_session.write("st", frame).affected == 4
    # d7's (1000) written again from an Arrow table, with epochs: the later write wins
    again = pa.table({"tbname": ["d7", "d7"], "ts": [1000, 1000], "v": pa.array([20, 21], pa.int32())})
    sql_session.write("d.st", again)
    assert rows(warehouse) == [
        ("c1", 1000, 1, None, None, "a", None),
        ("d7", 1000, 21, None, None, None, None),
        ("d7", 2000, 3, None, None, None, None),
        ("d8", 1000, 4, None, None, "d", None),
    ]
    tags = {r["tbname"]: r["g"] for r in warehouse.read_table(warehouse.table("d", "st")).to_pylist()}
    assert tags == {"c1": 1, "d7": 70, "d8": 80}  # c1 existed: its tags are kept


@settings(max_examples=25, deadline=None)
@given(
    frames=st.lists(
        st.lists(
            st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 6), st.integers(0, 99)), min_size=1, max_size=12
        ),
        min_size=1,
        max_size=3,
    ),
    in_order=st.booleans(),
)
def test_frames_written_one_after_another_keep_the_last_row_per_table_and_time(
    frames: list[list[tuple[str, int, int]]], in_order: bool
) -> None:
    # frames whose tables' times increase skip the grouping by key, the others are grouped
    # (and later frames merged into what is stored): either way one row per key, the last
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        warehouse = Warehouse(tmp)
        session = Session(warehouse, timezone="UTC")
        session.execute(SCHEMA)
        expected: dict[tuple[str, int], int] = {}
        for frame in frames:
            if in_order:  # each table's times in order, a time written twice side by side
                frame = sorted(frame, key=lambda row: row[:2])
            names, times, values = zip(*frame, strict=True)
            session.write("st", pa.table({"tbname": names, "ts": times, "v": pa.array(values, pa.int32())}))
            expected.update({(name, ts): v for name, ts, v in frame})
        assert [(r[0], r[1], r[2]) for r in rows(warehouse) if r[0] != "c1"] == sorted(
            (*k, v) for k, v in expected.items()
        )


def test_a_compaction_between_writes_keeps_the_key_spans_this_process_knows(
    sql_session: Session, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dagster_tdstream.storage.maintenance import COMPACT_EVERY

    sql_session.execute(SCHEMA + "".join(f"create table t{i} using st tags ({i});" for i in range(5)))
    read: list[list[str]] = []
    spans = warehouse.catalog.write_spans
    monkeypatch.setattr(
        warehouse.catalog, "write_spans", lambda db, st, names: read.append(names) or spans(db, st, names)
    )
    version = warehouse.delta.latest_version("d", "st")
    statements = COMPACT_EVERY - version % COMPACT_EVERY + 5  # round-robin past a compaction
    for i in range(statements):
        sql_session.execute(f"insert into t{i % 5} (ts, v) values ({1000 * (i + 1)}, {i})")
    assert "OPTIMIZE" in [e["operation"] for e in DeltaTable(warehouse.delta.uri("d", "st")).history()]
    # each name's spans read from the catalog once, not again after the compaction's commit
    assert sorted(name for names in read for name in names) == [f"t{i}" for i in range(5)]
    sql_session.execute("insert into t0 (ts, v) values (1000, 99)")  # a stored key: updated, not appended
    stored = [r for r in rows(warehouse) if r[0] == "t0"]
    assert (stored[0][1], stored[0][2]) == (1000, 99) and len(stored) == len({r[1] for r in stored})


def test_a_writes_marks_skip_the_disk_wait_and_every_other_catalog_commit_keeps_it(
    sql_session: Session, warehouse: Warehouse
) -> None:
    sql_session.execute(SCHEMA)
    levels: list[int] = []
    record = warehouse.catalog.record_writes

    def spied(*args: object, **kwargs: object) -> None:
        record(*args, **kwargs)  # type: ignore[arg-type]
        with warehouse.catalog.engine.connect() as conn:  # the pool's connection, back from it
            levels.append(conn.exec_driver_sql("PRAGMA synchronous").scalar())

    warehouse.catalog.record_writes = spied  # type: ignore[method-assign]
    with warehouse.catalog._relaxed_transaction() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL inside
    sql_session.execute("insert into c1 (ts, v) values (1000, 1)")
    assert levels == [2]  # FULL again for the DDL and everything else the connection commits
    assert rows(warehouse)[0][:3] == ("c1", 1000, 1)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 5), st.integers(0, 9)), max_size=40))
def test_a_small_batchs_keys_grouped_in_python_match_arrows_grouping(rows_written: list[tuple[str, int, int]]) -> None:
    from dagster_tdstream.storage import warehouse as storage

    data = pa.table(
        {
            "tbname": pa.array([r[0] for r in rows_written], pa.string()),
            "ts": pa.array([r[1] for r in rows_written], pa.int64()),
            "v": pa.array([r[2] for r in rows_written], pa.int32()),
        }
    )
    small = (storage._last_per_key(data, ["tbname", "ts"]), storage._key_spans(data, "ts", True, "st"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(storage, "_SMALL_ROWS", 0)  # Arrow's grouping for any size
        grouped = (storage._last_per_key(data, ["tbname", "ts"]), storage._key_spans(data, "ts", True, "st"))
    assert small[0].to_pylist() == grouped[0].to_pylist()
    assert small[1] == grouped[1]


def test_rows_loaded_table_by_table_are_stored_in_row_groups_of_their_time(
    sql_session: Session, warehouse: Warehouse
) -> None:
    import pyarrow.dataset as pads

    sql_session.execute(SCHEMA)
    tables, per_table = 4, 40_000  # 160,000 rows: three row groups
    keys = np.arange(per_table, dtype=np.int64) * 1000
    frame = pa.table(
        {
            "tbname": np.repeat([f"t{i}" for i in range(tables)], per_table),
            "ts": np.tile(keys, tables),
            "v": pa.array(np.arange(tables * per_table, dtype=np.int32)),
        }
    )
    assert sql_session.write("d.st", frame).affected == tables * per_table
    (uri,) = warehouse.delta.file_uris("d", "st")
    (fragment,) = pads.dataset(uri, format="parquet").get_fragments()
    groups = fragment.split_by_row_group()
    bounds = [(g.row_groups[0].statistics["ts"]["min"], g.row_groups[0].statistics["ts"]["max"]) for g in groups]
    assert len(bounds) == 3 and bounds[0][0] == 0 and bounds[-1][1] == keys[-1]
    assert all(high <= low for (_, high), (low, _) in itertools.pairwise(bounds))  # each a slice of the time
    # the newest minute of every table lies in the last group alone: a read of it decodes no other
    newest = pads.field("ts") >= int(keys[-60])
    assert len(fragment.split_by_row_group(filter=newest)) == 1
    stored = warehouse.read_table(warehouse.table("d", "st")).sort_by([("tbname", "ascending"), ("ts", "ascending")])
    assert stored.column("v").to_pylist() == frame.column("v").to_pylist()  # every row, as written


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        ({"tbname": ["c1"], "ts": [1], "v": [2**31]}, "out of range for column v"),
        ({"tbname": ["c1"], "ts": [1], "f": [float("nan")]}, "out of range for column f"),
        ({"tbname": ["c1"], "ts": [1], "f": [1e39]}, "out of range for column f"),
        ({"tbname": ["c1"], "ts": [1], "s": ["abcdefg"]}, "longer than VARCHAR(6)"),
        ({"tbname": ["c1"], "ts": [1], "v": [1.5]}, "cannot hold the frame's values"),
        ({"tbname": ["c1"], "ts": [None], "v": [1]}, "primary key ts cannot be NULL"),
        ({"tbname": [None], "ts": [1], "v": [1]}, "tbname cannot be NULL"),
        ({"tbname": ["c1"], "ts": [1], "w": [1]}, "st has no column w"),
        ({"ts": [1], "v": [1]}, "needs a tbname column"),
    ],
)
def test_a_rejected_frame_writes_nothing(
    sql_session: Session, warehouse: Warehouse, frame: dict[str, list[object]], message: str
) -> None:
    sql_session.execute(SCHEMA + "insert into c1 values (0, 0, 0, true, 'ok', 'ok')")
    data = pa.table(frame)
    if "tbname" in frame:  # after a good row of a new child table: that is not written either
        data = pa.concat_tables(
            [pa.table({"tbname": ["new"], "ts": [5], "v": [5]}), data], promote_options="permissive"
        )
    with pytest.raises(WriteRejectedError, match=re.escape(message)):
        sql_session.write("st", data)
    assert len(rows(warehouse)) == 1
    assert warehouse.find_table("d", "new") is None


def test_a_statement_into_two_tables_killed_between_their_commits_is_rolled_forward_whole(
    session: Session, warehouse: Warehouse
) -> None:
    session.execute(SCHEMA + "create table nt (ts timestamp, v int)")
    statement = "insert into c1 values (1000, 1, 1, true, 'a', 'a') (2000, 2, 2, true, 'b', 'b') nt values (1000, 7)"
    killed = _write_in_process(warehouse, statement, failpoint="between-table-commits")
    assert killed == -signal.SIGKILL
    # the process died with c1's rows committed and nt's not: whoever opens the warehouse next
    # writes the rest of the statement, once
    assert warehouse.intents.unfinished() != []
    # a query in a process that had the warehouse open before the crash reads the whole
    # statement, never c1's rows without nt's
    assert session.query("select count(*) from nt").rows == [(1,)]
    assert warehouse.intents.unfinished() == []
    _write_in_process(warehouse, statement.replace("1000", "5000"), failpoint="between-table-commits")
    assert warehouse.intents.unfinished() != []
    reopened = Warehouse(warehouse.uri)
    assert reopened.intents.unfinished() == []
    assert _keys(reopened) == [("c1", 1000), ("c1", 2000), ("c1", 5000)]
    assert sorted((r["ts"], r["v"]) for r in reopened.read_table(reopened.table("d", "nt")).to_pylist()) == [
        (1000, 7),
        (5000, 7),
    ]
    assert reopened.recover_writes() == 0
    # the client retries the statement it never saw acknowledged: no row twice
    Session(reopened, database="d").execute(statement)
    assert _keys(reopened) == [("c1", 1000), ("c1", 2000), ("c1", 5000)]
    assert len(reopened.read_table(reopened.table("d", "nt"))) == 2
    reopened.close()


def _spooled(warehouse: Warehouse, count: int) -> None:
    deadline = time.monotonic() + 60
    while len(warehouse.spool.waiting("d", "st")) < count:
        assert time.monotonic() < deadline, "the writers never staged their rows"
        time.sleep(0.05)


def _start_writer(warehouse: Warehouse, statement: str, failpoint: str | None = None) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if key != FAILPOINT_ENV}
    if failpoint is not None:
        env[FAILPOINT_ENV] = failpoint
    return subprocess.Popen([sys.executable, "-c", _WRITER, warehouse.uri, statement], env=env)


def test_writers_waiting_for_a_table_are_committed_together_in_one_version(
    sql_session: Session, warehouse: Warehouse
) -> None:
    sql_session.execute(SCHEMA + "create table c2 using st tags (2); create table c3 using st tags (3)")
    before = warehouse.delta.latest_version("d", "st")
    with warehouse.locks.hold([("d", "st")]):  # a long write holds the table meanwhile
        writers = [
            _start_writer(warehouse, f"insert into c{n} values ({n}000, {n}, 1, true, 'a', 'a')") for n in (1, 2, 3)
        ]
        _spooled(warehouse, 3)
    assert [writer.wait(timeout=120) for writer in writers] == [0, 0, 0]
    assert warehouse.delta.latest_version("d", "st") == before + 1  # one commit, one WAL offset
    assert _keys(warehouse) == [("c1", 1000), ("c2", 2000), ("c3", 3000)]
    assert warehouse.spool.waiting("d", "st") == []


def test_a_group_leader_killed_after_its_commit_leaves_each_write_once(
    sql_session: Session, warehouse: Warehouse
) -> None:
    sql_session.execute(SCHEMA + "create table c2 using st tags (2)")
    before = warehouse.delta.latest_version("d", "st")
    with warehouse.locks.hold([("d", "st")]):
        writers = [
            _start_writer(warehouse, f"insert into c{n} values ({n}000, {n}, 1, true, 'a', 'a')", "after-data-commit")
            for n in (1, 2)
        ]
        _spooled(warehouse, 2)
    # whichever leads commits both and dies before settling; the other finds its rows in that
    # commit (its id is in the commit info) and returns without writing them again
    assert sorted(writer.wait(timeout=120) for writer in writers) == [-signal.SIGKILL, 0]
    assert warehouse.delta.latest_version("d", "st") == before + 1
    assert _keys(warehouse) == [("c1", 1000), ("c2", 2000)]
    sql_session.execute("insert into c2 values (2000, 20, 1, true, 'b', 'b')")  # marks caught up: a merge
    assert _keys(warehouse) == [("c1", 1000), ("c2", 2000)]


# ---------------------------------------------------------------- schemaless (line protocol)

LINES = """
# TDengine's schemaless example, and the types line protocol spells
meters,location=California.LosAngeles,groupid=2 current=11.8,voltage=221i32,phase=0.28f32,on=t,note="a \\"b\\"" 1648432611249000000
meters,location=California.LosAngeles,groupid=2 current=13.4,voltage=223i32,phase=0.29f32,on=F 1648432611250000000
meters,location=California.SanFrancisco,groupid=3 current=10.8,voltage=223i32,phase=0.29f32,on=true,label=L"né" 1648432611249000000
"""


def test_line_protocol_creates_super_and_child_tables_as_tdengine_does(
    sql_session: Session, warehouse: Warehouse
) -> None:
    import hashlib

    sql_session.execute("create database d; use d")
    assert sql_session.write_lines(LINES).affected == 3
    stable = warehouse.table("d", "meters")
    assert [(c.name, str(c.type)) for c in stable.columns] == [
        ("_ts", "TIMESTAMP"), ("current", "DOUBLE"), ("voltage", "INT"), ("phase", "FLOAT"), ("on", "BOOL"),
        ("note", "VARCHAR(16)"), ("label", "NCHAR(16)"),
    ]  # fmt: skip
    assert [(t.name, str(t.type)) for t in stable.tags] == [("location", "NCHAR(23)"), ("groupid", "NCHAR(16)")]
    child = "t_" + hashlib.md5(b"meters,groupid=2,location=California.LosAngeles").hexdigest()
    got = sorted(
        (r["tbname"], r["_ts"], r["voltage"], r["on"], r["note"], r["groupid"])
        for r in warehouse.read_table(stable).to_pylist()
    )
    la = [(child, 1648432611249, 221, True, 'a "b"', "2"), (child, 1648432611250, 223, False, None, "2")]
    assert [row for row in got if row[0] == child] == la
    assert [row[1:] for row in got if row[0] != child] == [(1648432611249, 223, True, None, "3")]
    assert {r["label"] for r in warehouse.read_table(stable).to_pylist()} == {None, "né"}
    # the same lines again: the same keys, updated in place; a new tag joins the super table
    sql_session.write_lines(LINES + "meters,groupid=2,location=x,unit=A current=1 1648432611251000000")
    assert [t.name for t in warehouse.table("d", "meters").tags] == ["location", "groupid", "unit"]
    assert len(warehouse.read_table(warehouse.table("d", "meters"))) == 4


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("m,t=1 v=1i8 1\nm,t=1 v=1.5 2", "line 3: field v is DOUBLE here but TINYINT on an earlier line"),
        ("m,t=1 v=1i8 1\nm,t=1 v=300i8 2", "out of range for column v"),
        ("m,t=1 v=xyz 1", "line 2: field value 'xyz' is not a number"),
        ('m,t=1 v="open 1', "line 2: a string field is not closed"),
        ("m,t=1 v=1 12ab", "line 2: timestamp '12ab' is not an integer"),
        ("m,t v=1 1", "line 2: tag 't' is not key=value"),
    ],
)
def test_bad_lines_are_refused_at_their_line_and_write_nothing(
    sql_session: Session, warehouse: Warehouse, lines: str, message: str
) -> None:
    sql_session.execute("create database d; use d")
    sql_session.write_lines("m,t=1 v=1i8 0\nother,t=1 w=1 0")
    with pytest.raises(WriteRejectedError, match=re.escape(message)):
        sql_session.write_lines("other,t=1 w=2 5\n" + lines)
    assert len(warehouse.read_table(warehouse.table("d", "m"))) == 1
    assert len(warehouse.read_table(warehouse.table("d", "other"))) == 1  # the good line neither


def test_tdstream_ingest_reads_line_protocol_from_a_file(warehouse: Warehouse, tmp_path: Path) -> None:
    Session(warehouse).execute("create database d")
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(f"cpu,host=h{i % 3} usage={i}.5 {1_700_000_000 + i}" for i in range(25)))
    tdstream = str(Path(sys.executable).parent / "tdstream")
    done = subprocess.run(
        [tdstream, "ingest", str(source), "-d", "d", "--precision", "s", "--batch", "10", "--warehouse", warehouse.uri,
         "--child-table-tag", "host"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Insert OK, 25 row(s) affected"
    rows = warehouse.read_table(warehouse.table("d", "cpu")).to_pylist()
    assert sorted({r["tbname"] for r in rows}) == ["h0", "h1", "h2"]
    assert sorted(r["_ts"] for r in rows)[:2] == [1_700_000_000_000, 1_700_000_001_000]


_STAT_VALUES = {
    "i": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "b": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "f": (pa.float32(), st.floats(width=32)),
    "d": (pa.float64(), st.floats()),
    "s": (pa.string(), st.text(max_size=4)),
    "t": (pa.bool_(), st.booleans()),
}


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(1, 64))
def test_a_few_rows_get_the_same_file_statistics_as_arrow_computes(data: st.DataObject, rows: int) -> None:
    # a group commit's few rows take their statistics in Python; a reader prunes files by them,
    # so they must be Arrow's exactly: unicode order, float32 values, NaN and infinities, nulls
    columns = {
        name: pa.array(data.draw(st.lists(st.none() | values, min_size=rows, max_size=rows)), kind)
        for name, (kind, values) in _STAT_VALUES.items()
    }
    table = pa.table(columns)
    assert append._few_rows_stats(table) == append._arrow_stats(table)


@pytest.mark.parametrize("altered_by", ["another warehouse", "the same session"])
def test_an_insert_after_a_table_was_recreated_is_checked_against_its_new_columns(
    warehouse: Warehouse, altered_by: str
) -> None:
    """A process keeps the table and database definitions it read until another connection
    commits to the catalog: another process's DDL (here another ``Warehouse``), or its own,
    which runs on SQLAlchemy's connections."""
    session = Session(warehouse, timezone="UTC")
    session.execute("create database d; use d; create table n (ts timestamp, v int); insert into n values (1000, 1)")
    other = Warehouse(warehouse.uri) if altered_by == "another warehouse" else warehouse
    try:
        Session(other, database="d", timezone="UTC").execute(
            "drop table n; create table n (ts timestamp, v int, w varchar(4))"
        )
    finally:
        if other is not warehouse:
            other.close()
    session.execute("insert into n values (2000, 2, 'new')")
    with pytest.raises(WriteRejectedError, match="expected 3 value"):
        session.execute("insert into n values (3000, 3)")
    assert warehouse.read_table(warehouse.table("d", "n")).to_pylist() == [{"ts": 2000, "v": 2, "w": "new"}]
