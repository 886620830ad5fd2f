"""Tokens of the TDengine dialect, with positions.

Owns turning SQL text into positioned tokens and splitting a script into statements.
sqlparse's lexer finds the boundaries of strings, quoted names and comments (the part
that is easy to get subtly wrong); the runs of code between them are re-tokenised here
because TDengine has tokens sqlparse does not know (``10s`` durations, ``%%trows``
placeholders). Must not interpret tokens: that is the parser's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from sqlparse import lexer as sqlparse_lexer
from sqlparse import tokens as sqlparse_tokens

from ..errors import SqlSyntaxError


class Kind(Enum):
    IDENT = "identifier"
    QUOTED_IDENT = "quoted identifier"
    STRING = "string"
    NUMBER = "number"
    DURATION = "duration"
    PLACEHOLDER = "placeholder"
    OP = "operator"
    HINT = "hint"  # /*+ name(…) … */ right after SELECT (skip_tsma)
    END = "end of statement"


@dataclass(frozen=True)
class Token:
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
        return re.sub(r"\\(.)", r"\1", body)


_CODE_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<exponent>(?:\d+(?:\.\d*)?|\.\d+)[eE][+-]?\d+(?![a-zA-Z]))
  | (?P<duration>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?[a-zA-Z]+\b)
  | (?P<number>(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<placeholder>%%\w+)
  | (?P<ident>[A-Za-z_\u0080-\uffff][\w$\u0080-\uffff]*)
  | (?P<op>>=|<=|<>|!=|==|\|\||[=<>+\-*/%&|~(),.;?:])
    """,
    re.VERBOSE,
)

_OPAQUE = (
    sqlparse_tokens.Literal.String.Single,
    sqlparse_tokens.Literal.String.Symbol,
)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


class _Positioner:
    def __init__(self, text: str) -> None:
        self._starts = _line_starts(text)

    def at(self, offset: int) -> tuple[int, int]:
        lo, hi = 0, len(self._starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self._starts[lo] + 1


def tokenize(text: str) -> list[Token]:
    """Tokens of a whole script (comments and white space dropped, ``;`` kept; a hint after
    SELECT kept as one HINT token)."""
    positioner = _Positioner(text)
    result: list[Token] = []
    offset = 0

    def emit(kind: Kind, value: str, at: int) -> None:
        line, column = positioner.at(at)
        result.append(Token(kind, value, at, line, column))

    code_start: int | None = None

    def flush_code(end: int) -> None:
        nonlocal code_start
        if code_start is None:
            return
        chunk = text[code_start:end]
        pos = 0
        while pos < len(chunk):
            m = _CODE_TOKEN.match(chunk, pos)
            if m is None:
                line, column = positioner.at(code_start + pos)
                raise SqlSyntaxError(f"unexpected character {chunk[pos]!r}", line=line, column=column)
            kind = m.lastgroup
            if kind != "ws":
                emit(
                    {
                        "duration": Kind.DURATION,
                        "number": Kind.NUMBER,
                        "exponent": Kind.NUMBER,  # 1e-10: a number, not 1 with the unit e
                        "placeholder": Kind.PLACEHOLDER,
                        "ident": Kind.IDENT,
                        "op": Kind.OP,
                    }[kind],
                    m.group(),
                    code_start + pos,
                )
            pos = m.end()
        code_start = None

    for ttype, value in sqlparse_lexer.tokenize(text):
        if ttype in sqlparse_tokens.Comment or (ttype in _OPAQUE and not _closed_string(value)):
            if ttype in _OPAQUE:
                line, column = positioner.at(offset)
                raise SqlSyntaxError("unterminated string literal", line=line, column=column)
            flush_code(offset)
            # TDengine reads /*+ … */ as hints only right after SELECT; anywhere else it is a
            # comment
            if value.startswith("/*+") and result and result[-1].kind is Kind.IDENT and result[-1].upper == "SELECT":
                emit(Kind.HINT, value, offset)
        elif ttype in _OPAQUE:
            flush_code(offset)
            emit(Kind.STRING, value, offset)
        elif ttype in sqlparse_tokens.Name and value.startswith("`"):
            flush_code(offset)
            emit(Kind.QUOTED_IDENT, value, offset)
        elif ttype is sqlparse_tokens.Error and value in "'\"`":
            line, column = positioner.at(offset)
            raise SqlSyntaxError(f"unterminated quote {value}", line=line, column=column)
        elif code_start is None:
            code_start = offset
        offset += len(value)
    flush_code(offset)
    return result


def _closed_string(value: str) -> bool:
    return len(value) >= 2 and value[0] == value[-1] and value[0] in "'\""


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
