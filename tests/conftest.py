"""Shared fixtures: one warm Spark Connect server for the whole run (started on first use, as
the product starts it, and stopped at the end), a fresh warehouse per test."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from websockets.sync.server import ServerConnection, serve

from dagster_tdstream import Session, StreamHarness, Warehouse, build_spark_session
from dagster_tdstream.compute.spark import SPARK_MASTER_ENV, LazySpark
from dagster_tdstream.compute.spark_server import HOME_ENV, stop_server

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.pop(SPARK_MASTER_ENV, None)  # the tests' own warm server, whatever the shell points at

CONFORMANCE = Path(__file__).resolve().parent / "conformance" / "tdengine"


def _shared_home(base: Path) -> Path:
    """The server's folder for the whole run: with pytest-xdist each worker's base folder is
    ``<run's base>/popen-gwN``, so the workers share the run's one server."""
    return base.parent / "spark-connect" if os.environ.get("PYTEST_XDIST_WORKER") else base / "spark-connect"


@pytest.fixture(scope="session", autouse=True)
def spark_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every Spark client of the run — test sessions, harness runs, CLI commands, Dagster
    subprocesses (they inherit the environment), every xdist worker — adopts the one server
    kept here (started by the first that needs it; the server start is locked)."""
    home = _shared_home(tmp_path_factory.getbasetemp())
    home.mkdir(parents=True, exist_ok=True)
    os.environ[HOME_ENV] = str(home)
    yield home
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # a worker leaves it to the others
        stop_server(home)
    os.environ.pop(HOME_ENV, None)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With xdist, the run's controller stops the server once every worker is done."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(session.config.option, "numprocesses", None):
        return
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is not None:
        stop_server(factory.getbasetemp() / "spark-connect")  # the workers' base folders are inside


@pytest.fixture(scope="session")
def spark(spark_home: Path) -> Iterator[object]:
    session = build_spark_session()
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path: Path) -> Iterator[Warehouse]:
    wh = Warehouse(str(tmp_path / "warehouse"))
    yield wh
    wh.close()


@pytest.fixture
def session(warehouse: Warehouse, spark: object) -> Session:
    """A SQL session in UTC on a fresh warehouse, sharing the test run's Spark session."""
    return Session(warehouse, timezone="UTC", spark=LazySpark(session=spark))


@pytest.fixture
def sql_session(warehouse: Warehouse) -> Session:
    """A session for statements that never reach Spark (DDL, writes, catalog checks)."""
    return Session(warehouse, timezone="UTC", spark=LazySpark(session=_NoSpark()))


@pytest.fixture
def harness(warehouse: Warehouse, spark: object) -> Iterator[StreamHarness]:
    """Drives the warehouse's streams in-process through Dagster (UTC literals)."""
    driver = StreamHarness(warehouse, timezone="UTC")
    yield driver
    driver.close()


def assert_rejected(session: Session, statement: str, message: str) -> None:
    """The statement fails with ``message`` at a position, and no stream exists after it."""
    from dagster_tdstream.errors import TDStreamError
    from dagster_tdstream.storage.registry import load_streams

    with pytest.raises(TDStreamError, match=re.escape(message)) as caught:
        session.execute(statement)
    assert "line 1" in str(caught.value)
    assert load_streams(session.warehouse) == []


def output(session: Session, sql: str) -> list[tuple[Any, ...]]:
    """A query's rows with timestamps as integers in the table's precision."""
    table = session.query(sql).to_arrow()
    columns = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in table.columns]
    return list(zip(*(c.to_pylist() for c in columns), strict=True))


class _NoSpark:
    def __getattr__(self, name: str) -> object:
        raise AssertionError("this test must not start Spark")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM a server the test started, SIGKILL if it has not gone within 20 s."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


class Receiver:
    """A WebSocket server on 127.0.0.1 that keeps every message; it can be stopped and
    started again on the same port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"ws://127.0.0.1:{self.port}/notify"
        self.messages: list[dict[str, Any]] = []
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def _handle(self, connection: ServerConnection) -> None:
        for message in connection:
            self.messages.append(json.loads(message))

    def start(self) -> None:
        self._server = serve(self._handle, "127.0.0.1", self.port)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        assert self._thread is not None
        self._thread.join(timeout=10)

    def settle(self) -> None:
        """Wait (at most 5 s) until the handler threads have taken every message: delivery
        ends with the close handshake, which the server's reader answers before its handler
        thread has necessarily appended the messages it read."""
        deadline, seen = time.monotonic() + 5, -1
        while seen != len(self.messages) and time.monotonic() < deadline:
            seen = len(self.messages)
            time.sleep(0.15)

    def events(self, stream: str | None = None) -> list[dict[str, Any]]:
        self.settle()
        return [
            event
            for message in self.messages
            for entry in message["streams"]
            if stream is None or entry["streamName"] == stream
            for event in entry["events"]
        ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    server.start()
    yield server
    server.stop()
