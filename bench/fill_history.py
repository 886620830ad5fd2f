"""Benchmark: FILL_HISTORY over a large super table, beside a hand-written Spark SQL.

Writes ``--rows`` rows spread over ``--tables`` child tables (one row per second each) straight
into the warehouse's Delta table, creates a stream with FILL_HISTORY, and drives it through
the Dagster harness until idle: one history run derives every window in one Spark job and
writes the output. Then the same windows are computed by a hand-written Spark SQL over the
same Parquet files. Results (seconds, rows, windows) go to ``bench/results/fill_history.json``.

    .venv/bin/python bench/fill_history.py --rows 10000000 --tables 1000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from dagster import AssetKey

from dagster_tdstream import Session, StreamHarness, Warehouse
from dagster_tdstream.compute.spark import build_spark_session

START = 1_700_000_000_000  # ms
STREAMS = {
    "interval": "interval(1m) sliding(1m)",
    "state_window": "state_window(phase)",
}


def load(warehouse: Warehouse, rows: int, tables: int) -> None:
    session = Session(warehouse, timezone="UTC")
    session.execute(
        "create database bench; use bench;"
        "create stable meters (ts timestamp, current float, voltage int, phase int) tags (groupid int)"
    )
    stable = warehouse.table("bench", "meters")
    children = [warehouse.new_child("bench", f"d{i}", stable, {"groupid": i % 10}) for i in range(tables)]
    warehouse.create_child_tables(children)
    per_table = rows // tables
    rng = np.random.default_rng(7)
    batch_tables = max(1, 1_000_000 // per_table)
    for first in range(0, tables, batch_tables):
        names = [f"d{i}" for i in range(first, min(tables, first + batch_tables))]
        n = len(names) * per_table
        data = pa.table(
            {
                "tbname": pa.array(np.repeat(names, per_table)),
                "ts": pa.array(np.tile(START + np.arange(per_table, dtype=np.int64) * 1000, len(names))),
                "current": pa.array(rng.random(n, dtype=np.float32) * 20),
                "voltage": pa.array(rng.integers(200, 240, n, dtype=np.int32)),
                # a phase that changes every 5 to 15 minutes: state windows of a few hundred rows
                "phase": pa.array((np.tile(np.arange(per_table) // 600, len(names)) % 3).astype(np.int32)),
            }
        )
        session.write("bench.meters", data)


def run(rows: int, tables: int, kind: str, root: Path) -> dict[str, object]:
    warehouse = Warehouse(str(root / "warehouse"))
    started = time.perf_counter()
    load(warehouse, rows, tables)
    loaded = time.perf_counter() - started
    session = Session(warehouse, timezone="UTC")
    session.execute(
        f"use bench; create stream s {STREAMS[kind]} from meters partition by tbname stream_options(fill_history) "
        "into out as select _twstart, count(*) n, avg(current) a, max(voltage) m from %%trows"
    )
    harness = StreamHarness(warehouse, timezone="UTC")
    started = time.perf_counter()
    report = harness.run_until_idle()
    stream_seconds = time.perf_counter() - started
    assert not report.failures, report.failures
    windows = session.query("select count(*) from out").rows[0][0]
    history = harness.instance.get_latest_materialization_event(AssetKey(["tdstream", "bench", "out"]))
    assert history is not None and history.asset_materialization is not None
    split = {k.split("/")[1]: v.value for k, v in history.asset_materialization.metadata.items() if "seconds" in k}

    spark = build_spark_session()
    files = warehouse.delta.file_uris("bench", "meters")
    spark.read.parquet(*files).createOrReplaceTempView("meters_raw")
    if kind == "interval":
        sql = (
            "SELECT tbname, ts - pmod(ts, 60000) AS w, count(*), avg(current), max(voltage) FROM meters_raw "
            "GROUP BY tbname, ts - pmod(ts, 60000)"
        )
    else:  # gaps-and-islands: a new window where the phase changes
        sql = (
            "SELECT tbname, min(ts) AS w, count(*), avg(current), max(voltage) FROM ("
            " SELECT *, sum(change) OVER (PARTITION BY tbname ORDER BY ts) AS island FROM ("
            "  SELECT *, CASE WHEN phase = lag(phase) OVER (PARTITION BY tbname ORDER BY ts) THEN 0 ELSE 1 END"
            "  AS change FROM meters_raw)) GROUP BY tbname, island"
        )
    started = time.perf_counter()
    hand = spark.sql(sql).toArrow()
    hand_seconds = time.perf_counter() - started
    warehouse.close()
    return {
        "trigger": kind,
        "rows": rows,
        "child_tables": tables,
        "load_seconds": round(loaded, 1),
        "stream_runs": report.runs,
        "stream_seconds": round(stream_seconds, 1),
        "stream_windows": windows,
        **{f"stream_{name}": value for name, value in split.items()},
        "hand_written_sql_seconds": round(hand_seconds, 1),
        # the hand-written SQL also counts each table's last, still open window
        "hand_written_sql_windows": hand.num_rows,
        "cores": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--trigger", choices=sorted(STREAMS), action="append")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "fill_history.json"))
    parser.add_argument("--driver-memory", default="8g")
    args = parser.parse_args()
    # started before the harness so its resource reuses this session with the memory cap
    build_spark_session(conf={"spark.driver.memory": args.driver_memory, "spark.ui.enabled": "false"})
    results = []
    for kind in args.trigger or sorted(STREAMS):
        root = Path(tempfile.mkdtemp(prefix="tdstream-bench-"))
        try:
            result = run(args.rows, args.tables, kind, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(json.dumps(result))
        results.append(result)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
