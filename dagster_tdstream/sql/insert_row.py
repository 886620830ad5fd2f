"""The one-row INSERT of plain literals, read with a few patterns instead of the grammar.

Owns recognising ``INSERT INTO [db.]name [(columns)] VALUES (literal, …) [;]`` — one table,
one tuple, every value a number (with an optional sign), a quoted string without backslash
escapes, NULL, TRUE or FALSE, no comment — and building the ``ast.Insert`` the grammar builds
for it, positions and source text included. Why: it is what an IoT client sends one after
another, and tokenizing plus parsing it was a third of what the warehouse's writer spends on
each such statement. Anything else (``now``, an expression, a second tuple or table, USING, a
comment, white space around a name's dot) is not recognised and goes through the grammar,
so every error stays the grammar's. Must not convert a value to a column type (the INSERT
family does) nor accept what the grammar rejects; a property test holds the two together.
"""

from __future__ import annotations

import re

from . import ast

# the tokenizer's identifier, possessive as the tokenizer reads it (``c1\u00a0values`` is one
# name there, not a name and white space), and a quoted name without backticks inside
# (``a``b`` keeps its doubled backticks in the grammar's name: not worth reading here)
_WORD = r"[A-Za-z_\u0080-\uffff][\w$\u0080-\uffff]*+"
_NAME = rf"(?:{_WORD}|`[^`]+`)"
# the keywords are read as words and compared upper-cased, as the grammar compares them (a
# case-insensitive pattern folds differently: ``(?i:s)`` matches the long s); white space is
# possessive, as the tokenizer takes it whole before a token (``\u00a01c`` after a comma is
# white space and ``1c``, never the name ``\u00a01c``)
_HEAD = re.compile(
    rf"\s*+({_WORD})\s++({_WORD})\s++(?:({_NAME})\.)?({_NAME})"
    rf"(?:\s*+\(\s*+({_NAME}(?:\s*+,\s*+{_NAME})*)\s*+\)\s*+|\s++)({_WORD})\s*+\(\s*+"
)
# the listed names again, each with the white space before it (which may start with a
# character a name may hold: the tokenizer reads white space first, as this does)
_COLUMN_NAME = re.compile(rf"\s*+({_NAME})\s*+,?")
# one value and what follows it: a sign glued to a number (``- 1`` and ``+-1`` are the
# grammar's), the tokenizer's number, a string as the tokenizer reads it when it holds no
# backslash, or a word (NULL, TRUE, FALSE); then ``,`` or the tuple's ``)``
_VALUE = re.compile(
    rf"""
    (?:(?P<sign>[-+]?)(?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
      | (?P<string>'(?:''|[^'\\])*'|"(?:""|[^"\\])*")
      | (?P<word>{_WORD})
    )
    \s*+(?P<after>[,)])\s*+
    """,
    re.VERBOSE,
)
_KEYWORDS = ("INSERT", "INTO", "VALUES")
_LITERAL_WORDS = {"NULL": None, "TRUE": True, "FALSE": False}
_END = re.compile(r";?\s*")


def one_row_insert(script: str) -> ast.Insert | None:
    """``script`` parsed when it is one such INSERT (the statement the grammar gives for it);
    None when it is anything else."""
    head = _HEAD.match(script)
    if head is None or (head.group(1).upper(), head.group(2).upper(), head.group(6).upper()) != _KEYWORDS:
        return None
    values: list[ast.Expr] = []
    pos, after = head.end(), ","
    while after == ",":
        value = _VALUE.match(script, pos)
        if value is None or (value.group("word") is not None and value.group("word").upper() not in _LITERAL_WORDS):
            return None
        values.append(_literal(script, value))
        pos, after = value.end(), value.group("after")
    if _END.fullmatch(script, pos) is None:
        return None
    stop = script.rindex(")", 0, pos) + 1  # the statement's text ends with its last token
    db, name = head.group(3), head.group(4)
    table_at = _pos(script, head.start(3) if db is not None else head.start(4))
    table = ast.QualifiedName(_unquoted(name), None if db is None else _unquoted(db), table_at)
    columns = None
    if (listed := head.group(5)) is not None:
        columns = tuple(_unquoted(column) for column in _COLUMN_NAME.findall(listed))
    target = ast.InsertTarget(table, None, columns, (tuple(values),), table_at)
    start = head.start(1)
    return ast.Insert((target,), pos=_pos(script, start), text=script[start:stop])


def _literal(script: str, value: re.Match[str]) -> ast.Literal:
    if (number := value.group("number")) is not None:
        sign = value.group("sign")
        # the grammar folds ``-1`` into a literal at the sign, and ``+1`` is its operand
        at = _pos(script, value.start("sign") if sign == "-" else value.start("number"))
        kind = "float" if any(c in number for c in ".eE") else "int"
        parsed = float(number) if kind == "float" else int(number)
        return ast.Literal(-parsed if sign == "-" else parsed, kind, pos=at)
    at = _pos(script, value.start())
    if (text := value.group("string")) is not None:
        quote = text[0]
        return ast.Literal(text[1:-1].replace(quote * 2, quote), "string", pos=at)
    word = value.group("word").upper()
    return ast.Literal(_LITERAL_WORDS[word], "null" if word == "NULL" else "bool", pos=at)


def _unquoted(name: str) -> str:
    return name[1:-1] if name.startswith("`") else name


def _pos(script: str, offset: int) -> ast.Pos:
    """The line and column of ``offset``, counted as the tokenizer counts them (``\\n``)."""
    line_start = script.rfind("\n", 0, offset) + 1
    return ast.Pos(script.count("\n", 0, line_start) + 1, offset - line_start + 1)
