#!/usr/bin/env bash
# The test command: install everything, lint, run the whole test suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# two workers, one test file each at a time: a file's tests share its fixtures (servers,
# Dagster instances); alone, the run leaves a core idle a third of the time
exec .venv/bin/python -m pytest -n 2 --dist loadfile "$@"
