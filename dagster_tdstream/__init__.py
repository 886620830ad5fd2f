"""dagster-tdstream: TDengine's stream computing on Dagster, Spark and Delta Lake.

The public surface is what this module re-exports; ``tests/test_public_api.py`` pins it.
"""

from .compute.spark import build_spark_session as build_spark_session
from .errors import CatalogError as CatalogError
from .errors import QueryError as QueryError
from .errors import SqlSyntaxError as SqlSyntaxError
from .errors import StreamValidationError as StreamValidationError
from .errors import TDStreamError as TDStreamError
from .errors import WriteRejectedError as WriteRejectedError
from .orchestration.definitions import TDStreamProject as TDStreamProject
from .orchestration.definitions import build_definitions as build_definitions
from .orchestration.resources import TDStreamSpark as TDStreamSpark
from .orchestration.resources import TDStreamWarehouse as TDStreamWarehouse
from .orchestration.translator import DagsterTDStreamTranslator as DagsterTDStreamTranslator
from .results import Result as Result
from .session import Session as Session
from .sql.parser import parse_script as parse_script
from .sql.parser import parse_statement as parse_statement
from .storage.warehouse import Warehouse as Warehouse
from .testing.harness import StreamHarness as StreamHarness

__all__ = [
    "CatalogError",
    "DagsterTDStreamTranslator",
    "QueryError",
    "Result",
    "Session",
    "SqlSyntaxError",
    "StreamHarness",
    "StreamValidationError",
    "TDStreamError",
    "TDStreamProject",
    "TDStreamSpark",
    "TDStreamWarehouse",
    "Warehouse",
    "WriteRejectedError",
    "build_definitions",
    "build_spark_session",
    "parse_script",
    "parse_statement",
]
