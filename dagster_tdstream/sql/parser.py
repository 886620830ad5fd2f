"""Parser: tokens → AST (``ast.py``) for the TDengine dialect.

Owns the grammar: DDL, DML, SELECT, CREATE STREAM and the stream management statements.
Raises ``SqlSyntaxError`` with the position of the offending token and what was expected.
Semantic rules (units, ranges, option combinations, catalog lookups) are not checked here:
``validate.py`` and the session do that, so that the grammar stays readable.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ..errors import SqlSyntaxError
from . import ast
from .insert_row import one_row_insert
from .legacy_stream import LEGACY_START_WORDS, parse_legacy_stream
from .limits import MAX_EXPRESSION_DEPTH, MAX_NESTING
from .timeunits import NANOS_PER_UNIT, Duration, TimeValueError, parse_duration
from .tokens import Kind, StatementText, Token, split_statements
from .tsma import parse_create_tsma, parse_drop_tsma
from .udf import parse_create_function, parse_drop_function
from .values import block_width
from .vtable import is_vtables, parse_alter_vtable, parse_create_vtable, parse_drop_vtable, parse_show_vtables
from .walk import depth

T = TypeVar("T")

# Words that end an expression or a select item; an identifier in this set is never an alias.
_CLAUSE_WORDS = frozenset(
    [
        "FROM",
        "WHERE",
        "PARTITION",
        "GROUP",
        "ORDER",
        "LIMIT",
        "SLIMIT",
        "SOFFSET",
        "OFFSET",
        "HAVING",
        "INTERVAL",
        "SLIDING",
        "FILL",
        "RANGE",
        "EVERY",
        "SESSION",
        "STATE_WINDOW",
        "EVENT_WINDOW",
        "COUNT_WINDOW",
        "UNION",
        "AND",
        "OR",
        "NOT",
        "AS",
        "ON",
        "JOIN",
        "INNER",
        "LEFT",
        "RIGHT",
        "FULL",
        "OUTER",
        "INTO",
        "VALUES",
        "USING",
        "TAGS",
        "END",
        "THEN",
        "ELSE",
        "WHEN",
        "ASC",
        "DESC",
        "NULLS",
        "LIKE",
        "MATCH",
        "NMATCH",
        "IS",
        "IN",
        "BETWEEN",
        "TRUE_FOR",
        "STREAM_OPTIONS",
        "OPTIONS",
        "NOTIFY",
        "NOTIFY_OPTIONS",
        "OUTPUT_SUBTABLE",
    ]
)

STREAM_OPTION_NAMES = (
    "WATERMARK",
    "EXPIRED_TIME",
    "IGNORE_DISORDER",
    "DELETE_RECALC",
    "DELETE_OUTPUT_TABLE",
    "FILL_HISTORY",
    "FILL_HISTORY_FIRST",
    "CALC_NOTIFY_ONLY",
    "LOW_LATENCY_CALC",
    "PRE_FILTER",
    "FORCE_OUTPUT",
    "MAX_DELAY",
    "EVENT_TYPE",
    "IGNORE_NODATA_TRIGGER",
)
_DURATION_OPTIONS = ("WATERMARK", "EXPIRED_TIME", "MAX_DELAY")
_START_OPTIONS = ("FILL_HISTORY", "FILL_HISTORY_FIRST")
WINDOW_EVENT_TYPES = ("WINDOW_OPEN", "WINDOW_CLOSE")
NOTIFY_EVENT_TYPES = ("WINDOW_OPEN", "WINDOW_CLOSE", "ON_TIME")
NOTIFY_OPTION_NAMES = ("NOTIFY_HISTORY", "ON_FAILURE_PAUSE")
FILL_MODES = ("NONE", "NULL", "NULL_F", "VALUE", "VALUE_F", "PREV", "NEXT", "NEAR", "LINEAR")


def parse_script(script: str) -> list[ast.Statement]:
    """Every statement of a script; the first syntax error stops the parse. A one-row INSERT
    of plain literals is read by ``insert_row.py``'s patterns (the same statement)."""
    if (insert := one_row_insert(script)) is not None:
        return [insert]
    return [parse_statement_text(part, script) for part in split_statements(script)]


def parse_statement(sql: str) -> ast.Statement:
    """Exactly one statement (a trailing ``;`` is allowed)."""
    if (insert := one_row_insert(sql)) is not None:
        return insert
    parts = split_statements(sql)
    if not parts:
        raise SqlSyntaxError("empty statement", line=1, column=1)
    if len(parts) > 1:
        extra = parts[1]
        raise SqlSyntaxError("expected one statement, found another after ';'", line=extra.line, column=extra.column)
    return parse_statement_text(parts[0], sql)


def parse_statement_text(part: StatementText, script: str) -> ast.Statement:
    return _Parser(part, script).statement()


# TDengine's integer database options and their ranges (its CREATE DATABASE reference)
_DATABASE_INT_OPTIONS: dict[str, tuple[int, int]] = {
    "VGROUPS": (1, 1024),
    "REPLICA": (1, 3),
    "BUFFER": (3, 16384),
    "PAGES": (64, 2**31 - 1),
    "PAGESIZE": (1, 16384),
    "CACHESIZE": (1, 65536),
    "COMP": (0, 2),
    "WAL_FSYNC_PERIOD": (0, 180000),
    "WAL_LEVEL": (0, 2),
    "WAL_RETENTION_PERIOD": (-1, 2**31 - 1),
    "WAL_RETENTION_SIZE": (-1, 2**31 - 1),
    "WAL_ROLL_PERIOD": (0, 2**31 - 1),
    "WAL_SEGMENT_SIZE": (0, 2**31 - 1),
    "MAXROWS": (200, 10000),
    "MINROWS": (10, 1000),
    "STT_TRIGGER": (1, 16),
    "TABLE_PREFIX": (-256, 256),
    "TABLE_SUFFIX": (-256, 256),
    "TSDB_PAGESIZE": (1, 16384),
    "SINGLE_STABLE": (0, 1),
    "KEEP_TIME_OFFSET": (0, 23),
}


