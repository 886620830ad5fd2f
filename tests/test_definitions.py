"""Streams as Dagster definitions: the builder, the translator, partitions, the code location."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
from click.testing import CliRunner
from dagster import (
    AssetKey,
    AssetSpec,
    BackfillPolicy,
    DagsterInstance,
    Definitions,
    SensorEvaluationContext,
    SensorResult,
    build_sensor_context,
)
from dagster._core.instance.ref import InstanceRef

from dagster_tdstream import (
    DagsterTDStreamTranslator,
    Session,
    TDStreamProject,
    TDStreamWarehouse,
    Warehouse,
    build_definitions,
)
from dagster_tdstream.cli.main import main
from dagster_tdstream.storage.registry import StreamDefinition

from .conftest import CONFORMANCE

ROOT = Path(__file__).resolve().parents[1]

STREAMS = """
create database d; use d;
create stable st (ts timestamp, v int) tags (g int);
create stream fast interval(1m) sliding(1m) from st partition by tbname into fast_out as select _twstart, avg(v) from %%trows;
create stream slow interval(2h) sliding(1h) from st into slow_out as select _twstart, count(*) from %%trows;
"""


def project(tmp_path: Path, sql: str = STREAMS) -> TDStreamProject:
    path = tmp_path / "streams.sql"
    path.write_text(sql)
    return TDStreamProject(warehouse=str(tmp_path / "wh"), sql_files=[path])


def test_every_stream_becomes_a_partitioned_asset_and_a_sensor(tmp_path: Path) -> None:
    defs = build_definitions(project(tmp_path))
    Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    fast = graph.get(AssetKey(["tdstream", "d", "fast_out"]))
    slow = graph.get(AssetKey(["tdstream", "d", "slow_out"]))
    assert fast.partitions_def.get_partition_keys()[0].endswith("-00:00")  # hourly buckets for 1m windows
    assert len(slow.partitions_def.get_partition_keys()[0]) == len("2025-01-01")  # daily for 2h windows
    assert fast.backfill_policy == BackfillPolicy.single_run()
    assert fast.metadata["tdstream/trigger_type"] == "INTERVAL"
    assert fast.metadata["tdstream/stream"] == "d.fast"
    assert fast.metadata["tdstream/partition_by"] == "tbname"
    assert "create stream fast" in fast.metadata["tdstream/sql"].value
    assert fast.group_name == "d" and fast.kinds == {"spark", "delta"}
    # and the live worker's keeper, with the job it keeps running
    assert sorted(s.name for s in defs.sensors) == ["d__fast__trigger", "d__slow__trigger", "tdstream_live_worker"]
    assert [job.name for job in defs.jobs or []] == ["tdstream_live_worker"]
    # due on every pass of the daemon (which waits 5 s between passes by itself)
    assert defs.resolve_sensor_def("d__fast__trigger").minimum_interval_seconds == 1
    assert set(defs.resources) == {"tdstream_warehouse", "tdstream_spark", "tdstream_notifier"}


def test_loading_twice_is_idempotent_and_code_versions_follow_the_sql(tmp_path: Path) -> None:
    first = build_definitions(project(tmp_path)).resolve_asset_graph()
    # the streams' output tables exist once they produced results; a reload must still work
    Session(Warehouse(str(tmp_path / "wh"))).execute(
        "create table d.fast_out (ts timestamp, a double) tags (tag_tbname varchar(270))"
    )
    again = build_definitions(project(tmp_path)).resolve_asset_graph()  # the files apply as IF NOT EXISTS
    key = AssetKey(["tdstream", "d", "fast_out"])
    assert first.get(key).code_version == again.get(key).code_version
    # white space and keyword case do not change the version; the SQL's meaning does
    other = Warehouse(str(tmp_path / "other"))
    Session(other).execute(
        "create database d; use d; create stable st (ts timestamp, v int) tags (g int);"
        "CREATE STREAM fast INTERVAL(1m)   SLIDING(1m) FROM st PARTITION BY tbname INTO fast_out AS SELECT _twstart, avg(v) FROM %%trows;"
        "create stream slow interval(2h) sliding(1h) from st into slow_out as select _twstart, sum(v) from %%trows;"
    )
    rebuilt = build_definitions(TDStreamProject(warehouse=other.uri)).resolve_asset_graph()
    assert rebuilt.get(key).code_version == first.get(key).code_version
    slow = AssetKey(["tdstream", "d", "slow_out"])
    assert rebuilt.get(slow).code_version != first.get(slow).code_version


def test_sensor_ticks_as_the_daemon_runs_them_share_one_instance_and_one_warehouse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: object
) -> None:
    """The daemon hands a tick an instance reference; a tick that opened the instance (Alembic's
    migration scripts loaded on SQLite storage) or a new catalog engine each time spent half
    of the code server's CPU with 20 streams on it."""
    defs = build_definitions(project(tmp_path))
    repository = defs.get_repository_def()
    sensor = repository.get_sensor_def("d__fast__trigger")
    opened: list[object] = []
    real = DagsterInstance.from_ref

    def counting(ref: InstanceRef) -> DagsterInstance:
        opened.append(ref)
        return real(ref)

    monkeypatch.setattr(DagsterInstance, "from_ref", staticmethod(counting))
    warehouse = defs.resources["tdstream_warehouse"].get()
    session = Session(warehouse, timezone="UTC")
    session.execute("use d; create table c1 using st tags (1); insert into c1 values ('2025-01-01 00:00:10', 5)")
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(str(tmp_path / "dagster")) as instance:

        def tick(cursor: str | None) -> SensorResult:
            context = SensorEvaluationContext(
                instance.get_ref(), cursor=cursor, repository_name=repository.name,
                repository_def=repository, sensor_name=sensor.name,
            )  # fmt: skip
            with context:
                result = sensor.evaluate_tick(context)
            assert result.cursor is not None
            return result

        first = tick(None)
        assert first.skip_message is not None and "no pending" in first.skip_message.lower()
        session.execute("insert into d.c1 values ('2025-01-01 00:01:10', 7)")  # closes [0:00, 0:01)
        second = tick(first.cursor)
        third = tick(second.cursor)
    # the second tick queued the closed window and asked for its run (no live worker runs)
    assert len(second.run_requests) == 1 and second.run_requests[0].tags["tdstream/stream"] == "d.fast"
    assert warehouse.catalog.count_pending("d.fast") == 1
    assert third.cursor == second.cursor
    assert len(opened) == 1  # one instance for the three ticks
    # every copy Dagster makes of the warehouse resource opens the same catalog
    assert TDStreamWarehouse(uri=warehouse.uri).get() is warehouse


