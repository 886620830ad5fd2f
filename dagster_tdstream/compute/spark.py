"""Spark sessions for tdstream.

Owns how a Spark session is built: local by default (``local[2]``, UI off, loopback, small
shuffle, UTC session time, ANSI off so that division by zero yields NULL as in TDengine),
a cluster master URL or a Spark Connect ``sc://`` URL by config (``TDSTREAM_SPARK_MASTER``).
Must not read or write tables: ``storage/spark_read.py`` registers them.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

SPARK_MASTER_ENV = "TDSTREAM_SPARK_MASTER"

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.sql.session.timeZone": "UTC",
    # Spark 4 defaults to ANSI mode, where 1/0 raises; TDengine returns NULL
    "spark.sql.ansi.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "127.0.0.1",
    "spark.sql.adaptive.enabled": "true",
}


def build_spark_session(
    master: str | None = None, app_name: str = "tdstream", conf: dict[str, str] | None = None
) -> Any:
    """A Spark session (``pyspark.sql.SparkSession``); reuses the active one if any."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    # Python workers (the trigger replay UDF) need this interpreter's packages: without this,
    # Spark starts whatever ``python3`` is first on PATH, which lacks pyarrow outside a venv shell
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or os.environ.get(SPARK_MASTER_ENV) or "local[2]"
    builder = SparkSession.builder.appName(app_name)
    if master.startswith("sc://"):
        builder = builder.remote(master)
    else:
        builder = builder.master(master)
        for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
            builder = builder.config(key, value)
    # pyspark logs every failed query's analysis error with the JVM stack at ERROR; the
    # session turns those into one-line QueryErrors, so the log record is noise
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR") if not master.startswith("sc://") else None
    return session


class LazySpark:
    """Starts Spark on first use: DDL and inserts never pay for a JVM."""

    def __init__(self, master: str | None = None, session: Any = None) -> None:
        self._master = master
        self._session = session

    def get(self) -> Any:
        if self._session is None:
            self._session = build_spark_session(self._master)
        return self._session