class _Parser:
    def __init__(self, part: StatementText, script: str) -> None:
        self.tokens = part.tokens
        self.script = script
        self.part = part
        self.i = 0
        self.nesting = 0  # parentheses, function calls and prefix operators open around the current token

    # ------------------------------------------------------------------ token helpers

    def peek(self, k: int = 0) -> Token:
        j = self.i + k
        if j < len(self.tokens):
            return self.tokens[j]
        last = self.tokens[-1] if self.tokens else None
        offset = last.offset + len(last.text) if last else self.part.tokens[0].offset
        line = last.line if last else self.part.line
        column = last.column + len(last.text) if last else self.part.column
        return Token(Kind.END, "", offset, line, column)

    def next(self) -> Token:
        tok = self.peek()
        if tok.kind is not Kind.END:
            self.i += 1
        return tok

    def at_end(self) -> bool:
        return self.i >= len(self.tokens)

    def error(self, expected: str, tok: Token | None = None) -> SqlSyntaxError:
        tok = tok or self.peek()
        found = "end of statement" if tok.kind is Kind.END else repr(tok.text)
        return SqlSyntaxError(
            f"expected {expected}, found {found}",
            line=tok.line,
            column=tok.column,
            statement=self.part.text,
        )

    def fail_at(self, message: str, tok: Token) -> SqlSyntaxError:
        return SqlSyntaxError(message, line=tok.line, column=tok.column, statement=self.part.text)

    def pos(self, tok: Token | None = None) -> ast.Pos:
        tok = tok or self.peek()
        return ast.Pos(tok.line, tok.column)

    def accept_word(self, *words: str) -> Token | None:
        if self.peek().is_word(*words):
            return self.next()
        return None

    def expect_word(self, *words: str) -> Token:
        tok = self.accept_word(*words)
        if tok is None:
            raise self.error(" or ".join(words))
        return tok

    def accept_words(self, *words: str) -> bool:
        """Accept a fixed sequence such as IF NOT EXISTS (all or nothing)."""
        for k, word in enumerate(words):
            if not self.peek(k).is_word(word):
                return False
        self.i += len(words)
        return True

    def expect_words(self, *words: str) -> None:
        for word in words:
            self.expect_word(word)

    def accept_op(self, *ops: str) -> Token | None:
        if self.peek().is_op(*ops):
            return self.next()
        return None

    def expect_op(self, op: str) -> Token:
        tok = self.accept_op(op)
        if tok is None:
            raise self.error(f"'{op}'")
        return tok

    def expect_end(self) -> None:
        if not self.at_end():
            raise self.error("end of statement")

    def ident(self, what: str = "a name") -> Token:
        tok = self.peek()
        if tok.kind is Kind.QUOTED_IDENT and not tok.name:
            raise self.fail_at(f"expected {what}: a quoted name cannot be empty (``)", tok)
        if tok.kind in (Kind.IDENT, Kind.QUOTED_IDENT):
            return self.next()
        raise self.error(what)

    def qualified_name(self, what: str = "a table name") -> ast.QualifiedName:
        first = self.ident(what)
        if self.accept_op("."):
            second = self.ident(what)
            return ast.QualifiedName(second.name, first.name, self.pos(first))
        return ast.QualifiedName(first.name, None, self.pos(first))

    def comma_list(self, item: Callable[[], T]) -> list[T]:
        items = [item()]
        while self.accept_op(","):
            items.append(item())
        return items

    def parenthesized(self, item: Callable[[], T]) -> list[T]:
        self.expect_op("(")
        items = self.comma_list(item)
        self.expect_op(")")
        return items

    def integer(self, what: str = "an integer") -> int:
        negative = bool(self.accept_op("-"))
        tok = self.peek()
        if tok.kind is Kind.NUMBER and tok.text.isdigit():
            self.next()
            return -int(tok.text) if negative else int(tok.text)
        raise self.error(what)

    def string(self, what: str = "a quoted string") -> str:
        tok = self.peek()
        if tok.kind is Kind.STRING:
            self.next()
            return tok.string_value
        raise self.error(what)

    def source_text(self, start: int, end: int) -> str:
        """Source text of tokens[start:end] as the user wrote it."""
        if end <= start:
            return ""
        first, last = self.tokens[start], self.tokens[end - 1]
        return self.script[first.offset : last.offset + len(last.text)]

    # ------------------------------------------------------------------ durations

    def duration(self, what: str = "a duration such as 10s") -> ast.Duration:
        """A duration argument: ``10s``, ``'10s'`` or a constant sum such as ``12+30s``."""
        tok = self.peek()
        if tok.kind is Kind.STRING:
            self.next()
            return self._duration_from(tok, tok.string_value)
        expr = self.expression()
        try:
            return _fold_duration(expr)
        except TimeValueError as exc:
            raise self.fail_at(str(exc), tok) from None
        except _NotConstant:
            raise self.error(what, tok) from None

    def _duration_from(self, tok: Token, text: str) -> Duration:
        try:
            return parse_duration(text)
        except TimeValueError as exc:
            raise self.fail_at(str(exc), tok) from None

    # ------------------------------------------------------------------ statements

    def statement(self) -> ast.Statement:
        first = self.peek()
        pos, text = self.pos(first), self.part.text
        word = first.upper if first.kind is Kind.IDENT else ""
        handlers: dict[str, Callable[[], ast.Statement]] = {
            "CREATE": self.create,
            "DROP": self.drop,
            "USE": self.use,
            "INSERT": self.insert,
            "DELETE": self.delete,
            "ALTER": self.alter,
            "SHOW": self.show,
            "DESCRIBE": self.describe,
            "DESC": self.describe,
            "SELECT": self.query,
            "START": self.start_stream,
            "STOP": self.stop_stream,
            "PAUSE": self.stop_stream,
            "RESUME": self.start_stream,
            "RECALCULATE": self.recalculate,
            "KILL": self.kill_stream,
            "COMPACT": self.maintain_database,
            "TRIM": self.maintain_database,
            "FLUSH": self.maintain_database,
        }
        handler = handlers.get(word)
        if handler is None:
            raise self.error("a statement (" + ", ".join(sorted(handlers)) + ")")
        stmt = handler()
        self.expect_end()
        return _with_source(stmt, pos, text)

    def create(self) -> ast.Statement:
        self.expect_word("CREATE")
        tok = self.peek()
        if self.accept_word("DATABASE"):
            return self.create_database()
        if self.accept_word("STABLE"):
            return self.create_table(is_super=True)
        if self.accept_word("TABLE"):
            return self.create_table(is_super=False)
        if self.accept_word("VTABLE"):
            return parse_create_vtable(self)
        if self.accept_word("STREAM"):
            return self.create_stream()
        if self.accept_word("TSMA"):
            return parse_create_tsma(self, recursive=False)
        if self.accept_words("RECURSIVE", "TSMA"):
            return parse_create_tsma(self, recursive=True)
        if self.accept_word("SNODE"):
            self.expect_words("ON", "DNODE")
            return ast.CreateSnode(self.integer("a dnode id"))
        or_replace = self.accept_words("OR", "REPLACE")
        aggregate = bool(self.accept_word("AGGREGATE"))
        if self.accept_word("FUNCTION"):
            return parse_create_function(self, or_replace=or_replace, aggregate=aggregate)
        if or_replace or aggregate:
            raise self.error("FUNCTION")
        raise self.error(
            "DATABASE, STABLE, TABLE, VTABLE, STREAM, TSMA, RECURSIVE TSMA, SNODE or [OR REPLACE] [AGGREGATE] FUNCTION",
            tok,
        )

    def create_database(self) -> ast.CreateDatabase:
        if_not_exists = self.accept_words("IF", "NOT", "EXISTS")
        name = self.ident("a database name").name
        precision = "ms"
        keep: tuple[Duration, ...] = ()
        options: list[tuple[str, str]] = []
        seen: set[str] = set()
        while not self.at_end():
            key_tok = self.ident("a database option such as PRECISION 'us' or VGROUPS 2")
            key = key_tok.upper
            if key in seen:
                raise self.fail_at(f"database option {key} given twice", key_tok)
            seen.add(key)
            if key == "PRECISION":
                value_tok = self.peek()
                precision = self.string("a precision: 'ms', 'us' or 'ns'").lower()
                if precision not in ("ms", "us", "ns"):
                    raise self.fail_at(f"invalid precision {precision!r}; expected 'ms', 'us' or 'ns'", value_tok)
                options.append((key, precision))
            elif key == "KEEP":
                keep = tuple(self.comma_list(self._keep_value))
                options.append((key, ",".join(str(k) for k in keep)))
            else:
                value_tok = self.peek()
                value = self._option_value()
                bounds = _DATABASE_INT_OPTIONS.get(key)
                if bounds is not None:
                    number = int(value) if re.fullmatch(r"-?\d+", value) else None
                    if number is None or not bounds[0] <= number <= bounds[1]:
                        raise self.fail_at(
                            f"invalid value {value!r} for database option {key}; "
                            f"expected an integer from {bounds[0]} to {bounds[1]}",
                            value_tok,
                        )
                    value = str(number)
                options.append((key, value))
        return ast.CreateDatabase(name, if_not_exists, precision, keep, tuple(options))

    def _keep_value(self) -> Duration:
        tok = self.peek()
        if tok.kind is Kind.NUMBER and tok.text.isdigit():
            self.next()
            return Duration(int(tok.text), "d")
        if tok.kind is Kind.DURATION:
            self.next()
            return self._duration_from(tok, tok.text)
        raise self.error("a KEEP value such as 3650 or 365d")

    def _option_value(self) -> str:
        tok = self.next()
        if tok.kind is Kind.STRING:
            return tok.string_value
        if tok.is_op("-"):
            return "-" + self.next().text
        if tok.kind in (Kind.NUMBER, Kind.DURATION, Kind.IDENT):
            values = [tok.text]
            while self.peek().is_op(",") and self.peek(1).kind in (Kind.NUMBER, Kind.DURATION):
                self.next()
                values.append(self.next().text)
            return ",".join(values)
        raise self.error("an option value", tok)

    def data_type(self) -> ast.DataType:
        tok = self.ident("a data type")
        name = tok.upper
        if name in ("INT", "BIGINT", "SMALLINT", "TINYINT") and self.accept_word("UNSIGNED"):
            name = f"{name} UNSIGNED"
        if name not in _TYPE_NAMES:
            raise self.fail_at(f"unknown data type {tok.text!r}; expected one of {', '.join(_TYPE_NAMES)}", tok)
        length = scale = None
        if self.accept_op("("):
            length = self.integer("a type length")
            if self.accept_op(","):
                scale = self.integer("a decimal scale")
            self.expect_op(")")
        if name in ("VARCHAR", "BINARY", "NCHAR", "VARBINARY", "GEOMETRY") and length is None:
            raise self.fail_at(f"type {name} needs a length, e.g. {name}(64)", tok)
        return ast.DataType(name, length, scale)

    def column_def(self) -> ast.ColumnDef:
        tok = self.ident("a column name")
        dtype = self.data_type()
        primary_key = self.accept_words("PRIMARY", "KEY")
        comment = None
        while True:
            if self.accept_word("COMMENT"):
                comment = self.string()
            elif self.accept_word("ENCODE", "COMPRESS", "LEVEL"):
                self.string()
            else:
                break
        return ast.ColumnDef(tok.name, dtype, primary_key, comment, self.pos(tok))

    def create_table(self, *, is_super: bool) -> ast.Statement:
        start = self.i
        if_not_exists = self.accept_words("IF", "NOT", "EXISTS")
        name = self.qualified_name()
        if not is_super and self.peek().is_word("USING"):
            self.i = start
            return self.create_child_tables()
        if not is_super and self.accept_word("AS"):
            return ast.CreateContinuousQuery(name, if_not_exists, self.select())
        columns = tuple(self.parenthesized(self.column_def))
        tags: tuple[ast.ColumnDef, ...] = ()
        if self.accept_word("TAGS"):
            tags = tuple(self.parenthesized(self.column_def))
        elif is_super:
            raise self.error("TAGS (...) for a super table")
        options: list[tuple[str, str]] = []
        while not self.at_end():
            key = self.ident("a table option").upper
            options.append((key, self._option_value()))
        return ast.CreateTable(name, columns, tags, bool(tags) or is_super, if_not_exists, tuple(options))

    def child_table_def(self, *, if_not_exists: bool, name: ast.QualifiedName) -> ast.ChildTableDef:
        self.expect_word("USING")
        stable = self.qualified_name("a super table name")
        tag_names = None
        if self.peek().is_op("("):
            tag_names = tuple(t.name for t in self.parenthesized(lambda: self.ident("a tag name")))
        self.expect_word("TAGS")
        values = tuple(self.parenthesized(self.expression))
        return ast.ChildTableDef(name, stable, tag_names, values, if_not_exists)

    def create_child_tables(self) -> ast.CreateChildTables:
        tables = []
        while True:
            if_not_exists = self.accept_words("IF", "NOT", "EXISTS")
            name = self.qualified_name()
            tables.append(self.child_table_def(if_not_exists=if_not_exists, name=name))
            if self.at_end():
                break
        return ast.CreateChildTables(tuple(tables))

    def drop(self) -> ast.Statement:
        self.expect_word("DROP")
        tok = self.peek()
        if self.accept_word("DATABASE"):
            if_exists = self.accept_words("IF", "EXISTS")
            name = self.ident("a database name").name
            force = bool(self.accept_word("FORCE"))
            return ast.DropDatabase(name, if_exists, force)
        if self.accept_word("STABLE", "TABLE"):
            if_exists = self.accept_words("IF", "EXISTS")
            if self.accept_word("WITH"):  # 3.3.x: tables named by their uid, db.`uid`
                uids = self.comma_list(lambda: self.qualified_name("db.`uid` (a table's uid)"))
                return ast.DropTables(tuple(uids), if_exists, tok.is_word("STABLE"), by_uid=True)
            names = self.comma_list(self.qualified_name)
            return ast.DropTables(tuple(names), if_exists, tok.is_word("STABLE"))
        if self.accept_word("STREAM"):
            if_exists = self.accept_words("IF", "EXISTS")
            return ast.DropStream(self.qualified_name("a stream name"), if_exists)
        if self.accept_word("TSMA"):
            return parse_drop_tsma(self)
        if self.accept_word("VTABLE"):
            return parse_drop_vtable(self)
        if self.accept_word("FUNCTION"):
            return parse_drop_function(self)
        raise self.error("DATABASE, STABLE, TABLE, VTABLE, STREAM, TSMA or FUNCTION", tok)

    def kill_stream(self) -> ast.KillStream:
        self.expect_words("KILL", "STREAM")
        tok = self.peek()
        text = tok.string_value if tok.kind is Kind.STRING else None
        if tok.kind is Kind.NUMBER:
            self.next()
            text = tok.text
            if self.accept_op(":"):
                text += ":" + self.next().text
        elif text is not None:
            self.next()
        if text is None:
            return ast.KillStream(self.qualified_name("a stream id (connId:streamId) or a continuous query's name"))
        match = re.fullmatch(r"(?:\d+:)?(\d+)", text.strip())
        if match is None:
            raise self.error("a stream id such as 3:1 (connId:streamId, as SHOW STREAMS shows it)", tok)
        return ast.KillStream(None, int(match.group(1)))

    def maintain_database(self) -> ast.MaintainDatabase:
        """``COMPACT DATABASE db`` / ``TRIM DATABASE db`` / ``FLUSH DATABASE db`` (TDengine's;
        the time range a COMPACT may name is accepted and the whole database compacted)."""
        action = self.next().upper
        self.expect_word("DATABASE")
        name = self.ident("a database name").name
        if action == "COMPACT":
            for word in ("START", "END"):
                if self.accept_words(word, "WITH"):
                    self.expression()
        return ast.MaintainDatabase(action, name)

    def use(self) -> ast.UseDatabase:
        self.expect_word("USE")
        return ast.UseDatabase(self.ident("a database name").name)

    def insert(self) -> ast.Insert:
        self.expect_words("INSERT", "INTO")
        targets = []
        while True:
            tok = self.peek()
            name = self.qualified_name()
            using = None
            if self.peek().is_word("USING"):
                using = self.child_table_def(if_not_exists=True, name=name)
            columns = None
            if self.peek().is_op("("):
                columns = tuple(t.name for t in self.parenthesized(lambda: self.ident("a column name")))
            self.expect_word("VALUES")
            block = None
            if self.peek().kind is Kind.VALUES_BLOCK:
                text = self.next()
                block = ast.ValuesBlock(text.text, block_width(text.text), self.pos(text))
            rows = [] if block is not None else [tuple(self.parenthesized(self.insert_value))]
            while self.peek().is_op("(") or (self.peek().is_op(",") and self.peek(1).is_op("(")):
                self.accept_op(",")
                rows.append(tuple(self.parenthesized(self.insert_value)))
            targets.append(ast.InsertTarget(name, using, columns, tuple(rows), self.pos(tok), block))
            if self.at_end():
                break
        return ast.Insert(tuple(targets))

    def insert_value(self) -> ast.Expr:
        """One value of a VALUES row. A lone number, string, NULL or boolean (nearly every
        value of a bulk INSERT) is read at once; anything else through the expression
        grammar, whose dozen precedence levels a literal would otherwise descend."""
        tok, after = self.peek(), self.peek(1)
        if after.kind is Kind.OP and after.text in (",", ")"):
            kind, text = tok.kind, tok.text
            pos = ast.Pos(tok.line, tok.column)
            if kind is Kind.NUMBER:
                self.i += 1
                if "." in text or "e" in text or "E" in text:
                    return ast.Literal(float(text), "float", pos=pos)
                return ast.Literal(int(text), "int", pos=pos)
            if kind is Kind.STRING:
                self.i += 1
                return ast.Literal(tok.string_value, "string", pos=pos)
            if kind is Kind.IDENT and text.upper() in ("NULL", "TRUE", "FALSE"):
                return self.primary()
        return self.expression()

    def delete(self) -> ast.Delete:
        self.expect_words("DELETE", "FROM")
        name = self.qualified_name()
        where = self.expression() if self.accept_word("WHERE") else None
        return ast.Delete(name, where)

    def alter(
        self,
    ) -> ast.AlterTableSetTags | ast.AlterTags | ast.AlterLocal | ast.AlterDnode | ast.AlterVirtualColumn:
        self.expect_word("ALTER")
        if self.accept_word("VTABLE"):
            return parse_alter_vtable(self)
        if self.accept_word("LOCAL"):
            return ast.AlterLocal(*self.option_pair("ALTER LOCAL 'name' 'value'", "'querySmaOptimize'"))
        if self.accept_words("ALL", "DNODES"):
            return ast.AlterDnode(None, *self.option_pair("ALTER ALL DNODES 'name' 'value'", "'maxTsmaNum'"))
        if self.accept_word("DNODE"):
            dnode = self.integer("a dnode id")
            return ast.AlterDnode(dnode, *self.option_pair("ALTER DNODE id 'name' 'value'", "'maxTsmaNum'"))
        if self.accept_word("TABLE", "STABLE") is None:
            raise self.error("TABLE, STABLE, VTABLE, LOCAL, DNODE or ALL DNODES")
        name = self.qualified_name()
        if self.accept_words("ADD", "TAG"):
            return ast.AlterTags(name, added=self.column_def())
        if self.accept_words("DROP", "TAG"):
            return ast.AlterTags(name, dropped=self.ident("a tag name").name)
        if not self.accept_words("SET", "TAG"):
            raise self.error("SET TAG name = value, ADD TAG name type or DROP TAG name")
        return self.tag_assignments(name)

    def option_pair(self, form: str, example: str) -> tuple[str, str]:
        """An option and its value: ``'name' 'value'`` or TDengine's one-string ``'name value'``."""
        first = self.string(f"an option name in quotes, e.g. {example}")
        if self.peek().kind is Kind.STRING:
            return first.strip(), self.string("a value")
        name, _, value = first.strip().partition(" ")
        if not value.strip():
            raise self.error(f"the option's value: {form}")
        return name, value.strip()

    def tag_assignments(self, name: ast.QualifiedName) -> ast.AlterTableSetTags:
        """``name = value, …`` after SET TAG (ALTER TABLE and ALTER VTABLE)."""

        def assignment() -> tuple[str, ast.Expr]:
            tag = self.ident("a tag name").name
            self.expect_op("=")
            return tag, self.expression()

        return ast.AlterTableSetTags(name, tuple(self.comma_list(assignment)))

    def show(self) -> ast.Show | ast.ShowVariables:
        self.expect_word("SHOW")
        db = None
        if self.peek().kind in (Kind.IDENT, Kind.QUOTED_IDENT) and self.peek(1).is_op("."):
            db = self.next().name
            self.next()
        if is_vtables(self):
            return parse_show_vtables(self, db)
        if db is None and self.accept_word("DNODE"):
            dnode = self.integer("a dnode id")
            self.expect_word("VARIABLES")
            return ast.ShowVariables(dnode, self.string("a LIKE pattern") if self.accept_word("LIKE") else None)
        if db is None and self.accept_word("VARIABLES"):
            return ast.ShowVariables(None, self.string("a LIKE pattern") if self.accept_word("LIKE") else None)
        what_tok = self.accept_word("DATABASES", "STABLES", "TABLES", "STREAMS", "TSMAS", "FUNCTIONS")
        if what_tok is None:
            raise self.error(
                "DATABASES, STABLES, TABLES, VTABLES, STREAMS, TSMAS, FUNCTIONS, VARIABLES or DNODE id VARIABLES"
            )
        what = what_tok.upper
        if what in ("DATABASES", "FUNCTIONS") and db:
            raise self.fail_at(f"SHOW {what} takes no database prefix", what_tok)
        like = self.string("a LIKE pattern") if self.accept_word("LIKE") else None
        return ast.Show(what, db, like)

    def describe(self) -> ast.Describe:
        self.next()
        return ast.Describe(self.qualified_name())

    def query(self) -> ast.Query:
        first = self.select()
        unions: list[tuple[bool, ast.Select]] = []
        while self.peek().is_word("UNION"):
            tok = self.next()
            before = unions[-1][1] if unions else first
            if before.order_by or before.limit is not None or before.offset is not None:
                raise self.fail_at(
                    "ORDER BY, LIMIT and OFFSET order and cut the whole UNION: write them after its last SELECT", tok
                )
            unions.append((bool(self.accept_word("ALL")), self.select()))
        if not unions:
            return ast.Query(first)
        last = unions[-1][1]
        whole = dataclasses.replace(last, order_by=(), limit=None, offset=None)
        unions[-1] = (unions[-1][0], whole)
        return ast.Query(first, tuple(unions), last.order_by, last.limit, last.offset)

    def stream_name(self) -> tuple[ast.QualifiedName, bool]:
        if_exists = self.accept_words("IF", "EXISTS")
        return self.qualified_name("a stream name"), if_exists

    def start_stream(self) -> ast.StartStream:
        """START STREAM, and the legacy RESUME STREAM (the same: the stream runs again)."""
        self.expect_word("START", "RESUME")
        self.expect_word("STREAM")
        if_exists = self.accept_words("IF", "EXISTS")
        ignore = self.accept_words("IGNORE", "UNTREATED")
        name = self.qualified_name("a stream name")
        return ast.StartStream(name, if_exists, ignore)

    def stop_stream(self) -> ast.StopStream:
        """STOP STREAM, and the legacy PAUSE STREAM (the same: no runs until started again)."""
        self.expect_word("STOP", "PAUSE")
        self.expect_word("STREAM")
        name, if_exists = self.stream_name()
        return ast.StopStream(name, if_exists)

    def recalculate(self) -> ast.RecalculateStream:
        self.expect_words("RECALCULATE", "STREAM")
        name = self.qualified_name("a stream name")
        self.expect_word("FROM")
        start = self.expression()
        end = self.expression() if self.accept_word("TO") else None
        return ast.RecalculateStream(name, start, end)

    # ------------------------------------------------------------------ CREATE STREAM

    def create_stream(self) -> ast.CreateStream | ast.CreateLegacyStream:
        if_not_exists = self.accept_words("IF", "NOT", "EXISTS")
        name = self.qualified_name("a stream name")
        if self.peek().is_word(*LEGACY_START_WORDS):  # 3.3.7 has its trigger here
            return parse_legacy_stream(self, name, if_not_exists)
        trigger = self.trigger()
        trigger_table = self.qualified_name() if self.accept_word("FROM") else None
        partition_by: tuple[ast.Expr, ...] = ()
        if self.accept_words("PARTITION", "BY"):
            partition_by = tuple(self.comma_list(self.expression))
        options: tuple[ast.StreamOption, ...] = ()
        options_keyword = "STREAM_OPTIONS"
        kw = self.accept_word("STREAM_OPTIONS", "OPTIONS")
        if kw:
            options_keyword = kw.upper
            options = self.stream_options()
        notification = None
        if self.peek().is_word("NOTIFY"):
            notification = self.notification()
        elif self.peek().is_word("NOTIFY_OPTIONS", "ON"):
            raise self.fail_at(f"{self.peek().upper} needs a NOTIFY(url) before it", self.peek())
        into = self.qualified_name("an output table name") if self.accept_word("INTO") else None
        output_subtable = None
        if self.accept_word("OUTPUT_SUBTABLE"):
            self.expect_op("(")
            output_subtable = self.expression()
            self.expect_op(")")
        columns: list[str] = []
        composite_key = False
        if self.peek().is_op("("):
            self.next()
            while True:
                col = self.ident("an output column name")
                columns.append(col.name)
                key_tok = self.peek()
                if self.accept_words("COMPOSITE", "KEY") or self.accept_words("PRIMARY", "KEY"):
                    if len(columns) != 2:
                        raise self.fail_at(
                            f"{key_tok.upper} KEY can only mark the second column (the first is the timestamp key)",
                            key_tok,
                        )
                    composite_key = True
                if not self.accept_op(","):
                    break
            self.expect_op(")")
        tags: list[ast.OutputTag] = []
        if self.accept_word("TAGS"):
            tags = self.parenthesized(self.output_tag)
        query = None
        if self.accept_word("AS"):
            query = self.select()
        elif not self.at_end():
            raise self.error(
                "the next clause of CREATE STREAM (FROM, PARTITION BY, STREAM_OPTIONS, NOTIFY, INTO, "
                "OUTPUT_SUBTABLE, column list, TAGS or AS)"
            )
        return ast.CreateStream(
            name=name,
            if_not_exists=if_not_exists,
            trigger=trigger,
            trigger_table=trigger_table,
            partition_by=partition_by,
            options=options,
            notification=notification,
            into=into,
            output_subtable=output_subtable,
            columns=tuple(columns),
            composite_key=composite_key,
            tags=tuple(tags),
            query=query,
            options_keyword=options_keyword,
        )

    def trigger(self) -> ast.Trigger:
        tok = self.peek()
        if self.accept_word("PERIOD"):
            self.expect_op("(")
            period = self.duration()
            offset = self.duration() if self.accept_op(",") else None
            self.expect_op(")")
            return ast.PeriodTrigger(period, offset)
        if self.accept_word("INTERVAL"):
            self.expect_op("(")
            interval = self.duration()
            interval_offset = self.duration() if self.accept_op(",") else None
            self.expect_op(")")
            if not self.peek().is_word("SLIDING"):
                raise self.error("SLIDING(...) after INTERVAL(...): the interval trigger needs a sliding")
            sliding = self._sliding()
            return ast.SlidingTrigger(sliding[0], sliding[1], interval, interval_offset)
        if self.peek().is_word("SLIDING"):
            sliding = self._sliding()
            return ast.SlidingTrigger(sliding[0], sliding[1])
        if self.accept_word("SESSION"):
            self.expect_op("(")
            col = self.ident("the timestamp column of SESSION")
            self.expect_op(",")
            gap = self.duration()
            self.expect_op(")")
            return ast.SessionTrigger(ast.Column(col.name, pos=self.pos(col)), gap)
        if self.accept_word("STATE_WINDOW"):
            self.expect_op("(")
            expr = self.expression()
            self.expect_op(")")
            return ast.StateTrigger(expr, self.true_for())
        if self.accept_word("EVENT_WINDOW"):
            self.expect_op("(")
            start, end = self.event_conditions()
            self.expect_op(")")
            return ast.EventTrigger(start, end, self.true_for())
        if self.accept_word("COUNT_WINDOW"):
            self.expect_op("(")
            count, sliding, columns = self.count_arguments()
            self.expect_op(")")
            return ast.CountTrigger(count, sliding, columns)
        raise self.error(
            "a trigger: PERIOD, [INTERVAL(...)] SLIDING, SESSION, STATE_WINDOW, EVENT_WINDOW or COUNT_WINDOW",
            tok,
        )

    def _sliding(self) -> tuple[Duration, Duration | None]:
        self.expect_word("SLIDING")
        self.expect_op("(")
        sliding = self.duration()
        offset = self.duration() if self.accept_op(",") else None
        self.expect_op(")")
        return sliding, offset

    def true_for(self) -> Duration | None:
        if not self.accept_word("TRUE_FOR"):
            return None
        self.expect_op("(")
        value = self.duration()
        self.expect_op(")")
        return value

    def event_conditions(self) -> tuple[tuple[ast.Expr, ...], tuple[ast.Expr, ...]]:
        self.expect_words("START", "WITH")
        start = self.condition_list()
        # TDengine's tests write ``START WITH (c1, c2)`` without END WITH: the window then
        # lasts while a start condition holds.
        end: tuple[ast.Expr, ...] = ()
        if self.accept_words("END", "WITH"):
            end = self.condition_list()
        return start, end

    def condition_list(self) -> tuple[ast.Expr, ...]:
        """``cond`` or ``(cond1, cond2, …)``: the index of the condition met is reported by
        notifications, so a list is kept as a list."""
        if self.peek().is_op("("):
            saved = self.i
            self.next()
            items = self.comma_list(self.expression)
            if len(items) > 1 and self.accept_op(")"):
                return tuple(items)
            self.i = saved
        return (self.expression(),)

    def count_arguments(self) -> tuple[int, int | None, tuple[ast.Column, ...]]:
        count = self.integer("the row count of COUNT_WINDOW")
        sliding = None
        columns: list[ast.Column] = []
        while self.accept_op(","):
            tok = self.peek()
            if tok.kind is Kind.NUMBER and not columns and sliding is None:
                sliding = self.integer()
            else:
                col = self.ident("a column name or the sliding row count")
                columns.append(ast.Column(col.name, pos=self.pos(col)))
        return count, sliding, tuple(columns)

    def stream_options(self) -> tuple[ast.StreamOption, ...]:
        self.expect_op("(")
        options = [self.stream_option()]
        while self.accept_op("|"):
            options.append(self.stream_option())
        self.expect_op(")")
        return tuple(options)

    def stream_option(self) -> ast.StreamOption:
        tok = self.peek()
        if tok.kind is not Kind.IDENT or tok.upper not in STREAM_OPTION_NAMES:
            raise self.error("a stream option (" + " | ".join(STREAM_OPTION_NAMES) + ")")
        self.next()
        name, pos = tok.upper, self.pos(tok)
        if name in _DURATION_OPTIONS:
            self.expect_op("(")
            value = self.duration()
            self.expect_op(")")
            return ast.StreamOption(name, duration=value, pos=pos)
        if name in _START_OPTIONS:
            start = None
            if self.accept_op("("):
                arg = self.peek()
                if arg.kind is Kind.STRING:
                    self.next()
                    start = ast.Literal(arg.string_value, "string", pos=self.pos(arg))
                elif arg.kind is Kind.NUMBER and arg.text.isdigit():
                    self.next()
                    start = ast.Literal(int(arg.text), "int", pos=self.pos(arg))
                else:
                    raise self.error("a start time: a timestamp string or an epoch integer")
                self.expect_op(")")
            return ast.StreamOption(name, start=start, pos=pos)
        if name == "PRE_FILTER":
            self.expect_op("(")
            expr = self.expression()
            self.expect_op(")")
            return ast.StreamOption(name, expr=expr, pos=pos)
        if name == "EVENT_TYPE":
            types = self.event_type_list(WINDOW_EVENT_TYPES)
            return ast.StreamOption(name, event_types=types, pos=pos)
        return ast.StreamOption(name, pos=pos)

    def event_type_list(self, allowed: tuple[str, ...]) -> tuple[str, ...]:
        self.expect_op("(")
        types = []
        while True:
            tok = self.next()
            value = tok.string_value.upper() if tok.kind is Kind.STRING else tok.upper
            if tok.kind not in (Kind.IDENT, Kind.STRING) or value not in allowed:
                raise self.error("an event type (" + " | ".join(allowed) + ")", tok)
            if value in types:
                raise self.fail_at(f"event type {value} given twice", tok)
            types.append(value)
            if not self.accept_op("|", ","):
                break
        self.expect_op(")")
        return tuple(types)

    def notification(self) -> ast.Notification:
        self.expect_word("NOTIFY")
        urls = tuple(self.parenthesized(lambda: self.string("a quoted WebSocket URL")))
        on: tuple[str, ...] = ()
        if self.accept_word("ON"):
            on = self.event_type_list(NOTIFY_EVENT_TYPES)
        where = self.expression() if self.accept_word("WHERE") else None
        options: list[str] = []
        if self.accept_word("NOTIFY_OPTIONS"):
            self.expect_op("(")
            while True:
                tok = self.peek()
                if not tok.is_word(*NOTIFY_OPTION_NAMES):
                    raise self.error("a notify option (" + " | ".join(NOTIFY_OPTION_NAMES) + ")")
                self.next()
                if tok.upper in options:
                    raise self.fail_at(f"notify option {tok.upper} given twice", tok)
                options.append(tok.upper)
                if not self.accept_op("|"):
                    break
            self.expect_op(")")
        return ast.Notification(urls, on, where, tuple(options))

    def output_tag(self) -> ast.OutputTag:
        name = self.ident("a tag name").name
        dtype = self.data_type()
        comment = self.string() if self.accept_word("COMMENT") else None
        self.expect_word("AS")
        return ast.OutputTag(name, dtype, self.expression(), comment)

    # ------------------------------------------------------------------ SELECT

    def select(self) -> ast.Select:
        start_tok = self.expect_word("SELECT")
        start_index = self.i - 1
        hints: list[str] = []
        while self.peek().kind is Kind.HINT:
            hints += [name.lower() for name in re.findall(r"(\w+)\s*\(", self.next().text)]
        distinct = bool(self.accept_word("DISTINCT"))
        items = self.comma_list(self.select_item)
        source = None
        if self.accept_word("FROM"):
            source = self.from_source()
        where = self.expression() if self.accept_word("WHERE") else None
        partitions: list[tuple[ast.Expr, str | None]] = []
        if self.accept_words("PARTITION", "BY"):
            partitions = self.comma_list(self.partition_item)
        partition_by = tuple(expr for expr, _ in partitions)
        interp = self.interp_clause() if self.peek().is_word("RANGE", "EVERY") else None
        window = self.query_window()
        group_by: tuple[ast.Expr, ...] = ()
        if self.accept_words("GROUP", "BY"):
            group_by = tuple(self.comma_list(self.expression))
        having = self.expression() if self.accept_word("HAVING") else None
        if window is None and (partition_by or group_by):
            window = self.query_window()
        order_by: tuple[ast.OrderItem, ...] = ()
        if self.accept_words("ORDER", "BY"):
            order_by = tuple(self.comma_list(self.order_item))
        limit = offset = slimit = soffset = None
        while True:
            if self.accept_word("SLIMIT"):
                slimit = self.integer()
                if self.accept_op(","):
                    soffset, slimit = slimit, self.integer()
            elif self.accept_word("SOFFSET"):
                soffset = self.integer()
            elif self.accept_word("LIMIT"):
                limit = self.integer()
                if self.accept_op(","):
                    offset, limit = limit, self.integer()
            elif self.accept_word("OFFSET"):
                offset = self.integer()
            else:
                break
        return ast.Select(
            items=tuple(items),
            source=source,
            where=where,
            partition_by=partition_by,
            window=window,
            group_by=group_by,
            having=having,
            order_by=order_by,
            limit=limit,
            offset=offset,
            slimit=slimit,
            soffset=soffset,
            distinct=distinct,
            text=self.source_text(start_index, self.i),
            pos=self.pos(start_tok),
            partition_aliases=tuple(alias for _, alias in partitions) if any(a for _, a in partitions) else (),
            hints=tuple(hints),
            interp=interp,
        )

    def interp_clause(self) -> ast.Interp:
        """``RANGE(start[, end]) [EVERY(d)] [FILL(...)]`` or, in a stream, ``EVERY(d) FILL(...)``."""
        tok = self.peek()
        start = end = None
        if self.accept_word("RANGE"):
            self.expect_op("(")
            start = self.expression()
            end = self.expression() if self.accept_op(",") else None
            self.expect_op(")")
        every = None
        if self.accept_word("EVERY"):
            self.expect_op("(")
            every = self.duration()
            self.expect_op(")")
        fill = self.fill() if self.peek().is_word("FILL") else None
        return ast.Interp(start, end, every, fill, pos=self.pos(tok))

    def partition_item(self) -> tuple[ast.Expr, str | None]:
        """``expr [[AS] alias]``: legacy streams name partitions for SUBTABLE and TAGS."""
        expr = self.expression()
        if self.accept_word("AS"):
            return expr, self.ident("an alias").name
        if self.peek().kind is Kind.QUOTED_IDENT or (
            self.peek().kind is Kind.IDENT and self.peek().upper not in _CLAUSE_WORDS
        ):
            return expr, self.next().name
        return expr, None

    def select_item(self) -> ast.SelectItem:
        start = self.i
        expr = self.expression()
        text = self.source_text(start, self.i)
        alias = None
        if self.accept_word("AS"):
            alias_tok = self.peek()
            if alias_tok.kind is Kind.STRING:
                self.next()
                alias = alias_tok.string_value
            else:
                alias = self.ident("an alias").name
        elif not isinstance(expr, ast.Star) and (
            self.peek().kind is Kind.QUOTED_IDENT
            or (self.peek().kind is Kind.IDENT and self.peek().upper not in _CLAUSE_WORDS)
        ):
            alias = self.next().name
        return ast.SelectItem(expr, alias, text)

    def from_source(self) -> ast.FromSource:
        source = self.single_source()
        while True:
            kind = None
            if self.accept_op(","):  # FROM a, b WHERE a.ts = b.ts
                kind = "CROSS"
            elif self.accept_word("JOIN"):
                kind = "INNER"
            else:
                for words, join_kind in (
                    (("INNER", "JOIN"), "INNER"),
                    (("LEFT", "JOIN"), "LEFT"),
                    (("LEFT", "OUTER", "JOIN"), "LEFT"),
                    (("RIGHT", "JOIN"), "RIGHT"),
                    (("FULL", "JOIN"), "FULL"),
                    (("FULL", "OUTER", "JOIN"), "FULL"),
                ):
                    if self.accept_words(*words):
                        kind = join_kind
                        break
            if kind is None:
                return source
            right = self.single_source()
            on = self.expression() if self.accept_word("ON") else None
            source = ast.Join(source, right, on, kind)

    def _alias(self) -> str | None:
        if self.accept_word("AS"):
            return self.ident("an alias").name
        tok = self.peek()
        if tok.kind is Kind.QUOTED_IDENT or (tok.kind is Kind.IDENT and tok.upper not in _CLAUSE_WORDS):
            return self.next().name
        return None

    def single_source(self) -> ast.FromSource:
        tok = self.peek()
        if tok.kind is Kind.PLACEHOLDER:
            self.next()
            placeholder = ast.Placeholder(tok.text[2:].lower(), pos=self.pos(tok))
            if placeholder.name not in ("trows", "tbname"):
                raise self.fail_at(f"placeholder {tok.text} cannot be a table; use %%trows or %%tbname", tok)
            return ast.PlaceholderSource(placeholder, self._alias())
        if self.accept_op("("):
            query = self.select()
            self.expect_op(")")
            return ast.SubquerySource(query, self._alias())
        table = self.qualified_name()
        return ast.TableSource(table, self._alias())

    def query_window(self) -> ast.QueryWindow | None:
        tok = self.peek()
        if self.accept_word("INTERVAL"):
            self.expect_op("(")
            interval = self.duration()
            offset = self.duration() if self.accept_op(",") else None
            self.expect_op(")")
            sliding = None
            if self.accept_word("SLIDING"):
                self.expect_op("(")
                sliding = self.duration()
                self.expect_op(")")
            fill = self.fill() if self.peek().is_word("FILL") else None
            return ast.IntervalWindow(interval, offset, sliding, fill)
        if self.accept_word("SESSION"):
            self.expect_op("(")
            col = self.ident("the timestamp column of SESSION")
            self.expect_op(",")
            gap = self.expression()
            self.expect_op(")")
            return ast.SessionWindow(ast.Column(col.name, pos=self.pos(col)), gap)
        if self.accept_word("STATE_WINDOW"):
            self.expect_op("(")
            expr = self.expression()
            self.expect_op(")")
            return ast.StateWindow(expr, self.true_for())
        if self.accept_word("EVENT_WINDOW"):
            start, end = self.event_conditions()
            return ast.EventWindow(start, end, self.true_for())
        if self.accept_word("COUNT_WINDOW"):
            self.expect_op("(")
            # a query may name the counted columns first: COUNT_WINDOW(v, 3) as COUNT_WINDOW(3, v)
            leading = []
            while self.peek().kind is Kind.IDENT:
                col = self.ident("a column to count")
                leading.append(ast.Column(col.name, pos=self.pos(col)))
                self.expect_op(",")
            count, sliding, columns = self.count_arguments()
            self.expect_op(")")
            return ast.CountWindow(count, sliding, (*leading, *columns))
        del tok
        return None

    def fill(self) -> ast.Fill:
        self.expect_word("FILL")
        self.expect_op("(")
        tok = self.ident("a fill mode")
        mode = tok.upper
        if mode not in FILL_MODES:
            raise self.fail_at(f"unknown fill mode {tok.text!r}; expected one of {', '.join(FILL_MODES)}", tok)
        values: list[ast.Expr] = []
        while self.accept_op(","):
            values.append(self.expression())
        self.expect_op(")")
        return ast.Fill(mode, tuple(values))

    def order_item(self) -> ast.OrderItem:
        expr = self.expression()
        descending = False
        if self.accept_word("DESC"):
            descending = True
        else:
            self.accept_word("ASC")
        nulls_first = None
        if self.accept_word("NULLS"):
            nulls_first = bool(self.expect_word("FIRST", "LAST").is_word("FIRST"))
        return ast.OrderItem(expr, descending, nulls_first)

    # ------------------------------------------------------------------ expressions

    def expression(self) -> ast.Expr:
        start = self.peek()
        with self._nested(start):
            expr = self.or_expr()
        if self.nesting == 0 and depth(expr) > MAX_EXPRESSION_DEPTH:
            raise self.fail_at(
                f"expression is more than {MAX_EXPRESSION_DEPTH} levels deep "
                "(each operator of a chain such as a + b + … is a level); split it",
                start,
            )
        return expr

    @contextmanager
    def _nested(self, tok: Token) -> Iterator[None]:
        """One more level of nesting; beyond ``MAX_NESTING`` the statement is refused rather
        than recursing until Python's stack runs out."""
        if self.nesting >= MAX_NESTING:
            raise self.fail_at(
                f"expression nested more than {MAX_NESTING} levels deep "
                "(parentheses, function calls, NOT and sign prefixes)",
                tok,
            )
        self.nesting += 1
        try:
            yield
        finally:
            self.nesting -= 1

    def or_expr(self) -> ast.Expr:
        left = self.and_expr()
        while (tok := self.accept_word("OR")) is not None:
            left = ast.Binary("OR", left, self.and_expr(), pos=self.pos(tok))
        return left

    def and_expr(self) -> ast.Expr:
        left = self.not_expr()
        while (tok := self.accept_word("AND")) is not None:
            left = ast.Binary("AND", left, self.not_expr(), pos=self.pos(tok))
        return left

    def not_expr(self) -> ast.Expr:
        tok = self.accept_word("NOT")
        if tok is not None:
            with self._nested(tok):
                return ast.Unary("NOT", self.not_expr(), pos=self.pos(tok))
        return self.comparison()

    def comparison(self) -> ast.Expr:
        left = self.bit_expr()
        while True:
            tok = self.peek()
            if tok.is_op("=", "==", "<>", "!=", "<", "<=", ">", ">="):
                self.next()
                op = {"==": "=", "!=": "<>"}.get(tok.text, tok.text)
                left = ast.Binary(op, left, self.bit_expr(), pos=self.pos(tok))
            elif tok.is_word("IS"):
                self.next()
                negated = bool(self.accept_word("NOT"))
                self.expect_word("NULL")
                left = ast.IsNull(left, negated, pos=self.pos(tok))
            elif tok.is_word("LIKE", "MATCH", "NMATCH", "CONTAINS"):
                self.next()
                left = ast.Binary(tok.upper, left, self.bit_expr(), pos=self.pos(tok))
            elif tok.is_word("NOT") and self.peek(1).is_word("LIKE", "IN", "BETWEEN"):
                self.next()
                kind = self.next()
                left = self._negatable(kind, left, negated=True)
            elif tok.is_word("IN", "BETWEEN"):
                self.next()
                left = self._negatable(tok, left, negated=False)
            else:
                return left

    def _negatable(self, kind: Token, left: ast.Expr, *, negated: bool) -> ast.Expr:
        pos = self.pos(kind)
        if kind.is_word("LIKE"):
            expr = ast.Binary("LIKE", left, self.bit_expr(), pos=pos)
            return ast.Unary("NOT", expr, pos=pos) if negated else expr
        if kind.is_word("IN"):
            items = tuple(self.parenthesized(self.expression))
            return ast.InList(left, items, negated, pos=pos)
        low = self.bit_expr()
        self.expect_word("AND")
        high = self.bit_expr()
        return ast.Between(left, low, high, negated, pos=pos)

    def bit_expr(self) -> ast.Expr:
        left = self.additive()
        while (tok := self.accept_op("&", "|")) is not None:
            left = ast.Binary(tok.text, left, self.additive(), pos=self.pos(tok))
        return left

    def additive(self) -> ast.Expr:
        left = self.multiplicative()
        while (tok := self.accept_op("+", "-", "||")) is not None:
            right = self.multiplicative()
            if tok.text == "||":
                left = ast.Func("concat", (left, right), pos=self.pos(tok))
            else:
                left = ast.Binary(tok.text, left, right, pos=self.pos(tok))
        return left

    def multiplicative(self) -> ast.Expr:
        left = self.unary()
        while (tok := self.accept_op("*", "/", "%")) is not None:
            left = ast.Binary(tok.text, left, self.unary(), pos=self.pos(tok))
        return left

    def unary(self) -> ast.Expr:
        tok = self.accept_op("-", "+", "~")
        if tok is None:
            return self.primary()
        with self._nested(tok):
            operand = self.unary()
        if tok.text == "-" and isinstance(operand, ast.Literal) and operand.kind in ("int", "float"):
            return ast.Literal(-operand.value, operand.kind, pos=self.pos(tok))  # type: ignore[operator]
        if tok.text == "+":
            return operand
        return ast.Unary(tok.text, operand, pos=self.pos(tok))

    def primary(self) -> ast.Expr:
        tok = self.peek()
        pos = self.pos(tok)
        if tok.kind is Kind.NUMBER:
            self.next()
            if any(c in tok.text for c in ".eE"):
                return ast.Literal(float(tok.text), "float", pos=pos)
            return ast.Literal(int(tok.text), "int", pos=pos)
        if tok.kind is Kind.DURATION:
            self.next()
            return ast.DurationLiteral(self._duration_from(tok, tok.text), pos=pos)
        if tok.kind is Kind.STRING:
            self.next()
            return ast.Literal(tok.string_value, "string", pos=pos)
        if tok.kind is Kind.PLACEHOLDER:
            self.next()
            name = tok.text[2:].lower()
            if not (name.isdigit() and int(name) >= 1) and name not in ("tbname", "trows"):
                raise self.fail_at(f"unknown placeholder {tok.text}; expected %%tbname, %%trows or %%n", tok)
            return ast.Placeholder(name, pos=pos)
        if tok.is_op("*"):
            self.next()
            return ast.Star(pos=pos)
        if tok.is_op("("):
            self.next()
            expr = self.expression()
            self.expect_op(")")
            return expr
        if tok.kind is Kind.QUOTED_IDENT:
            return self.column_ref()
        if tok.kind is Kind.IDENT:
            word = tok.upper
            if word == "NULL":
                self.next()
                return ast.Literal(None, "null", pos=pos)
            if word in ("TRUE", "FALSE"):
                self.next()
                return ast.Literal(word == "TRUE", "bool", pos=pos)
            if word == "CASE":
                return self.case()
            if word == "CAST" and self.peek(1).is_op("("):
                self.next()
                self.next()
                operand = self.expression()
                self.expect_word("AS")
                dtype = self.data_type()
                self.expect_op(")")
                return ast.Cast(operand, dtype, pos=pos)
            if self.peek(1).is_op("("):
                return self.function_call()
            if word in ("NOW", "TODAY") and not self.peek(1).is_op("."):
                self.next()
                return ast.Func(word.lower(), (), pos=pos)
            if word in _CLAUSE_WORDS:
                raise self.error("an expression")
            return self.column_ref()
        raise self.error("an expression")

    def column_ref(self) -> ast.Expr:
        tok = self.next()
        pos = self.pos(tok)
        if self.peek().is_op(".") and self.peek(1).is_op("*"):
            self.next()
            self.next()
            return ast.Star(tok.name, pos=pos)
        if self.peek().is_op(".") and self.peek(1).kind in (Kind.IDENT, Kind.QUOTED_IDENT):
            self.next()
            col = self.next()
            return ast.Column(col.name, tok.name, pos=pos)
        return ast.Column(tok.name, pos=pos)

    def function_call(self) -> ast.Expr:
        tok = self.next()
        self.expect_op("(")
        name = tok.text.lower()
        distinct = bool(self.accept_word("DISTINCT"))
        args: list[ast.Expr] = []
        if not self.peek().is_op(")"):
            args = self.comma_list(self.expression)
        self.expect_op(")")
        return ast.Func(name, tuple(args), distinct, pos=self.pos(tok))

    def case(self) -> ast.Expr:
        tok = self.expect_word("CASE")
        operand = None if self.peek().is_word("WHEN") else self.expression()
        whens = []
        while self.accept_word("WHEN"):
            cond = self.expression()
            self.expect_word("THEN")
            whens.append((cond, self.expression()))
        if not whens:
            raise self.error("WHEN")
        default = self.expression() if self.accept_word("ELSE") else None
        self.expect_word("END")
        return ast.Case(operand, tuple(whens), default, pos=self.pos(tok))


