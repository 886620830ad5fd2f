"""Bulk VALUES lists: runs of row tuples made only of plain literals, read as columns.

Owns recognising, right after ``VALUES``, the longest run of tuples whose every value is a
plain literal (a number, a quoted string without backslash escapes, NULL, TRUE, FALSE) and
whose tuples all have the width of the first, and splitting such a run into per-column
literal texts with one compiled pattern: a 100,000-row INSERT is then not tokenised and
parsed value by value (that was nearly all of its time). Anything else — ``now``, an
expression, an escape, a tuple of another width — ends the run, and the parser reads the
rest as usual, so what is accepted and every error stay the grammar's. Must not convert a
literal to a column type: the INSERT family does that with the column's rules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

# a number not followed by a unit (10s is a duration) or more digits; strings without
# backslashes, so a doubled quote is the only escape left to undo
_NUMBER = r"-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?![\w.])"
_STRING = r"'(?:[^'\\]|'')*'|\"(?:[^\"\\]|\"\")*\""
_WORD = r"(?i:null|true|false)\b"
_LITERAL = f"(?:{_NUMBER}|{_STRING}|{_WORD})"
_FIRST_TUPLE = re.compile(rf"\(\s*({_LITERAL}(?:\s*,\s*{_LITERAL})*)\s*\)")
_ONE_LITERAL = re.compile(_LITERAL)
_WHITE = re.compile(r"\s*")
MIN_ROWS = 2  # a single tuple reads as fast through the grammar, and keeps its positions exact


@lru_cache(maxsize=128)
def _tuple_pattern(width: int, *, capture: bool) -> re.Pattern[str]:
    """One tuple of exactly ``width`` literals (each captured, or not: finding the run's end
    needs no groups) and the separator to the next tuple (a comma is consumed only when
    another tuple follows it)."""
    literal = f"({_LITERAL})" if capture else _LITERAL
    literals = r"\s*,\s*".join(literal for _ in range(width))
    return re.compile(rf"\(\s*{literals}\s*\)(?:\s*,?\s*(?=\())?")


def scan_block(text: str, start: int) -> tuple[int, int, int] | None:
    """The start and end offsets and the width of the run of plain-literal tuples at ``start``
    (after white space), or None when fewer than ``MIN_ROWS`` tuples qualify."""
    start = _WHITE.match(text, start).end()  # type: ignore[union-attr]
    first = _FIRST_TUPLE.match(text, start)
    if first is None:
        return None
    width = block_width(text[first.start() : first.end()])
    # the tuples without a quoted string in one match of a pattern that never backtracks
    # (a third of the general scan's time), then tuple by tuple from where it stopped
    unquoted = _unquoted_run(width).match(text, start)
    end = start if unquoted is None else unquoted.end()
    rows = text.count("(", start, end)  # unquoted: every ( opens a tuple
    for match in iter(_tuple_pattern(width, capture=False).scanner(text, end).match, None):
        rows += 1
        end = match.end()
    if rows < MIN_ROWS:
        return None
    while text[end - 1].isspace():  # the next token starts after the white space, not in it
        end -= 1
    return start, end, width


@lru_cache(maxsize=128)
def _unquoted_run(width: int) -> re.Pattern[str]:
    """A run of tuples of ``width`` unquoted literals (numbers, NULL, TRUE, FALSE), each with
    the separator the general tuple pattern takes after it. Atomic and possessive: a literal
    or a tuple that fails here fails in the general pattern too (a number's lookahead and a
    word's boundary are implied by the ``,`` or ``)`` that must follow), so the run matched is
    the general pattern's run over the same tuples."""
    literal = rf"(?>-?(?:\d++(?:\.\d*+)?+|\.\d++)(?:[eE][+-]?+\d++)?+|{_WORD})"
    literals = r"\s*+,\s*+".join(literal for _ in range(width))
    return re.compile(rf"(?>\(\s*+{literals}\s*+\)(?:\s*+,?+\s*+(?=\())?+)++")


def block_width(block: str) -> int:
    """How many literals each tuple of a block holds (its first tuple's count)."""
    first = _FIRST_TUPLE.match(block)
    assert first is not None, "a block starts with a tuple"
    return len(_ONE_LITERAL.findall(first.group(1)))


def block_columns(block: str, width: int) -> list[Sequence[str]]:
    """The literal texts of a block, column by column (quotes kept: the type decides)."""
    if "'" not in block and '"' not in block:
        # no string: the literals are the block's words between parentheses, commas and white
        # space (str.split in C, a tenth of the pattern's time)
        words = block.translate(_PUNCTUATION).split()
        assert len(words) % width == 0, "a block is tuples of its width (the scan made sure)"
        return [words[column::width] for column in range(width)]
    # the block is tuples end to end (the scan made sure), so findall skips nothing
    rows = _tuple_pattern(width, capture=True).findall(block)
    if width == 1:
        return [rows]
    return [column for column in zip(*rows, strict=True)] if rows else [() for _ in range(width)]


_PUNCTUATION = str.maketrans("(),", "   ")


def literal_offset(block: str, width: int, row: int, column: int) -> int:
    """Where literal ``column`` of tuple ``row`` starts in ``block`` (error messages only)."""
    for index, match in enumerate(iter(_tuple_pattern(width, capture=True).scanner(block).match, None)):
        if index == row:
            return match.start(column + 1)
    raise IndexError(row)
