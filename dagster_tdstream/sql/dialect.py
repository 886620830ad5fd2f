"""The query dialect of a session: TDengine 3.x (the default) or the 2.x client's.

Owns the one difference in what a query returns that 2.x users rely on: a 2.x INTERVAL query
starts its result with the window's start (named ``ts``) without selecting it — ``select
count(*) from t interval(1d)`` has two columns there, one in 3.x. No catalog, no I/O.
"""

from __future__ import annotations

import dataclasses

from . import ast

DIALECTS = ("3.x", "2.x")


def as_dialect(select: ast.Select, dialect: str) -> ast.Select:
    """The 3.x SELECT that returns what ``select`` returns in ``dialect``."""
    if dialect == "2.x" and isinstance(select.window, ast.IntervalWindow):
        window_start = ast.SelectItem(ast.Column("_wstart"), "ts", "_wstart")
        return dataclasses.replace(select, items=(window_start, *select.items))
    return select
