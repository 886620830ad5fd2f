"""Benchmark: a window's close → its result visible, through the real Dagster daemon.

Starts what the run command starts — the warm Spark Connect server, ``dagster-daemon run``
(which serves the code location itself; no webserver) — on a scratch warehouse and
DAGSTER_HOME with the project's ``dagster.yaml``; creates ``--streams`` streams
``INTERVAL(--window) SLIDING(--window) FROM lat.m PARTITION BY tbname`` over ``--groups`` child
tables (``--low-latency`` adds ``STREAM_OPTIONS(LOW_LATENCY_CALC)``); feeds one row per group
every ``--every-ms`` with ts = now for ``--seconds``; and reports, per window and stream, the
time from the window's close (the commit of the first row past its end) to the window being in
the stream's output for every group: p50/p95/max. The split comes from Dagster's event log:
run requested → started (queue + launch), started → step start (process, imports, resources),
step (Spark session, compute, commit); for live runs the compute time each window's
materialization records. Results: ``bench/results/live_latency.json``.

    .venv/bin/python bench/live_latency.py --streams 1
    .venv/bin/python bench/live_latency.py --streams 1 --low-latency
    .venv/bin/python bench/live_latency.py --streams 20 --seconds 600
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=1)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--every-ms", type=int, default=1000, help="one row per group this often")
    parser.add_argument("--window", default="5s")
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to feed")
    parser.add_argument("--low-latency", action="store_true")
    parser.add_argument("--notify", action="store_true", help="streams notify a local WebSocket on WINDOW_CLOSE")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    window_ms = int(args.window.rstrip("s")) * 1000

    scratch = Path(tempfile.mkdtemp(prefix="tdstream-live-"))
    warehouse_dir, home = scratch / "warehouse", scratch / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "TDSTREAM_WAREHOUSE": str(warehouse_dir),
        "TDSTREAM_TIMEZONE": "UTC",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("TDSTREAM_SPARK_HOME", None)
    os.environ.update({k: env[k] for k in ("TDSTREAM_WAREHOUSE", "TDSTREAM_TIMEZONE", "SPARK_LOCAL_IP")})

    from dagster_tdstream import Session, Warehouse
    from dagster_tdstream.compute.spark_server import ensure_server, server_home, stop_server

    warehouse = Warehouse(str(warehouse_dir))
    session = Session(warehouse, timezone="UTC")
    options = " stream_options(low_latency_calc)" if args.low_latency else ""
    notified: dict[tuple[int, int], float] = {}  # (stream, window start) → its last group's event arrived
    if args.notify:
        options += f" notify('ws://127.0.0.1:{listen(notified)}/bench') on (window_close)"
    ddl = ["create database lat; use lat; create stable m (ts timestamp, v int) tags (g int);"]
    ddl += [f"create table c{g} using m tags ({g});" for g in range(args.groups)]
    ddl += [
        f"create stream s{i} interval({args.window}) sliding({args.window}) from m partition by tbname{options} "
        f"into out{i} as select _twstart ts, count(*) n, sum(v) total from %%trows;"
        for i in range(args.streams)
    ]
    began = time.monotonic()
    session.execute("".join(ddl))
    print(f"created {args.streams} stream(s) in {time.monotonic() - began:.1f} s", flush=True)
    (scratch / "defs.py").write_text(
        textwrap.dedent(f"""
            from dagster_tdstream import TDStreamProject, build_definitions

            defs = build_definitions(TDStreamProject(warehouse={str(warehouse_dir)!r}, timezone="UTC"))
        """)
    )
    (scratch / "workspace.yaml").write_text(
        "load_from:\n  - python_file:\n      relative_path: defs.py\n      location_name: bench\n"
    )
    began = time.monotonic()
    spark_state = ensure_server("local[2]", server_home(str(warehouse_dir)))
    print(f"Spark Connect {spark_state.url} up in {time.monotonic() - began:.1f} s", flush=True)
    daemon_log = (scratch / "daemon.log").open("w")
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-daemon"), "run", "-w", "workspace.yaml"],
        cwd=scratch,
        env=env,
        stdout=daemon_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )

    closes: dict[int, float] = {}  # window start → wall time the first row past its end committed
    stop = threading.Event()

    def feed() -> None:
        value = 0
        while not stop.is_set():
            now = int(time.time() * 1000)
            value += 1
            rows = " ".join(f"c{g} values ({now}, {value})" for g in range(args.groups))
            session.execute(f"insert into {rows}")
            committed = time.time()
            start = now - now % window_ms - window_ms  # the window this row is past the end of
            closes.setdefault(start, committed)
            stop.wait(max(0.0, args.every_ms / 1000 - (time.time() - committed)))

    seen: dict[tuple[int, int], float] = {}  # (stream, window start) → visible for every group
    versions: dict[int, int] = {}  # stream → the output version last read
    outputs: dict[int, Any] = {}  # stream → its output table, once created

    def watch() -> None:
        # an output is read again only when its Delta version moved: reading 20 tables every
        # 100 ms took a third of a core from the system measured
        # drain until every measured window is seen (windows before the first whole one are
        # seen too but not counted: counting them ended the drain with windows still to come)
        while not stop.is_set() or sum(1 for _, start in seen if start >= first_full[0]) < expected_count():
            for i in range(args.streams):
                table = outputs.get(i) or warehouse.catalog.get_table("lat", f"out{i}")
                if table is None:
                    continue
                outputs[i] = table
                try:
                    version = warehouse.delta.version("lat", table.storage_name)
                    if versions.get(i) == version:
                        continue
                    rows = warehouse.delta.read("lat", table.storage_name, columns=["ts"])
                    versions[i] = version
                except Exception:  # created by the first run; not there yet
                    continue
                counts: dict[int, int] = {}
                for ts in rows.column("ts").cast("int64").to_pylist():
                    counts[ts] = counts.get(ts, 0) + 1
                now = time.time()
                for ts, count in counts.items():
                    if count >= args.groups and (i, ts) not in seen:
                        seen[(i, ts)] = now
            if stop.is_set() and time.time() > drain_until[0]:
                return
            time.sleep(0.1)

    def expected_count() -> int:
        return sum(1 for start in closes if start >= first_full[0]) * args.streams

    first_full = [0]
    drain_until = [0.0]
    try:
        # the daemon loads the code location, its sensors start the live runs (the worker, or
        # one per LOW_LATENCY_CALC stream); windows that close once those are up are measured
        # (steady state: a live run starts once, not per window)
        wait_for_live_runs(home, args.streams if args.low_latency else 1)
        feeder = threading.Thread(target=feed, daemon=True)
        watcher = threading.Thread(target=watch, daemon=True)
        feed_start = int(time.time() * 1000)
        first_full[0] = feed_start - feed_start % window_ms + window_ms  # the first window fed from its start
        feeder.start()
        watcher.start()
        time.sleep(args.seconds)
        stop.set()
        feeder.join()
        drain_until[0] = time.time() + 120  # let the last windows land
        watcher.join(timeout=130)
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
        daemon_log.close()

    latencies, missing, by_start = [], 0, []
    for start, closed in sorted(closes.items()):
        if start < first_full[0] or start + window_ms > int(max(closes.values()) * 1000) - window_ms:
            continue
        for i in range(args.streams):
            if (i, start) in seen:
                latencies.append(seen[(i, start)] - closed)
                by_start.append(latencies[-1])
            else:
                missing += 1
    # streams falling behind show as the second half of the run slower than the first
    halves = [by_start[: len(by_start) // 2], by_start[len(by_start) // 2 :]]
    split = run_split(home)
    if args.notify:
        # the event of a window's last group against the watcher seeing that window whole (the
        # watcher polls every 100 ms, so a notification may arrive before it looks: negative)
        after = [notified[key] - seen[key] for key in notified if key in seen and key[1] >= first_full[0]]
        split["notified_after_visible_s"] = round(statistics.median(after), 2) if after else None
        split["notified_after_visible_p95_s"] = round(percentile(after, 0.95), 2) if after else None
        split["notifications"] = len(after)
    split.update(trigger_split(warehouse, closes, seen, first_full[0]))
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores",
        "streams": args.streams,
        "groups": args.groups,
        "every_ms": args.every_ms,
        "window": args.window,
        "low_latency": args.low_latency,
        "seconds": args.seconds,
        "windows_measured": len(latencies),
        "windows_not_visible": missing,
        "p50_s": round(statistics.median(latencies), 2) if latencies else None,
        "p95_s": round(percentile(latencies, 0.95), 2) if latencies else None,
        "max_s": round(max(latencies), 2) if latencies else None,
        "p95_first_half_s": round(percentile(halves[0], 0.95), 2) if halves[0] else None,
        "p95_second_half_s": round(percentile(halves[1], 0.95), 2) if halves[1] else None,
        "split": split,
    }
    print(json.dumps(result, indent=2))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    name = f"live_latency_{args.streams}{'_ll' if args.low_latency else ''}.json"
    (out / name).write_text(json.dumps(result, indent=2))
    warehouse.close()
    stop_server(server_home(str(warehouse_dir)))
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    else:
        print(f"kept {scratch}")


def listen(notified: dict[tuple[int, int], float]) -> int:
    """A WebSocket server on a free loopback port recording when each (stream, window start)'s
    WINDOW_CLOSE events arrive; returns the port."""
    import socket

    from websockets.sync.server import ServerConnection, serve

    def handle(connection: ServerConnection) -> None:
        for message in connection:
            arrived = time.time()
            for entry in json.loads(message)["streams"]:
                stream = int(entry["streamName"].rsplit("s", 1)[1])  # "s3" or "lat.s3"
                for event in entry["events"]:
                    notified[(stream, int(event["windowStart"]))] = arrived

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = serve(handle, "127.0.0.1", port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return port


def wait_for_live_runs(home: Path, count: int, seconds: float = 120.0) -> None:
    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    began = time.monotonic()
    with DagsterInstance.from_config(str(home)) as instance:
        while time.monotonic() - began < seconds:
            started = instance.get_runs_count(
                filters=RunsFilter(tags={"tdstream/pool": "live"}, statuses=[DagsterRunStatus.STARTED])
            )
            if started >= count:
                break
            time.sleep(0.5)
    print(f"{count} live run(s) up after {time.monotonic() - began:.1f} s", flush=True)
    time.sleep(2)  # their first poll


def trigger_split(
    warehouse: Any, closes: dict[int, float], seen: dict[tuple[int, int], float], first: int
) -> dict[str, float | None]:
    """Median seconds from a window's close to its trigger being queued (the sensor's wait
    and tick, or the live run's poll), and from there to its result being visible (launch or
    pick-up, compute, commit), from the catalog's trigger queue."""
    from sqlalchemy import select

    from dagster_tdstream.storage.catalog import triggers_table

    query = select(triggers_table.c.stream, triggers_table.c.wstart, triggers_table.c.fired_at)
    fired: dict[tuple[int, int], float] = {}
    with warehouse.catalog.engine.connect() as conn:
        for stream, wstart, fired_at in conn.execute(query.where(triggers_table.c.event == "WINDOW_CLOSE")):
            key = (int(stream.rsplit(".s", 1)[1]), int(wstart))
            fired[key] = max(fired.get(key, 0.0), fired_at / 1e9)  # the last group's
    queued = [fired[key] - closes[key[1]] for key in fired if key[1] in closes and key[1] >= first]
    landed = [seen[key] - fired[key] for key in fired if key in seen and key[1] >= first]
    return {
        "close_to_queued_s": round(statistics.median(queued), 2) if queued else None,
        "queued_to_visible_s": round(statistics.median(landed), 2) if landed else None,
        "queued_to_visible_p95_s": round(percentile(landed, 0.95), 2) if landed else None,
    }


