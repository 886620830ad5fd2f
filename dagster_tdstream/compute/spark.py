"""Spark sessions for tdstream: always a Spark Connect client of a warm, shared server.

Owns how a session is obtained from the one setting ``TDSTREAM_SPARK_MASTER``: a Spark Connect
URL (``sc://host:port``) is used as it is; anything else — ``local[2]`` (the default), a
standalone master ``spark://host:7077``, ``yarn`` — is the master of the local Spark Connect
server that ``spark_server.py`` starts once and every process adopts, so no run, sensor or
shell boots a JVM of its own. Sets the session settings TDengine's semantics need, and keeps
the sessions runs have released for the next run of the process (``acquire_spark_session``).
Must not read or write tables: ``storage/spark_read.py`` registers them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
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
    # A grouped aggregate first probes a small map sized by this (2^16 entries by default) and
    # falls back to the general one once it is full: a history groups by window and child
    # table (166,000 windows in a 10 M-row table of 1,000 children, 83,000 in each task), so
    # past 65,536 groups every row paid both probes. 2^20 entries (an 8 MB bucket array per
    # aggregating task): the 10 M-row INTERVAL aggregate 1.10 → 0.91 s, a whole history run
    # 1.80 → 1.60 s (medians of 5 alternated rounds); a 3,000-row aggregate the same.
    "spark.sql.codegen.aggregate.fastHashMap.capacityBit": "20",
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
    return _connect(spark_endpoint(master, warehouse=warehouse, conf=conf), app_name, conf)


def _connect(url: str, app_name: str, conf: dict[str, str] | None) -> Any:
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    # pyspark.sql.functions and friends dispatch on this: set, they build Connect expressions
    # (pyspark's own builder sets it the same way for a remote session)
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    # pyspark logs every failed query's analysis error at ERROR; the session turns those into
    # one-line QueryErrors, so the log record is noise
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession.builder.remote(url).appName(app_name).create()
    # before the interpreter joins the thread pool pyspark releases query results on (a release
    # retrying against a server gone would hold the exit for minutes): threading's exit hooks
    # run before atexit's, last-in first-out, and the pool's own was registered at its import
    threading._register_atexit(_close_if_server_gone, session, url)  # type: ignore[attr-defined]
    settings = {**SESSION_CONF, **{k: v for k, v in (conf or {}).items() if k.startswith("spark.sql.")}}
    for key, value in settings.items():
        session.conf.set(key, value)
    from pyspark.sql.types import DoubleType

    # TDengine's own apercentile algorithms, which Spark has no counterpart of
    session.udf.register(APERCENTILE_UDF, apercentile, DoubleType())
    return session


def _close_if_server_gone(session: Any, url: str) -> None:
    """At exit, pyspark's client sends clean-up RPCs for every session it has not closed, and
    a query's results may still be being released in the background; when the server is gone
    (stopped before this process ends, as ``tdstream spark stop`` or a test run's teardown
    does) each one retries for minutes and the process hangs in its exit. A session whose
    server no longer accepts connections is closed here first (no clean-up RPC; closing the
    channel cancels a release still retrying), so the client has nothing left to wait on."""
    with contextlib.suppress(Exception):
        if not session.client.is_closed and not endpoint_reachable(url, timeout=0.5):
            # the channel first: the client's close waits up to 10 s on pending releases, by
            # which time their retries sleep for seconds between attempts
            channel = getattr(session.client, "_channel", None)
            if channel is not None:
                channel.close()
            session.client.close()


# Sessions that runs of this process released, by endpoint and settings. A fresh server-side
# session runs its first queries about 0.2 s slower than one that has served queries before
# (measured: 0.37 s against 0.16 s for a small aggregate), and the harness, the conformance
# runner and `tdstream run --until-idle` start a run per batch. A released session holds nothing
# of its run: SparkViews drops the views it registered, and a run sets no session setting.
_POOL_LOCK = threading.Lock()
_IDLE: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, Any]]] = {}
_KEYS: dict[int, tuple[str, tuple[tuple[str, str], ...]]] = {}  # id(session) → its pool key
# under the server's session timeout (``defaultSessionTimeout``, 10 min), after which the
# server has forgotten the session; the sessions idle when the process exits end there then
# (stopping them at exit would wait on the client's retries wherever the server is gone)
IDLE_SECONDS = 300.0
POOL_SIZE = 4  # idle sessions kept per endpoint and settings; more are stopped


def acquire_spark_session(
    master: str | None = None, conf: dict[str, str] | None = None, *, warehouse: str | None = None
) -> Any:
    """A session on the warm server for one run: one this process released for the same
    endpoint and settings, else a new one (``build_spark_session``). Give it back with
    ``release_spark_session``. A server restarted meanwhile listens on another port, so the
    sessions of the old one are never handed out."""
    url = spark_endpoint(master, warehouse=warehouse, conf=conf)
    key = (url, tuple(sorted((conf or {}).items())))
    now = time.monotonic()
    stale = []
    session = None
    with _POOL_LOCK:
        idle = _IDLE.get(key, [])
        while idle and session is None:
            since, candidate = idle.pop()
            if now - since < IDLE_SECONDS:
                session = candidate
            else:
                stale.append(candidate)
    for old in stale:
        _stop(old)
    if session is None:
        session = _connect(url, "tdstream", conf)
        with _POOL_LOCK:
            _KEYS[id(session)] = key
    return session


def release_spark_session(session: Any) -> None:
    """A run is done with ``session`` (from ``acquire_spark_session``): kept for the next run
    of this process, or stopped when enough are kept."""
    with _POOL_LOCK:
        key = _KEYS.get(id(session))
        idle = _IDLE.setdefault(key, []) if key is not None else None
        if idle is not None and len(idle) < POOL_SIZE:
            idle.append((time.monotonic(), session))
            return
    _stop(session)


def _stop(session: Any) -> None:
    """Ends the server side of a session; one the server no longer has is just dropped."""
    with _POOL_LOCK:
        _KEYS.pop(id(session), None)
    with contextlib.suppress(Exception):
        session.stop()


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
