"""The warehouse's writer process (``tdstream writer``): many client processes' small writes
group-committed by one long-lived process over a local socket, acknowledged only once
committed, and each row exactly once when the writer is killed before or after its commit.
No Spark: rows are read back with delta-rs."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from dagster_tdstream import CatalogError, Session, TDStreamError, Warehouse, WriteRejectedError
from dagster_tdstream.cli.main import main
from dagster_tdstream.families.writer_insert import writer_statements
from dagster_tdstream.faults import FAILPOINT_ENV
from dagster_tdstream.storage import warehouse as warehouse_module
from dagster_tdstream.storage.groupcommit import GROUP_KEY
from dagster_tdstream.storage.intents import StagedTable
from dagster_tdstream.storage.writer import WRITER_ENV, WriterServer, address, request

SCHEMA = (
    "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
    "create table c1 using st tags (1); create table c2 using st tags (2); create table c3 using st tags (3)"
)

_CLIENT = """
import sys
from dagster_tdstream import Session, Warehouse
session = Session(Warehouse(sys.argv[1]), database="d", timezone="UTC")
for statement in sys.argv[2:]:
    session.execute(statement)
"""


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def _status(warehouse: Warehouse) -> dict[str, object] | None:
    return request(address(Path(warehouse.uri), warehouse.catalog.url), {"op": "status"})


def _keys(warehouse: Warehouse) -> list[tuple[str, int, int]]:
    return sorted((r["tbname"], r["ts"], r["v"]) for r in warehouse.read_table(warehouse.table("d", "st")).to_pylist())


@pytest.fixture
def writer_of(warehouse: Warehouse) -> Iterator[Warehouse]:
    """The warehouse with its schema; its writer is stopped after the test, whatever happened."""
    Session(warehouse, timezone="UTC").execute(SCHEMA)
    yield warehouse
    if _status(warehouse) is not None:
        _cli("writer", "stop", "--warehouse", warehouse.uri)


def _start(warehouse: Warehouse, failpoint: str | None = None) -> str:
    env = {FAILPOINT_ENV: failpoint} if failpoint is not None else {}
    result = CliRunner(env=env).invoke(main, ["writer", "start", "--warehouse", warehouse.uri, "--idle-seconds", "120"])
    assert result.exit_code == 0, result.output
    return result.output


def _client(warehouse: Warehouse, *statements: str) -> subprocess.Popen[bytes]:
    env = {key: value for key, value in os.environ.items() if key != FAILPOINT_ENV}
    return subprocess.Popen([sys.executable, "-c", _CLIENT, warehouse.uri, *statements], env=env)


def test_writes_of_several_processes_are_committed_by_the_writer_in_groups(writer_of: Warehouse) -> None:
    warehouse = writer_of
    assert "ready in" in _start(warehouse)
    assert "0 writes (0 sent as SQL) in 0 commits" in _cli("writer", "status", "--warehouse", warehouse.uri)
    before = warehouse.delta.latest_version("d", "st")
    with warehouse.locks.hold([("d", "st")]):  # a long write holds the table: the requests queue up
        clients = [_client(warehouse, f"insert into c{n} values ({n}000, {n})") for n in (1, 2, 3)]
        deadline = time.monotonic() + 60
        while (_status(warehouse) or {}).get("queued") != 3:
            assert time.monotonic() < deadline, "the clients' writes never reached the writer"
            time.sleep(0.05)
        # nothing is acknowledged while nothing is committed
        assert [client.poll() for client in clients] == [None, None, None]
    assert [client.wait(timeout=120) for client in clients] == [0, 0, 0]
    assert _keys(warehouse) == [("c1", 1000, 1), ("c2", 2000, 2), ("c3", 3000, 3)]
    commits = warehouse.delta.latest_version("d", "st") - before
    assert commits < 3  # the first request alone at most; the ones that queued behind it together
    grouped = [value.split(",") for _, value in warehouse.delta.commit_values("d", "st", before + 1, GROUP_KEY)]
    assert sorted(len(ids) for ids in grouped) == ([3] if commits == 1 else [1, 2])
    status = _status(warehouse)
    assert status is not None and (status["requests"], status["commits"], status["queued"]) == (3, commits, 0)
    # this process's session finds the writer too; a rejected statement is handed back (not
    # taken, not counted), and its client raises the error
    session = Session(Warehouse(warehouse.uri), database="d", timezone="UTC")
    with pytest.raises(WriteRejectedError):
        session.execute("insert into c1 values (5000, 'five')")
    session.execute("insert into c1 values (1000, 10) (6000, 6)")  # an update and a new key
    assert _keys(warehouse) == [("c1", 1000, 10), ("c1", 6000, 6), ("c2", 2000, 2), ("c3", 3000, 3)]
    status = _status(warehouse)
    assert status is not None and status["requests"] == 4
    # stopped, the writer answers no more, and writes go on without it
    assert "stopped the writer" in _cli("writer", "stop", "--warehouse", warehouse.uri)
    assert "no writer is running" in _cli("writer", "status", "--warehouse", warehouse.uri)
    assert _client(warehouse, "insert into c2 values (7000, 7)").wait(timeout=120) == 0
    assert ("c2", 7000, 7) in _keys(warehouse)


def _rows_of(warehouse: Warehouse, table: str) -> list[tuple[int, int]]:
    return sorted(
        (r["ts"], r["v"]) for r in warehouse.read_table(warehouse.table("d", "st")).to_pylist() if r["tbname"] == table
    )


def test_an_insert_runs_in_the_writer_as_its_client_would_run_it(
    writer_of: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session sends one INSERT's text to the writer, which parses, checks and converts it
    with the session's database, time zone and NOW; what the writer does not take the client
    runs, and a rejected statement's error is the one the client raises without a writer."""
    warehouse = writer_of
    _start(warehouse)
    clock = 1_700_000_123_456_789_000  # ns: NOW is the client's
    sent = Session(Warehouse(warehouse.uri), database="d", timezone="Asia/Shanghai", clock=lambda: clock)
    monkeypatch.setenv(WRITER_ENV, "off")
    local = Session(Warehouse(warehouse.uri), database="d", timezone="Asia/Shanghai", clock=lambda: clock)
    monkeypatch.delenv(WRITER_ENV)
    statements = [
        "insert into {t} values (now, 1) ('2024-01-01 08:00:00', 2) (now + 1s, 3)",
        "INSERT INTO d.{t} (ts, v) VALUES (1000, 4) (1000, 5)",  # a key written twice: the last wins
        "  insert into {t} values (2000, 6);",
    ]
    for statement in statements:
        assert (
            sent.execute(statement.format(t="c1"))[-1].affected == local.execute(statement.format(t="c2"))[-1].affected
        )
    assert _rows_of(warehouse, "c1") == _rows_of(warehouse, "c2")
    assert (1_704_067_200_000, 2) in _rows_of(warehouse, "c1")  # 08:00 in Shanghai is midnight UTC
    assert (clock // 1_000_000, 1) in _rows_of(warehouse, "c1")
    status = _status(warehouse)
    assert status is not None and (status["statements"], status["requests"]) == (3, 3)
    # not taken, and run by the client: a script, and an INSERT creating its child table
    sent.execute("insert into c3 values (1000, 1); insert into c3 values (2000, 2)")
    sent.execute("insert into c4 using st tags (4) values (1000, 4)")
    assert _rows_of(warehouse, "c3") == [(1000, 1), (2000, 2)] and _rows_of(warehouse, "c4") == [(1000, 4)]
    status = _status(warehouse)
    assert status is not None and (status["statements"], status["requests"]) == (3, 6)  # their rows sent
    # rejected: the same error, at the same position, as without the writer
    for bad in [
        "insert into c1 values\n  (5000, 'five')",
        "insert into nowhere values (1, 1)",
        "insert into c1 values (1,",
    ]:
        with pytest.raises(TDStreamError) as by_writer:
            sent.execute(bad)
        with pytest.raises(TDStreamError) as by_client:
            local.execute(bad)
        assert type(by_writer.value) is type(by_client.value)
        assert (str(by_writer.value), by_writer.value.line, by_writer.value.column) == (
            str(by_client.value),
            by_client.value.line,
            by_client.value.column,
        )
        assert by_writer.value.line is not None
    status = _status(warehouse)
    assert status is not None and (status["statements"], status["requests"]) == (3, 6)


_PARITY_SCHEMA = "".join(
    f"create database {db} precision '{precision}';"
    f"create stable {db}.st (ts timestamp, v int, f float, b bool, s varchar(6), n nchar(3)) tags (g int);"
    + "".join(f"create table {db}.{side}{n} using {db}.st tags ({n});" for side in "wl" for n in (1, 2))
    + "".join(f"create table {db}.{side}n (ts timestamp, v int);" for side in "wl")
    for db, precision in (("a", "ms"), ("b", "us"))
)
_PARITY_STATEMENTS = [
    "insert into {x}1 values (now, 1, 1.5, true, 'ab', 'xy')",
    "insert into {x}1 values ('2024-02-29 12:00:00.123', 2, -0.5, false, 'a''b', 'é')",
    "insert into {x}1 (ts, v) values (now + 1s, 3) (now + 2s, NULL)",
    "insert into {x}1 values (1700000000000, 4, 1e3, 1, 'z', 'zz') (1700000000000, 5, 2, 0, 'y', 'yy')",
    "insert into {x}1 values (1700000000000, 6, 1, true, 's', 'n') {x}2 values (1700000000001, 7, 2, false, 't', 'm')",
    "insert into {x}n values (1700000000000, 8)",
    "INSERT INTO {x}2 VALUES ('2024-01-01T00:00:00+08:00', 9, 3, true, 'tz', 'tz')",
    "insert into {x}2 values (-1000, 10, 1, true, 'old', 'old')",  # a negative epoch: 2.x only
    "insert into {x}1 values (1, 11, 1, true, 'toolong', 'n')",  # rejected: too long for s
    "insert into {x}1 values (2, 12) ",  # rejected: too few values
    "insert into {x}n values (3, 13) {x}1 values (3, 13, 1, true, 's', 'n')",  # two physical tables
]


def _stored_side(warehouse: Warehouse, db: str, side: str) -> list[tuple[Any, ...]]:
    """The rows of one side's tables (w…: written through the writer, l…: by the client),
    named without the side's letter."""
    stored = [
        (r.pop("tbname")[1:], *r.values())
        for r in warehouse.read_table(warehouse.table(db, "st")).to_pylist()
        if r["tbname"].startswith(side)
    ]
    stored += [("n", *r.values()) for r in warehouse.read_table(warehouse.table(db, f"{side}n")).to_pylist()]
    return sorted(stored, key=repr)


@pytest.mark.parametrize(
    ("database", "timezone", "dialect"),
    [("a", "UTC", "3.x"), ("b", "America/New_York", "3.x"), ("a", "Asia/Shanghai", "2.x")],
)
def test_every_kind_of_insert_writes_through_the_writer_what_its_client_writes_alone(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch, database: str, timezone: str, dialect: str
) -> None:
    Session(warehouse, timezone="UTC").execute(_PARITY_SCHEMA)
    _start(warehouse)
    try:
        clock = 1_700_000_123_456_789_123
        sent = Session(
            Warehouse(warehouse.uri), database=database, timezone=timezone, dialect=dialect, clock=lambda: clock
        )
        monkeypatch.setenv(WRITER_ENV, "off")
        local = Session(
            Warehouse(warehouse.uri), database=database, timezone=timezone, dialect=dialect, clock=lambda: clock
        )
        monkeypatch.delenv(WRITER_ENV)
        for statement in _PARITY_STATEMENTS:
            outcomes = []
            for session, side in ((sent, "w"), (local, "l")):
                try:
                    outcomes.append(session.execute(statement.format(x=side))[-1].affected)
                except TDStreamError as exc:
                    outcomes.append((type(exc), str(exc).replace(f"{side}1", "x1"), exc.line, exc.column))
            assert outcomes[0] == outcomes[1], statement
            assert _stored_side(warehouse, database, "w") == _stored_side(warehouse, database, "l"), statement
        status = _status(warehouse)
        assert status is not None and status["statements"] >= 6  # the single-table ones the writer took
    finally:
        _cli("writer", "stop", "--warehouse", warehouse.uri)


@pytest.mark.parametrize("failpoint", ["writer-received", "after-data-commit", "after-acknowledged"])
def test_a_writer_killed_before_or_after_its_commit_leaves_each_write_once(
    writer_of: Warehouse, failpoint: str
) -> None:
    warehouse = writer_of
    _start(warehouse, failpoint)
    pid = _status(warehouse)
    assert pid is not None
    before = warehouse.delta.latest_version("d", "st")
    # the writer dies with the request in hand: before committing it (the client then writes
    # it itself), after (the client finds its id in the commit and does not write it again),
    # or after answering it, before the catalog recorded its keys; either way the client's
    # INSERT succeeds, and the rows are there once
    client = _client(warehouse, "insert into c1 values (1000, 1) (2000, 2)")
    assert client.wait(timeout=120) == 0
    deadline = time.monotonic() + 30  # answered first, the writer may still be reaching its end
    while _status(warehouse) is not None:
        assert time.monotonic() < deadline, "the writer did not die at its failpoint"
        time.sleep(0.05)
    assert _keys(warehouse) == [("c1", 1000, 1), ("c1", 2000, 2)]
    assert warehouse.delta.latest_version("d", "st") == before + 1  # one commit, by one of them
    # the catalog's marks are caught up from that commit: writing the rows again updates them
    Session(Warehouse(warehouse.uri), database="d", timezone="UTC").execute("insert into c1 values (2000, 20)")
    assert _keys(warehouse) == [("c1", 1000, 1), ("c1", 2000, 20)]


def test_a_client_is_answered_once_its_rows_are_durable_not_after_the_catalog_records_them(
    writer_of: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    warehouse = writer_of
    served = Warehouse(warehouse.uri)
    recording, release = threading.Event(), threading.Event()
    record = served._record

    def held_record(*args: Any) -> None:  # the catalog's record of the keys, held back
        recording.set()
        assert release.wait(timeout=60)
        record(*args)

    monkeypatch.setattr(served, "_record", held_record)
    server = WriterServer(served, Path(warehouse.uri), idle_seconds=60, statements=writer_statements(served))
    serving = threading.Thread(target=server.serve, daemon=True)
    serving.start()
    assert server.listening.wait(timeout=30)
    session = Session(Warehouse(warehouse.uri), database="d", timezone="UTC")
    client = threading.Thread(target=session.execute, args=("insert into c1 values (1000, 1)",), daemon=True)
    try:
        client.start()
        client.join(timeout=30)
        # the INSERT returned while the record waits: its rows are committed, and readers that
        # trust the catalog's marks read the data instead until the record is made
        assert not client.is_alive() and recording.is_set()
        assert _keys(warehouse) == [("c1", 1000, 1)]
        info = warehouse.table("d", "st")
        assert warehouse.trusted_watermarks(info) is None
    finally:
        release.set()
        server.stop()
        serving.join(timeout=30)
    assert not serving.is_alive() and server.commits == 1
    assert warehouse.trusted_watermarks(info) == (warehouse.delta.version("d", "st"), {"c1": 1000})


def test_a_second_writer_of_the_same_warehouse_is_refused(writer_of: Warehouse) -> None:
    warehouse = writer_of
    _start(warehouse)
    assert "writer (pid" in _start(warehouse)  # start again: reports the one running
    serve = CliRunner().invoke(main, ["writer", "serve", "--warehouse", warehouse.uri])
    assert serve.exit_code == 1
    assert "a writer already serves the warehouse" in serve.output


def test_the_writer_serves_only_processes_of_its_own_user(
    writer_of: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    warehouse = writer_of
    server = WriterServer(Warehouse(warehouse.uri), Path(warehouse.uri), idle_seconds=60)
    serving = threading.Thread(target=server.serve, daemon=True)
    with monkeypatch.context() as patched:
        patched.setattr(os, "getuid", lambda: os.geteuid() + 4242)  # the writer runs as another user
        serving.start()
        deadline = time.monotonic() + 30
        while not server.listening.is_set():
            assert time.monotonic() < deadline, "the writer never listened"
            time.sleep(0.01)
        assert _status(warehouse) is None  # refused: this process's user is not the writer's
        # a refused client writes itself: the statement succeeds, the writer received nothing
        Session(Warehouse(warehouse.uri), database="d", timezone="UTC").execute("insert into c1 values (1000, 1)")
        assert _keys(warehouse) == [("c1", 1000, 1)]
        assert server.requests == 0
    server.stop()
    serving.join(timeout=30)
    assert not serving.is_alive()


def test_a_statement_the_writer_could_not_commit_fails_at_its_position(writer_of: Warehouse) -> None:
    warehouse = writer_of
    prepared = writer_statements(Warehouse(warehouse.uri))

    def elsewhere(state: dict[str, Any]) -> tuple[StagedTable, pa.Table, int] | None:
        taken = prepared(state)  # the statement's rows, aimed at a table that is not there
        assert taken is not None
        return dataclasses.replace(taken[0], storage="gone"), taken[1], taken[2]

    server = WriterServer(Warehouse(warehouse.uri), Path(warehouse.uri), idle_seconds=60, statements=elsewhere)
    serving = threading.Thread(target=server.serve, daemon=True)
    serving.start()
    deadline = time.monotonic() + 30
    while not server.listening.is_set():
        assert time.monotonic() < deadline, "the writer never listened"
        time.sleep(0.01)
    session = Session(Warehouse(warehouse.uri), database="d", timezone="UTC")
    with pytest.raises(CatalogError) as failed:
        session.execute("\n  insert into c1 values (1000, 1)")
    assert failed.value.message.startswith("the write was not committed: ")
    assert (failed.value.line, failed.value.column) == (2, 3)
    assert _keys(warehouse) == []
    server.stop()
    serving.join(timeout=30)
    assert not serving.is_alive()


def test_a_malformed_request_is_refused_and_the_writer_goes_on(writer_of: Warehouse) -> None:
    warehouse = writer_of
    _start(warehouse)
    name = address(Path(warehouse.uri), warehouse.catalog.url)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:  # a write without its rows
        sock.settimeout(30)
        sock.connect(name)
        header = json.dumps({"op": "write", "id": "x"}).encode()
        sock.sendall(struct.pack("!II", len(header), 0) + header)
        size, _ = struct.unpack("!II", sock.recv(8))
        assert json.loads(sock.recv(size))["error"].startswith("malformed request: KeyError")
        assert sock.recv(1) == b""  # and the connection is closed
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:  # not even JSON
        sock.settimeout(30)
        sock.connect(name)
        sock.sendall(struct.pack("!II", 3, 0) + b"{{{")
        assert sock.recv(1) == b""
    assert request(name, {"op": "restart"}) == {"error": "the writer does not take 'restart' requests"}
    Session(Warehouse(warehouse.uri), database="d", timezone="UTC").execute("insert into c1 values (1000, 1)")
    status = _status(warehouse)
    assert status is not None and (status["requests"], status["commits"]) == (1, 1)
    assert _keys(warehouse) == [("c1", 1000, 1)]


def test_a_large_write_is_committed_by_its_own_process(writer_of: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    warehouse = writer_of
    _start(warehouse)
    session = Session(Warehouse(warehouse.uri), database="d", timezone="UTC")
    frame = pa.table({"tbname": ["c1"] * 1000, "ts": list(range(1000, 1_001_000, 1000)), "v": list(range(1000))})
    monkeypatch.setattr(warehouse_module, "WRITER_MAX_BYTES", frame.num_rows * 8)  # below the frame's size
    session.write("st", frame)
    session.execute("insert into c2 values (1000, 1)")  # small: through the writer
    status = _status(warehouse)
    assert status is not None and status["requests"] == 1
    assert len(_keys(warehouse)) == 1001


def test_the_writer_sees_a_database_and_table_another_process_recreated(writer_of: Warehouse) -> None:
    """The writer keeps the definitions it read while no other connection commits to the
    catalog; a statement after another process's DDL is checked against the new ones."""
    warehouse = writer_of
    _start(warehouse)
    sent = Session(Warehouse(warehouse.uri), database="d", timezone="UTC")
    sent.execute("create table n (ts timestamp, v int)")
    sent.execute("insert into n values (1000, 1)")  # prepared by the writer, which reads n and d
    recreate = "drop database d; create database d precision 'us'; use d; create table n (ts timestamp, v int, w int)"
    assert _client(warehouse, recreate).wait(timeout=120) == 0
    sent.execute("insert into n values ('1970-01-01 00:00:01', 2, 3)")  # microseconds now, and three columns
    with pytest.raises(WriteRejectedError) as short:
        sent.execute("insert into n values (2000, 4)")
    assert "expected 3 value(s) for table n, got 2" in str(short.value)
    status = _status(warehouse)
    assert status is not None and status["statements"] == 2  # the writer ran both inserts that were written
    assert warehouse.read_table(warehouse.table("d", "n")).to_pylist() == [{"ts": 1_000_000, "v": 2, "w": 3}]


def test_a_client_gone_before_its_answer_has_its_statement_committed_once(writer_of: Warehouse) -> None:
    """The committer sends each answer itself; a connection whose client hung up is closed only
    once its queued request is answered, and the next clients get their own answers."""
    warehouse = writer_of
    _start(warehouse)
    name = address(Path(warehouse.uri), warehouse.catalog.url)
    state = {"sql": "insert into c1 values (1000, 1)", "database": "d", "timezone": "UTC", "dialect": "3.x", "now": 0}
    # the commit waits for the table: the client hangs up before its answer
    with warehouse.locks.hold([("d", "st")]), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(name)
        header = json.dumps({**state, "op": "statement", "id": "gone"}).encode()
        sock.sendall(struct.pack("!II", len(header), 0) + header)
        deadline = time.monotonic() + 60
        while (_status(warehouse) or {}).get("queued") != 1:
            assert time.monotonic() < deadline, "the statement never reached the writer"
            time.sleep(0.05)
    deadline = time.monotonic() + 60
    while (_status(warehouse) or {}).get("queued") != 0:
        assert time.monotonic() < deadline, "the statement was never committed"
        time.sleep(0.05)
    assert _keys(warehouse) == [("c1", 1000, 1)]
    sessions = [Session(Warehouse(warehouse.uri), database="d", timezone="UTC") for _ in range(3)]
    results = [s.execute(f"insert into c2 values ({n}000, {n}) ({n}001, {n})")[-1] for n, s in enumerate(sessions)]
    assert [r.affected for r in results] == [2, 2, 2]
    status = _status(warehouse)
    assert status is not None and (status["statements"], status["connections"]) == (4, 4)
    assert _keys(warehouse) == [("c1", 1000, 1)] + [("c2", k, n) for n in range(3) for k in (n * 1000, n * 1000 + 1)]
