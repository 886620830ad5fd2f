"""The columns a SELECT computes for its row window (SESSION, STATE_WINDOW, EVENT_WINDOW,
COUNT_WINDOW), one per value the window's trigger reads.

Owns the names only: the translator computes these columns with Spark, the trigger replay
(``triggers.replay``) reads them; neither knows how the other works.
"""

from __future__ import annotations

from . import ast

QueryRowWindow = ast.SessionWindow | ast.StateWindow | ast.EventWindow | ast.CountWindow
# the values a query computes for its row window, one column each, named for the trigger
STATE_VALUE = "__state"


def start_flag(index: int) -> str:
    return f"__start{index}"


def end_flag(index: int) -> str:
    return f"__end{index}"


def counted_value(index: int) -> str:
    return f"__counted{index}"
