"""SQL front end: tokens, AST, parser, validation, time literals and the query translator.

Owns everything about TDengine's SQL text; must not touch storage, Spark or Dagster (the
translator emits Spark SQL *text* over views the caller registers).
"""
