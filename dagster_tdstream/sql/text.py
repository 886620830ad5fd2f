"""Canonical text of expressions.

Owns printing an expression back as compact SQL (``count(q_col1)``, ``(a + 1) > 2``), so
that names can be compared the way TDengine compares them: a result column of an unaliased
expression is named by its text, and NOTIFY ... WHERE may refer to it by that text.
"""

from __future__ import annotations

import fnmatch

from . import ast


def expr_text(expr: ast.Expr) -> str:
    if isinstance(expr, ast.Literal):
        if expr.kind == "string":
            return "'" + str(expr.value).replace("'", "''") + "'"
        if expr.kind == "null":
            return "null"
        if expr.kind == "bool":
            return "true" if expr.value else "false"
        return str(expr.value)
    if isinstance(expr, ast.DurationLiteral):
        return str(expr.duration)
    if isinstance(expr, ast.Column):
        return f"{expr.table}.{expr.name}" if expr.table else expr.name
    if isinstance(expr, ast.Star):
        return f"{expr.table}.*" if expr.table else "*"
    if isinstance(expr, ast.Placeholder):
        return f"%%{expr.name}"
    if isinstance(expr, ast.Func):
        inner = ",".join(expr_text(a) for a in expr.args)
        return f"{expr.name}({'distinct ' if expr.distinct else ''}{inner})"
    if isinstance(expr, ast.Cast):
        return f"cast({expr_text(expr.operand)} as {str(expr.type).lower()})"
    if isinstance(expr, ast.Unary):
        sep = " " if expr.op == "NOT" else ""
        return f"{expr.op.lower()}{sep}{expr_text(expr.operand)}"
    if isinstance(expr, ast.Binary):
        return f"({expr_text(expr.left)}{expr.op.lower()}{expr_text(expr.right)})"
    if isinstance(expr, ast.IsNull):
        return f"{expr_text(expr.operand)} is {'not ' if expr.negated else ''}null"
    if isinstance(expr, ast.Between):
        neg = "not " if expr.negated else ""
        return f"{expr_text(expr.operand)} {neg}between {expr_text(expr.low)} and {expr_text(expr.high)}"
    if isinstance(expr, ast.InList):
        neg = "not " if expr.negated else ""
        return f"{expr_text(expr.operand)} {neg}in ({','.join(expr_text(i) for i in expr.items)})"
    if isinstance(expr, ast.Case):
        parts = ["case"]
        if expr.operand is not None:
            parts.append(expr_text(expr.operand))
        for cond, value in expr.whens:
            parts += ["when", expr_text(cond), "then", expr_text(value)]
        if expr.default is not None:
            parts += ["else", expr_text(expr.default)]
        return " ".join([*parts, "end"])
    raise TypeError(f"no text for {type(expr).__name__}")


def name_key(text: str) -> str:
    """How result-column names compare: case and white space do not matter."""
    return "".join(text.split()).lower()


def show_like(name: str, pattern: str) -> bool:
    """Whether SHOW … LIKE 'pattern' lists ``name``: ``%`` any run, ``_`` one character, case
    ignored (names are stored lower-case; TDengine's option names are not)."""
    return fnmatch.fnmatchcase(name.lower(), pattern.lower().replace("%", "*").replace("_", "?"))
