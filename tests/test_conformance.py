"""TDengine's own stream scenarios (tests/conformance/tdengine, shipped with the project): each
case runs through the conformance runner in a fresh warehouse on the test run's Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dagster_tdstream.testing.conformance import run_case

from .conftest import CONFORMANCE

CASES = sorted((CONFORMANCE / "cases").glob("*.json"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_scenario(path: Path, spark: object) -> None:
    result = run_case(json.loads(path.read_text()), spark=spark)
    assert result.passed, result.reason


def test_corpus_is_shipped() -> None:
    assert len(CASES) >= 27
