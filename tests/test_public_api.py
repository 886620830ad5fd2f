"""Pins the public surface: removing or renaming an export is a breaking change."""

from __future__ import annotations

import dagster_tdstream


def test_public_surface() -> None:
    assert sorted(dagster_tdstream.__all__) == [
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
    for name in dagster_tdstream.__all__:
        assert getattr(dagster_tdstream, name) is not None
    assert issubclass(dagster_tdstream.SqlSyntaxError, dagster_tdstream.TDStreamError)
    assert issubclass(dagster_tdstream.UnknownDatabaseError, dagster_tdstream.CatalogError)
