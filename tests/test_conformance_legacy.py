"""TDengine's legacy (3.0-3.3.6) stream scenarios and invalid legacy statements
(tests/conformance/legacy_stream), through the conformance runner: each scenario's statements
in order on a fresh warehouse, the streams driven to idle after each phase, its checks after."""

from __future__ import annotations

from dagster_tdstream.testing.conformance import run_statement_file as run_statements

from .test_conformance import CORPORA, corpus_tests

test_legacy_scenario, test_legacy_statement_file = corpus_tests("legacy_stream")


def test_legacy_statements_tdengine_accepts_are_accepted() -> None:
    """Every CREATE STREAM of TDengine's legacy tests parses and passes the rules."""
    result = run_statements(CORPORA / "legacy_stream" / "legacy_create_stream_statements.txt", expect_valid=True)
    assert result.passed, result.reason
