"""TDengine's client options a session holds: ``ALTER LOCAL 'name' 'value'``.

Owns the options this engine reads (their names as TDengine spells them, case-insensitive,
their values' forms and ranges) and setting them on a session's ``ClientOptions``. Options
live as long as the session, as in TDengine's client. Does not read or write storage.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import QueryError
from ..sql import ast

_TRUE, _FALSE = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


@dataclass
class ClientOptions:
    # querySmaOptimize: queries read TSMAs (families/tsma_query.py); TDengine's default is off
    query_sma_optimize: bool = False
    # maxTsmaCalcDelay (s): a TSMA further behind its table's newest row is not read
    max_tsma_calc_delay: int = 600
    # keepColumnName: an unaliased first/last/last_row(col) is named col (sql/keep_column_name.py)
    keep_column_name: bool = False

    def alter(self, stmt: ast.AlterLocal) -> str:
        """Set one option; a clear error for an unknown name or a value out of its range."""
        name, value = stmt.name.lower(), stmt.value.strip().lower()
        where = {"line": stmt.pos.line or None, "column": stmt.pos.column or None}
        if name == "querysmaoptimize":
            if value not in _TRUE + _FALSE:
                raise QueryError(f"querySmaOptimize is 0 or 1, got {stmt.value!r}", **where)
            self.query_sma_optimize = value in _TRUE
            return f"querySmaOptimize set to {int(self.query_sma_optimize)}"
        if name == "maxtsmacalcdelay":
            if not value.isdigit() or not 600 <= int(value) <= 86400:
                raise QueryError(f"maxTsmaCalcDelay is whole seconds from 600 to 86400, got {stmt.value!r}", **where)
            self.max_tsma_calc_delay = int(value)
            return f"maxTsmaCalcDelay set to {self.max_tsma_calc_delay}"
        if name == "keepcolumnname":
            if value not in _TRUE + _FALSE:
                raise QueryError(f"keepColumnName is 0 or 1, got {stmt.value!r}", **where)
            self.keep_column_name = value in _TRUE
            return f"keepColumnName set to {int(self.keep_column_name)}"
        raise QueryError(
            f"unknown client option {stmt.name!r}: expected querySmaOptimize, maxTsmaCalcDelay or keepColumnName",
            **where,
        )
