"""Benchmark: INSERT through ``Session.execute`` on a super table with 100 child tables.

Times single-row INSERT statements (one Delta commit each, the way a device client writes)
and multi-row INSERTs of 1,000 / 10,000 / 100,000 rows spread over the child tables. No
Spark is involved: the write path is delta-rs plus the catalog. Results go to
``bench/results/ingest.json``.

    .venv/bin/python bench/ingest.py --statements 200
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from dagster_tdstream import Session, Warehouse

START = 1_700_000_000_000  # ms
TABLES = 100


def _session(root: str) -> Session:
    session = Session(Warehouse(root), timezone="UTC")
    session.execute("create database d; use d; create stable st (ts timestamp, v int, f float) tags (g int)")
    for i in range(TABLES):
        session.execute(f"create table c{i} using st tags ({i})")
    return session


def single_rows(statements: int) -> float:
    """Single-row INSERT statements per second (after 20 warm-up statements)."""
    with tempfile.TemporaryDirectory() as tmp:
        session = _session(f"{tmp}/wh")
        for i in range(20):
            session.execute(f"insert into c{i % TABLES} values ({START + i}, {i}, 1.5)")
        started = time.perf_counter()
        for i in range(statements):
            session.execute(f"insert into c{i % TABLES} values ({START + 1000 + i}, {i}, 1.5)")
        return statements / (time.perf_counter() - started)


def batch(rows: int) -> float:
    """Rows per second of one INSERT of ``rows`` rows over the child tables."""
    with tempfile.TemporaryDirectory() as tmp:
        session = _session(f"{tmp}/wh")
        per_table = rows // TABLES
        parts = []
        for t in range(TABLES):
            values = " ".join(f"({START + k}, {k}, 1.5)" for k in range(per_table))
            parts.append(f"c{t} values {values}")
        sql = "insert into " + " ".join(parts)
        started = time.perf_counter()
        session.execute(sql)
        return rows / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, default=200)
    parser.add_argument("--batches", default="1000,10000,100000")
    args = parser.parse_args()
    results = {"single_row_statements_per_s": round(single_rows(args.statements), 1)}
    for rows in (int(n) for n in args.batches.split(",")):
        results[f"insert_{rows}_rows_per_s"] = round(batch(rows))
    print(json.dumps(results, indent=2))
    out = Path(__file__).parent / "results" / "ingest.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
