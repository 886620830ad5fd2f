"""Tables that stay fast: compaction as writes accumulate, vacuum that keeps what a stream still
reads, KEEP through TRIM DATABASE — with a stream running across them, its output checked
against the batch query."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from dagster_tdstream import Session, StreamHarness, TDStreamError, Warehouse
from dagster_tdstream.storage.append import recent_rows
from dagster_tdstream.storage.maintenance import COMPACT_EVERY, RETENTION_ENV, table_files

from .conftest import output

T = 1_700_000_000_000
_STREAM = (
    "create stream s interval(10s) sliding(10s) from {source} into out "
    "as select _twstart ws, count(*) n, sum(v) total from %%trows"
)


def _closed_windows_match_the_batch_query(session: Session, harness: StreamHarness, table: str, late: int) -> None:
    """A row at ``late`` closes the open window (and empty ones); then every window the
    stream wrote with rows equals the batch query's."""
    session.execute(f"insert into {table} values ({late}, 0)")
    assert harness.run_until_idle().failures == []
    written = [row for row in output(session, "select ws, n, total from out") if row[1] > 0]
    assert written == output(session, f"select _wstart, count(*), sum(v) from {table} where ts < {late} interval(10s)")


def _operations(warehouse: Warehouse, db: str, table: str) -> list[str]:
    return [entry["operation"] for entry in reversed(DeltaTable(warehouse.delta.uri(db, table)).history())]


