"""The fuzzer at a size that fits the test command: no mutated statement crashes, hangs or
writes anything when rejected (``bench/fuzz.py`` runs 10,000)."""

from __future__ import annotations

from dagster_tdstream.testing.conformance import SYNTAX_TEST_TABLES
from dagster_tdstream.testing.fuzz import run_fuzz

from .conftest import CONFORMANCE


def test_mutated_statements_get_errors_and_change_nothing_when_rejected(spark: object) -> None:
    report = run_fuzz(
        400,
        seed=20261125,
        spark=spark,
        corpus_files=(CONFORMANCE / "create_stream_statements.txt", CONFORMANCE / "invalid_statements.txt"),
        setup_files=(SYNTAX_TEST_TABLES,),
        hang_seconds=120,
    )
    assert report.defects == []
    assert report.statements == 400
    # the run exercised both sides: statements written and statements refused
    assert report.accepted >= 10 and report.rejected >= 100
