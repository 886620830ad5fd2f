"""Tokens of the TDengine dialect, with positions.

Owns turning SQL text into positioned tokens and splitting a script into statements: one
compiled pattern matches every token kind of the dialect — strings with TDengine's escapes,
quoted names, comments, ``10s`` durations, ``%%trows`` placeholders — in a single pass (a
generic SQL lexer that tries its patterns one by one was most of an INSERT's parsing time).
Must not interpret tokens: that is the parser's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from ..errors import SqlSyntaxError
from .values import scan_block


class Kind(Enum):
    IDENT = "identifier"
    QUOTED_IDENT = "quoted identifier"
    STRING = "string"
    NUMBER = "number"
    DURATION = "duration"
    PLACEHOLDER = "placeholder"
    OP = "operator"
    HINT = "hint"  # /*+ name(…) … */ right after SELECT (skip_tsma)
    VALUES_BLOCK = "values"  # a run of plain-literal tuples after VALUES (see values.py)
    END = "end of statement"


class Token(NamedTuple):
    """One token and where it starts (a tuple: a bulk INSERT makes hundreds of thousands)."""

    kind: Kind
    text: str
    offset: int  # character offset in the script
    line: int
    column: int

    @property
    def upper(self) -> str:
        return self.text.upper()

    def is_word(self, *words: str) -> bool:
        return self.kind is Kind.IDENT and self.text.upper() in words

    def is_op(self, *ops: str) -> bool:
        return self.kind is Kind.OP and self.text in ops

    @property
    def name(self) -> str:
        """The identifier's name: backticks removed, case kept."""
        if self.kind is Kind.QUOTED_IDENT:
            return self.text[1:-1]
        return self.text

    @property
    def string_value(self) -> str:
        quote = self.text[0]
        body = self.text[1:-1]
        body = body.replace(quote * 2, quote)
        return re.sub(r"\\(.)", r"\1", body) if "\\" in body else body


# one pass over the text: each match is one token (or white space, or a comment); the order
# of the alternatives decides (a duration before a number, ``1e-10`` before ``1e``)
_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>--[^\r\n]*|\#[ ][^\r\n]*|/\*[\s\S]*?\*/)
  | (?P<string>'(?:''|\\[\s\S]|[^'\\])*'|"(?:""|\\[\s\S]|[^"\\])*")
  | (?P<quoted>`(?:``|[^`])*`)
  | (?P<exponent>(?:\d+(?:\.\d*)?|\.\d+)[eE][+-]?\d+(?![a-zA-Z]))
  | (?P<duration>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z]+\b)
  | (?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<placeholder>%%\w+)
  | (?P<ident>[A-Za-z_\u0080-\uffff][\w$\u0080-\uffff]*)
  | (?P<op>>=|<=|<>|!=|==|\|\||[=<>+\-*/%&|~(),.;?:])
    """,
    re.VERBOSE,
)
_KINDS = {
    "string": Kind.STRING,
    "quoted": Kind.QUOTED_IDENT,
    "duration": Kind.DURATION,
    "number": Kind.NUMBER,
    "exponent": Kind.NUMBER,  # 1e-10: a number, not 1 with the unit e
    "placeholder": Kind.PLACEHOLDER,
    "ident": Kind.IDENT,
    "op": Kind.OP,
}


def tokenize(text: str) -> list[Token]:
    """Tokens of a whole script (comments and white space dropped, ``;`` kept; a hint after
    SELECT kept as one HINT token; the plain-literal tuples after VALUES as one VALUES_BLOCK
    token)."""
    result: list[Token] = []
    line, line_start = 1, 0  # the line of the match, and where that line starts
    match = _TOKEN.match
    pos, end = 0, len(text)
    while pos < end:
        m = match(text, pos)
        if m is None:
            char = text[pos]
            if char in "'\"":
                message = "unterminated string literal"
            else:
                message = f"unterminated quote {char}" if char == "`" else f"unexpected character {char!r}"
            raise SqlSyntaxError(message, line=line, column=pos - line_start + 1)
        kind, value = m.lastgroup, m.group()
        if kind in _KINDS:
            result.append(Token(_KINDS[kind], value, pos, line, pos - line_start + 1))
        elif kind == "comment" and value.startswith("/*+") and result and result[-1].is_word("SELECT"):
            # TDengine reads /*+ … */ as hints only right after SELECT; elsewhere a comment
            result.append(Token(Kind.HINT, value, pos, line, pos - line_start + 1))
        newlines = value.count("\n")
        if newlines:
            line += newlines
            line_start = pos + value.rindex("\n") + 1
        pos = m.end()
        if kind == "ident" and value.upper() == "VALUES" and (block := scan_block(text, pos)) is not None:
            start, stop, _ = block
            # lines counted over the text just passed only: counting from the line's start
            # would rescan a one-line INSERT of 100 tables from its beginning at each block
            for begin, offset in ((pos, start), (start, stop)):
                if (newlines := text.count("\n", begin, offset)) > 0:
                    line += newlines
                    line_start = text.rindex("\n", begin, offset) + 1
                if offset == start:
                    result.append(Token(Kind.VALUES_BLOCK, text[start:stop], start, line, start - line_start + 1))
            pos = stop
    return result


@dataclass(frozen=True)
class StatementText:
    """One statement of a script: its tokens (without the ``;``) and its source text."""

    tokens: tuple[Token, ...]
    text: str
    line: int
    column: int


def split_statements(script: str) -> list[StatementText]:
    """Split on top-level ``;``; empty statements (``;;``) are dropped."""
    tokens = tokenize(script)
    statements: list[StatementText] = []
    current: list[Token] = []
    for tok in [*tokens, None]:
        if tok is None or tok.is_op(";"):
            if current:
                start = current[0].offset
                end_tok = current[-1]
                end = end_tok.offset + len(end_tok.text)
                statements.append(StatementText(tuple(current), script[start:end], current[0].line, current[0].column))
            current = []
        else:
            current.append(tok)
    return statements
