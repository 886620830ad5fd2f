"""TDengine query → Spark SQL.

Owns the translation of a parsed SELECT into one Spark SQL statement over views the caller
registers (and the row-window views it describes, ``RowWindowPlan``): pseudo-columns,
functions, query windows, output naming and which output
columns are timestamps; in stream mode, a whole batch of triggers at once. Pure: no Spark
session, no catalog access beyond the resolver the caller passes in.
"""

from .scope import (
    KeyAggregates,
    OutputColumn,
    RowWindowPlan,
    SourceTable,
    SpanWidth,
    StreamScope,
    TranslatedQuery,
    TranslationContext,
    UserFunctionRef,
)
from .select import translate_select
from .sources import row_condition, row_expression

__all__ = [
    "KeyAggregates",
    "OutputColumn",
    "RowWindowPlan",
    "SourceTable",
    "SpanWidth",
    "StreamScope",
    "TranslatedQuery",
    "TranslationContext",
    "UserFunctionRef",
    "row_condition",
    "row_expression",
    "translate_select",
]
