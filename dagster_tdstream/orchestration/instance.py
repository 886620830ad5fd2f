"""The Dagster instance the code server's sensor ticks share: one per instance reference and
process.

Dagster builds a new ``DagsterInstance`` for every sensor evaluation that touches
``context.instance`` or declares a resource parameter, and on the SQLite storage each new
instance loads Alembic's migration scripts to check the schema revision. With 20 trigger
sensors that was half of the code server's CPU (py-spy, ``docs/benchmarks.md``), spent on a
check whose answer cannot change while the process runs. Ticks therefore take their instance
from here and their resources from the code location's own resource objects (``sensors.py``).
Owns only the cache: no stream state, no run decisions.
"""

from __future__ import annotations

import threading

from dagster import DagsterInstance, SensorEvaluationContext
from dagster._serdes import serialize_value

_lock = threading.Lock()
_instances: dict[str, DagsterInstance] = {}


def tick_instance(context: SensorEvaluationContext) -> DagsterInstance:
    """The instance of the daemon that evaluates this tick, built once per process; a context
    built with an instance (tests, ``build_sensor_context``) keeps its own."""
    ref = context.instance_ref
    if ref is None:
        return context.instance
    key = serialize_value(ref)
    with _lock:
        instance = _instances.get(key)
        if instance is None:
            instance = _instances[key] = DagsterInstance.from_ref(ref)
        return instance
