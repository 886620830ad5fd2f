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
echo "Dagster UI: http://127.0.0.1:${DAGSTER_PORT:-3000}  (Ctrl-C stops it)"
exec .venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p "${DAGSTER_PORT:-3000}"