def test_translator_customises_keys_groups_and_metadata(tmp_path: Path) -> None:
    class Custom(DagsterTDStreamTranslator):
        def get_asset_spec(self, stream: StreamDefinition) -> AssetSpec:
            spec = super().get_asset_spec(stream)
            return spec.replace_attributes(
                key=AssetKey(["iot", stream.name]), group_name="iot", owners=["team:iot"]
            ).merge_attributes(metadata={"team": "iot"})

    graph = build_definitions(project(tmp_path), translator=Custom()).resolve_asset_graph()
    node = graph.get(AssetKey(["iot", "fast"]))
    assert node.group_name == "iot" and node.owners == ["team:iot"] and node.metadata["team"] == "iot"


def test_the_code_location_loads_the_demo_stream_and_the_feeder_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TDSTREAM_WAREHOUSE", str(tmp_path / "wh"))
    monkeypatch.syspath_prepend(str(ROOT))
    defs: Definitions = runpy.run_path(str(ROOT / "definitions.py"))["defs"]
    Definitions.validate_loadable(defs)
    assert defs.resolve_asset_graph().get(AssetKey(["tdstream", "power", "device_current_1m"])) is not None
    # the notifying demo stream: its asset delivers through a hook, the retry sensor is there
    high = next(a for a in defs.assets or [] if AssetKey(["tdstream", "power", "high_current"]) in a.keys)
    assert [h.name for h in high.hook_defs] == ["power__high_current__notify"]
    assert {s.name for s in defs.sensors or []} == {
        "power__device_current_1m__trigger",
        "power__high_current__trigger",
        "tdstream_notifications",
        "tdstream_live_worker",
        "demo_meter_feeder",
    }
    feeder = defs.resolve_sensor_def("demo_meter_feeder")
    warehouse = TDStreamWarehouse(uri=str(tmp_path / "wh"))
    result = feeder.evaluate_tick(build_sensor_context(resources={"tdstream_warehouse": warehouse}))
    assert result.skip_message == "wrote 12 readings into power.meters"
    table = warehouse.get().read_table(warehouse.get().table("power", "meters"))
    assert table.num_rows == 12 and set(table.column("tbname").to_pylist()) == {"d1001", "d1002", "d1003", "d1004"}


def test_cli_run_until_idle(tmp_path: Path, spark: object) -> None:
    wh = str(tmp_path / "wh")
    Session(Warehouse(wh), timezone="UTC").execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        "create stream s interval(10s) sliding(10s) from t into o as select _twstart, sum(v) from %%trows;"
        "insert into t values (1700000000000, 1) (1700000005000, 2) (1700000010000, 3)"
    )
    result = CliRunner().invoke(main, ["run", "--until-idle", "--warehouse", wh])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "2 sensor tick(s), 1 run(s)"
    out = CliRunner().invoke(
        main, ["sql", "--warehouse", wh, "--timezone", "UTC", "-d", "d", "--format", "csv", "select * from o"]
    )
    assert out.stdout.splitlines() == ["_twstart,sum(v)", "2023-11-14 22:13:20.000,3"]


def test_cli_conformance_runs_a_directory_and_writes_json(tmp_path: Path, spark: object) -> None:
    case = json.loads((CONFORMANCE / "cases" / "interval_partition_tbname_tags_tgrpid.json").read_text())
    broken = {**case, "id": "wrong_expectation", "expected": [{**case["expected"][1], "row_count": 3}]}
    cases = tmp_path / "suite" / "cases"
    cases.mkdir(parents=True)
    (cases / "a.json").write_text(json.dumps(case))
    (cases / "b.json").write_text(json.dumps(broken))
    report = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["conformance", str(tmp_path / "suite"), "--json", str(report)])
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("PASS interval_partition_tbname_tags_tgrpid")
    assert lines[1].startswith("FAIL wrong_expectation") and "2 row(s), expected 3" in lines[1]
    assert lines[-1] == "1 passed, 1 failed"
    written = json.loads(report.read_text())
    assert (written["passed"], written["failed"]) == (1, 1)
    assert [c["id"] for c in written["cases"]] == ["interval_partition_tbname_tags_tgrpid", "wrong_expectation"]
    assert all(isinstance(c["seconds"], float) for c in written["cases"])
