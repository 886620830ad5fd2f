"""TSMA (time-range small materialized aggregates): the grammar, the rules that need no
catalog, and the stream each TSMA is.

Owns reading ``CREATE [RECURSIVE] TSMA name ON [db.]table|tsma [FUNCTION(f(col), …)]
INTERVAL(d)`` and ``DROP TSMA [db.]name`` (called by the parser after the words that name the
statement), the function list and its parameters, the name length, the interval range and
TDengine's rule for a recursive TSMA's interval over its base (``recursive_interval_allowed``),
the intermediate states a TSMA keeps per window (``states``: enough to merge windows exactly),
and the text of the 3.3.7 stream that computes them (``stream_sql``). Does not read the catalog
or run anything: ``families/tsma.py`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import StreamValidationError
from . import ast
from .timeunits import Duration
from .tokens import Kind

if TYPE_CHECKING:
    from .parser import Parser

# the aggregate functions a TSMA keeps (count(*) is written count(ts))
TSMA_FUNCTIONS = ("min", "max", "sum", "first", "last", "avg", "count", "spread", "stddev")
# functions that need numeric input (TDengine: "Invalid function para type" otherwise)
NUMERIC_FUNCTIONS = ("sum", "avg", "stddev", "spread")
OUTPUT_SUFFIX = "_tsma_res_stb_"
MAX_NAME_LENGTH = 192 - len(OUTPUT_SUFFIX)  # the output super table's name must fit in 192
# the output super table's tag holding the source table's name (TDengine names it tbname,
# which is reserved here)
TBNAME_TAG = "tsma_tbname"
WINDOW_COLUMNS = ("_wstart", "_wend", "_wduration")  # not a function's column
MIN_INTERVAL = Duration(1, "m")
MAX_INTERVAL_MONTHS = 12
STORED_PREFIXES = ("CREATE TSMA ", "CREATE RECURSIVE TSMA ")  # how families/tsma.py stores one
# TDengine keywords that cannot name a TSMA unquoted (TDengine: syntax error): the words of
# the statement and the type and clause keywords of its grammar
_NAME_WORDS = frozenset(
    """TSMA TSMAS RECURSIVE FUNCTION FUNCTIONS INTERVAL ON SLIDING OFFSET FILL
    BOOL TINYINT SMALLINT INT INTEGER BIGINT FLOAT DOUBLE BINARY VARCHAR NCHAR TIMESTAMP JSON
    VARBINARY GEOMETRY DECIMAL UNSIGNED
    SELECT FROM WHERE GROUP BY ORDER PARTITION HAVING LIMIT SLIMIT SOFFSET AS AND OR NOT NULL
    IN IS LIKE MATCH NMATCH BETWEEN CASE WHEN THEN ELSE END UNION ALL DISTINCT ASC DESC
    CREATE DROP ALTER SHOW DESCRIBE USE INSERT INTO VALUES DELETE IMPORT EXPLAIN
    DATABASE DATABASES TABLE TABLES STABLE STABLES STREAM STREAMS TOPIC TOPICS VIEW VIEWS
    INDEX INDEXES TAG TAGS TBNAME USING IF EXISTS WITH TRIGGER WATERMARK NOW TODAY""".split()  # noqa: SIM905
)


@dataclass(frozen=True)
class State:
    """One intermediate column of a TSMA's output: ``kind`` of ``column`` per window."""

    kind: str  # sum count min max first firstts last lastts sumsq
    column: str

    @property
    def name(self) -> str:
        return f"{self.kind}_{self.column}"

    def compute(self, key: str) -> str:
        """The aggregate over raw rows (a base TSMA's stream query; ``key`` the primary key)."""
        col = f"`{self.column}`"
        if self.kind == "sumsq":
            return f"sum(cast({col} as double) * cast({col} as double))"
        if self.kind in ("firstts", "lastts"):  # when the value first/last was not NULL
            return f"{'min' if self.kind == 'firstts' else 'max'}(case when {col} is not null then `{key}` end)"
        return f"{self.kind}({col})"

    @property
    def combine(self) -> str:
        """The aggregate that combines several windows' states of this kind into one."""
        return {"count": "sum", "sumsq": "sum", "firstts": "min", "lastts": "max"}.get(self.kind, self.kind)

    def merge(self) -> str:
        """The aggregate over a smaller TSMA's states of the same kind (a recursive TSMA)."""
        return f"{self.combine}(`{self.name}`)"


# the states each function needs: avg = sum / count, stddev from count, sum and sum of
# squares, spread = max - min, first and last with their times (tables' windows start together:
# the first value of a super table is the one with the earliest time, not window)
FUNCTION_STATES = {
    "min": ("min",),
    "max": ("max",),
    "sum": ("sum",),
    "count": ("count",),
    "first": ("first", "firstts"),
    "last": ("last", "lastts"),
    "avg": ("sum", "count"),
    "stddev": ("count", "sum", "sumsq"),
    "spread": ("min", "max"),
}


