"""dagster-tdstream: TDengine's stream computing on Dagster, Spark and Delta Lake.

The public surface is what this module re-exports; ``tests/test_public_api.py`` pins it.
Exports load on first use (PEP 562): Spark's Python workers import the trigger modules to run
the window state machines, and must not pay for importing Dagster with them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers and editors
    from .compute.spark import build_spark_session
    from .errors import (
        CatalogError,
        QueryError,
        SqlSyntaxError,
        StreamValidationError,
        SubscriptionError,
        TDStreamError,
        UnknownDatabaseError,
        WriteRejectedError,
    )
    from .orchestration.component import TDStreamComponent
    from .orchestration.definitions import TDStreamProject, build_definitions
    from .orchestration.resources import TDStreamSpark, TDStreamWarehouse
    from .orchestration.subscriptions import subscription_rows, subscription_sensor
    from .orchestration.translator import DagsterTDStreamTranslator
    from .results import Result
    from .session import Session
    from .sql.parser import parse_script, parse_statement
    from .storage.warehouse import Warehouse
    from .testing.harness import StreamHarness

_EXPORTS = {
    "CatalogError": ".errors",
    "DagsterTDStreamTranslator": ".orchestration.translator",
    "QueryError": ".errors",
    "Result": ".results",
    "Session": ".session",
    "SqlSyntaxError": ".errors",
    "StreamHarness": ".testing.harness",
    "StreamValidationError": ".errors",
    "SubscriptionError": ".errors",
    "TDStreamComponent": ".orchestration.component",
    "TDStreamError": ".errors",
    "TDStreamProject": ".orchestration.definitions",
    "TDStreamSpark": ".orchestration.resources",
    "TDStreamWarehouse": ".orchestration.resources",
    "UnknownDatabaseError": ".errors",
    "Warehouse": ".storage.warehouse",
    "WriteRejectedError": ".errors",
    "build_definitions": ".orchestration.definitions",
    "build_spark_session": ".compute.spark",
    "parse_script": ".sql.parser",
    "parse_statement": ".sql.parser",
    "subscription_rows": ".orchestration.subscriptions",
    "subscription_sensor": ".orchestration.subscriptions",
}

__all__ = [
    "CatalogError",
    "DagsterTDStreamTranslator",
    "QueryError",
    "Result",
    "Session",
    "SqlSyntaxError",
    "StreamHarness",
    "StreamValidationError",
    "SubscriptionError",
    "TDStreamComponent",
    "TDStreamError",
    "TDStreamProject",
    "TDStreamSpark",
    "TDStreamWarehouse",
    "UnknownDatabaseError",
    "Warehouse",
    "WriteRejectedError",
    "build_definitions",
    "build_spark_session",
    "parse_script",
    "parse_statement",
    "subscription_rows",
    "subscription_sensor",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
