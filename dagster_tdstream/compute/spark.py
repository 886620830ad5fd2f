"""Spark sessions for tdstream: always a Spark Connect client of a warm, shared server.

Owns how a session is obtained from the one setting ``TDSTREAM_SPARK_MASTER``: a Spark Connect
URL (``sc://host:port``) is used as it is; anything else — ``local[2]`` (the default), a
standalone master ``spark://host:7077``, ``yarn`` — is the master of the local Spark Connect
server that ``spark_server.py`` starts once and every process adopts, so no run, sensor or
shell boots a JVM of its own. Sets the session settings TDengine's semantics need. Must not
read or write tables: ``storage/spark_read.py`` registers them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ..errors import SparkUnavailableError
from ..sql.translate.functions import APERCENTILE_UDF
from .apercentile import apercentile
from .spark_server import endpoint_reachable, ensure_server, server_home

SPARK_MASTER_ENV = "TDSTREAM_SPARK_MASTER"
DEFAULT_MASTER = "local[2]"

# set on every client session: a remote server may have other defaults than ours
SESSION_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    # Spark 4 defaults to ANSI mode, where 1/0 raises; TDengine returns NULL
    "spark.sql.ansi.enabled": "false",
}


def resolve_master(master: str | None = None) -> str:
    return master or os.environ.get(SPARK_MASTER_ENV) or DEFAULT_MASTER


def spark_endpoint(
    master: str | None = None, *, warehouse: str | None = None, conf: dict[str, str] | None = None
) -> str:
    """The Spark Connect URL to use: the configured endpoint, checked to answer, or the local
    warm server for ``master`` (started if none runs). Raises one clear line otherwise."""
    master = resolve_master(master)
    if master.startswith("sc://"):
        if not endpoint_reachable(master):
            raise SparkUnavailableError(
                f"Spark Connect endpoint {master} is not reachable; start it (for the local server: "
                f"`tdstream spark start`) or point {SPARK_MASTER_ENV} at a running one"
            )
        return master
    home = server_home(warehouse)
    return ensure_server(master, home, conf).url


def build_spark_session(
    master: str | None = None,
    app_name: str = "tdstream",
    conf: dict[str, str] | None = None,
    *,
    warehouse: str | None = None,
) -> Any:
    """A Spark Connect session (``pyspark.sql.connect.session.SparkSession``) on the warm server."""
    url = spark_endpoint(master, warehouse=warehouse, conf=conf)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    # pyspark.sql.functions and friends dispatch on this: set, they build Connect expressions
    # (pyspark's own builder sets it the same way for a remote session)
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    # pyspark logs every failed query's analysis error at ERROR; the session turns those into
    # one-line QueryErrors, so the log record is noise
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession.builder.remote(url).appName(app_name).create()
    settings = {**SESSION_CONF, **{k: v for k, v in (conf or {}).items() if k.startswith("spark.sql.")}}
    for key, value in settings.items():
        session.conf.set(key, value)
    from pyspark.sql.types import DoubleType

    # TDengine's own apercentile algorithms, which Spark has no counterpart of
    session.udf.register(APERCENTILE_UDF, apercentile, DoubleType())
    return session


class LazySpark:
    """Connects to Spark on first use: DDL and inserts never pay for it."""

    def __init__(self, master: str | None = None, session: Any = None, warehouse: str | Path | None = None) -> None:
        self._master = master
        self._session = session
        self._warehouse = str(warehouse) if warehouse is not None else None

    def get(self) -> Any:
        if self._session is None:
            self._session = build_spark_session(self._master, warehouse=self._warehouse)
        return self._session
