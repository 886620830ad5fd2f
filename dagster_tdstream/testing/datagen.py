"""The scenario field ``data_generator``: data too large or too random to transcribe, described
as loops, turned into the statements that create it.

Owns reading the description (``ddl`` and ``rows`` lines such as ``for i in 0..9, j in 0..9999:
ts = 1537146000000 + j*500 + r(500); if i < 5: insert into test.t{i} values (ts, j%10 + r(100),
'binary{j%10}') else: insert into …``), evaluating its expressions — integer and float arithmetic,
comparisons, the loop variables, assignments, ``R(a,b)``, ``r(n)``, ``U(0,1)`` as the
``randomness`` note defines them, seeded so a run repeats — without ``eval`` (the scenarios come
from outside), and batching the generated rows into INSERTs of up to 3,000 rows as TDengine's
tests send them. Does not execute anything.
"""

from __future__ import annotations

import ast as pyast
import functools
import operator
import random
import re
from collections.abc import Callable
from typing import Any

BATCH_ROWS = 3000
_LOOPS = re.compile(r"\s*for\s+(\w+\s+in\s+-?\d+\.\.-?\d+(?:\s*,\s*\w+\s+in\s+-?\d+\.\.-?\d+)*)\s*:\s*", re.S)
_RANGE = re.compile(r"(\w+)\s+in\s+(-?\d+)\.\.(-?\d+)")
_INSERT = re.compile(r"\s*insert\s+into\s+(\S+)\s+values\s*\((.*)\)\s*$", re.S | re.I)
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    pyast.Add: operator.add, pyast.Sub: operator.sub, pyast.Mult: operator.mul, pyast.Div: operator.truediv,
    pyast.FloorDiv: operator.floordiv, pyast.Mod: operator.mod,
}  # fmt: skip
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    pyast.Lt: operator.lt, pyast.LtE: operator.le, pyast.Gt: operator.gt, pyast.GtE: operator.ge,
    pyast.Eq: operator.eq, pyast.NotEq: operator.ne,
}  # fmt: skip


class GeneratorError(ValueError):
    """The description does not follow the loop language."""


def generate(generator: dict[str, Any], seed: int = 0) -> list[str]:
    """The statements of a ``data_generator``: its DDL, then its rows as batched INSERTs."""
    rng = random.Random(seed)
    functions = {
        "R": lambda a, b: rng.randint(int(a), int(b)),
        "r": lambda n: rng.randrange(int(n)),
        "U": lambda a, b: a + (b - a) * rng.random(),
    }
    statements: list[str] = []
    for line in generator.get("ddl", []):
        statements += [render(text, scope, functions) for text, scope in _expand(line, functions)]
    for line in generator.get("rows", []):
        rows: dict[str, list[str]] = {}
        for text, scope in _expand(line, functions):
            insert = _INSERT.match(text)
            if insert is None:
                statements.append(render(text, scope, functions))
                continue
            table = render(insert.group(1), scope, functions)
            values = [_value(item.strip(), scope, functions) for item in _split(insert.group(2))]
            rows.setdefault(table, []).append("(" + ", ".join(values) + ")")
        for table, values in rows.items():
            for start in range(0, len(values), BATCH_ROWS):
                statements.append(f"insert into {table} values " + " ".join(values[start : start + BATCH_ROWS]))
    return statements


