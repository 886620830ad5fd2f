"""The warm Spark: one local Spark Connect server shared by every client, a clear line when
Spark is unreachable (and nothing lost meanwhile), and a real standalone cluster behind it."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from dagster_tdstream import Session, StreamHarness, Warehouse
from dagster_tdstream.cli.main import main
from dagster_tdstream.compute.spark import SPARK_MASTER_ENV, build_spark_session, spark_endpoint
from dagster_tdstream.compute.spark_server import (
    HOME_ENV,
    ensure_server,
    running_server,
    stop_server,
)
from dagster_tdstream.errors import SparkUnavailableError

from .conftest import free_port, output

T = 1_700_000_000_000
STREAM = (
    "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
    "create table a using st tags (1); create table b using st tags (2);"
    "create stream s interval(10s) sliding(10s) from st partition by tbname into o "
    "as select _twstart ts, count(*) n, sum(v) total from %%trows;"
)
ROWS = f"insert into a values ({T}, 1) ({T + 5000}, 2) ({T + 10000}, 3) b values ({T + 1000}, 10) ({T + 12000}, 20)"


def test_every_client_adopts_the_one_warm_server(spark: object, spark_home: Path, tmp_path: Path) -> None:
    state = running_server(spark_home)
    assert state is not None and state.master == "local[2]"
    # a second client, a SQL session and the CLI all connect to it: no JVM of their own
    assert spark_endpoint() == state.url
    session = Session(Warehouse(str(tmp_path / "wh")), timezone="UTC")
    session.execute("create database d; use d; create table t (ts timestamp, v int)")
    session.execute(f"insert into t values ({T}, 1) ({T + 1}, 2)")
    assert output(session, "select count(*), sum(v) from t") == [(2, 3)]
    assert running_server(spark_home) == state
    shown = CliRunner().invoke(main, ["spark", "status"])
    assert shown.exit_code == 0 and state.url in shown.output and f"pid {state.pid}" in shown.output
    assert str(spark_home / "spark-connect.log") in shown.output


def test_runs_of_a_process_reuse_the_sessions_earlier_runs_released(spark: object) -> None:
    """A run's session goes back to the process when the run ends and the next run with the
    same settings gets it; other settings get a session of their own."""
    from dagster import build_init_resource_context

    from dagster_tdstream import TDStreamSpark

    def run(resource: TDStreamSpark) -> object:
        resource.setup_for_execution(build_init_resource_context())
        session = resource.spark_session
        resource.release()
        return session

    first = run(TDStreamSpark())
    assert run(TDStreamSpark()) is first
    other = run(TDStreamSpark(spark_config={"spark.sql.shuffle.partitions": "2"}))
    assert other is not first
    assert other.conf.get("spark.sql.shuffle.partitions") == "2"
    assert first.conf.get("spark.sql.shuffle.partitions") == "4"
    assert first.sql("select 41 + 1 AS v").collect()[0].v == 42


def test_an_unreachable_endpoint_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    endpoint = f"sc://127.0.0.1:{free_port()}"
    with pytest.raises(SparkUnavailableError, match=f"Spark Connect endpoint {endpoint} is not reachable"):
        build_spark_session(endpoint)
    monkeypatch.setenv(SPARK_MASTER_ENV, endpoint)
    result = CliRunner().invoke(
        main,
        [
            "sql",
            "--warehouse",
            str(tmp_path / "wh"),
            "create database d; use d; create table t (ts timestamp, v int);select count(*) from t",
        ],
    )
    assert result.exit_code == 1
    (line,) = [text for text in result.stderr.splitlines() if text.startswith("error")]
    assert f"Spark Connect endpoint {endpoint} is not reachable" in line and "tdstream spark start" in line
    assert "Traceback" not in result.output


def test_triggers_wait_while_spark_is_down_and_run_once_it_is_back(
    session: Session, warehouse: Warehouse, spark: object
) -> None:
    session.execute(STREAM + ROWS)
    endpoint = f"sc://127.0.0.1:{free_port()}"
    down = StreamHarness(warehouse, timezone="UTC", spark_master=endpoint)
    report = down.run_until_idle()
    assert report.runs == 0 and report.failures == []
    reason = report.skipped["d__s__trigger"]
    assert f"Spark Connect endpoint {endpoint} is not reachable" in reason and "pending triggers wait" in reason
    assert warehouse.catalog.count_pending("d.s") == 2
    # Spark is back (the same instance and sensor cursor): the waiting triggers run, once
    down.resources["tdstream_spark"] = StreamHarness(warehouse, timezone="UTC").resources["tdstream_spark"]
    assert down.run_until_idle().failures == []
    assert output(session, "select ts, n, total from o order by total") == [(T, 2, 3), (T, 1, 10)]
    assert warehouse.catalog.count_pending("d.s") == 0


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    """A Spark standalone cluster from the pyspark package: a master and one worker on 127.0.0.1."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    port, web = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "SPARK_CONNECT_MODE": "0"}
    env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"  # its fixed port 6066 is not ours
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    spark_class = str(spark_home / "bin" / "spark-class")
    log = (tmp_path / "cluster.log").open("w")
    master = subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(web)],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"spark://127.0.0.1:{port}"
    worker = subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
         "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(tmp_path / "work"), url],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while "Successfully registered with master" not in (tmp_path / "cluster.log").read_text():
            assert master.poll() is None and worker.poll() is None, (tmp_path / "cluster.log").read_text()
            assert time.monotonic() < deadline, "the standalone cluster did not come up in 90 s"
            time.sleep(0.5)
        yield url
    finally:
        # scratch processes with nothing to keep: a standalone Worker and Master take about
        # 20 s each to honour SIGTERM (their shutdown hooks), 40 s of the test command
        for process in (worker, master):
            process.kill()
            process.wait(timeout=20)
        log.close()


