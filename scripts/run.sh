#!/usr/bin/env bash
# The run command: install everything, load the demo schema into the embedded warehouse
# (./.tdstream) and show per-device one-minute averages computed on Spark.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bootstrap.sh
.venv/bin/tdstream sql -f assets/demo/meters.sql
exec .venv/bin/tdstream sql -d power \
    "select _wstart, tbname, avg(current), max(voltage) from meters partition by tbname interval(1m) order by tbname, _wstart"
