"""TDengine 2.x continuous queries: their rules, their result columns, and the stream each one is.

Owns what ``CREATE TABLE res AS SELECT … FROM t [WHERE …] INTERVAL(i) [SLIDING(s)] [GROUP BY
tbname|tags]`` means here: the 2.x rules checked before anything is created (an INTERVAL of
at least 10a, aggregate and selector functions only — not ``twa`` or ``elapsed`` —, one
table), the names 2.x gives result columns, and the 3.3.7 CREATE STREAM it is equivalent to::

    CREATE STREAM res INTERVAL(i) SLIDING(min(s, i)) FROM t [PARTITION BY <group by>]
      STREAM_OPTIONS(FILL_HISTORY | IGNORE_DISORDER | IGNORE_NODATA_TRIGGER [| PRE_FILTER(where)])
      INTO res AS SELECT _twstart ts, <items, named as 2.x names them> FROM %%trows

with options 3.3.7 does not have: its windows close by the wall clock, not by event time
(``FORCE_WINDOW_CLOSE``), so each complete window is computed once, when it is over, and a late
row never recomputes it; it first computes 10 s after CREATE (``FIRST_LAUNCH_DELAY``, 2.x's
streamCompStartDelay); an upper bound of the primary key in the WHERE is also its end
(``END_TIME``): once every window up to it is computed, the query stops by itself. ``now`` in
the WHERE is the moment the query was created (a time range ``ts > now and ts <= now + 1h``
bounds the run); a lower bound of the primary key is the
query's start time (FILL_HISTORY(start)), not a row filter. No catalog, no I/O.
"""

from __future__ import annotations

import dataclasses
import re

from ..errors import StreamValidationError
from . import ast
from .constants import ConstantContext, evaluate
from .timeunits import Duration
from .walk import conjuncts, walk

MIN_INTERVAL_NANOS = 10 * 10**6  # 2.x: the shortest window of a continuous query is 10a
FIRST_LAUNCH_DELAY = Duration(10, "s")  # 2.x's streamCompStartDelay (default 10,000 ms)
# the aggregate and selector functions of 2.x a continuous query computes per window
FUNCTIONS = frozenset(
    {
        "count",
        "avg",
        "sum",
        "min",
        "max",
        "first",
        "last",
        "last_row",
        "spread",
        "stddev",
        "percentile",
        "apercentile",
        "leastsquares",
    }
)
# 2.x refuses these in a continuous query (TD-12427)
REFUSED = {"twa": "twa() needs the rows around a window", "elapsed": "elapsed() needs the whole time range"}
_COMPARISONS = frozenset({"=", "<>", "<", "<=", ">", ">="})
_NOT_SUPPORTED = (
    ("FILL", lambda q: q.window is not None and getattr(q.window, "fill", None) is not None),
    ("HAVING", lambda q: q.having is not None),
    ("ORDER BY", lambda q: bool(q.order_by)),
    ("LIMIT", lambda q: q.limit is not None or q.slimit is not None),
    ("PARTITION BY (2.x groups with GROUP BY)", lambda q: bool(q.partition_by)),
    ("DISTINCT", lambda q: q.distinct),
)


def _fail(message: str, node: object = None) -> StreamValidationError:
    pos = getattr(node, "pos", None)
    if pos is not None and pos.line:
        return StreamValidationError(message, line=pos.line, column=pos.column)
    return StreamValidationError(message)


def validate_continuous_query(stmt: ast.CreateContinuousQuery) -> None:
    """The catalog-free rules of 2.x; the catalog's (the table exists, GROUP BY names tbname
    or tags) are checked on the equivalent stream."""
    query = stmt.query
    window = query.window
    if not isinstance(window, ast.IntervalWindow):
        raise _fail(
            "a continuous query needs INTERVAL(i) [SLIDING(s)]: CREATE TABLE … AS SELECT … FROM t INTERVAL(1m)",
            query,
        )
    if not window.interval.is_calendar and window.interval.nanos < MIN_INTERVAL_NANOS:
        raise _fail(f"the INTERVAL of a continuous query is at least 10a, got {window.interval}", query)
    if not isinstance(query.source, ast.TableSource):
        raise _fail("a continuous query reads one table or super table (FROM t), not a subquery or a join", query)
    for clause, present in _NOT_SUPPORTED:
        if present(query):
            raise _fail(f"{clause} is not supported in a continuous query", query)
    for expr in query.group_by:
        if not isinstance(expr, ast.Column):
            raise _fail("a continuous query groups by tbname or tags (GROUP BY tbname)", expr)
    for item in query.items:
        _check_item(item.expr)


