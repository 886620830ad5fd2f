"""Generic traversal of expression trees.

Owns iteration over the sub-expressions of an AST node, so that validation, typing and
translation do not each hand-write a recursive walk. Read-only.
"""

from __future__ import annotations

from collections.abc import Iterator

from . import ast


def children(expr: ast.Expr) -> tuple[ast.Expr, ...]:
    if isinstance(expr, ast.Func):
        return expr.args
    if isinstance(expr, ast.Cast | ast.Unary):
        return (expr.operand,)
    if isinstance(expr, ast.Binary):
        return (expr.left, expr.right)
    if isinstance(expr, ast.IsNull):
        return (expr.operand,)
    if isinstance(expr, ast.Between):
        return (expr.operand, expr.low, expr.high)
    if isinstance(expr, ast.InList):
        return (expr.operand, *expr.items)
    if isinstance(expr, ast.Case):
        parts: list[ast.Expr] = [] if expr.operand is None else [expr.operand]
        for cond, value in expr.whens:
            parts += [cond, value]
        if expr.default is not None:
            parts.append(expr.default)
        return tuple(parts)
    return ()


def walk(expr: ast.Expr) -> Iterator[ast.Expr]:
    """The node and all its descendants, depth first."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def depth(expr: ast.Expr) -> int:
    """The number of levels of the tree (a literal: 1), without recursion."""
    deepest = 0
    stack = [(expr, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        stack += [(child, level + 1) for child in children(node)]
    return deepest


def conjuncts(expr: ast.Expr | None) -> Iterator[ast.Expr]:
    """The terms a condition ANDs together (``a AND (b AND c)`` → a, b, c); none for None."""
    stack = [expr] if expr is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Binary) and node.op == "AND":
            stack += [node.right, node.left]
        else:
            yield node


def select_expressions(select: ast.Select) -> Iterator[ast.Expr]:
    """Every expression a SELECT holds at its own level (not inside nested subqueries)."""
    for item in select.items:
        yield item.expr
    for expr in (select.where, select.having):
        if expr is not None:
            yield expr
    yield from select.partition_by
    yield from select.group_by
    for order in select.order_by:
        yield order.expr
    window = select.window
    if isinstance(window, ast.StateWindow):
        yield window.expr
    elif isinstance(window, ast.EventWindow):
        yield from window.start
        yield from window.end
    elif isinstance(window, ast.SessionWindow):
        yield window.column
        yield window.gap
    elif isinstance(window, ast.CountWindow):
        yield from window.columns


def nested_selects(select: ast.Select) -> Iterator[ast.Select]:
    """The SELECT and every SELECT inside its FROM clause."""
    yield select
    stack: list[ast.FromSource | None] = [select.source]
    while stack:
        source = stack.pop()
        if isinstance(source, ast.SubquerySource):
            yield from nested_selects(source.query)
        elif isinstance(source, ast.Join):
            stack += [source.left, source.right]


def all_expressions(select: ast.Select) -> Iterator[ast.Expr]:
    """Every node of every expression in the SELECT and its subqueries."""
    for sub in nested_selects(select):
        for expr in select_expressions(sub):
            yield from walk(expr)


def columns_named(select: ast.Select) -> frozenset[str] | None:
    """The column names (lower case) the SELECT and its subqueries name anywhere; None when it
    reads every column (a ``*`` item, a selector over ``*`` such as ``last(*)``; ``count(*)``
    names none)."""
    names: set[str] = set()
    for sub in nested_selects(select):
        if any(isinstance(item.expr, ast.Star) for item in sub.items):
            return None
        for expr in select_expressions(sub):
            for node in walk(expr):
                if isinstance(node, ast.Column):
                    names.add(node.name.lower())
                elif node_reads_all(node):
                    return None
    return frozenset(names)


def node_reads_all(node: ast.Expr) -> bool:
    """A selector over ``*`` (``last(*)``): it reads every column (``count(*)`` none)."""
    return isinstance(node, ast.Func) and node.name != "count" and any(isinstance(a, ast.Star) for a in node.args)


def sources(select: ast.Select) -> Iterator[ast.FromSource]:
    """Leaf FROM sources (tables and placeholders) of the SELECT and its subqueries."""
    for sub in nested_selects(select):
        stack: list[ast.FromSource | None] = [sub.source]
        while stack:
            source = stack.pop()
            if isinstance(source, ast.Join):
                stack += [source.left, source.right]
            elif isinstance(source, ast.TableSource | ast.PlaceholderSource):
                yield source


def interp_calls(select: ast.Select) -> list[ast.Func]:
    """The INTERP calls of the select list, each once, in order."""
    calls: list[ast.Func] = []
    for item in select.items:
        for node in walk(item.expr):
            if isinstance(node, ast.Func) and node.name == "interp" and node not in calls:
                calls.append(node)
    return calls


def is_interp_query(select: ast.Select) -> bool:
    """INTERP's query (or a legacy INTERP stream's): its clause or an INTERP call."""
    return select.interp is not None or bool(interp_calls(select))
