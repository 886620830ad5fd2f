"""Stream statements against a real Dagster: a ``dagster-webserver`` on 127.0.0.1 serving a code
location built by ``build_definitions``, and its instance in a temporary DAGSTER_HOME. The SQL
runs through the ``tdstream sql`` command, which finds that Dagster the way a user's second
shell does: from what the code location recorded in the warehouse's catalog."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from dagster import DagsterInstance
from dagster._core.scheduler.instigation import InstigatorStatus

from dagster_tdstream import Session, StreamHarness, Warehouse
from dagster_tdstream.cli.main import main
from dagster_tdstream.orchestration.control import DagsterLink, DagsterStreamControl
from dagster_tdstream.orchestration.sensors import runnable_stream

from .conftest import free_port, output, stop_process

T = 1700000000000
LOCATION = "tdstream_under_test"


@pytest.fixture(scope="module")
def dagster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("dagster_control")
    warehouse = root / "wh"
    Session(Warehouse(str(warehouse)), timezone="UTC").execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream s interval(10s) sliding(10s) from t into o as select _twstart, sum(v) total from %%trows"
    )
    (root / "defs.py").write_text(
        textwrap.dedent(f"""
            from dagster_tdstream import TDStreamProject, build_definitions

            defs = build_definitions(TDStreamProject(warehouse={str(warehouse)!r}, timezone="UTC"))
        """)
    )
    (root / "workspace.yaml").write_text(
        f"load_from:\n  - python_file:\n      relative_path: defs.py\n      location_name: {LOCATION}\n"
    )
    home = root / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "DAGSTER_HOME": str(home), "TDSTREAM_DAGSTER_URL": url, "SPARK_LOCAL_IP": "127.0.0.1"}
    log = (root / "webserver.log").open("w")
    webserver = str(Path(sys.executable).parent / "dagster-webserver")
    server = subprocess.Popen(
        [webserver, "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/server_info", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((root / "webserver.log").read_text()) from None
                time.sleep(0.5)
        yield {"warehouse": str(warehouse), "home": str(home), "url": url, "root": root}
    finally:
        stop_process(server)
        log.close()


@pytest.fixture
def cli(dagster: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``tdstream sql`` in a shell that names no Dagster: it finds the one the catalog names."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("TDSTREAM_DAGSTER_URL", raising=False)

    def run(sql: str) -> list[str]:
        result = CliRunner().invoke(
            main, ["sql", "--warehouse", dagster["warehouse"], "--timezone", "UTC", "-d", "d", "--format", "csv", sql]
        )
        assert result.exit_code == 0, result.output
        return result.stdout.splitlines()

    return run


def _graphql(url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())["data"]


def _loaded(url: str) -> dict[str, Any]:
    """What the webserver shows: sensors with their status, schedules, asset keys."""
    data = _graphql(
        url,
        "{ workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError { ... on RepositoryLocation {"
        " repositories { sensors { name sensorState { id status } } schedules { name scheduleState { id status } }"
        " assetNodes { assetKey { path } } } } } } } } }",
    )
    (entry,) = data["workspaceOrError"]["locationEntries"]
    (repo,) = entry["locationOrLoadError"]["repositories"]
    return {
        "sensors": {s["name"]: s["sensorState"] for s in repo["sensors"]},
        "schedules": {s["name"]: s["scheduleState"] for s in repo["schedules"]},
        "assets": sorted("/".join(a["assetKey"]["path"]) for a in repo["assetNodes"]),
    }


def _stored_switches(home: str) -> dict[str, InstigatorStatus]:
    with DagsterInstance.from_config(home) as instance:
        return {s.instigator_name: s.status for s in instance.all_instigator_state()}


def _status(cli: Any, stream: str) -> str:
    rows = cli("select stream_name, status from information_schema.ins_streams")
    return dict(row.split(",") for row in rows[1:])[stream]


def test_the_code_location_records_where_dagster_runs(dagster: dict[str, Any]) -> None:
    link = DagsterLink.recorded(Warehouse(dagster["warehouse"]))
    assert link == DagsterLink(dagster["home"], dagster["url"])


def test_create_stream_reloads_the_code_location_and_drop_removes_it(dagster: dict[str, Any], cli: Any) -> None:
    assert "d__s2__trigger" not in _loaded(dagster["url"])["sensors"]
    lines = cli("create stream s2 count_window(2) from t into o2 as select _twstart, sum(v) total from %%trows")
    assert lines == ["Create OK", f"Dagster: reloaded code location {LOCATION}"]
    loaded = _loaded(dagster["url"])
    assert loaded["sensors"]["d__s2__trigger"]["status"] == "RUNNING"
    assert "tdstream/d/o2" in loaded["assets"]
    # idempotent: nothing changes, nothing is reloaded
    assert cli(
        "create stream if not exists s2 count_window(2) from t into o2 as select _twstart, sum(v) from %%trows"
    ) == ["OK (stream exists)"]
    # the stream computes (in-process here), then DROP takes its definitions and keeps its output
    cli(f"insert into t values ({T}, 1) ({T + 1000}, 2)")
    assert StreamHarness(Warehouse(dagster["warehouse"]), timezone="UTC").run_until_idle().failures == []
    assert cli("select total from o2") == ["total", "3"]
    assert cli("drop stream s2") == ["Drop OK", f"Dagster: reloaded code location {LOCATION}"]
    loaded = _loaded(dagster["url"])
    assert "d__s2__trigger" not in loaded["sensors"] and "tdstream/d/o2" not in loaded["assets"]
    assert cli("select total from o2") == ["total", "3"]
    assert cli("drop stream if exists s2") == ["Drop OK"]


def test_stop_and_start_switch_the_sensor_in_the_instance(dagster: dict[str, Any], cli: Any) -> None:
    assert cli("stop stream s") == ["Stop OK", "Dagster: sensor d__s__trigger stopped"]
    assert _stored_switches(dagster["home"])["d__s__trigger"] == InstigatorStatus.STOPPED
    assert _loaded(dagster["url"])["sensors"]["d__s__trigger"]["status"] == "STOPPED"
    assert _status(cli, "s") == "Stopped"
    assert cli("start stream s") == ["Start OK", "Dagster: sensor d__s__trigger started"]
    assert _stored_switches(dagster["home"])["d__s__trigger"] == InstigatorStatus.RUNNING
    assert _status(cli, "s") == "Running"


def test_turning_the_sensor_off_in_the_ui_stops_the_stream(dagster: dict[str, Any], cli: Any) -> None:
    state = _loaded(dagster["url"])["sensors"]["d__s__trigger"]
    # the UI's toggle sends exactly these mutations
    _graphql(dagster["url"], "mutation($id: String) { stopSensor(id: $id) { __typename } }", {"id": state["id"]})
    assert _status(cli, "s") == "Stopped"
    (header, row) = csv.reader(cli("show streams"))
    assert dict(zip(header, row, strict=True))["status"] == "Stopped"
    selector = {"repositoryLocationName": LOCATION, "repositoryName": "__repository__", "sensorName": "d__s__trigger"}
    _graphql(
        dagster["url"],
        "mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) { __typename } }",
        {"s": selector},
    )
    assert _status(cli, "s") == "Running"


def test_a_sensor_switched_on_by_hand_starts_its_stopped_stream(dagster: dict[str, Any], cli: Any) -> None:
    """The daemon evaluates a sensor only while it is on: one switched on since STOP STREAM
    (with no SQL session to notice) starts its stream on the tick."""
    warehouse = Warehouse(dagster["warehouse"])
    Session(warehouse, timezone="UTC").execute("stop stream d.s")  # no control: the registry only
    with DagsterInstance.from_config(dagster["home"]) as instance:
        assert _stored_switches(dagster["home"])["d__s__trigger"] == InstigatorStatus.RUNNING
        stream = runnable_stream(warehouse, "d.s", instance, "d__s__trigger")
        assert not isinstance(stream, str) and stream.info.status == "Running"
        cli("stop stream s")  # now both sides say stopped: the tick skips
        skipped = runnable_stream(warehouse, "d.s", instance, "d__s__trigger")
        assert "is stopped" in str(getattr(skipped, "skip_message", ""))
    cli("start stream s")


def test_a_period_stream_switches_its_schedule(dagster: dict[str, Any], cli: Any) -> None:
    assert cli("create stream p period(1m) into po as select cast(_tlocaltime/1000000 as timestamp) ts, 1 one") == [
        "Create OK",
        f"Dagster: reloaded code location {LOCATION}",
    ]
    assert _loaded(dagster["url"])["schedules"]["d__p__period"]["status"] == "RUNNING"
    assert cli("stop stream p") == ["Stop OK", "Dagster: schedule d__p__period stopped"]
    assert _loaded(dagster["url"])["schedules"]["d__p__period"]["status"] == "STOPPED"
    assert cli("start stream p") == ["Start OK", "Dagster: schedule d__p__period started"]
    assert _loaded(dagster["url"])["schedules"]["d__p__period"]["status"] == "RUNNING"
    # a stream created again under a dropped one's name does not inherit its switch
    cli("stop stream p")
    cli("drop stream p")
    assert "d__p__period" not in _stored_switches(dagster["home"])
    cli("create stream p period(1m) into po as select cast(_tlocaltime/1000000 as timestamp) ts, 1 one")
    assert _loaded(dagster["url"])["schedules"]["d__p__period"]["status"] == "RUNNING"
    assert _status(cli, "p") == "Running"
    cli("drop stream p")


def test_an_unreachable_dagster_is_reported_and_the_statement_still_counts(tmp_path: Path, spark: object) -> None:
    warehouse = Warehouse(str(tmp_path / "wh"))
    closed = f"http://127.0.0.1:{free_port()}"
    control = DagsterStreamControl(DagsterLink(None, closed), timeout_seconds=5)
    session = Session(warehouse, timezone="UTC", control=control)
    session.execute("create database d; use d; create table t (ts timestamp, v int)")
    (created,) = session.execute(
        "create stream s state_window(v) from t into o as select _twstart, count(*) n from %%trows"
    )
    assert created.message.splitlines() == [
        "Create OK",
        f"Dagster: no Dagster webserver answers at {closed} ([Errno 111] Connection refused); "
        "the change appears when the code location is reloaded",
    ]
    (stopped,) = session.execute("stop stream s")
    assert stopped.message.splitlines()[1].endswith("the sensor follows the stream's status on its next tick")
    assert output(session, "select status from information_schema.ins_streams") == [("Stopped",)]
