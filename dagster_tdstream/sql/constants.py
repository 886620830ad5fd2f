"""Constant expressions: the values of INSERT rows, tag values and time bounds.

Owns evaluating a constant expression (literals, ``now``, ``now + 1s``, timestamp strings,
arithmetic on constants) into a Python value, given the target type's precision and the
session time zone. Raises ``WriteRejectedError`` with the value's position. No catalog, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from ..errors import WriteRejectedError
from . import ast
from .timeunits import PRECISIONS, TimeValueError, parse_timestamp

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# a comparison read from its other side (``5 < ts`` is ``ts > 5``)
FLIPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}


@dataclass(frozen=True)
class ConstantContext:
    precision: str
    timezone: ZoneInfo
    now_ns: int
    # whether a written timestamp may be a negative epoch number: 2.x read -1000 as 1 s before
    # 1970; 3.x's INSERT refuses it ("invalid timestamp format") and takes such a time only as
    # a string ('1969-12-31 23:59:59')
    negative_epochs: bool = True

    @property
    def now(self) -> int:
        return self.now_ns // PRECISIONS[self.precision]


def _reject(message: str, expr: ast.Expr) -> WriteRejectedError:
    if expr.pos.line:
        return WriteRejectedError(message, line=expr.pos.line, column=expr.pos.column)
    return WriteRejectedError(message)


def evaluate(expr: ast.Expr, ctx: ConstantContext, *, timestamp: bool = False) -> object:
    """The value of a constant expression; with ``timestamp`` strings are parsed as times
    and durations count in the precision."""
    if isinstance(expr, ast.Literal):
        if timestamp and expr.kind == "string":
            if str(expr.value).strip().isdigit():
                # TDengine reads a quoted integer as an epoch in the precision, as it does unquoted
                return int(str(expr.value))
            try:
                return parse_timestamp(str(expr.value), ctx.precision, ctx.timezone)
            except TimeValueError as exc:
                raise _reject(str(exc), expr) from None
        return expr.value
    if isinstance(expr, ast.Func) and expr.name in ("now", "today") and not expr.args:
        if expr.name == "now":
            return ctx.now
        return _today(ctx)
    if isinstance(expr, ast.DurationLiteral):
        try:
            return expr.duration.in_precision(ctx.precision)
        except TimeValueError as exc:
            raise _reject(str(exc), expr) from None
    if isinstance(expr, ast.Unary) and expr.op in ("-", "+"):
        value = evaluate(expr.operand, ctx, timestamp=timestamp)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise _reject(f"cannot negate {value!r}", expr)
        return -value if expr.op == "-" else value
    if isinstance(expr, ast.Binary) and expr.op in ("+", "-", "*", "/"):
        left = evaluate(expr.left, ctx, timestamp=timestamp)
        right = evaluate(expr.right, ctx, timestamp=timestamp)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (left, right)):
            raise _reject(f"operator {expr.op} needs numbers, got {left!r} and {right!r}", expr)
        if expr.op == "+":
            return left + right  # type: ignore[operator]
        if expr.op == "-":
            return left - right  # type: ignore[operator]
        if expr.op == "*":
            return left * right  # type: ignore[operator]
        if right == 0:
            raise _reject("division by zero", expr)
        return left / right  # type: ignore[operator]
    if isinstance(expr, ast.Cast):
        return _cast(expr, ctx)
    raise _reject("expected a constant value (a literal, now, now+1s or a timestamp string)", expr)


def _cast(expr: ast.Cast, ctx: ConstantContext) -> object:
    """``CAST(constant AS type)`` to a timestamp, a number, a string or a bool (TDengine's
    scripts write ``delete … where ts = cast(1668073288214 as timestamp)``)."""
    name = expr.type.name.split()[0]
    value = evaluate(expr.operand, ctx, timestamp=name == "TIMESTAMP")
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    if name in ("TIMESTAMP", "BIGINT", "INT", "SMALLINT", "TINYINT") and numeric:
        return int(value)  # type: ignore[arg-type]
    if name in ("FLOAT", "DOUBLE") and numeric:
        return float(value)  # type: ignore[arg-type]
    if name in ("VARCHAR", "BINARY", "NCHAR") and value is not None:
        return str(value)[: expr.type.length] if expr.type.length else str(value)
    if name == "BOOL" and (numeric or isinstance(value, bool)):
        return bool(value)
    raise _reject(f"cannot cast {value!r} to {expr.type} in a constant", expr)


def _today(ctx: ConstantContext) -> int:
    from datetime import datetime

    seconds = ctx.now_ns // 10**9
    local = datetime.fromtimestamp(seconds, ctx.timezone)
    midnight = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return int(midnight.timestamp()) * 10**9 // PRECISIONS[ctx.precision]


def key_bounds(node: ast.Expr, is_key: Callable[[ast.Expr], bool], ctx: ConstantContext) -> tuple[int, int] | None:
    """The primary-key range one WHERE conjunct states (both ends included, as TDengine keeps
    it: ``ts < b`` ends at b - 1), if it compares the key with constants (``ts >= '2024-01-01'``,
    ``_c0 < now``, ``ts BETWEEN a AND b``); None otherwise."""

    def constant(expr: ast.Expr) -> int | None:
        try:
            value = evaluate(expr, ctx, timestamp=True)
        except WriteRejectedError:  # not a constant: no bound
            return None
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    if isinstance(node, ast.Between) and not node.negated and is_key(node.operand):
        low, high = constant(node.low), constant(node.high)
        return (low, high) if low is not None and high is not None else None
    if not (isinstance(node, ast.Binary) and node.op in FLIPPED):
        return None
    op, other = node.op, node.right
    if is_key(node.right):  # constant on the left: turn the comparison around
        op, other = FLIPPED[op], node.left
    elif not is_key(node.left):
        return None
    value = constant(other)
    if value is None:
        return None
    return {"<": (INT64_MIN, value - 1), "<=": (INT64_MIN, value), ">": (value + 1, INT64_MAX),
            ">=": (value, INT64_MAX), "=": (value, value)}[op]  # fmt: skip
