#!/usr/bin/env bash
# The run command: install everything, then start the Dagster UI and daemon on the demo code
# location (definitions.py): the demo stream over power.meters in the embedded warehouse
# (./.tdstream), its trigger sensor, and a feeder sensor that keeps writing meter readings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bootstrap.sh
export DAGSTER_HOME="${DAGSTER_HOME:-$PWD/.dagster_home}"
mkdir -p "$DAGSTER_HOME"
cp dagster.yaml "$DAGSTER_HOME/dagster.yaml"
# the code location records this (and DAGSTER_HOME) in the warehouse's catalog, so
# `tdstream sql` in another shell reloads it on CREATE STREAM and switches sensors on STOP/START
export TDSTREAM_DAGSTER_URL="http://127.0.0.1:${DAGSTER_PORT:-3000}"
# the warm Spark every run, sensor and `tdstream sql` connects to (started once; later runs
# of this script adopt it). `tdstream spark stop` stops it; its log is .tdstream/_spark/.
.venv/bin/tdstream spark start
echo "Dagster UI: $TDSTREAM_DAGSTER_URL  (Ctrl-C stops it)"
exec .venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p "${DAGSTER_PORT:-3000}"
