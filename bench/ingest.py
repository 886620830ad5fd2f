"""Benchmark: INSERT through ``Session.execute`` on a super table with 100 child tables.

Times single-row INSERT statements (one Delta commit each, the way a device client writes),
multi-row INSERTs of 1,000 / 10,000 / 100,000 rows spread over the child tables, and
``Session.write`` of an Arrow table of 1,000,000 rows into the super table (child tables
from its ``tbname`` column), and single-row INSERTs from ``--clients`` processes at once
(group commit: how many statements/s in all, in how many Delta commits, and the CPU each
statement cost the clients and the writer), once committing among themselves and once through
the warehouse's writer process (``tdstream writer start``). Every
measurement
checks afterwards that the table holds the rows written. No Spark is involved: the write
path is Parquet, the Delta log and the catalog. Results go to ``bench/results/ingest.json``.

Every measurement's warehouse stays until the whole run ends. ext4 does not hand out an inode
freed in the last minute or so again, and skips over each such inode, reading its inode table,
on every file it creates in that block group: right after a measurement's folder of 8,000
files was deleted, the next one paid 0.4-0.8 ms of CPU per file it created instead of 0.02
(``perf``: ``recently_deleted`` under ``__ext4_new_inode``, a quarter of a one-row INSERT
loop's samples). The run reports what creating a file cost in its folder before and after.

    .venv/bin/python bench/ingest.py --statements 200
    .venv/bin/python bench/ingest.py --statements 500 --rounds 5   # each rate's runs and median
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from dagster_tdstream import Session, Warehouse

START = 1_700_000_000_000  # ms
TABLES = 100


_SCRATCH: list[str] = []  # the run's folder (main sets it): measurements' warehouses, removed at the end


def _fresh() -> str:
    """A new folder for one measurement's warehouse, removed with the run's folder at the end."""
    return tempfile.mkdtemp(dir=_SCRATCH[0])


def _file_creation_ms(files: int = 200) -> float:
    """CPU milliseconds to create one empty file in a new folder of the run's (the state of the
    file system the measurements met: ~0.02 ms, or several tenths after mass deletions)."""
    folder = Path(_fresh())
    started = time.process_time()
    for i in range(files):
        (folder / f"f{i}").touch(exist_ok=False)
    return round((time.process_time() - started) / files * 1000, 3)


def _session(root: str) -> Session:
    session = Session(Warehouse(root), timezone="UTC")
    session.execute("create database d; use d; create stable st (ts timestamp, v int, f float) tags (g int)")
    for i in range(TABLES):
        session.execute(f"create table c{i} using st tags ({i})")
    return session


def _stored(session: Session) -> int:
    stored = session.warehouse.stored_rows(session.warehouse.table("d", "st"))
    assert stored is not None
    return stored


def single_rows(statements: int, writer: bool = False) -> float:
    """Single-row INSERT statements per second (after 20 warm-up statements; ``writer``:
    committed by the warehouse's writer process)."""
    tmp = _fresh()
    session = _session(f"{tmp}/wh")
    if writer:
        _writer("start", f"{tmp}/wh")
        session = Session(Warehouse(f"{tmp}/wh"), database="d", timezone="UTC")  # finds it at once
    for i in range(20):
        session.execute(f"insert into c{i % TABLES} values ({START + i}, {i}, 1.5)")
    started = time.perf_counter()
    for i in range(statements):
        session.execute(f"insert into c{i % TABLES} values ({START + 1000 + i}, {i}, 1.5)")
    elapsed = time.perf_counter() - started
    if writer:
        _writer("stop", f"{tmp}/wh")
    assert _stored(session) == 20 + statements
    return statements / elapsed


def batch(rows: int) -> float:
    """Rows per second of one INSERT of ``rows`` rows over the child tables."""
    tmp = _fresh()
    session = _session(f"{tmp}/wh")
    per_table = rows // TABLES
    parts = []
    for t in range(TABLES):
        values = " ".join(f"({START + k}, {k}, 1.5)" for k in range(per_table))
        parts.append(f"c{t} values {values}")
    sql = "insert into " + " ".join(parts)
    started = time.perf_counter()
    session.execute(sql)
    elapsed = time.perf_counter() - started
    assert _stored(session) == per_table * TABLES
    return rows / elapsed


_CLIENT = """
import sys
from dagster_tdstream import Session, Warehouse
session = Session(Warehouse(sys.argv[1]), database="d", timezone="UTC")
client, statements, start = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sys.stdout.write("ready\\n"); sys.stdout.flush(); sys.stdin.readline()
for i in range(statements):
    session.execute(f"insert into c{(client * 7 + i) % 100} values ({start + client * 1_000_000 + i}, {i}, 1.5)")
sys.stdout.write("done\\n"); sys.stdout.flush()
"""


def _writer(command: str, root: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "dagster_tdstream.cli.main", "writer", command, "--warehouse", root],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU so far (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def concurrent(clients: int, statements: int, writer: bool = False) -> dict[str, float]:
    """Single-row INSERT statements/s summed over ``clients`` processes writing one super table
    at once (group commit combines them; ``writer``: through the warehouse's writer process),
    how many Delta commits they took, and the CPU each statement cost the clients and the
    writer (where the time goes: the cores are the bound)."""
    tmp = _fresh()
    session = _session(f"{tmp}/wh")
    writer_pid = None
    if writer:
        writer_pid = int(re.search(r"pid (\d+)", _writer("start", f"{tmp}/wh")).group(1))  # type: ignore[union-attr]
    before = session.warehouse.delta.latest_version("d", "st")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CLIENT, f"{tmp}/wh", str(c), str(statements), str(START)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for c in range(clients)
    ]
    for proc in procs:  # every client imported and opened the warehouse: start together
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    cpu = [sum(_cpu_seconds(proc.pid) for proc in procs), _cpu_seconds(writer_pid) if writer_pid else 0.0]
    started = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    # until every client has written its last statement (not until the processes have
    # exited: tearing down an interpreter with pyarrow and delta-rs loaded is no ingest)
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
    elapsed = time.perf_counter() - started
    cpu = [
        sum(_cpu_seconds(proc.pid) for proc in procs) - cpu[0],
        (_cpu_seconds(writer_pid) if writer_pid else 0.0) - cpu[1],
    ]
    assert [proc.wait(timeout=600) for proc in procs] == [0] * clients
    if writer:
        _writer("stop", f"{tmp}/wh")
    assert _stored(session) == clients * statements
    commits = session.warehouse.delta.latest_version("d", "st") - before
    total = clients * statements
    return {
        "statements_per_s": round(total / elapsed, 1),
        "delta_commits": commits,
        "client_cpu_ms_per_statement": round(cpu[0] / total * 1000, 2),
        **({"writer_cpu_ms_per_statement": round(cpu[1] / total * 1000, 2)} if writer else {}),
    }


def frame(rows: int) -> float:
    """Rows per second of ``Session.write`` of one Arrow table over the child tables."""
    tmp = _fresh()
    session = _session(f"{tmp}/wh")
    per_table = rows // TABLES
    data = pa.table(
        {
            "tbname": pa.array([f"c{t}" for t in range(TABLES) for _ in range(per_table)]),
            "ts": pa.array([START + k for _ in range(TABLES) for k in range(per_table)], pa.int64()),
            "v": pa.array([k % 1000 for k in range(per_table * TABLES)], pa.int32()),
            "f": pa.array([1.5] * (per_table * TABLES), pa.float32()),
        }
    )
    started = time.perf_counter()
    session.write("st", data)
    elapsed = time.perf_counter() - started
    assert _stored(session) == per_table * TABLES
    return per_table * TABLES / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--statements", type=int, default=200)
    parser.add_argument("--batches", default="1000,10000,100000")
    parser.add_argument("--frame", type=int, default=1_000_000, help="rows of the Session.write measurement")
    parser.add_argument("--clients", type=int, default=8, help="processes of the concurrent measurement")
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat the statement-rate measurements, in turn, this many times"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        _SCRATCH[:] = [scratch]
        results = _measure(args)
    print(json.dumps(results, indent=2))
    out = Path(__file__).parent / "results" / "ingest.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")