def states(functions: tuple[ast.TsmaFunction, ...]) -> tuple[State, ...]:
    """The intermediate states of a function list, each once, in a stable order."""
    seen: dict[str, State] = {}
    for f in functions:
        for kind in FUNCTION_STATES[f.name]:
            state = State(kind, f.column)
            seen.setdefault(state.name, state)
    return tuple(seen.values())


def parse_create_tsma(p: Parser, recursive: bool) -> ast.CreateTsma:
    """After ``CREATE [RECURSIVE] TSMA``."""
    if_not_exists = p.accept_words("IF", "NOT", "EXISTS")
    name_tok = p.peek()
    if name_tok.kind is Kind.IDENT and name_tok.text.upper() in _NAME_WORDS:
        raise p.error("a TSMA name (a keyword cannot name a TSMA; quote it with backticks)")
    name = p.ident("a TSMA name")
    if not name.name:
        raise p.fail_at("Invalid identifier name: a TSMA name cannot be empty", name)
    if len(name.name) > MAX_NAME_LENGTH:
        raise p.fail_at(
            f"Tsma name too long: {len(name.name)} characters, at most {MAX_NAME_LENGTH} "
            f"(the output table {name.name}{OUTPUT_SUFFIX} must fit in 192)",
            name,
        )
    p.expect_word("ON")
    table_tok = p.peek()
    table = p.qualified_name("a TSMA name" if recursive else "a super table or normal table")
    if not table.name:
        raise p.fail_at("Invalid identifier name: a table name cannot be empty", table_tok)
    functions: tuple[ast.TsmaFunction, ...] = ()
    if recursive:
        if p.peek().is_word("FUNCTION"):
            raise p.error("INTERVAL (a recursive TSMA keeps the functions of the TSMA it is built on)")
    else:
        p.expect_word("FUNCTION")
        functions = _function_list(p)
    interval_tok = p.expect_word("INTERVAL")
    p.expect_op("(")
    tok = p.peek()
    if tok.kind is not Kind.DURATION:
        raise p.error("a duration with its unit such as 5m (the TSMA's window)")
    p.next()
    interval = p._duration_from(tok, tok.text)
    p.expect_op(")")
    check_interval(interval, p.pos(interval_tok))
    return ast.CreateTsma(
        ast.QualifiedName(name.name, None, p.pos(name)), table, functions, interval, recursive, if_not_exists
    )


def parse_drop_tsma(p: Parser) -> ast.DropTsma:
    """After ``DROP TSMA``."""
    if_exists = p.accept_words("IF", "EXISTS")
    return ast.DropTsma(p.qualified_name("a TSMA name"), if_exists)


def _function_list(p: Parser) -> tuple[ast.TsmaFunction, ...]:
    p.expect_op("(")
    functions = p.comma_list(lambda: _function(p))
    p.expect_op(")")
    unique: dict[tuple[str, str], ast.TsmaFunction] = {}
    for f in functions:  # the same function of the same column is kept once
        unique.setdefault((f.name, f.column), f)
    return tuple(unique.values())


def _function(p: Parser) -> ast.TsmaFunction:
    tok = p.peek()
    if tok.kind is not Kind.IDENT or not p.peek(1).is_op("("):
        raise p.error("an aggregate function such as avg(c1)")
    p.next()
    p.next()
    args = [] if p.peek().is_op(")") else p.comma_list(p.expression)
    p.expect_op(")")
    if not p.peek().is_op(",", ")"):
        raise p.error("',' or ')' after a function (each function of a TSMA is one call)")
    name = tok.text.lower()
    pos = p.pos(tok)
    if name not in TSMA_FUNCTIONS:
        raise StreamValidationError(
            f"Tsma func not supported: {name}; a TSMA keeps {', '.join(TSMA_FUNCTIONS)}",
            line=pos.line,
            column=pos.column,
        )
    if name == "count" and len(args) == 1 and isinstance(args[0], ast.Star):
        raise StreamValidationError(
            "Invalid tsma func param: count(*) is kept as count(ts), the count of the primary timestamp",
            line=pos.line,
            column=pos.column,
        )
    if len(args) != 1 or not isinstance(args[0], ast.Column) or args[0].name.lower() in WINDOW_COLUMNS:
        raise StreamValidationError(
            f"Invalid tsma func param, only one non-tag column allowed: {name}(…) takes one column of the table",
            line=pos.line,
            column=pos.column,
        )
    return ast.TsmaFunction(name, args[0].name.lower(), pos)


