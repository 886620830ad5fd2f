"""Resources: the warehouse and Spark, as Dagster ``ConfigurableResource``s."""

from __future__ import annotations

import os
import threading
from typing import Any
from zoneinfo import ZoneInfo

from dagster import ConfigurableResource, InitResourceContext
from dagster_pyspark import PySparkResource
from pydantic import Field, PrivateAttr

from ..compute.spark import acquire_spark_session, release_spark_session, spark_endpoint
from ..sql.timeunits import resolve_timezone
from ..storage.registry import StreamDefinition
from ..storage.warehouse import METADATA_ENV, Warehouse, resolve_warehouse_uri

_warehouses_lock = threading.Lock()
_warehouses: dict[tuple[str, str | None], Warehouse] = {}


def _location(uri: str | None, metadata_url: str | None) -> tuple[str, str | None]:
    return resolve_warehouse_uri(uri), metadata_url or os.environ.get(METADATA_ENV)


def open_warehouse(uri: str | None, metadata_url: str | None) -> Warehouse:
    """One ``Warehouse`` per location and process: Dagster hands every run and tick a fresh
    copy of a resource, and each would otherwise open its own catalog engine and Delta table
    handles, and a new catalog engine checks the catalog's schema: a tick paid for both."""
    key = _location(uri, metadata_url)
    with _warehouses_lock:
        warehouse = _warehouses.get(key)
        if warehouse is None:
            warehouse = _warehouses[key] = Warehouse(uri, metadata_url=metadata_url)
        return warehouse


def close_warehouse(uri: str | None, metadata_url: str | None) -> None:
    """Close and forget this process's shared ``Warehouse`` of a location (its catalog's
    connections and table handles), for a process done with it — a test harness: a process
    driving many locations in turn would otherwise keep every one open."""
    with _warehouses_lock:
        warehouse = _warehouses.pop(_location(uri, metadata_url), None)
    if warehouse is not None:
        warehouse.close()


class TDStreamWarehouse(ConfigurableResource):
    """Where tables and the catalog live; ``uri``/``metadata_url`` default to the
    ``TDSTREAM_WAREHOUSE``/``TDSTREAM_METADATA_URL`` environment, then ``./.tdstream``."""

    uri: str | None = None
    metadata_url: str | None = None
    timezone: str | None = None

    _warehouse: Warehouse | None = PrivateAttr(default=None)

    def get(self) -> Warehouse:
        if self._warehouse is None:
            self._warehouse = open_warehouse(self.uri, self.metadata_url)
        return self._warehouse

    def zone(self, stream: StreamDefinition) -> ZoneInfo:
        """The time zone the stream's literals are read in: that of the session that created
        it, else this resource's."""
        return resolve_timezone(stream.info.timezone or self.timezone)


class TDStreamSpark(PySparkResource):
    """dagster-pyspark's resource as a client of the warm Spark: ``master`` is a Spark Connect
    ``sc://host:port`` URL, or the master (``local[2]``, ``spark://host:7077``) of the local
    Connect server kept beside ``warehouse``; unset, ``TDSTREAM_SPARK_MASTER`` then ``local[2]``.
    The session is opened on first use (a sensor only checks the endpoint), never with a JVM of
    its own, and handed back for the process's next run when the run ends (``release``)."""

    master: str | None = None
    warehouse: str | None = None
    spark_config: dict[str, Any] = Field(default_factory=dict)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self._spark_session = None

    @property
    def spark_session(self) -> Any:
        if self._spark_session is None:
            self._spark_session = acquire_spark_session(self.master, self._conf(), warehouse=self.warehouse)
        return self._spark_session

    def endpoint(self) -> str:
        """The Spark Connect URL runs will use, the local server started if it is down; raises
        ``SparkUnavailableError`` with one line naming the endpoint otherwise."""
        return spark_endpoint(self.master, warehouse=self.warehouse, conf=self._conf())

    def release(self) -> None:
        """Hands the session back for the process's next run (``release_spark_session``); the
        run calls it when it is done. A resource teardown would make this a context-manager
        resource, which sensor contexts would then have to open as one."""
        if self._spark_session is not None:
            release_spark_session(self._spark_session)
            self._spark_session = None

    def _conf(self) -> dict[str, str]:
        return {key: str(value) for key, value in self.spark_config.items()}
