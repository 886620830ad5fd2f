"""The warm Spark: one local Spark Connect server shared by every run, sensor and SQL session.

Owns the server's life cycle on this machine — starting it from the pyspark package
(``spark-submit`` of ``SparkConnectServer``, bound to 127.0.0.1 on a free port, its log and a
small state file in a folder beside the warehouse), adopting one that already runs (the state
file names its pid, port and master; a lock keeps two processes from starting two), showing
and stopping it. A cold JVM costs 10–20 s; with the server warm a run pays a gRPC connection.
Must not build sessions (``spark.py`` does) nor read tables.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import SparkUnavailableError

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STATE_FILE = "server.json"
LOG_FILE = "spark-connect.log"
LOCK_FILE = "server.lock"
HOME_ENV = "TDSTREAM_SPARK_HOME"  # where the state and log live when the warehouse is not local
START_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 30.0
LOCK_TIMEOUT_SECONDS = START_TIMEOUT_SECONDS + 30.0  # another process may be starting the server

# Settings every session on the server starts from: TDengine's semantics (ANSI off, so 1/0 is
# NULL), UTC session time (the translator converts to the session zone itself), loopback only,
# no UI, small shuffles for a 2-core machine. A client's own session may override SQL settings.
SERVER_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.log.level": "WARN",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.ansi.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.adaptive.enabled": "true",
    # A query reads a table as the explicit list of its Delta snapshot's files; above this many
    # paths Spark stats them with a distributed job (about a second for 200 small files against
    # 0.1 s listed in the driver). The embedded server reads local files, where the driver is fast.
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
    "spark.connect.grpc.binding.address": "127.0.0.1",
    # a run that dies without releasing its session leaves it to expire, not to pile up
    "spark.connect.session.manager.defaultSessionTimeout": "10min",
}


@dataclass(frozen=True)
class ServerState:
    pid: int
    port: int
    master: str
    started: float
    log: str

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


def server_home(warehouse_uri: str | None = None) -> Path:
    """The folder of the server's state and log: ``_spark`` inside a local warehouse (beside its
    databases), else ``TDSTREAM_SPARK_HOME`` or ``~/.tdstream/spark``."""
    from ..storage.delta import is_local, local_path
    from ..storage.warehouse import resolve_warehouse_uri

    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).resolve()
    uri = resolve_warehouse_uri(warehouse_uri)
    if is_local(uri):
        return local_path(uri) / "_spark"
    return Path.home() / ".tdstream" / "spark"


def endpoint_reachable(url: str, timeout: float = 2.0) -> bool:
    """Whether something accepts TCP connections at a ``sc://host:port`` URL."""
    host, port = parse_endpoint(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def parse_endpoint(url: str) -> tuple[str, int]:
    rest = url.removeprefix("sc://").split("/", 1)[0].split(";", 1)[0]
    host, _, port = rest.rpartition(":")
    if not host:
        return rest, 15002
    try:
        return host, int(port)
    except ValueError as exc:
        raise SparkUnavailableError(f"Spark Connect endpoint {url}: the port must be a number") from exc


def running_server(home: Path) -> ServerState | None:
    """The server the state file names, if its process lives and its port answers."""
    state = _recorded(home)
    if state is None or not _alive(state.pid) or not endpoint_reachable(state.url, timeout=1.0):
        return None
    return state


def ensure_server(master: str, home: Path | None = None, conf: dict[str, str] | None = None) -> ServerState:
    """The running server of ``home``, started first if none runs (adopted if another process
    started it). A server running on another master is kept: stop it to change masters."""
    home = home or server_home()
    state = running_server(home)
    if state is not None:
        return state
    with _locked(home):
        state = running_server(home)  # another process may have started it while we waited
        if state is not None:
            return state
        return _start(master, home, conf or {})


def stop_server(home: Path | None = None) -> ServerState | None:
    """Stops the server of ``home`` (SIGTERM, then SIGKILL after a bound); returns what ran."""
    home = home or server_home()
    with _locked(home):
        state = _recorded(home)
        if state is not None and _alive(state.pid):
            _terminate(state.pid)
        (home / STATE_FILE).unlink(missing_ok=True)
        return state


def _recorded(home: Path) -> ServerState | None:
    """What the state file says, alive or not; None without a readable one."""
    try:
        return ServerState(**json.loads((home / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _start(master: str, home: Path, conf: dict[str, str]) -> ServerState:
    home.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    settings = {**SERVER_CONF, **conf, "spark.connect.grpc.binding.port": str(port)}
    command = [str(_spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", master]
    command += ["--name", "tdstream Spark Connect"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        # the server's Python workers (the trigger replay and row-window UDFs) import this
        # package: they run this interpreter, not whatever python3 is on PATH
        "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        "PYARROW_IGNORE_TIMEZONE": "1",
        # pyspark's launcher would otherwise start a Connect client, not the classic JVM
        "SPARK_CONNECT_MODE": "0",
    }
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    log = home / LOG_FILE
    with log.open("ab") as out:
        out.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting on {master}, port {port}\n".encode())
        out.flush()
        # a session of its own: the server outlives the run or shell that started it
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    state = ServerState(pid=process.pid, port=port, master=master, started=time.time(), log=str(log))
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not endpoint_reachable(state.url, timeout=0.5):
        if process.poll() is not None:
            raise SparkUnavailableError(
                f"the local Spark Connect server exited with code {process.returncode} while starting; see {log}"
            )
        if time.monotonic() > deadline:
            _terminate(process.pid)
            raise SparkUnavailableError(
                f"the local Spark Connect server did not answer on port {port} within "
                f"{START_TIMEOUT_SECONDS:g} s; see {log}"
            )
        time.sleep(0.25)
    (home / STATE_FILE).write_text(json.dumps(asdict(state)))
    return state


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of this process counts as gone
    with contextlib.suppress(ChildProcessError):
        finished, _ = os.waitpid(pid, os.WNOHANG)
        if finished == pid:
            return False
    return True


def _terminate(pid: int) -> None:
    """SIGTERM the server's process group (spark-submit and its JVM), SIGKILL after a bound."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + LOCK_TIMEOUT_SECONDS
    with (home / LOCK_FILE).open("w") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SparkUnavailableError(
                        f"another process holds {home / LOCK_FILE} for over {LOCK_TIMEOUT_SECONDS:g} s"
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