_TYPE_NAMES = (
    "TIMESTAMP",
    "BOOL",
    "TINYINT",
    "SMALLINT",
    "INT",
    "INTEGER",
    "BIGINT",
    "TINYINT UNSIGNED",
    "SMALLINT UNSIGNED",
    "INT UNSIGNED",
    "BIGINT UNSIGNED",
    "FLOAT",
    "DOUBLE",
    "BINARY",
    "VARCHAR",
    "NCHAR",
    "VARBINARY",
    "JSON",
    "GEOMETRY",
    "DECIMAL",
)


class _NotConstant(Exception):
    pass


def _fold_duration(expr: ast.Expr) -> Duration:
    """Fold a constant duration expression (``12+30s``); a bare integer counts as milliseconds,
    the default database precision, as TDengine reads it in a millisecond database."""
    if isinstance(expr, ast.DurationLiteral):
        return expr.duration
    nanos = _fold_nanos(expr)
    if nanos < 0:
        raise TimeValueError("a duration cannot be negative")
    for unit in ("w", "d", "h", "m", "s", "a", "u", "b"):
        if nanos % NANOS_PER_UNIT[unit] == 0:
            return Duration(nanos // NANOS_PER_UNIT[unit], unit)
    raise TimeValueError("invalid duration")  # pragma: no cover - 'b' divides everything


def _fold_nanos(expr: ast.Expr) -> int:
    if isinstance(expr, ast.DurationLiteral):
        if expr.duration.is_calendar:
            raise TimeValueError(f"calendar unit in {expr.duration} is not allowed here")
        return expr.duration.nanos
    if isinstance(expr, ast.Literal) and expr.kind == "int":
        return int(expr.value) * NANOS_PER_UNIT["a"]  # type: ignore[call-overload]
    if isinstance(expr, ast.Literal) and expr.kind == "float":
        raise TimeValueError(
            f"a duration is an integer and a unit, such as 10s or 1500a; {expr.value} is not (use a smaller unit)"
        )
    if isinstance(expr, ast.Binary) and expr.op in ("+", "-"):
        left, right = _fold_nanos(expr.left), _fold_nanos(expr.right)
        return left + right if expr.op == "+" else left - right
    raise _NotConstant


def _with_source(stmt: ast.Statement, pos: ast.Pos, text: str) -> ast.Statement:
    object.__setattr__(stmt, "pos", pos)
    object.__setattr__(stmt, "text", text)
    return stmt
