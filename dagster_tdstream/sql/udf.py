"""User-defined functions (UDFs): the grammar.

Owns reading ``CREATE [OR REPLACE] [AGGREGATE] FUNCTION [IF NOT EXISTS] name AS 'path'
OUTPUTTYPE type [BUFSIZE n] [LANGUAGE 'C' | 'Python']`` and ``DROP FUNCTION [IF EXISTS] name``,
called by the parser after the words that name the statement, with TDengine's rules that need
no catalog (the language, the aggregate's buffer size). Does not read files or the catalog:
``families/udf.py`` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import ast

if TYPE_CHECKING:
    from .parser import Parser

LANGUAGES = ("C", "Python")  # as TDengine spells them
MAX_BUFSIZE = 4096 * 64  # TSDB_FUNC_BUF_SIZE: an aggregate's intermediate buffer, in bytes
MAX_NAME_LENGTH = 64  # TSDB_FUNC_NAME_LEN - 1


def parse_create_function(p: Parser, *, or_replace: bool, aggregate: bool) -> ast.CreateFunction:
    if_not_exists = p.accept_words("IF", "NOT", "EXISTS")
    name_tok = p.peek()
    name = p.ident("a function name").name.lower()
    if len(name) > MAX_NAME_LENGTH:
        raise p.fail_at(f"function name {name!r} is longer than {MAX_NAME_LENGTH} characters", name_tok)
    p.expect_word("AS")
    path = p.string("the path of the function's library or Python file, quoted")
    p.expect_word("OUTPUTTYPE")
    output_type = p.data_type()
    bufsize = 0
    size_tok = p.peek()
    if p.accept_word("BUFSIZE"):
        size_tok = p.peek()
        bufsize = p.integer("a buffer size in bytes")
    if aggregate and not 0 < bufsize <= MAX_BUFSIZE:
        raise p.fail_at(
            f"Invalid function buffer size: an AGGREGATE FUNCTION needs BUFSIZE from 1 to {MAX_BUFSIZE} bytes"
            f" (its intermediate result), got {bufsize}",
            size_tok,
        )
    language = "C"
    if p.accept_word("LANGUAGE"):
        lang_tok = p.peek()
        given = p.string("'C' or 'Python'")
        match = [known for known in LANGUAGES if known.lower() == given.lower()]
        if not match:
            raise p.fail_at(f"Invalid udf language {given!r}: expected 'C' or 'Python'", lang_tok)
        language = match[0]
    return ast.CreateFunction(name, path, output_type, aggregate, or_replace, if_not_exists, bufsize, language)


def parse_drop_function(p: Parser) -> ast.DropFunction:
    if_exists = p.accept_words("IF", "EXISTS")
    return ast.DropFunction(p.ident("a function name").name.lower(), if_exists)