def test_a_stream_runs_on_a_standalone_cluster_through_its_connect_server(
    standalone: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "cluster-connect"
    monkeypatch.setenv(HOME_ENV, str(home))
    # the same setting as any master: the warm Connect server runs its jobs on the cluster
    state = ensure_server(standalone, home, {"spark.executor.memory": "512m", "spark.cores.max": "1"})
    try:
        assert state.master == standalone
        warehouse = Warehouse(str(tmp_path / "wh"))
        session = Session(warehouse, timezone="UTC", spark=build_spark_session(state.url))
        session.execute(STREAM + ROWS)
        harness = StreamHarness(warehouse, timezone="UTC", spark_master=state.url)
        assert harness.run_until_idle().failures == []
        assert output(session, "select ts, n, total from o order by total") == [(T, 2, 3), (T, 1, 10)]
        assert "Registering app tdstream Spark Connect" in (tmp_path / "cluster.log").read_text()
    finally:
        stopped = stop_server(home)
    assert stopped is not None and stopped.pid == state.pid
    assert running_server(home) is None
    assert CliRunner().invoke(main, ["spark", "status"]).exit_code == 1


class _Proxy:
    """Forwards TCP connections to the run's server until closed: a server that goes away
    under a client, without stopping the one the other tests use."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept: a plain close would not
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def test_a_process_whose_server_went_away_still_exits(spark: object) -> None:
    """pyspark's client cleans up every open session at exit and retries for minutes when the
    server is gone; the sessions of a server that no longer answers are closed first."""
    from dagster_tdstream.compute.spark_server import parse_endpoint

    proxy = _Proxy(parse_endpoint(spark_endpoint()))
    child = subprocess.Popen(
        [
            sys.executable, "-c",
            "from dagster_tdstream.compute.spark import build_spark_session\n"
            f"s = build_spark_session('sc://127.0.0.1:{proxy.port}')\n"
            "print(s.sql('select 41 + 1').collect()[0][0], flush=True)\n"
            "input()\n",
        ],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "42"
        proxy.close()
        started = time.monotonic()
        child.communicate("\n", timeout=60)
        assert child.returncode == 0
        assert time.monotonic() - started < 30  # without the close: minutes of retries
    finally:
        child.kill()
        proxy.close()
