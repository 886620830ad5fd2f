#!/usr/bin/env bash
# Installs everything the project needs into ./.venv on a fresh machine (Python 3.11+ and
# Java 17 present, nothing else). Sourced by run.sh and test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v java >/dev/null 2>&1; then
    echo "error: Java 17 is required by Spark but 'java' is not on PATH." >&2
    echo "       install a JDK 17 (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) and retry." >&2
    exit 1
fi
java_major=$(java -version 2>&1 | sed -nE 's/.*version "([0-9]+)(\.[0-9]+)*.*/\1/p' | head -n 1)
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
    echo "error: Spark 4 needs Java 17 or newer; found: $(java -version 2>&1 | head -n 1)" >&2
    exit 1
fi

python_bin=""
for candidate in "${PYTHON:-}" python3.11 python3.12 python3.13 python3; do
    if [ -n "$candidate" ] && command -v "$candidate" >/dev/null 2>&1 &&
        "$candidate" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] < (3, 14) else 1)'; then
        python_bin="$candidate"
        break
    fi
done
if [ -z "$python_bin" ]; then
    echo "error: Python 3.11, 3.12 or 3.13 is required (set PYTHON=/path/to/python)." >&2
    exit 1
fi

if [ ! -x .venv/bin/python ]; then
    "$python_bin" -m venv .venv
fi
if [ ! -x .venv/bin/uv ]; then
    # a venv made by uv itself has no pip: bring it in first
    .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip --upgrade >/dev/null
    # uv resolves and installs in seconds; pip would also build pyspark from source
    .venv/bin/python -m pip install --quiet --disable-pip-version-check uv
fi
.venv/bin/uv pip install --quiet --python .venv/bin/python -e ".[dev]"
# Bytecode for everything installed and for the project, written now: uv installs without it,
# and where PYTHONDONTWRITEBYTECODE is set no process writes it, so every `tdstream`, Dagster
# run or Spark Python worker compiled its ~2,500 modules again (10 s of CPU a process).
# Up-to-date files are skipped: 25 s the first time, 4 s after. A file that does not compile
# (a package may ship templates that are not Python) only stays without bytecode.
.venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    dagster_tdstream >/dev/null || true

export SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