def test_small_writes_are_compacted_and_vacuumed_while_a_stream_reads_them(
    session: Session, harness: StreamHarness, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RETENTION_ENV, "0")  # files may go as soon as no reader needs them
    session.execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table c1 using st tags (1);" + _STREAM.format(source="st partition by tbname")
    )
    version = warehouse.delta.latest_version("d", "st")
    # the stream reads these before the next compaction (the version before a multiple of
    # COMPACT_EVERY), then 5 more writes pass one
    first = (version // COMPACT_EVERY + 2) * COMPACT_EVERY - 1 - version
    for i in range(first):
        session.execute(f"insert into c1 values ({T + i * 1000}, {i})")
    assert harness.run_until_idle().failures == []
    for i in range(first, first + 5):  # passes the COMPACT_EVERY-th version
        session.execute(f"insert into c1 values ({T + i * 1000}, {i})")
    assert "OPTIMIZE" in _operations(warehouse, "d", "st")
    table = Path(warehouse.delta.uri("d", "st"))
    assert len(DeltaTable(str(table)).file_uris()) <= 6  # the small files became one, 4 came after
    # the stream had not read past the compaction: the files it replaced are all still there
    assert table_files(table) >= first + 5

    assert harness.run_until_idle().failures == []
    rows = first + 5
    closed = T + (rows - 1) // 10 * 10_000  # the last row's window is still open
    expected = output(session, f"select _wstart, count(*), sum(v) from c1 where ts < {closed} interval(10s)")
    assert output(session, "select ws, n, total from out") == expected
    # the stream has read past the compaction: COMPACT DATABASE's vacuum may now delete them
    message = session.execute("compact database d")[0].message
    assert message.startswith("Compact OK") and "unreferenced file(s) deleted" in message
    assert table_files(table) < 30
    assert output(session, "select count(*), sum(v) from st") == [(rows, sum(range(rows)))]
    _closed_windows_match_the_batch_query(session, harness, "c1", T + rows * 1000 + 60_000)


def test_keep_trims_expired_files_without_touching_stream_results(
    session: Session, harness: StreamHarness, warehouse: Warehouse
) -> None:
    now = time.time_ns() // 1_000_000 // 10_000 * 10_000
    old = now - 3 * 86_400_000  # three days back: past KEEP 1d
    session.execute(
        "create database r; create database k keep 1d; use k;"
        "create stable st (ts timestamp, v int) tags (g int); create table c1 using st tags (1);"
        # the results live in a database without KEEP: what trimming k must not change
        "create stream s interval(10s) sliding(10s) from st partition by tbname into r.out "
        "as select _twstart ws, count(*) n from %%trows"
    )
    session.execute(f"insert into c1 values ({old}, 1) ({old + 1000}, 2) ({old + 11_000}, 3)")
    session.execute(f"insert into c1 values ({now}, 4) ({now + 1000}, 5)")
    assert harness.run_until_idle().failures == []
    before = output(session, "select ws, n from r.out")
    assert before[:2] == [(old, 2), (old + 10_000, 1)]

    assert session.execute("trim database k")[0].message == "Trim OK: 1 expired data file(s) removed from 1 table(s)"
    assert output(session, "select ts, v from c1") == [(now, 4), (now + 1000, 5)]
    session.execute(f"insert into c1 values ({now + 2000}, 6)")
    assert harness.run_until_idle().failures == []
    # the expired rows left the table, not the stream's results: no window was recalculated
    assert output(session, "select ws, n from r.out")[: len(before)] == before
    history = DeltaTable(warehouse.delta.uri("k", "st")).history()
    assert [str(entry["operationParameters"]) for entry in history if "KEEP" in str(entry)] != []


def test_the_change_feed_read_from_appended_files_equals_delta_rs_change_feed(
    sql_session: Session, warehouse: Warehouse
) -> None:
    """Appends, a compaction, a KEEP trim and a MERGE: every range of versions reads the same
    rows whether the appended files are read directly or delta-rs replays the change feed."""
    sql_session.execute(
        "create database d keep 1d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "create table c1 using st tags (1); create table c2 using st tags (2)"
    )
    now = time.time_ns() // 1_000_000
    sql_session.execute(f"insert into c1 values ({now - 3 * 86_400_000}, 0)")  # expired at once
    for i in range(6):
        sql_session.execute(f"insert into c{1 + i % 2} values ({now + i}, {i}) ({now + 100 + i}, {i})")
    sql_session.execute("compact database d")
    flushed = sql_session.execute("flush database d")[0].message
    assert flushed == "Flush OK: every acknowledged write is already committed to its Delta table"
    with pytest.raises(TDStreamError, match="database nope does not exist"):
        sql_session.execute("flush database nope")
    sql_session.execute(f"insert into c1 values ({now + 1000}, 7)")
    sql_session.execute(f"insert into c1 values ({now}, 70)")  # an update: a MERGE
    latest = warehouse.delta.latest_version("d", "st")
    direct = 0
    for start in range(1, latest + 1):
        for end in range(start, latest + 1):
            expected = pa.table(warehouse.delta.current("d", "st").load_cdf(starting_version=start, ending_version=end))
            got = warehouse.delta._appended_rows("d", "st", start, end)
            if got is None:
                continue
            direct += 1
            order = lambda row: (row["_commit_version"], row["tbname"], row["ts"])  # noqa: E731
            assert sorted(got.to_pylist(), key=order) == sorted(expected.to_pylist(), key=order)
    assert direct > latest  # most ranges avoid the MERGE and are read directly


def test_log_entries_no_reader_needs_are_expired_and_the_table_reads_and_streams_on(
    session: Session, harness: StreamHarness, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RETENTION_ENV, "0")  # entries may go as soon as no reader needs them
    session.execute("create database d; use d; create table t (ts timestamp, v int);" + _STREAM.format(source="t"))
    rows = 130  # one commit each: past the log's checkpoint at version 100
    reader = Warehouse(warehouse.uri)  # another process's snapshot handle, taken early and kept
    for i in range(rows):
        session.execute(f"insert into t values ({T + i * 1000}, {i})")
        if i == 10:
            early = reader.delta.current("d", "t").version()
    log = Path(warehouse.delta.uri("d", "t")) / "_delta_log"

    def versions() -> list[int]:
        return sorted(int(entry.name[:20]) for entry in log.glob("*.json"))

    assert "0 expired log entries removed" in session.execute("compact database d")[0].message
    assert versions()[:3] == [0, 1, 2]  # the stream has read none of them yet
    assert harness.run_until_idle().failures == []
    message = session.execute("compact database d")[0].message
    checkpoint = json.loads((log / "_last_checkpoint").read_text())["version"]
    assert checkpoint >= 100 and f"{checkpoint - 1} expired log entries removed" in message
    # version 0 names the table's incarnation; the snapshot is the checkpoint and what follows
    assert versions()[:2] == [0, checkpoint]
    assert [int(entry.name[:20]) for entry in log.glob("*.checkpoint*.parquet")] == [checkpoint]
    assert output(session, "select count(*), sum(v) from t") == [(rows, sum(range(rows)))]
    _closed_windows_match_the_batch_query(session, harness, "t", T + rows * 1000 + 60_000)
    newest = warehouse.delta.latest_version("d", "t")
    assert DeltaTable(str(log.parent)).version() == newest
    # the entry after the early handle's version is gone: it still comes up to date
    assert not (log / f"{early + 1:020}.json").exists() and reader.delta.current("d", "t").version() == newest
    reader.close()


_COMPACT_IN_ANOTHER_PROCESS = """
import sys
from dagster_tdstream import Session, Warehouse
warehouse = Warehouse(sys.argv[1])
print(Session(warehouse, timezone="UTC").execute("compact database d")[0].message)
warehouse.close()
"""


def test_a_compaction_from_the_rows_written_here_equals_one_read_from_the_files(
    sql_session: Session, warehouse: Warehouse, tmp_path: Path
) -> None:
    """The process that wrote a table's small files compacts them from the rows it kept; a
    process that did not reads them. The compacted file must be the same either way: same
    schema, same rows, in key order — with nulls and text, and with some of the small files
    written by another process, so that the first compaction takes rows from both places."""
    sql_session.execute(
        "create database d; use d; create stable m (ts timestamp, v int, f float, s nchar(8), b bool) tags (g int);"
        "create table c1 using m tags (1); create table c2 using m tags (2)"
    )
    for i in range(12):
        value = "null" if i % 5 == 0 else str(i)
        sql_session.execute(
            f"insert into c{1 + i % 2} values ({T + 1000 * (12 - i)}, {value}, {i / 4}, 'é{i}', {i % 2 == 0})"
        )
    inserts = ";".join(
        f"insert into d.c{1 + i % 2} values ({T + 1000 * i + 7}, {i}, null, 'z{i}', false)" for i in range(12, 20)
    )
    written = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster_tdstream.cli.main",
            "sql",
            "--warehouse",
            warehouse.uri,
            "--timezone",
            "UTC",
            inserts,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert written.returncode == 0, written.stderr
    uri = Path(warehouse.delta.uri("d", "m"))
    small = [uri / path for path in warehouse.delta.snapshot("d", "m").files]
    assert sorted(recent_rows(file) is not None for file in small) == [False] * 8 + [True] * 12
    elsewhere = tmp_path / "copy"
    shutil.copytree(warehouse.uri, elsewhere)

    message = sql_session.execute("compact database d")[0].message
    done = subprocess.run(
        [sys.executable, "-c", _COMPACT_IN_ANOTHER_PROCESS, str(elsewhere)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == message and "20 file(s) compacted" in message, (message, done.stdout)

    def compacted(table: Path) -> pa.Table:
        (file,) = [f for f in DeltaTable(str(table)).file_uris() if "part-" in f]
        return pq.read_table(file.removeprefix("file://"))

    here = compacted(uri)
    read = compacted(elsewhere / uri.relative_to(warehouse.uri))
    assert here.schema.equals(read.schema, check_metadata=True)
    assert here.to_pylist() == read.to_pylist()
    assert here.num_rows == 20 and here["ts"].to_pylist() == sorted(here["ts"].to_pylist())
    assert here["f"].null_count == 8 and here["v"].null_count == 3
