"""Row conditions evaluated in Python: EVENT_WINDOW start/end conditions and PRE_FILTER.

Owns SQL's three-valued logic over one row (a dict of column and tag values): comparisons,
arithmetic, AND/OR/NOT, IS [NOT] NULL, [NOT] IN, [NOT] BETWEEN, LIKE, a few scalar
functions. A NULL comparison is unknown, and unknown is not true. No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..sql import ast
from ..sql.text import expr_text, name_key


class ConditionError(ValueError):
    """The condition uses something this evaluator does not know."""


def holds(expr: ast.Expr, row: Mapping[str, Any]) -> bool:
    """Whether the condition is true for the row (unknown counts as false)."""
    return _eval(expr, row) is True


def value(expr: ast.Expr, row: Mapping[str, Any]) -> Any:
    """A scalar expression's value for the row (a legacy PARTITION BY expression's group):
    arithmetic is DOUBLE as in TDengine, NULL in gives NULL."""
    return _eval(expr, row)


class ResultRow(dict[str, Any]):
    """A query result row for NOTIFY WHERE, keyed by ``name_key`` of each result column's
    name: a sub-expression whose text names a result column (``avg(cint)``, ``avg_v``)
    evaluates to that column's value."""


def _eval(expr: ast.Expr, row: Mapping[str, Any]) -> Any:
    if isinstance(row, ResultRow):
        key = name_key(expr_text(expr))
        if key in row:
            return row[key]
    if isinstance(expr, ast.Literal):
        return expr.value
    if isinstance(expr, ast.Column):
        name = expr.name.lower()
        if name not in row:
            raise ConditionError(f"unknown column {expr.name} in a trigger condition")
        return row[name]
    if isinstance(expr, ast.Unary):
        value = _eval(expr.operand, row)
        if expr.op == "NOT":
            return None if value is None else not value
        if value is None:
            return None
        return -value if expr.op == "-" else ~int(value)
    if isinstance(expr, ast.Binary):
        return _binary(expr, row)
    if isinstance(expr, ast.IsNull):
        return (_eval(expr.operand, row) is None) != expr.negated
    if isinstance(expr, ast.Between):
        value, low, high = (_eval(e, row) for e in (expr.operand, expr.low, expr.high))
        if None in (value, low, high):
            return None
        return (low <= value <= high) != expr.negated
    if isinstance(expr, ast.InList):
        value = _eval(expr.operand, row)
        if value is None:
            return None
        return (value in [_eval(i, row) for i in expr.items]) != expr.negated
    if isinstance(expr, ast.Func):
        args = [_eval(a, row) for a in expr.args]
        if expr.name == "abs" and len(args) == 1:
            return None if args[0] is None else abs(args[0])
        if expr.name in ("lower", "upper") and len(args) == 1:
            return None if args[0] is None else getattr(str(args[0]), expr.name)()
        if expr.name == "length" and len(args) == 1:
            return None if args[0] is None else len(str(args[0]).encode())
        if expr.name == "concat" and len(args) >= 2:
            return None if None in args else "".join(str(a) for a in args)
        raise ConditionError(f"{expr.name}() is not supported in trigger conditions{_at(expr)}")
    if isinstance(expr, ast.Cast):
        return _cast(_eval(expr.operand, row), expr)
    raise ConditionError(f"{type(expr).__name__} is not supported in trigger conditions{_at(expr)}")


def _cast(value: Any, expr: ast.Cast) -> Any:
    name = expr.type.name.split()[0]
    if value is None:
        return None
    if name in ("VARCHAR", "BINARY", "NCHAR"):
        # numbers print as TDengine prints them: integers plainly, doubles with six decimals
        if isinstance(value, float):
            text = f"{value:.6f}"
        else:
            text = str(value).lower() if isinstance(value, bool) else str(value)
        return text[: expr.type.length] if expr.type.length else text
    if name in ("BIGINT", "INT", "SMALLINT", "TINYINT", "TIMESTAMP") and not isinstance(value, str):
        return int(value)
    if name in ("DOUBLE", "FLOAT") and not isinstance(value, str):
        return float(value)
    raise ConditionError(f"CAST to {expr.type} is not supported in trigger conditions{_at(expr)}")


def _at(expr: ast.Expr) -> str:
    """Where in the CREATE STREAM statement the expression is (when the parser recorded it)."""
    return f" (at line {expr.pos.line}, column {expr.pos.column})" if expr.pos.line else ""


def _binary(expr: ast.Binary, row: Mapping[str, Any]) -> Any:
    op = expr.op
    if op in ("AND", "OR"):
        left, right = _eval(expr.left, row), _eval(expr.right, row)
        if op == "AND":
            if left is False or right is False:
                return False
            return None if None in (left, right) else True
        if left is True or right is True:
            return True
        return None if None in (left, right) else False
    left, right = _eval(expr.left, row), _eval(expr.right, row)
    if left is None or right is None:
        return None
    if op == "=":
        return left == right
    if op == "<>":
        return left != right
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    if op == ">=":
        return left >= right
    # TDengine's arithmetic is DOUBLE whatever the operands' types
    if op == "+":
        return float(left + right)
    if op == "-":
        return float(left - right)
    if op == "*":
        return float(left * right)
    if op == "/":
        return None if right == 0 else float(left / right)
    if op == "%":
        return None if right == 0 else float(left % right)
    if op == "LIKE":
        pattern = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in str(right))
        return re.fullmatch(pattern, str(left), re.S) is not None
    if op in ("MATCH", "NMATCH"):
        return (re.search(str(right), str(left)) is not None) == (op == "MATCH")
    raise ConditionError(f"operator {op} is not supported in trigger conditions")
