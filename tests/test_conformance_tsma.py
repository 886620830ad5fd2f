"""TDengine's TSMA scenarios and invalid TSMA statements (tests/conformance/tsma), through the
conformance runner: a query checked against its skip_tsma() form reads the TSMAs with
querySmaOptimize on and must give the raw query's rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from .test_conformance import run_scenario, run_statement_file, scenarios, statement_files


@pytest.mark.parametrize("path", scenarios("tsma"))
def test_tsma_scenario(path: Path, spark: object) -> None:
    run_scenario(path, spark)


@pytest.mark.parametrize("path", statement_files("tsma"))
def test_tsma_statement_file(path: Path, spark: object) -> None:
    run_statement_file(path, spark)
