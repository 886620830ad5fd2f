"""TDengine's TSMA scenarios and invalid TSMA statements (tests/conformance/tsma), through the
conformance runner: a query checked against its skip_tsma() form reads the TSMAs with
querySmaOptimize on and must give the raw query's rows."""

from __future__ import annotations

from .test_conformance import corpus_tests

test_tsma_scenario, test_tsma_statement_file = corpus_tests("tsma")