def _expand(line: str, functions: dict[str, Callable[..., Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Each statement a line stands for with the names in scope when it runs."""
    loops = _LOOPS.match(line)
    if loops is None:
        return [(line, {})]
    ranges = [(m.group(1), int(m.group(2)), int(m.group(3))) for m in _RANGE.finditer(loops.group(1))]
    body = line[loops.end() :]
    found: list[tuple[str, dict[str, Any]]] = []

    def run(depth: int, scope: dict[str, Any]) -> None:
        if depth == len(ranges):
            found.extend(_body(body, dict(scope), functions))
            return
        name, low, high = ranges[depth]
        for value in range(low, high + 1):
            scope[name] = value
            run(depth + 1, scope)

    run(0, {})
    return found


def _body(
    body: str, scope: dict[str, Any], functions: dict[str, Callable[..., Any]]
) -> list[tuple[str, dict[str, Any]]]:
    """``name = expr; …; [if cond: stmt else: stmt | stmt]`` once, in order."""
    found = []
    for kind, *fields in _steps(body):
        if kind == "if":
            condition, then, otherwise = fields
            found.append((then if _evaluate(condition, scope, functions) else otherwise, dict(scope)))
        elif kind == "set":
            scope[fields[0]] = _evaluate(fields[1], scope, functions)
        else:
            found.append((fields[0], dict(scope)))
    return found


@functools.cache
def _steps(body: str) -> tuple[tuple[str, ...], ...]:
    """A body's parts, read once however many rows run it: ("if", condition, then, else),
    ("set", name, expression) or ("run", statement)."""
    steps: list[tuple[str, ...]] = []
    for part in (p.strip() for p in _split(body, ";")):
        assignment = re.fullmatch(r"(\w+)\s*=\s*([^=].*)", part, re.S)
        conditional = re.fullmatch(r"if\s+(.+?):\s*(.+?)\s+else:\s*(.+)", part, re.S | re.I)
        if conditional is not None:
            steps.append(("if", conditional.group(1), conditional.group(2).strip(), conditional.group(3).strip()))
        elif assignment is not None and not part.lower().startswith(("insert", "create", "drop", "alter", "use")):
            steps.append(("set", assignment.group(1), assignment.group(2)))
        elif part:
            steps.append(("run", part))
    return tuple(steps)


@functools.cache
def _split(text: str, separator: str = ",") -> tuple[str, ...]:
    """``text`` split on ``separator`` outside parentheses and quotes (a row template's text is
    the same for every row: split once)."""
    parts, depth, quote, current = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        elif ch == separator and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return tuple(parts)


def render(template: str, scope: dict[str, Any], functions: dict[str, Callable[..., Any]] | None = None) -> str:
    """``{expr}`` fields replaced by their values."""
    pieces = _pieces(template)
    return "".join(p if k % 2 == 0 else _text(_evaluate(p, scope, functions or {})) for k, p in enumerate(pieces))


@functools.cache
def _pieces(template: str) -> tuple[str, ...]:
    """A template's text and ``{expr}`` fields, alternating (split once per template)."""
    return tuple(re.split(r"\{([^}]*)\}", template))


def _value(item: str, scope: dict[str, Any], functions: dict[str, Callable[..., Any]]) -> str:
    """One VALUES item as SQL: a quoted template, a SQL literal, or an expression's value."""
    if item[:1] in ("'", '"') and item[-1:] == item[:1]:
        return "'" + render(item[1:-1], scope, functions).replace("'", "''") + "'"
    if item.lower() in ("true", "false", "null"):
        return item.upper()
    return _text(_evaluate(item, scope, functions))


def _text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _evaluate(text: str, scope: dict[str, Any], functions: dict[str, Callable[..., Any]]) -> Any:
    return _node(_parsed(text), scope, functions, text)


@functools.cache
def _parsed(text: str) -> pyast.AST:
    """Each expression is parsed once, however many rows evaluate it."""
    try:
        return pyast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise GeneratorError(f"data_generator: {text!r} is not an expression") from exc


def _node(node: pyast.AST, scope: dict[str, Any], functions: dict[str, Callable[..., Any]], text: str) -> Any:
    if isinstance(node, pyast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, pyast.Name) and node.id in scope:
        return scope[node.id]
    if isinstance(node, pyast.BinOp) and type(node.op) in _BINARY:
        left, right = _node(node.left, scope, functions, text), _node(node.right, scope, functions, text)
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, pyast.UnaryOp) and isinstance(node.op, pyast.USub):
        return -_node(node.operand, scope, functions, text)
    if isinstance(node, pyast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        left, right = _node(node.left, scope, functions, text), _node(node.comparators[0], scope, functions, text)
        return _COMPARE[type(node.ops[0])](left, right)
    if isinstance(node, pyast.Call) and isinstance(node.func, pyast.Name) and node.func.id in functions:
        return functions[node.func.id](*(_node(a, scope, functions, text) for a in node.args))
    raise GeneratorError(f"data_generator: {text!r} uses {pyast.unparse(node)!r}, which the loop language lacks")
