"""The Dagster Component: TDengine streams in a ``dg`` project from a ``defs.yaml``.

Owns the YAML surface (a folder of ``.sql`` files, the warehouse, Spark and partition settings),
the scaffold ``dg scaffold defs dagster_tdstream.TDStreamComponent NAME`` writes (a ``defs.yaml``
and an example ``streams/`` folder), and turning the two into ``build_definitions``. Must not
build definitions itself: ``definitions.py`` does, for this and for plain code locations.
"""

# no `from __future__ import annotations`: Resolvable reads the field types at run time
from dataclasses import dataclass, field
from pathlib import Path

from dagster import AssetSpec, Component, ComponentLoadContext, Definitions, Resolvable, Scaffolder, scaffold_component
from dagster.components.scaffold.scaffold import ScaffoldRequest, scaffold_with

from ..storage.registry import StreamDefinition
from .definitions import DEFAULT_MAX_LAG_SECONDS, TDStreamProject, build_definitions
from .translator import DagsterTDStreamTranslator

EXAMPLE_SQL = """\
-- Applied on every load of the code location (each CREATE acts as CREATE … IF NOT EXISTS).
create database if not exists power precision 'ms';
use power;
create stable if not exists meters (ts timestamp, current float, voltage int)
  tags (groupid int, location varchar(24));
-- per device and minute, computed when the minute closes
create stream if not exists device_current_1m interval(1m) sliding(1m)
  from meters partition by tbname
  into device_current_1m
  as select _twstart ts, avg(current) avg_current, max(voltage) max_voltage, count(*) readings from %%trows;
"""


class TDStreamScaffolder(Scaffolder):
    """``dg scaffold defs``: a ``defs.yaml`` naming the SQL folder and the warehouse, and a
    ``streams/`` folder with an example super table and stream to edit."""

    def scaffold(self, request: ScaffoldRequest) -> None:
        scaffold_component(request, {"sql_path": "streams", "warehouse": ".tdstream"})
        streams = Path(request.target_path) / "streams"
        streams.mkdir(parents=True, exist_ok=True)
        example = streams / "power.sql"
        if not example.exists():
            example.write_text(EXAMPLE_SQL)


@scaffold_with(TDStreamScaffolder)
@dataclass
class TDStreamComponent(Component, Resolvable):
    """TDengine streams (``CREATE STREAM``) from a folder of ``.sql`` files: each stream
    becomes a partitioned Spark asset with its trigger sensor (or PERIOD schedule) and a lag
    check. ``sql_path`` is read from the folder of the ``defs.yaml``, a relative local
    ``warehouse`` from the project's root (data does not belong in the source tree). Subclass
    and override ``get_asset_spec`` to change asset keys, groups or metadata."""

    sql_path: str = "streams"
    warehouse: str | None = None  # a path or URI; default TDSTREAM_WAREHOUSE or ./.tdstream
    metadata_url: str | None = None
    spark_master: str | None = None  # sc://… or the warm local server's master; default TDSTREAM_SPARK_MASTER
    spark_config: dict[str, str] = field(default_factory=dict)
    timezone: str | None = None
    partition_grain: str | None = None  # hourly | daily | monthly; default chosen from each window
    max_lag_seconds: float = DEFAULT_MAX_LAG_SECONDS

    def get_asset_spec(self, stream: StreamDefinition) -> AssetSpec:
        return DagsterTDStreamTranslator().get_asset_spec(stream)

    def build_defs(self, context: ComponentLoadContext) -> Definitions:
        folder = Path(context.path) / self.sql_path
        if not folder.is_dir():
            raise FileNotFoundError(f"{context.path / 'defs.yaml'}: sql_path {self.sql_path!r} is not a folder")
        project = TDStreamProject(
            warehouse=self._warehouse(context),
            sql_files=sorted(folder.glob("*.sql")),
            metadata_url=self.metadata_url,
            spark_master=self.spark_master,
            # YAML's template rendering may hand numbers over as numbers; Spark wants strings
            spark_config={key: str(value) for key, value in self.spark_config.items()},
            timezone=self.timezone,
            partition_grain=self.partition_grain,
            max_lag_seconds=self.max_lag_seconds,
        )
        return build_definitions(project, translator=_ComponentTranslator(self))

    def _warehouse(self, context: ComponentLoadContext) -> str | None:
        location = self.warehouse
        if location is None or "://" in location or Path(location).is_absolute():
            return location  # default, URIs and absolute paths as given
        return str((Path(context.project_root) / location).resolve())


class _ComponentTranslator(DagsterTDStreamTranslator):
    """Routes the definitions builder's translator to the component's ``get_asset_spec``."""

    def __init__(self, component: "TDStreamComponent") -> None:
        self.component = component

    def get_asset_spec(self, stream: StreamDefinition) -> AssetSpec:
        return self.component.get_asset_spec(stream)
