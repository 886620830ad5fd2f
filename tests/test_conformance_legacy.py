"""TDengine's legacy (3.0-3.3.6) stream scenarios and invalid legacy statements
(tests/conformance/legacy_stream), through the conformance runner: each scenario's statements
in order on a fresh warehouse, the streams driven to idle after each phase, its checks after."""

from __future__ import annotations

from pathlib import Path

import pytest

from dagster_tdstream.testing.conformance import run_statement_file as run_statements

from .test_conformance import CORPORA, run_scenario, run_statement_file, scenarios, statement_files


@pytest.mark.parametrize("path", scenarios("legacy_stream"))
def test_legacy_scenario(path: Path, spark: object) -> None:
    run_scenario(path, spark)


@pytest.mark.parametrize("path", statement_files("legacy_stream"))
def test_legacy_statement_file(path: Path, spark: object) -> None:
    run_statement_file(path, spark)


def test_legacy_statements_tdengine_accepts_are_accepted() -> None:
    """Every CREATE STREAM of TDengine's legacy tests parses and passes the rules."""
    result = run_statements(CORPORA / "legacy_stream" / "legacy_create_stream_statements.txt", expect_valid=True)
    assert result.passed, result.reason
