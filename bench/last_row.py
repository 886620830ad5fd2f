"""Benchmark: last_row()/last() per child table, answered from the newest files.

Writes ``--rows`` rows over ``--tables`` child tables (one row per second each) in
``--commits`` time-ordered commits, as a stream of INSERTs would leave them (each commit a
slice of time for every child table, its watermarks recorded as the write path records them).
Then times, on the warm Spark server, the query that reads only the files above the oldest
child table's newest timestamp, beside the same query with a condition on the rows (which
reads the whole table: the cost without it). Results go to ``bench/results/last_row.json``.

    .venv/bin/python bench/last_row.py --rows 10000000 --tables 1000 --commits 100
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from dagster_tdstream import Session, Warehouse

START = 1_700_000_000_000  # ms
QUERIES = {
    "last_row(*) partition by tbname": "select tbname, last_row(*) from meters partition by tbname",
    "last(current), last(voltage) group by tbname": (
        "select tbname, last(current), last(voltage) from meters group by tbname"
    ),
    "last_row(*) of one child table": "select last_row(*) from d7",
}


def load(warehouse: Warehouse, rows: int, tables: int, commits: int) -> None:
    session = Session(warehouse, timezone="UTC")
    session.execute(
        "create database bench; use bench;"
        "create stable meters (ts timestamp, current float, voltage int, phase int) tags (groupid int)"
    )
    stable = warehouse.table("bench", "meters")
    children = [warehouse.new_child("bench", f"d{i}", stable, {"groupid": i % 10}) for i in range(tables)]
    warehouse.create_child_tables(children)
    per_table = rows // tables
    steps = per_table // commits
    names = np.array([f"d{i}" for i in range(tables)])
    rng = np.random.default_rng(7)
    for commit in range(commits):
        offsets = START + (commit * steps + np.arange(steps, dtype=np.int64)) * 1000
        n = steps * tables
        data = pa.table(
            {
                "tbname": pa.array(np.repeat(names, steps)),
                "ts": pa.array(np.tile(offsets, tables)),
                "current": pa.array(rng.random(n, dtype=np.float32) * 20),
                "voltage": pa.array(rng.integers(200, 240, n, dtype=np.int32)),
                "phase": pa.array(rng.integers(0, 3, n, dtype=np.int32)),
            }
        )
        session.write("bench.meters", data)


def timed(session: Session, sql: str, repeat: int) -> tuple[float, int]:
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        result = session.query(sql)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), len(result.rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "last_row.json"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tdstream-bench-"))
    try:
        warehouse = Warehouse(str(root / "warehouse"))
        started = time.perf_counter()
        load(warehouse, args.rows, args.tables, args.commits)
        loaded = time.perf_counter() - started
        session = Session(warehouse, database="bench", timezone="UTC")
        session.query("select count(*) from meters")  # the server warm, its first query paid
        results = []
        for label, sql in QUERIES.items():
            newest, rows = timed(session, sql, args.repeat)
            # a condition on the rows that keeps every row: the query reads the whole table
            whole, same_rows = timed(session, sql.replace(" from meters", " from meters where ts > 0"), args.repeat)
            assert rows == same_rows
            results.append(
                {
                    "query": label,
                    "rows": rows,
                    "newest_files_seconds": round(newest, 2),
                    "whole_table_seconds": round(whole, 2),
                }
            )
            print(json.dumps(results[-1]))
        summary = {
            "rows": args.rows,
            "child_tables": args.tables,
            "commits": args.commits,
            "load_seconds": round(loaded, 1),
            "cores": os.cpu_count(),
            "queries": results,
        }
        warehouse.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