def _check_item(expr: ast.Expr) -> None:
    aggregated = False
    for node in walk(expr):
        if isinstance(node, ast.Func):
            if node.name in REFUSED:
                raise _fail(f"{node.name}() is not allowed in a continuous query: {REFUSED[node.name]}", node)
            if node.name in FUNCTIONS:
                aggregated = True
    if not aggregated:
        raise _fail(
            "every result of a continuous query is an aggregate or selector of the window "
            f"({', '.join(sorted(FUNCTIONS))}), not a plain column or constant",
            expr,
        )
    # the nodes below an aggregate: a column anywhere else is a plain column
    aggregated_nodes = {id(n) for f in walk(expr) if isinstance(f, ast.Func) and f.name in FUNCTIONS for n in walk(f)}
    for node in walk(expr):
        if isinstance(node, ast.Column) and id(node) not in aggregated_nodes:
            raise _fail(f"column {node.name} must be inside an aggregate in a continuous query", node)


def result_column_name(item: ast.SelectItem) -> str:
    """2.x's name of a result column: its alias, or the expression's text with every character
    that cannot be in a name replaced by ``_`` (``avg(`dataInt`)`` → ``avg__dataInt__``)."""
    if item.alias:
        return item.alias
    return re.sub(r"[^A-Za-z0-9_]", "_", item.text.strip())


def effective_sliding(window: ast.IntervalWindow) -> Duration:
    """2.x clamps a SLIDING longer than the INTERVAL to the INTERVAL."""
    sliding = window.sliding or window.interval
    if sliding.is_calendar or window.interval.is_calendar:
        return sliding
    return window.interval if sliding.nanos > window.interval.nanos else sliding


def equivalent_stream(
    stmt: ast.CreateContinuousQuery, ctx: ConstantContext, timestamp_columns: frozenset[str]
) -> ast.CreateStream:
    """The 3.3.7 stream the continuous query is (see the module docstring). ``ctx``: the
    source's precision, the creating session's time zone and the creation time (``now``);
    ``timestamp_columns``: the source's primary key names, whose bounds are times."""
    query = stmt.query
    window = query.window
    assert isinstance(window, ast.IntervalWindow) and isinstance(query.source, ast.TableSource)
    trigger = ast.SlidingTrigger(
        sliding=effective_sliding(window), interval=window.interval, interval_offset=window.offset
    )
    start, where = _start_time(query.where, ctx, timestamp_columns)
    options = [
        ast.StreamOption("FILL_HISTORY", start=None if start is None else ast.Literal(start, "int")),
        ast.StreamOption("IGNORE_DISORDER"),
        ast.StreamOption("IGNORE_NODATA_TRIGGER"),
        ast.StreamOption(ast.FORCE_WINDOW_CLOSE),
        ast.StreamOption(ast.FIRST_LAUNCH_DELAY, duration=FIRST_LAUNCH_DELAY),
    ]
    if where is not None:
        folded = fold_time_bounds(where, ctx, timestamp_columns)
        options.append(ast.StreamOption("PRE_FILTER", expr=folded))
        end = _end_time(folded, timestamp_columns)
        if end is not None:
            options.append(ast.StreamOption(ast.END_TIME, start=ast.Literal(end, "int")))
    items = (
        ast.SelectItem(ast.Column("_twstart"), "ts", "_twstart"),
        *(ast.SelectItem(item.expr, result_column_name(item), item.text) for item in query.items),
    )
    stream_query = ast.Select(
        items=items, source=ast.PlaceholderSource(ast.Placeholder("trows")), text=query.text, pos=query.pos
    )
    return ast.CreateStream(
        name=stmt.table,
        if_not_exists=stmt.if_not_exists,
        trigger=trigger,
        trigger_table=query.source.table,
        partition_by=query.group_by,
        options=tuple(options),
        notification=None,
        into=stmt.table,
        output_subtable=None,
        columns=(),
        composite_key=False,
        tags=(),
        query=stream_query,
        pos=stmt.pos,
        text=stmt.text,
    )