def check_interval(interval: Duration, pos: ast.Pos) -> None:
    """TSMA windows are 1m to 1y (12n)."""
    too_small = not interval.is_calendar and interval.nanos < MIN_INTERVAL.nanos
    too_large = interval.months > MAX_INTERVAL_MONTHS if interval.is_calendar else interval.nanos > 366 * 86400 * 10**9
    if too_small or too_large or interval.value <= 0:
        raise StreamValidationError(
            f"Invalid tsma interval {interval}: a TSMA's window is 1m to 1y (12n)", line=pos.line, column=pos.column
        )


# TDengine's checkRecursiveTsmaInterval: how many of one unit make the next (b u a s m h d w n y);
# -1 where one cannot be built on the other (a month on weeks), a day is built on 1h only
_UNITS = "buasmhdwny"
_STEP = {
    ("b", "u"): 1000, ("u", "b"): 1000, ("u", "a"): 1000, ("a", "u"): 1000, ("a", "s"): 1000,
    ("s", "a"): 1000, ("s", "m"): 60, ("m", "s"): 60, ("m", "h"): 60, ("h", "m"): 60, ("h", "d"): 1,
    ("d", "h"): 24, ("d", "w"): 7, ("d", "n"): 1, ("w", "d"): 7, ("w", "n"): -1, ("n", "y"): 12,
    ("y", "n"): 12,
}  # fmt: skip


def _step(a: str, b: str) -> int:
    return 1 if a == b else _STEP.get((a, b), 0)


def recursive_interval_allowed(base: Duration, interval: Duration) -> bool:
    """Whether a recursive TSMA of ``interval`` may be built on a TSMA of ``base``: a multiple
    of it, larger when both are calendar or both fixed, and reachable unit by unit the way
    TDengine walks them (a day only from 1h, a month only from 1d, 12h never to a year)."""
    eq = base.is_calendar == interval.is_calendar
    if _UNITS.index(base.unit) <= _UNITS.index(interval.unit):
        return _up(base.value, base.unit, interval.value, interval.unit, eq)
    return _down(base.value, base.unit, interval.value, interval.unit, True)


def _same(b: int, i: int, eq: bool) -> bool:
    return i >= b and not (eq and i == b) and i % b == 0


def _up(b: int, unit: str, i: int, target: str, eq: bool) -> bool:
    if _step(unit, target) == -1:
        return False
    if unit == target:
        return _same(b, i, eq)
    start = _UNITS.index(unit)
    for nxt in _UNITS[start + 1 : _UNITS.index(target) + 1]:
        f = _step(unit, nxt)
        if f == 0:
            break
        if f == -1:
            continue
        if f % b and b % f:
            return False
        if _up(b // f + (1 if b < f else 0), nxt, i, target, b >= f and f != 1 and eq):
            return True
    return False


def _down(b: int, unit: str, i: int, target: str, eq: bool) -> bool:
    if _step(unit, target) == -1:
        return False
    if unit == target:
        return _same(b, i, eq)
    lower = _UNITS[_UNITS.index(unit) - 1]
    return _down(b * _step(unit, lower), lower, i, target, eq)


def stream_sql(
    name: str,
    db: str,
    source: str,
    interval: Duration,
    tags: tuple[ast.ColumnDef, ...],
    kept: tuple[State, ...],
    recursive: bool,
    key: str,
) -> str:
    """The 3.3.7 stream that keeps a TSMA: an INTERVAL window per child table (or the normal
    table), history first, late rows, updates and deletes recalculated, windows without rows
    not written; into the hidden output super table tagged with the table's name and its tags.
    A recursive TSMA reads the states of the TSMA it is built on (``source`` is then that
    TSMA's output, whose tags are the same) and merges them."""
    group_tags = [t.name for t in tags if t.name != TBNAME_TAG]
    partition = ", ".join([TBNAME_TAG if recursive else "tbname", *(f"`{t}`" for t in group_tags)])
    out_tags = [f"{TBNAME_TAG} varchar(192) as {TBNAME_TAG if recursive else 'tbname'}"]
    out_tags += [f"`{t.name}` {t.type} as `{t.name}`" for t in tags if t.name != TBNAME_TAG]
    aggregates = [f"{s.merge() if recursive else s.compute(key)} as `{s.name}`" for s in kept]
    return (
        f"create stream `{db}`.`{name}` interval({interval}) sliding({interval}) from {source} "
        f"partition by {partition} "
        "stream_options(fill_history | delete_recalc | ignore_nodata_trigger) "
        f"into `{db}`.`{name}{OUTPUT_SUFFIX}` tags ({', '.join(out_tags)}) "
        f"as select _twstart as wstart, _twend as wend, _twduration as wduration, {', '.join(aggregates)} "
        "from %%trows"
    )
