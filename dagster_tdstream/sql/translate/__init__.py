"""TDengine query → Spark SQL.

Owns the translation of a parsed SELECT into one Spark SQL statement over views the caller
registers: pseudo-columns, functions, query windows, output naming and which output
columns are timestamps. Pure: no Spark session, no catalog access beyond the resolver the
caller passes in.
"""

from .select import OutputColumn, SourceTable, TranslatedQuery, TranslationContext, translate_select

__all__ = ["OutputColumn", "SourceTable", "TranslatedQuery", "TranslationContext", "translate_select"]
