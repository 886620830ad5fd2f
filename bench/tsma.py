"""Benchmark: queries reading a TSMA against the same queries over the raw rows.

Writes ``--rows`` rows of ``meters`` (``--tables`` child tables, one row per second each)
straight into the warehouse's Delta table, creates a 1m TSMA on avg(current), max(voltage),
count(ts), lets its stream compute the history through the Dagster harness, then runs each
query with ``querySmaOptimize`` on and again with ``/*+ skip_tsma() */`` (``--repeat`` times
each, warm: the median counts) and checks both give the same rows. Results go to
``bench/results/tsma_<layout>.json``.

    .venv/bin/python bench/tsma.py --rows 10000000 --tables 1000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from dagster_tdstream import Session, StreamHarness, Warehouse
from dagster_tdstream.compute.spark import build_spark_session
from dagster_tdstream.compute.spark_server import HOME_ENV, stop_server

START = 1_700_000_000_000  # ms, a whole minute
QUERIES = (
    "select _wstart, avg(current), max(voltage) from meters interval(1h)",
    "select _wstart, tbname, avg(current), max(voltage) from meters partition by tbname interval(1h)",
    "select avg(current), max(voltage), count(*) from meters",
)


def load(warehouse: Warehouse, rows: int, tables: int, layout: str) -> None:
    """``layout`` time: files of 100,000 rows holding every table's next seconds, as rows
    arriving live are committed; table: files of 1,000,000 rows holding whole tables, each
    file spanning all the time (a bulk load table by table)."""
    session = Session(warehouse, timezone="UTC")
    session.execute(
        "create database bench; use bench;"
        "create stable meters (ts timestamp, current float, voltage int, phase float)"
        " tags (groupid int, location varchar(24))"
    )
    stable = warehouse.table("bench", "meters")
    children = [
        warehouse.new_child("bench", f"d{i}", stable, {"groupid": i % 10, "location": f"city{i % 7}"})
        for i in range(tables)
    ]
    warehouse.create_child_tables(children)
    per_table = rows // tables
    rng = np.random.default_rng(7)
    names = np.array([f"d{i}" for i in range(tables)])
    if layout == "table":
        batch_tables = max(1, 1_000_000 // per_table)
        slices = [(names[i : i + batch_tables], np.arange(per_table)) for i in range(0, tables, batch_tables)]
    else:
        step = max(1, 100_000 // tables)
        slices = [(names, np.arange(s, min(per_table, s + step))) for s in range(0, per_table, step)]
    for chunk, seconds in slices:
        n = len(chunk) * len(seconds)
        data = pa.table(
            {
                "tbname": pa.array(np.repeat(chunk, len(seconds))),
                "ts": pa.array(np.tile(START + seconds.astype(np.int64) * 1000, len(chunk))),
                "current": pa.array(rng.random(n, dtype=np.float32) * 20),
                "voltage": pa.array(rng.integers(200, 240, n, dtype=np.int32)),
                "phase": pa.array(rng.random(n, dtype=np.float32)),
            }
        )
        session.write("bench.meters", data)


def _timed(session: Session, query: str, repeat: int) -> tuple[float, list[tuple[object, ...]], str]:
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = session.query(query)
        seconds.append(time.perf_counter() - started)
    rows = sorted((tuple(f"{v:.6g}" if isinstance(v, float) else v for v in row) for row in result.rows), key=repr)
    return statistics.median(seconds), rows, result.message


def run(rows: int, tables: int, repeat: int, layout: str, root: Path) -> dict[str, object]:
    warehouse = Warehouse(str(root / "warehouse"))
    started = time.perf_counter()
    load(warehouse, rows, tables, layout)
    loaded = time.perf_counter() - started
    session = Session(warehouse, timezone="UTC", database="bench")
    session.execute("create tsma m1 on meters function(avg(current), max(voltage), count(ts)) interval(1m)")
    harness = StreamHarness(warehouse, timezone="UTC")
    started = time.perf_counter()
    report = harness.run_until_idle()
    history = time.perf_counter() - started
    assert not report.failures, report.failures
    windows = session.query("select count(*) from m1_tsma_res_stb_").rows[0][0]
    session.execute("alter local 'querySmaOptimize' '1'")
    measured = []
    for query in QUERIES:
        with_tsma, mine, message = _timed(session, query, repeat)
        assert "read from TSMA bench.m1" in message, message
        raw, theirs, _ = _timed(session, query.replace("select ", "select /*+ skip_tsma() */ ", 1), repeat)
        assert mine == theirs, f"{query}: the TSMA's rows differ from the raw rows'"
        measured.append(
            {
                "query": query,
                "result_rows": len(mine),
                "tsma_seconds": round(with_tsma, 2),
                "raw_seconds": round(raw, 2),
                "speedup": round(raw / with_tsma, 1),
            }
        )
    warehouse.close()
    return {
        "rows": rows,
        "child_tables": tables,
        "layout": layout,
        "load_seconds": round(loaded, 1),
        "tsma_history_seconds": round(history, 1),
        "tsma_windows": windows,
        "repeat": repeat,
        "queries": measured,
        "cores": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--layout", choices=("time", "table"), default="time")
    parser.add_argument("--out", default=None, help="default: bench/results/tsma_<layout>.json")
    parser.add_argument("--driver-memory", default="8g")
    args = parser.parse_args()
    # started before the harness so its resource reuses this session with the memory cap
    root = Path(tempfile.mkdtemp(prefix="tdstream-bench-"))
    # one server for the benchmark's sessions and runs, outside the warehouse it deletes (each
    # warehouse would otherwise start its own, and a client of a deleted one hangs at exit)
    home = Path(tempfile.mkdtemp(prefix="tdstream-bench-spark-"))
    os.environ[HOME_ENV] = str(home)
    build_spark_session(conf={"spark.driver.memory": args.driver_memory, "spark.ui.enabled": "false"})
    try:
        result = run(args.rows, args.tables, args.repeat, args.layout, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        stop_server(home)
        shutil.rmtree(home, ignore_errors=True)
    out = Path(args.out or Path(__file__).parent / "results" / f"tsma_{args.layout}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    sys.stdout.flush()
    # each Spark Connect client retries its at-exit cleanup against the server just stopped
    # (pyspark's _on_exit), which hangs the interpreter's exit: leave without it
    os._exit(0)


if __name__ == "__main__":
    main()
