"""Row conditions and values evaluated in Python: EVENT_WINDOW start/end conditions,
PRE_FILTER, a STATE_WINDOW over an expression, a legacy PARTITION BY expression.

Owns SQL's three-valued logic over one row (a dict of column and tag values): comparisons,
arithmetic, AND/OR/NOT, IS [NOT] NULL, [NOT] IN, [NOT] BETWEEN, LIKE, CASE, CAST, a few
scalar functions — and ``check``, which refuses up front what it cannot compute. A NULL
comparison is unknown, and unknown is not true. No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ..sql import ast
from ..sql.text import expr_text, name_key
from ..sql.walk import walk


class ConditionError(ValueError):
    """The condition uses something this evaluator does not know."""


def holds(expr: ast.Expr, row: Mapping[str, Any]) -> bool:
    """Whether the condition is true for the row (unknown counts as false)."""
    return _eval(expr, row) is True


# the scalar functions the evaluator computes: (fewest arguments, most, the function of the
# evaluated arguments); ``check`` and ``_eval`` both read it
_FUNCTIONS: dict[str, tuple[int, int, Callable[[list[Any]], Any]]] = {
    "abs": (1, 1, lambda a: None if a[0] is None else abs(a[0])),
    "lower": (1, 1, lambda a: None if a[0] is None else str(a[0]).lower()),
    "upper": (1, 1, lambda a: None if a[0] is None else str(a[0]).upper()),
    "length": (1, 1, lambda a: None if a[0] is None else len(str(a[0]).encode())),
    "concat": (2, 8, lambda a: None if None in a else "".join(str(x) for x in a)),
}
_OPERATORS = {"AND", "OR", "=", "<>", "<", "<=", ">", ">=", "+", "-", "*", "/", "%"}
_OPERATORS |= {"LIKE", "NOT LIKE", "MATCH", "NMATCH"}
_TEXT_TYPES, _INTEGER_TYPES = ("VARCHAR", "BINARY", "NCHAR"), ("BIGINT", "INT", "SMALLINT", "TINYINT", "TIMESTAMP")
_CASTS = (*_TEXT_TYPES, *_INTEGER_TYPES, "DOUBLE", "FLOAT")
_NODES = (ast.Literal, ast.Column, ast.Unary, ast.Binary, ast.IsNull, ast.Between, ast.InList, ast.Case, ast.Cast)


def check(expr: ast.Expr) -> None:
    """Refuse, with the node's position, an expression the evaluator cannot compute (checked
    when a stream is created: a row meeting it later would fail the trigger instead)."""
    for node in walk(expr):
        if isinstance(node, ast.Func) and not _computes(node):
            known = ", ".join(f"{name}()" for name in _FUNCTIONS)
            raise ConditionError(f"{node.name}() is not supported here{_at(node)}; these are: {known}")
        elif isinstance(node, ast.Binary) and node.op not in _OPERATORS:
            raise ConditionError(f"operator {node.op} is not supported here{_at(node)}")
        elif isinstance(node, ast.Cast) and node.type.name.split()[0] not in _CASTS:
            raise ConditionError(f"CAST to {node.type} is not supported here{_at(node)}")
        elif not isinstance(node, _NODES):
            raise ConditionError(f"{expr_text(node)} is not supported here{_at(node)}")


def _computes(call: ast.Func) -> bool:
    spec = _FUNCTIONS.get(call.name)
    return spec is not None and spec[0] <= len(call.args) <= spec[1]


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
        if not _computes(expr):
            raise ConditionError(f"{expr.name}() is not supported in trigger conditions{_at(expr)}")
        return _FUNCTIONS[expr.name][2]([_eval(a, row) for a in expr.args])
    if isinstance(expr, ast.Cast):
        return _cast(_eval(expr.operand, row), expr)
    if isinstance(expr, ast.Case):
        return _case(expr, row)
    raise ConditionError(f"{type(expr).__name__} is not supported in trigger conditions{_at(expr)}")


def _case(expr: ast.Case, row: Mapping[str, Any]) -> Any:
    """CASE [operand] WHEN … THEN … [ELSE …] END: the first WHEN that is true (equal to the
    operand) gives the value; an unknown one is not true; no ELSE gives NULL."""
    operand = _eval(expr.operand, row) if expr.operand is not None else None
    for when, then in expr.whens:
        if expr.operand is None:
            matched = _eval(when, row) is True
        else:
            candidate = _eval(when, row)
            matched = operand is not None and candidate is not None and operand == candidate
        if matched:
            return _eval(then, row)
    return _eval(expr.default, row) if expr.default is not None else None


def _cast(value: Any, expr: ast.Cast) -> Any:
    name = expr.type.name.split()[0]
    if value is None:
        return None
    if name in _TEXT_TYPES:
        # numbers print as TDengine prints them: integers plainly, doubles with six decimals
        if isinstance(value, float):
            text = f"{value:.6f}"
        else:
            text = str(value).lower() if isinstance(value, bool) else str(value)
        return text[: expr.type.length] if expr.type.length else text
    if name in _INTEGER_TYPES and not isinstance(value, str):
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
    if op in ("LIKE", "NOT LIKE"):
        pattern = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in str(right))
        return (re.fullmatch(pattern, str(left), re.S) is not None) == (op == "LIKE")
    if op in ("MATCH", "NMATCH"):
        return (re.search(str(right), str(left)) is not None) == (op == "MATCH")
    raise ConditionError(f"operator {op} is not supported in trigger conditions")
