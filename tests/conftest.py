"""Shared fixtures: one real Spark session for the whole run, a fresh warehouse per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from dagster_tdstream import Session, Warehouse, build_spark_session
from dagster_tdstream.compute.spark import LazySpark

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


class _NoSpark:
    def __getattr__(self, name: str) -> object:
        raise AssertionError("this test must not start Spark")
