"""Resources: the warehouse and Spark, as Dagster ``ConfigurableResource``s."""

from __future__ import annotations

from typing import Any

from dagster import ConfigurableResource, InitResourceContext
from dagster_pyspark import PySparkResource
from pydantic import Field, PrivateAttr

from ..compute.spark import build_spark_session
from ..sql.timeunits import resolve_timezone
from ..storage.warehouse import Warehouse


class TDStreamWarehouse(ConfigurableResource):
    """Where tables and the catalog live; ``uri``/``metadata_url`` default to the
    ``TDSTREAM_WAREHOUSE``/``TDSTREAM_METADATA_URL`` environment, then ``./.tdstream``."""

    uri: str | None = None
    metadata_url: str | None = None
    timezone: str | None = None

    _warehouse: Warehouse | None = PrivateAttr(default=None)

    def get(self) -> Warehouse:
        if self._warehouse is None:
            self._warehouse = Warehouse(self.uri, metadata_url=self.metadata_url)
        return self._warehouse

    def zone(self) -> Any:
        return resolve_timezone(self.timezone)


class TDStreamSpark(PySparkResource):
    """dagster-pyspark's resource with tdstream's session defaults: ``master`` is
    ``local[2]`` by default, a cluster URL, or a Spark Connect ``sc://host:port`` URL."""

    master: str = "local[2]"
    spark_config: dict[str, Any] = Field(default_factory=dict)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._spark_session = build_spark_session(self.master, conf={k: str(v) for k, v in self.spark_config.items()})
