"""TDengine's ``keepColumnName`` client option as a rewrite of a parsed statement.

Owns one rule: with the option on, an unaliased ``first(col)``, ``last(col)`` or
``last_row(col)`` is named after its column (``ca``, not ``last(ca)``), in every SELECT of the
statement — queries, a stream's subquery, a continuous query. The rewrite gives those items the
column's name as their alias, so naming, duplicate checks and ORDER BY see what TDengine's client
produces, and writes the aliases into the statement's text too: a stream is stored as its text
and parsed again by the processes that run it, which do not know the option. Pure: reads and
returns AST nodes, touches no storage or session.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import ast

# the functions TDengine's client renames; other selectors (min, max, …) keep their text
_RENAMED = frozenset({"first", "last", "last_row"})


def keep_column_names(stmt: ast.Statement) -> ast.Statement:
    """``stmt`` with every SELECT's first/last/last_row items of one plain column aliased by it,
    in its tree and in its text."""
    renamed: list[ast.SelectItem] = []
    rewritten = _rewrite(stmt, renamed)
    assert isinstance(rewritten, ast.Statement)
    if not renamed:
        return stmt
    return dataclasses.replace(rewritten, text=_spliced(stmt, renamed))


def _spliced(stmt: ast.Statement, renamed: list[ast.SelectItem]) -> str:
    """The statement's text with `` AS `col` `` after each renamed item. Positions are the
    script's (1-based line and column); the text starts at the statement's own position."""
    text = stmt.text
    line_starts = [0] + [i + 1 for i, char in enumerate(text) if char == "\n"]
    cuts = []
    for item in renamed:
        pos = item.expr.pos
        if pos.line < stmt.pos.line or pos.line == 0:  # pragma: no cover - parsed items have positions
            continue
        row = pos.line - stmt.pos.line
        start = pos.column - stmt.pos.column if row == 0 else line_starts[row] + pos.column - 1
        end = start + len(item.text)
        if text[start:end] == item.text:  # a built statement's text may not hold the item
            cuts.append((end, f" AS `{item.alias}`"))
    for end, alias in sorted(cuts, reverse=True):
        text = text[:end] + alias + text[end:]
    return text


def _rewrite(node: Any, renamed: list[ast.SelectItem]) -> Any:
    if isinstance(node, tuple):
        parts = tuple(_rewrite(part, renamed) for part in node)
        return node if all(a is b for a, b in zip(parts, node, strict=True)) else parts
    # expressions hold no SELECT: only statements, sources and SELECTs are rebuilt
    if not dataclasses.is_dataclass(node) or isinstance(node, ast.Expr):
        return node
    changes = {}
    for item in dataclasses.fields(node):
        value = getattr(node, item.name)
        new = _rewrite(value, renamed)
        if new is not value:
            changes[item.name] = new
    if isinstance(node, ast.Select):
        items = tuple(_kept(item) for item in node.items)
        aliased = [kept for item, kept in zip(node.items, items, strict=True) if kept is not item]
        if aliased:
            renamed += aliased
            changes["items"] = items
    return dataclasses.replace(node, **changes) if changes else node


def _kept(item: ast.SelectItem) -> ast.SelectItem:
    expr = item.expr
    if (
        item.alias is None
        and isinstance(expr, ast.Func)
        and expr.name in _RENAMED
        and len(expr.args) == 1
        and isinstance(expr.args[0], ast.Column)
    ):
        return dataclasses.replace(item, alias=expr.args[0].name)
    return item