def _measure(args: argparse.Namespace) -> dict[str, object]:
    creation_before = _file_creation_ms()
    # the rates of statements are taken in rounds, each measurement in turn: this VM's speed
    # drifts by a third within minutes, and one run of each would compare different minutes
    rates: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        measured = {
            "single_row_statements_per_s": round(single_rows(args.statements), 1),
            "single_row_through_writer_statements_per_s": round(single_rows(args.statements, writer=True), 1),
        }
        for key, value in concurrent(args.clients, args.statements).items():
            measured[f"concurrent_{args.clients}_clients_{key}"] = value
        for key, value in concurrent(args.clients, args.statements, writer=True).items():
            measured[f"concurrent_{args.clients}_clients_through_writer_{key}"] = value
        for key, value in measured.items():
            rates.setdefault(key, []).append(value)
    results: dict[str, object] = {
        key: runs[0] if len(runs) == 1 else {"rounds": runs, "median": round(statistics.median(runs), 2)}
        for key, runs in rates.items()
    }
    for rows in (int(n) for n in args.batches.split(",")):
        results[f"insert_{rows}_rows_per_s"] = round(batch(rows))
    results[f"write_frame_{args.frame}_rows_per_s"] = round(frame(args.frame))
    results["file_creation_cpu_ms_before_and_after"] = [creation_before, _file_creation_ms()]
    return results


if __name__ == "__main__":
    main()
