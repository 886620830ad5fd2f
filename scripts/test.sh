#!/usr/bin/env bash
# The test command: install everything, lint, run the whole test suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# scratch (each test's warehouse, Dagster instance and the shared Spark server's home) in memory
# where the machine has a tmpfs: a stream run commits a dozen SQLite transactions and Delta
# files, and each fsync to disk waited behind the other worker's
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR
    TMPDIR=$(mktemp -d /dev/shm/tdstream-tests.XXXXXX)
    chmod 755 "$TMPDIR"  # the PostgreSQL test's server runs as the postgres user
    trap 'rm -rf "$TMPDIR"' EXIT
fi
# two workers, one test file each at a time: a file's tests share its fixtures (servers,
# Dagster instances); alone, the run leaves a core idle a third of the time
.venv/bin/python -m pytest -n 2 --dist loadfile "$@"
