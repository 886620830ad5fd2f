"""Benchmark: one run computing 10, 1,000 and 10,000 triggers over the same rows.

Writes ``--tables`` child tables of ``--rows-per-table`` rows (one per second) straight into
the warehouse's Delta table, registers ``INTERVAL(1m) … PARTITION BY tbname … SELECT _twstart,
avg(current), max(voltage) FROM %%trows``, derives its closed windows, and times
``compute_triggers`` — the whole of a run's work: triggers view, the stream query as one Spark
job, the output commit — for batches of 10, 1,000 and 10,000 of those windows (each size
``--repeat`` times, the best kept, after one warm-up run), the windows picked at random over
the history or (``--pick latest``) the newest, as a real-time run has them. ``--query range``
times the same windows read from the super table by ``WHERE ts >= _twstart AND ts < _twend``
(every table's rows: a range join of data and triggers) instead of ``%%trows``. The issue's
target: 10,000 triggers within 1.5× the time of 10. Results go to
``bench/results/trigger_batch.json``.

    .venv/bin/python bench/trigger_batch.py --tables 100 --rows-per-table 6100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
import pyarrow as pa

from dagster_tdstream import Session, Warehouse
from dagster_tdstream.compute.run import compute_triggers, triggers_for_range
from dagster_tdstream.compute.spark import build_spark_session
from dagster_tdstream.storage.registry import load_stream

START = 1_700_000_000_000  # ms
SIZES = (10, 1_000, 10_000)


def load(warehouse: Warehouse, tables: int, per_table: int) -> None:
    session = Session(warehouse, timezone="UTC")
    session.execute(
        "create database bench; use bench;"
        "create stable meters (ts timestamp, current float, voltage int) tags (groupid int);"
        "create stream s interval(1m) sliding(1m) from meters partition by tbname into out "
        "as select _twstart, avg(current), max(voltage) from %%trows;"
        # the same windows read from the super table by a time range on the trigger's bounds
        "create stream r interval(1m) sliding(1m) from meters partition by tbname into out_range "
        "as select _twstart, avg(current), max(voltage) from meters where ts >= _twstart and ts < _twend"
    )
    stable = warehouse.table("bench", "meters")
    children = [warehouse.new_child("bench", f"d{i}", stable, {"groupid": i % 10}) for i in range(tables)]
    warehouse.create_child_tables(children)
    rng = np.random.default_rng(7)
    names = [f"d{i}" for i in range(tables)]
    n = tables * per_table
    data = pa.table(
        {
            "tbname": pa.array(np.repeat(names, per_table)),
            "ts": pa.array(np.tile(START + np.arange(per_table, dtype=np.int64) * 1000, tables)),
            "current": pa.array(rng.random(n, dtype=np.float32) * 20),
            "voltage": pa.array(rng.integers(200, 240, n, dtype=np.int32)),
        }
    )
    session.write("bench.meters", data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--rows-per-table", type=int, default=6100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--pick",
        choices=["random", "latest"],
        default="random",
        help="which windows a batch holds: random ones over the whole history, or the newest (a real-time run)",
    )
    parser.add_argument(
        "--query",
        choices=["trows", "range"],
        default="trows",
        help="the stream query: %%trows, or the super table WHERE ts >= _twstart AND ts < _twend (a range join)",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "trigger_batch.json")
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = build_spark_session(conf={"spark.driver.memory": "4g"})
    root = Path(tempfile.mkdtemp(prefix="tdstream-bench-"))
    try:
        warehouse = Warehouse(str(root / "wh"))
        started = time.perf_counter()
        load(warehouse, args.tables, args.rows_per_table)
        load_seconds = time.perf_counter() - started
        stream = load_stream(warehouse, "bench.s" if args.query == "trows" else "bench.r")
        windows = triggers_for_range(spark, warehouse, stream, START, START + args.rows_per_table * 1000)
        if len(windows) < max(SIZES):
            raise SystemExit(f"only {len(windows)} windows: raise --tables or --rows-per-table")
        if args.pick == "latest":
            order = sorted(range(len(windows)), key=lambda i: -int(windows[i]["wstart"]))
        else:
            order = list(np.random.default_rng(11).permutation(len(windows)))
        zone = ZoneInfo("UTC")
        compute_triggers(spark, warehouse, stream, [windows[i] for i in order[:10]], timezone=zone)  # warm-up
        results = []
        for size in SIZES:
            batch = [windows[i] for i in order[:size]]
            seconds = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                outcome = compute_triggers(spark, warehouse, stream, batch, timezone=zone)
                seconds.append(time.perf_counter() - t0)
            assert outcome.windows == size and outcome.rows_written == size
            results.append(
                {"triggers": size, "best_seconds": round(min(seconds), 3), "runs": [round(s, 3) for s in seconds]}
            )
            each = ", ".join(f"{s:.2f}" for s in seconds)
            print(f"{size:>6} triggers: best {min(seconds):.2f} s of {args.repeat} ({each})")
        ratio = results[-1]["best_seconds"] / results[0]["best_seconds"]
        print(f"10,000 / 10 triggers: {ratio:.2f}x (target ≤ 1.5x)")
        report = {
            "rows": args.tables * args.rows_per_table,
            "tables": args.tables,
            "windows_available": len(windows),
            "load_seconds": round(load_seconds, 2),
            "results": results,
            "ratio_10000_to_10": round(ratio, 2),
            "pick": args.pick,
            "query": args.query,
            "cores": os.cpu_count(),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2))
        print(f"wrote {args.out}")
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