def _start_time(
    where: ast.Expr | None, ctx: ConstantContext, timestamp_columns: frozenset[str]
) -> tuple[int | None, ast.Expr | None]:
    """2.x reads a lower bound of the primary key ANDed into the WHERE (``ts > t``, ``ts >= t``)
    as the moment the continuous query starts, not as a row filter: no row before it triggers
    a window, and each window is computed over its whole range — a row at ``t`` itself counts
    even under ``ts > t`` (TDengine's stream_1970 test). The start (the latest of those bounds)
    and the rest of the WHERE."""
    starts: list[int] = []
    rest: list[ast.Expr] = []
    for term in conjuncts(where):
        bound = _lower_bound(fold_time_bounds(term, ctx, timestamp_columns), timestamp_columns)
        if bound is None:
            rest.append(term)
        else:
            starts.append(bound)
    remaining = None
    for term in rest:
        remaining = term if remaining is None else ast.Binary("AND", remaining, term, pos=term.pos)
    return (max(starts) if starts else None), remaining


def _lower_bound(term: ast.Expr, timestamp_columns: frozenset[str]) -> int | None:
    bound = _time_comparison(term, timestamp_columns)
    return bound[1] if bound is not None and bound[0] in (">", ">=") else None


def _end_time(where: ast.Expr, timestamp_columns: frozenset[str]) -> int | None:
    """The last time a row may have under the upper bounds of the primary key ANDed into the
    (folded) WHERE (``ts < t``: t - 1, ``ts <= t``: t), the earliest of them; None without one.
    2.x closes the query once the window holding it has been computed."""
    ends: list[int] = []
    for term in conjuncts(where):
        bound = _time_comparison(term, timestamp_columns)
        if bound is not None and bound[0] in ("<", "<="):
            ends.append(bound[1] - (bound[0] == "<"))
    return min(ends) if ends else None


def _time_comparison(term: ast.Expr, timestamp_columns: frozenset[str]) -> tuple[str, int] | None:
    """A (folded) comparison of the primary key with a constant as ``(op, t)`` read ``ts op t``
    (``t > ts`` is ``ts < t``); None for any other term."""
    if not isinstance(term, ast.Binary) or term.op not in _FLIPPED:
        return None
    column, value, op = term.left, term.right, term.op
    if not _is_time(column, timestamp_columns):
        column, value, op = term.right, term.left, _FLIPPED[op]
    if _is_time(column, timestamp_columns) and isinstance(value, ast.Literal) and value.kind == "int":
        return op, int(value.value)  # type: ignore[call-overload]
    return None


_FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def fold_time_bounds(expr: ast.Expr, ctx: ConstantContext, timestamp_columns: frozenset[str]) -> ast.Expr:
    """The WHERE with each time bound of the primary key (``now + 1h``, ``'2021-07-20'``)
    replaced by its value at ``ctx.now``, in the table's precision: rows are then compared
    against constants (by the trigger, by a subscription)."""
    if isinstance(expr, ast.Binary):
        left = fold_time_bounds(expr.left, ctx, timestamp_columns)
        right = fold_time_bounds(expr.right, ctx, timestamp_columns)
        if expr.op in _COMPARISONS:
            if _is_time(left, timestamp_columns):
                right = _time_value(right, ctx)
            elif _is_time(right, timestamp_columns):
                left = _time_value(left, ctx)
        return dataclasses.replace(expr, left=left, right=right)
    if isinstance(expr, ast.Between) and _is_time(expr.operand, timestamp_columns):
        return dataclasses.replace(expr, low=_time_value(expr.low, ctx), high=_time_value(expr.high, ctx))
    if isinstance(expr, ast.Unary) and expr.op == "NOT":
        return dataclasses.replace(expr, operand=fold_time_bounds(expr.operand, ctx, timestamp_columns))
    return expr


def _is_time(expr: ast.Expr, timestamp_columns: frozenset[str]) -> bool:
    return isinstance(expr, ast.Column) and expr.name.lower() in timestamp_columns


def _time_value(expr: ast.Expr, ctx: ConstantContext) -> ast.Expr:
    if any(isinstance(node, ast.Column) for node in walk(expr)):
        return expr  # a comparison of two columns: nothing to fold
    value = evaluate(expr, ctx, timestamp=True)
    return ast.Literal(int(value), "int", pos=expr.pos)  # type: ignore[call-overload]
