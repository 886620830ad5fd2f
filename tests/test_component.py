"""``TDStreamComponent`` in ``dg`` projects: scaffolded, loaded from ``defs.yaml``, customised
by subclassing, and driven by the real ``dg`` command."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml
from dagster import AssetKey, AssetSpec
from dagster.components.testing import create_defs_folder_sandbox

from dagster_tdstream import Session, TDStreamComponent, Warehouse
from dagster_tdstream.storage.registry import StreamDefinition

T = 1700000000000


class RenamingComponent(TDStreamComponent):
    """What a user writes to put the streams under their own asset keys."""

    def get_asset_spec(self, stream: StreamDefinition) -> AssetSpec:
        spec = super().get_asset_spec(stream)
        return spec.replace_attributes(key=AssetKey(["iot", stream.name]), group_name="iot")


def test_scaffold_writes_defs_yaml_and_an_example_that_loads(tmp_path: Path) -> None:
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(component_cls=TDStreamComponent, defs_path="meters")
        scaffolded = yaml.safe_load((defs_path / "defs.yaml").read_text())
        # the sandbox names the defining module; `dg scaffold` the public name (tested below)
        assert scaffolded["type"].endswith(".TDStreamComponent")
        assert scaffolded["attributes"] == {"sql_path": "streams", "warehouse": ".tdstream"}
        assert "create stream if not exists device_current_1m" in (defs_path / "streams" / "power.sql").read_text()
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (component, defs):
            assert isinstance(component, TDStreamComponent)
            key = AssetKey(["tdstream", "power", "device_current_1m"])
            asset = defs.resolve_asset_graph().get(key)
            assert asset.partitions_def is not None and asset.group_name == "power"
            assert [s.name for s in defs.sensors or []] == ["power__device_current_1m__trigger", "tdstream_live_worker"]
            assert set(defs.resources or {}) == {"tdstream_warehouse", "tdstream_spark", "tdstream_notifier"}
            # the relative warehouse is at the project's root, not in the source tree
            warehouse = Warehouse(str(sandbox.project_root / ".tdstream"))
            assert [s.key for s in warehouse.catalog.list_streams()] == ["power.device_current_1m"]


def test_yaml_attributes_and_a_subclass_shape_the_definitions(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.defs_folder_path / "custom"
        (defs_path / "sql").mkdir(parents=True)
        (defs_path / "sql" / "a.sql").write_text(
            "create database d; use d; create table t (ts timestamp, v int);"
            "create stream s count_window(2) from t into o as select _twstart, sum(v) total from %%trows;"
        )
        (defs_path / "defs.yaml").write_text(
            yaml.safe_dump(
                {
                    "type": f"{__name__}.RenamingComponent",
                    "attributes": {
                        "sql_path": "sql",
                        "warehouse": str(warehouse),
                        "timezone": "UTC",
                        "partition_grain": "daily",
                        "max_lag_seconds": 30,
                        "spark_config": {"spark.sql.shuffle.partitions": "2"},
                    },
                }
            )
        )
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (component, defs):
            assert isinstance(component, RenamingComponent)
            assert component.max_lag_seconds == 30
            asset = defs.resolve_asset_graph().get(AssetKey(["iot", "s"]))
            assert asset.group_name == "iot" and asset.partitions_def.cron_schedule == "0 0 * * *"  # daily
            assert defs.resources["tdstream_spark"].spark_config == {"spark.sql.shuffle.partitions": "2"}
    assert Session(Warehouse(str(warehouse))).query("show d.streams").rows[0][0] == "s"


def test_dg_scaffolds_and_lists_the_component(tmp_path: Path) -> None:
    """The real ``dg`` command in a dg project layout (pyproject with [tool.dg], src/<module>/defs)."""
    project = tmp_path / "iot_project"
    defs = project / "src" / "iot_project" / "defs"
    defs.mkdir(parents=True)
    (project / "pyproject.toml").write_text(
        textwrap.dedent("""
            [project]
            name = "iot-project"
            version = "0.1.0"
            requires-python = ">=3.11"
            dependencies = ["dagster-tdstream"]

            [tool.dg]
            directory_type = "project"

            [tool.dg.project]
            root_module = "iot_project"
        """)
    )
    (project / "src" / "iot_project" / "__init__.py").write_text("")
    (defs / "__init__.py").write_text("")
    (project / "src" / "iot_project" / "definitions.py").write_text(
        textwrap.dedent("""
            from pathlib import Path

            import dagster as dg


            @dg.definitions
            def defs() -> dg.Definitions:
                return dg.load_from_defs_folder(path_within_project=Path(__file__).parent.parent.parent)
        """)
    )
    venv = Path(sys.executable).parent
    env = {
        **os.environ,
        "VIRTUAL_ENV": str(venv.parent),
        "PATH": f"{venv}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(project / "src"),  # the project is not installed into the test venv
        "SPARK_LOCAL_IP": "127.0.0.1",
    }

    def dg(*args: str) -> str:
        done = subprocess.run(
            [str(venv / "dg"), *args], cwd=project, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    # `dg list components` lists the modules of this entry point group (read here: the
    # command itself costs another ~20 s of the test command)
    registered = {e.value for e in importlib.metadata.entry_points(group="dagster_dg_cli.registry_modules")}
    assert "dagster_tdstream" in registered
    dg("scaffold", "defs", "dagster_tdstream.TDStreamComponent", "meters")
    assert yaml.safe_load((defs / "meters" / "defs.yaml").read_text())["type"] == "dagster_tdstream.TDStreamComponent"
    assert (defs / "meters" / "streams" / "power.sql").exists()
    listed = json.loads(dg("list", "defs", "--json"))
    assert [s["name"] for s in listed["sensors"]] == ["power__device_current_1m__trigger", "tdstream_live_worker"]
    assert [c["key"] for c in listed["asset_checks"]] == ["tdstream/power/device_current_1m:stream_lag"]
    assert sorted(r["name"] for r in listed["resources"]) == [
        "tdstream_notifier",
        "tdstream_spark",
        "tdstream_warehouse",
    ]
    assert (project / ".tdstream" / "catalog.sqlite").exists()
