"""DELETE conditions as delta-rs predicates.

Owns rendering a TDengine WHERE clause of ``DELETE FROM`` into the SQL predicate delta-rs
evaluates (DataFusion dialect), over the stored form of the table: timestamps as integers
in the database precision, ``tbname`` for rows of super tables. Tag conditions are refused
with a clear message rather than silently ignored.
"""

from __future__ import annotations

import re

from ..errors import WriteRejectedError
from ..sql import ast
from ..sql.constants import ConstantContext, evaluate
from .catalog import TableInfo
from .types import value_range

_COMPARISONS = ("=", "<>", "<", "<=", ">", ">=")
_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _reject(message: str, expr: ast.Expr) -> WriteRejectedError:
    return WriteRejectedError(message, line=expr.pos.line or None, column=expr.pos.column or None)


def delete_predicate(where: ast.Expr, info: TableInfo, ctx: ConstantContext) -> str:
    columns = {c.name: c for c in info.columns}
    tags = {t.name for t in info.tags}

    def column(expr: ast.Expr) -> tuple[str, ast.ColumnDef | None] | None:
        """(quoted name, its definition; None for tbname) when expr names a stored column."""
        if not isinstance(expr, ast.Column):
            return None
        name = expr.name.lower()
        if name in ("_c0", "_rowts"):
            name = info.primary_key
        if name == "tbname" and info.kind != "normal":
            return '"tbname"', None
        if name in tags:
            raise _reject(f"DELETE conditions can use the timestamp, columns and tbname, not the tag {expr.name}", expr)
        col = columns.get(name)
        if col is None:
            raise _reject(f"table {info.name} has no column {expr.name}", expr)
        return f'"{col.name}"', col

    def value(expr: ast.Expr, col: ast.ColumnDef | None) -> object:
        return evaluate(expr, ctx, timestamp=col is not None and col.type.name == "TIMESTAMP")

    def literal(result: object) -> str:
        if result is None:
            return "NULL"
        if isinstance(result, bool):
            return "true" if result else "false"
        if isinstance(result, str):
            return "'" + result.replace("'", "''") + "'"
        return repr(result) if isinstance(result, float) else str(result)

    def compare(name: str, col: ast.ColumnDef | None, op: str, result: object, expr: ast.Expr) -> str:
        """``name op value``; a number the column's type cannot hold (beyond its range, or
        not finite) is decided here — delta-rs would fail casting it to the column's type."""
        bounds = value_range(col.type) if col is not None else None
        if bounds is not None and isinstance(result, str):
            try:  # a numeric column compares with a number written as a string
                result = float(result) if re.search(r"[.eE]|inf|nan", result, re.IGNORECASE) else int(result)
            except ValueError:
                assert col is not None
                raise _reject(f"column {col.name} ({col.type}) compares with numbers, not {result!r}", expr) from None
        if bounds is not None and isinstance(result, int | float) and not isinstance(result, bool):
            low, high = bounds
            if result != result:  # NaN: no comparison holds
                return "FALSE"
            if result < low or result > high:
                above = result > high
                holds = op == "<>" or (op in ("<", "<=") and above) or (op in (">", ">=") and not above)
                return f"({name} IS NOT NULL)" if holds else "FALSE"
        return f"({name} {op} {literal(result)})"

    def render(expr: ast.Expr) -> str:
        if isinstance(expr, ast.Binary) and expr.op in ("AND", "OR"):
            return f"({render(expr.left)} {expr.op} {render(expr.right)})"
        if isinstance(expr, ast.Unary) and expr.op == "NOT":
            return f"(NOT {render(expr.operand)})"
        if isinstance(expr, ast.Binary) and expr.op in _COMPARISONS:
            left, right = column(expr.left), column(expr.right)
            if left is not None and right is None:
                return compare(left[0], left[1], expr.op, value(expr.right, left[1]), expr.right)
            if right is not None and left is None:
                return compare(right[0], right[1], _FLIPPED[expr.op], value(expr.left, right[1]), expr.left)
            if left is not None and right is not None:
                return f"({left[0]} {expr.op} {right[0]})"
        if isinstance(expr, ast.Between):
            col = column(expr.operand)
            if col is not None:
                low = compare(col[0], col[1], ">=", value(expr.low, col[1]), expr.low)
                high = compare(col[0], col[1], "<=", value(expr.high, col[1]), expr.high)
                return f"(NOT ({low} AND {high}))" if expr.negated else f"({low} AND {high})"
        if isinstance(expr, ast.InList):
            col = column(expr.operand)
            if col is not None:
                items = " OR ".join(compare(col[0], col[1], "=", value(item, col[1]), item) for item in expr.items)
                return f"(NOT ({items}))" if expr.negated else f"({items})"
        if isinstance(expr, ast.IsNull):
            col = column(expr.operand)
            if col is not None:
                return f"({col[0]} IS {'NOT ' if expr.negated else ''}NULL)"
        raise _reject("DELETE supports comparisons, BETWEEN, IN and IS NULL on columns combined with AND/OR/NOT", expr)

    return render(where)