def run_split(home: Path) -> dict[str, float | int | None]:
    """Median seconds of each stage of the runs, from the instance's event log."""
    from dagster import DagsterEventType, DagsterInstance, EventRecordsFilter

    with DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        queued, launch, step, compute = [], [], [], []
        for run in runs:
            stats = instance.get_run_stats(run.run_id)
            record = instance.get_run_record_by_id(run.run_id)
            if record is None or stats.start_time is None:
                continue
            queued.append(stats.start_time - record.create_timestamp.timestamp())
            events = instance.all_logs(run.run_id, of_type={DagsterEventType.STEP_START, DagsterEventType.STEP_SUCCESS})
            starts = [e.timestamp for e in events if e.dagster_event.event_type == DagsterEventType.STEP_START]
            ends = [e.timestamp for e in events if e.dagster_event.event_type == DagsterEventType.STEP_SUCCESS]
            if starts:
                launch.append(min(starts) - stats.start_time)
            if starts and ends and run.tags.get("tdstream/mode") != "live":
                step.append(max(ends) - min(starts))
        for record in instance.get_event_records(
            EventRecordsFilter(event_type=DagsterEventType.ASSET_MATERIALIZATION), limit=100000
        ):
            metadata = record.asset_materialization.metadata if record.asset_materialization else {}
            if "tdstream/compute_seconds" in metadata:
                compute.append(float(metadata["tdstream/compute_seconds"].value))

    def median(values: list[float]) -> float | None:
        return round(statistics.median(values), 2) if values else None

    return {
        "runs": len(runs),
        "requested_to_started_s": median(queued),
        "started_to_step_s": median(launch),
        "step_s": median(step),
        "live_compute_per_batch_s": median(compute),
        "live_batches": len(compute),
    }


if __name__ == "__main__":
    main()
