"""Shared fixtures: one real Spark session for the whole run, a fresh warehouse per test."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from dagster_tdstream import Session, StreamHarness, Warehouse, build_spark_session
from dagster_tdstream.compute.spark import LazySpark

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

CONFORMANCE = Path(__file__).resolve().parents[2] / "shared" / "conformance" / "tdengine"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = build_spark_session(conf={"spark.driver.memory": "2g", "spark.ui.enabled": "false"})
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
def harness(warehouse: Warehouse, spark: object) -> StreamHarness:
    """Drives the warehouse's streams in-process through Dagster (UTC literals)."""
    return StreamHarness(warehouse, timezone="UTC")


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
