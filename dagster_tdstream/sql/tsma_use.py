"""Which TSMA a query can read: TDengine's rules for using one, without the catalog.

Owns reading a SELECT for what a TSMA must keep for it (``query_shape``: the aggregates it
asks for, its INTERVAL, the primary-key range its WHERE sets) and refusing the queries no
TSMA may answer — a ``skip_tsma()`` hint, a filter or grouping on an ordinary column, another
kind of window, a function no TSMA keeps, a join or a subquery — and whether one TSMA covers
a shape (``covers``: every function kept, the INTERVAL, its OFFSET and SLIDING multiples of the
TSMA's interval). Choosing among the TSMAs that exist and reading their states is
``families/tsma_query.py``'s; merging the states is the translator's (``Renderer._merged``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import ast
from .constants import INT64_MAX, INT64_MIN, ConstantContext, key_bounds
from .intervals import day_shift
from .timeunits import Duration
from .translate.functions import AGGREGATES, SCALARS, TIME_FUNCTIONS
from .tsma import TSMA_FUNCTIONS
from .walk import children, conjuncts, walk

# pseudo-columns a query over a TSMA may still name: the window's and the query's bounds
_PSEUDO = ("_wstart", "_wend", "_wduration", "_qstart", "_qend", "_qduration")


@dataclass(frozen=True)
class QueryShape:
    """What a TSMA must keep to answer a query: ``functions`` as (function, column) pairs
    (``count(*)`` as ``count`` of the primary key), its INTERVAL, and the primary-key range
    [low, high] its WHERE sets (both ends included)."""

    table: ast.QualifiedName
    functions: frozenset[tuple[str, str]]
    window: ast.IntervalWindow | None
    low: int = INT64_MIN
    high: int = INT64_MAX
    tag_filtered: bool = False  # the WHERE also filters on tags or tbname
    timezone: str = "UTC"  # the session's: where INTERVAL(1d) and (1w) windows start


def query_shape(
    select: ast.Select,
    columns: tuple[ast.ColumnDef, ...],
    tags: tuple[ast.ColumnDef, ...],
    constants: ConstantContext,
) -> QueryShape | None:
    """The shape of a query a TSMA of its table could answer; None when none may (the
    documented restrictions, and anything this engine cannot merge from states)."""
    source = select.source
    if not isinstance(source, ast.TableSource) or "skip_tsma" in select.hints or select.distinct:
        return None
    if select.window is not None and not isinstance(select.window, ast.IntervalWindow):
        return None
    pk = columns[0].name.lower()
    ordinary = {c.name.lower() for c in columns}
    groupable = {t.name.lower() for t in tags} | {"tbname"}
    functions: set[tuple[str, str]] = set()

    def reads_only(expr: ast.Expr, allowed: set[str]) -> bool:
        """No aggregate, and no column but ``allowed`` ones."""
        for node in walk(expr):
            if isinstance(node, ast.Func) and (node.name in AGGREGATES or not _row_free(node)):
                return False
            if isinstance(node, ast.Star | ast.Placeholder):
                return False
            if isinstance(node, ast.Column) and node.name.lower() not in allowed:
                return False
        return True

    def covered(expr: ast.Expr, names: set[str]) -> bool:
        """Aggregates of kept functions, over ``names`` (tags, tbname, the windows'
        pseudo-columns; in ORDER BY and HAVING the select items' aliases too)."""
        stack = [expr]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Func) and node.name in AGGREGATES:
                needed = _kept_function(node, pk, ordinary)
                if needed is None:
                    return False
                functions.add(needed)
                continue
            if isinstance(node, ast.Func) and not _row_free(node):
                return False
            if isinstance(node, ast.Star | ast.Placeholder):
                return False
            if isinstance(node, ast.Column) and node.name.lower() not in names:
                return False
            stack.extend(children(node))
        return True

    names = groupable | set(_PSEUDO)
    aliases = names | {item.alias.lower() for item in select.items if item.alias}
    later = [o.expr for o in select.order_by] + ([select.having] if select.having is not None else [])
    if not all(covered(item.expr, names) for item in select.items) or not all(covered(e, aliases) for e in later):
        return None
    if not functions:
        return None
    if not all(reads_only(e, groupable) for e in (*select.partition_by, *select.group_by)):
        return None
    low, high, tag_filtered = INT64_MIN, INT64_MAX, False
    for node in conjuncts(select.where):
        bounds = key_bounds(node, _is_key(pk), constants)
        if bounds is not None:
            low, high = max(low, bounds[0]), min(high, bounds[1])
        elif not reads_only(node, groupable):
            return None  # a filter on an ordinary column (or a key condition not a range)
        else:
            tag_filtered = True
    return QueryShape(
        source.table, frozenset(functions), select.window, low, high, tag_filtered, constants.timezone.key
    )


def _row_free(func: ast.Func) -> bool:
    """A scalar function: computed from its arguments alone (no series, no selection)."""
    return func.name in SCALARS or func.name in ("cast", "now", "today") or func.name in TIME_FUNCTIONS


def _kept_function(func: ast.Func, pk: str, ordinary: set[str]) -> tuple[str, str] | None:
    """(function, column) a TSMA keeps for this aggregate; count(*) is count of the key."""
    if func.name not in TSMA_FUNCTIONS or func.distinct or len(func.args) != 1:
        return None
    arg = func.args[0]
    if func.name == "count" and isinstance(arg, ast.Star):
        return "count", pk
    if isinstance(arg, ast.Column) and arg.table is None and arg.name.lower() in ordinary:
        return func.name, arg.name.lower()
    return None


def _is_key(pk: str) -> Callable[[ast.Expr], bool]:
    return lambda expr: isinstance(expr, ast.Column) and expr.name.lower() in (pk, "_c0", "_rowts")


def covers(shape: QueryShape, functions: frozenset[tuple[str, str]], interval: Duration, timezone: str) -> bool:
    """A TSMA keeping ``functions`` per ``interval`` (its windows on ``timezone``'s days)
    answers the query: every function kept (spread is not built from min and max: TDengine's
    rule), and each of the query's windows a union of whole TSMA windows — its INTERVAL,
    OFFSET and SLIDING multiples of the TSMA's interval, and its grid on the TSMA's once days
    and weeks start at each one's local midnight (calendar months only by months: their starts
    are the time zone's)."""
    if not shape.functions <= functions:
        return False
    window = shape.window
    if window is None:
        return True
    parts = [d for d in (window.interval, window.sliding) if d is not None]
    if interval.is_calendar:
        if window.offset is not None and window.offset.value:
            return False
        return all(d.is_calendar and d.months % interval.months == 0 for d in parts)
    if window.offset is not None:
        parts.append(window.offset)
    if any(d.is_calendar or d.nanos % interval.nanos for d in parts):
        return False
    shift = day_shift(window.interval, "ns", shape.timezone) - day_shift(interval, "ns", timezone)
    return shift % interval.nanos == 0
