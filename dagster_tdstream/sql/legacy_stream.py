"""Legacy streams (TDengine 3.0–3.3.6): their grammar, their rules, the 3.3.7 stream each one is.

Owns reading ``CREATE STREAM s [TRIGGER …] [WATERMARK t] [IGNORE EXPIRED 0|1] [DELETE_MARK t]
[FILL_HISTORY 0|1 [ASYNC]] [IGNORE UPDATE 0|1] [INTO stb [(cols)] [TAGS (…)] [SUBTABLE(e)]] AS
SELECT … window_clause [NOTIFY …]`` (called by the parser once the words after the stream's
name say it is the legacy form), the rules of the legacy documentation and of TDengine's tests,
and ``equivalent_stream``: the legacy statement as the 3.3.7 ``CreateStream`` the one trigger
engine runs. The window of the SELECT becomes the trigger; its WHERE the PRE_FILTER;
``_wstart``/``_wend``/``_wduration`` the trigger's ``_twstart``/``_twend``/``_twduration``;
``IGNORE EXPIRED 1`` (the default) IGNORE_DISORDER; deletes always recalculate (DELETE_RECALC);
TRIGGER AT_ONCE and FORCE_WINDOW_CLOSE internal options of the engine (``ast.AT_ONCE``,
``ast.FORCE_WINDOW_CLOSE``). Does not read the catalog or run anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..errors import StreamValidationError
from . import ast
from .text import expr_text
from .tokens import Kind
from .validate import is_aggregate_function
from .walk import all_expressions, is_interp_query, walk

if TYPE_CHECKING:
    from .parser import Parser

# the words that can follow a stream's name in the legacy form (3.3.7 puts a trigger there)
LEGACY_START_WORDS = ("TRIGGER", "WATERMARK", "IGNORE", "DELETE_MARK", "FILL_HISTORY", "INTO", "AS")
TRIGGER_MODES = ("AT_ONCE", "WINDOW_CLOSE", "MAX_DELAY", "FORCE_WINDOW_CLOSE", "CONTINUOUS_WINDOW_CLOSE")
# the aggregate and selector functions the legacy documentation refuses in a stream
REFUSED_FUNCTIONS = (
    "leastsquares", "percentile", "top", "bottom", "elapsed", "interp", "derivative", "irate", "twa",
    "histogram", "diff", "statecount", "stateduration", "csum", "mavg", "sample", "tail", "unique", "mode",
)  # fmt: skip
WINDOW_NAMES = {"_wstart": "_twstart", "_wend": "_twend", "_wduration": "_twduration"}
OPTION_WORDS = ("TRIGGER", "WATERMARK", "IGNORE EXPIRED", "IGNORE UPDATE", "DELETE_MARK", "FILL_HISTORY")
MIN_MAX_DELAY_NS = 5 * 10**9
LEGACY_EVENT_TYPES = ("WINDOW_OPEN", "WINDOW_CLOSE")
TABLE_NAME_LENGTH = 192  # TDengine's tbname: VARCHAR(192)


def parse_legacy_stream(p: Parser, name: ast.QualifiedName, if_not_exists: bool) -> ast.CreateLegacyStream:
    trigger, max_delay, recalculate = "WINDOW_CLOSE", None, None
    watermark = delete_mark = None
    ignore_expired = ignore_update = True
    fill_history = False
    positions: dict[str, ast.Pos] = {}
    while not p.peek().is_word("INTO", "AS"):
        tok = p.peek()
        if tok.kind is Kind.END:
            raise p.error("INTO or AS")
        word = tok.upper
        if word == "IGNORE":
            p.next()
            kind_tok = p.peek()
            if not kind_tok.is_word("EXPIRED", "UPDATE"):
                raise p.error("EXPIRED or UPDATE after IGNORE")
            p.next()
            word = f"IGNORE {kind_tok.upper}"
        elif word in ("TRIGGER", "WATERMARK", "DELETE_MARK", "FILL_HISTORY"):
            p.next()
        else:
            raise p.error(f"a stream option ({', '.join(OPTION_WORDS)}), INTO or AS")
        if word in positions:
            raise p.fail_at(f"stream option {word} given twice", tok)
        positions[word] = p.pos(tok)
        if word == "TRIGGER":
            mode_tok = p.peek()
            if not mode_tok.is_word(*TRIGGER_MODES):
                raise p.error("a trigger mode (" + ", ".join(TRIGGER_MODES) + ")")
            p.next()
            trigger = mode_tok.upper
            if trigger == "MAX_DELAY":
                max_delay = p.duration("a MAX_DELAY such as 5s")
            elif trigger == "CONTINUOUS_WINDOW_CLOSE" and p.accept_word("RECALCULATE"):
                recalculate = p.duration("a recalculation period such as 1h")
        elif word == "WATERMARK":
            watermark = p.duration("a WATERMARK such as 10s")
        elif word == "DELETE_MARK":
            delete_mark = p.duration("a DELETE_MARK such as 1d")
        else:
            flag = _flag(p, word)
            if word == "FILL_HISTORY":
                fill_history = flag
                p.accept_word("ASYNC")
            elif word == "IGNORE EXPIRED":
                ignore_expired = flag
            else:
                ignore_update = flag
    into = None
    columns: list[str] = []
    key_column = None
    tags: list[ast.LegacyTag] = []
    subtable = None
    if p.accept_word("INTO"):
        into = p.qualified_name("an output super table name")
        if p.accept_op("("):
            while True:
                columns.append(p.ident("an output column name").name)
                key_tok = p.peek()
                if p.accept_words("COMPOSITE", "KEY") or p.accept_words("PRIMARY", "KEY"):
                    if key_column is not None:
                        raise p.fail_at(f"{key_tok.upper} KEY marks one column", key_tok)
                    # whether it is the output's second column depends on the query (see
                    # _output_columns): checked with the equivalent stream
                    key_column = len(columns) - 1
                if not p.accept_op(","):
                    break
            p.expect_op(")")
        if p.accept_word("TAGS"):
            tags = p.parenthesized(lambda: _tag(p))
        if p.accept_word("SUBTABLE"):
            p.expect_op("(")
            subtable = p.expression()
            p.expect_op(")")
    p.expect_word("AS")
    query = p.select()
    notification = _notification(p) if p.peek().is_word("NOTIFY") else None
    return ast.CreateLegacyStream(
        name=name,
        if_not_exists=if_not_exists,
        trigger=trigger,
        max_delay=max_delay,
        recalculate=recalculate,
        watermark=watermark,
        ignore_expired=ignore_expired,
        delete_mark=delete_mark,
        fill_history=fill_history,
        ignore_update=ignore_update,
        into=into,
        columns=tuple(columns),
        key_column=key_column,
        tags=tuple(tags),
        subtable=subtable,
        query=query,
        notification=notification,
        option_pos=positions,
    )


def _flag(p: Parser, word: str) -> bool:
    tok = p.peek()
    if tok.kind is Kind.NUMBER and tok.text in ("0", "1"):
        p.next()
        return tok.text == "1"
    raise p.error(f"0 or 1 after {word}")


def _notification(p: Parser) -> ast.Notification:
    """``NOTIFY (url, …) ON (event_type, …) [NOTIFY_HISTORY 0|1] [ON_FAILURE DROP|PAUSE]``: the
    legacy options as the 3.3.7 ones they are — NOTIFY_HISTORY 1 is NOTIFY_HISTORY, and a legacy
    stream pauses on failure unless ON_FAILURE DROP (3.3.7 drops unless ON_FAILURE_PAUSE)."""
    p.expect_word("NOTIFY")
    urls = tuple(p.parenthesized(lambda: p.string("a quoted WebSocket URL")))
    on = p.event_type_list(LEGACY_EVENT_TYPES) if p.accept_word("ON") else ()
    history, pause, given = False, True, set()
    while True:
        tok = p.peek()
        if tok.is_word("NOTIFY_OPTIONS", "WHERE"):
            raise p.fail_at(
                f"{tok.upper} after NOTIFY is the 3.3.7 syntax; a legacy stream takes NOTIFY_HISTORY 0|1 "
                "and ON_FAILURE DROP|PAUSE",
                tok,
            )
        if p.accept_word("NOTIFY_HISTORY", "ON_FAILURE") is None:
            break
        if tok.upper in given:
            raise p.fail_at(f"{tok.upper} given twice", tok)
        given.add(tok.upper)
        if tok.upper == "NOTIFY_HISTORY":
            value_tok = p.peek()
            value = p.integer("NOTIFY_HISTORY 0 or 1")
            if value not in (0, 1):
                raise p.fail_at(f"NOTIFY_HISTORY is 0 or 1, got {value}", value_tok)
            history = value == 1
        else:
            pause = p.expect_word("DROP", "PAUSE").upper == "PAUSE"
    options = (("NOTIFY_HISTORY",) if history else ()) + (("ON_FAILURE_PAUSE",) if pause else ())
    return ast.Notification(urls, on, None, options)


def _tag(p: Parser) -> ast.LegacyTag:
    tok = p.peek()
    name = p.ident("a tag name").name
    # ``TAGS(cc)``: the tag takes the type of the PARTITION BY column it is the value of
    dtype = None if p.peek().is_op(",", ")") or p.peek().is_word("COMMENT") else p.data_type()
    comment = p.string() if p.accept_word("COMMENT") else None
    return ast.LegacyTag(name, dtype, comment, p.pos(tok))


def _error(stmt: ast.CreateLegacyStream, message: str, pos: ast.Pos | None = None) -> StreamValidationError:
    where = pos if pos is not None and pos.line else stmt.query.pos
    return StreamValidationError(message, line=where.line or None, column=where.column or None, statement=stmt.text)


def validate_virtual_source(stmt: ast.CreateLegacyStream) -> None:
    """The legacy streams' rules over a virtual table (the spec lists them): no WATERMARK but
    0, no IGNORE EXPIRED 0 or IGNORE UPDATE 0 (out-of-order rows, updates and deletes are not
    handled), no FILL_HISTORY 1, no MAX_DELAY, FORCE_WINDOW_CLOSE or CONTINUOUS_WINDOW_CLOSE
    trigger and no COUNT_WINDOW."""
    opt = stmt.option_pos.get
    source = stmt.query.source
    assert isinstance(source, ast.TableSource)
    table = source.table.name
    if stmt.watermark is not None and stmt.watermark.nanos != 0:
        raise _error(stmt, f"a stream over the virtual table {table} needs WATERMARK 0", opt("WATERMARK"))
    for word, value in (("IGNORE EXPIRED", stmt.ignore_expired), ("IGNORE UPDATE", stmt.ignore_update)):
        if word in stmt.option_pos and not value:
            raise _error(stmt, f"a stream over the virtual table {table} needs {word} 1", opt(word))
    if stmt.fill_history:
        raise _error(stmt, f"a stream over the virtual table {table} needs FILL_HISTORY 0", opt("FILL_HISTORY"))
    if stmt.trigger in ("MAX_DELAY", "FORCE_WINDOW_CLOSE", "CONTINUOUS_WINDOW_CLOSE"):
        raise _error(stmt, f"TRIGGER {stmt.trigger} is not supported over the virtual table {table}", opt("TRIGGER"))
    if isinstance(stmt.query.window, ast.CountWindow):
        raise _error(stmt, f"COUNT_WINDOW is not supported over the virtual table {table}")


def validate_legacy_stream(stmt: ast.CreateLegacyStream) -> None:
    """The legacy rules that the statement alone decides, each with its position."""
    query = stmt.query
    window = query.window
    opt = stmt.option_pos.get
    if not isinstance(query.source, ast.TableSource):
        raise _error(stmt, "a legacy stream reads one table (FROM a table or super table)", query.pos)
    if query.group_by:
        raise _error(stmt, "a stream's query groups by its window: GROUP BY is not allowed", query.group_by[0].pos)
    for clause, present in (
        ("ORDER BY", query.order_by),
        ("LIMIT", query.limit is not None),
        ("SLIMIT", query.slimit is not None),
    ):
        if present:
            raise _error(stmt, f"{clause} is not allowed in a stream's query")
    if window is None and not is_interp_query(stmt.query):
        _validate_scalar(stmt)
    if query.having is not None and not isinstance(window, ast.IntervalWindow):
        raise _error(stmt, "HAVING is allowed only with INTERVAL in a stream's query", query.having.pos)
    if isinstance(window, ast.IntervalWindow) and window.fill is not None:
        _validate_fill(stmt, window.fill)
    if isinstance(window, ast.SessionWindow) and (
        not isinstance(window.gap, ast.DurationLiteral)
        or window.gap.duration.is_calendar
        or window.gap.duration.value <= 0
    ):
        raise _error(stmt, "SESSION's gap is a positive duration such as 10s or 5m", window.gap.pos)
    if is_interp_query(stmt.query):
        _validate_interp(stmt)
    allowed = {"interp"} if query.interp is not None else set()
    if stmt.trigger == "FORCE_WINDOW_CLOSE":
        allowed.add("twa")  # TDengine computes twa in a stream only at FORCE_WINDOW_CLOSE
    for node in all_expressions(query):
        if isinstance(node, ast.Func) and node.name in REFUSED_FUNCTIONS and node.name not in allowed:
            raise _error(
                stmt,
                f"function {node.name}() is not allowed in a stream"
                f" (the legacy streams refuse {', '.join(REFUSED_FUNCTIONS)})",
                node.pos,
            )
    if query.where is not None:
        for node in walk(query.where):
            if isinstance(node, ast.Column) and node.name.lower() in WINDOW_NAMES:
                raise _error(stmt, f"{node.name} is a window pseudo-column: it cannot be used in WHERE", node.pos)
    names = [item.alias or item.text for item in query.items]
    seen: set[str] = set()
    for item, name in zip(query.items, names, strict=True):
        if name.lower() in seen:
            raise _error(stmt, f"duplicate output column name {name!r}", item.expr.pos)
        seen.add(name.lower())
    if stmt.columns and len(set(c.lower() for c in stmt.columns)) != len(stmt.columns):
        raise _error(stmt, "duplicate column name in the output column list", stmt.query.pos)
    if stmt.max_delay is not None and stmt.max_delay.nanos < MIN_MAX_DELAY_NS:
        raise _error(stmt, f"MAX_DELAY {stmt.max_delay} is shorter than the minimum 5s", opt("TRIGGER"))
    sliding = window.sliding if isinstance(window, ast.IntervalWindow) else None
    if isinstance(window, ast.IntervalWindow) and sliding is not None and sliding.nanos > window.interval.nanos:
        raise _error(stmt, f"SLIDING {window.sliding} is longer than INTERVAL {window.interval}")
    interp = is_interp_query(stmt.query)
    if (
        stmt.trigger in ("FORCE_WINDOW_CLOSE", "CONTINUOUS_WINDOW_CLOSE")
        and not isinstance(window, ast.IntervalWindow)
        and not (interp and stmt.trigger == "FORCE_WINDOW_CLOSE")
    ):
        raise _error(stmt, f"TRIGGER {stmt.trigger} needs an INTERVAL window or INTERP … EVERY", opt("TRIGGER"))
    if stmt.trigger == "FORCE_WINDOW_CLOSE" and not interp:
        assert isinstance(window, ast.IntervalWindow)
        if stmt.fill_history:
            raise _error(stmt, "TRIGGER FORCE_WINDOW_CLOSE needs FILL_HISTORY 0", opt("FILL_HISTORY"))
        if "IGNORE EXPIRED" in stmt.option_pos and not stmt.ignore_expired:
            raise _error(stmt, "TRIGGER FORCE_WINDOW_CLOSE needs IGNORE EXPIRED 1", opt("IGNORE EXPIRED"))
        if "IGNORE UPDATE" in stmt.option_pos and not stmt.ignore_update:
            raise _error(stmt, "TRIGGER FORCE_WINDOW_CLOSE needs IGNORE UPDATE 1", opt("IGNORE UPDATE"))
        if window.fill is not None and window.fill.mode not in ("PREV", "NULL", "NONE", "VALUE", "NULL_F", "VALUE_F"):
            raise _error(
                stmt, f"TRIGGER FORCE_WINDOW_CLOSE allows FILL PREV, NULL, NONE and VALUE, not {window.fill.mode}"
            )
    if isinstance(window, ast.CountWindow):
        # TDengine's tests: a count window needs a WATERMARK and IGNORE EXPIRED 1
        if stmt.watermark is None:
            raise _error(stmt, "COUNT_WINDOW streams need a WATERMARK", query.pos)
        if not stmt.ignore_expired:
            raise _error(stmt, "COUNT_WINDOW streams need IGNORE EXPIRED 1", opt("IGNORE EXPIRED"))
    aliases = {a.lower() for a in query.partition_aliases if a}
    if (
        len(stmt.tags)
        and query.partition_by
        and len(stmt.tags) != len(query.partition_by)
        # fewer tags than partitions: each names a PARTITION BY alias (``partition by tbname,
        # ta as dd`` with ``TAGS(dd …)``, as TDengine's scripts write it)
        and not (len(stmt.tags) < len(query.partition_by) and all(t.name.lower() in aliases for t in stmt.tags))
    ):
        raise _error(
            stmt,
            f"TAGS names {len(stmt.tags)} tags but PARTITION BY has {len(query.partition_by)} expressions "
            "(fewer tags must each name a PARTITION BY alias)",
            stmt.tags[0].pos,
        )


def _validate_scalar(stmt: ast.CreateLegacyStream) -> None:
    """A stream without a window transforms each row: no aggregates, no HAVING, and a
    timestamp first (the output rows' key)."""
    query = stmt.query
    if query.having is not None:
        raise _error(stmt, "HAVING needs a window clause in a stream's query", query.having.pos)
    for node in all_expressions(query):
        if isinstance(node, ast.Func) and is_aggregate_function(node.name):
            raise _error(
                stmt,
                f"{node.name}() aggregates: a stream without a window clause writes each row as it arrives;"
                " add INTERVAL, SESSION, STATE_WINDOW, EVENT_WINDOW or COUNT_WINDOW",
                node.pos,
            )
        if isinstance(node, ast.Column) and node.name.lower() in WINDOW_NAMES:
            raise _error(stmt, f"{node.name} needs a window clause in a stream's query", node.pos)


def needs_tbname_partition(stmt: ast.CreateLegacyStream) -> bool:
    """STATE, EVENT and COUNT windows over a super table need PARTITION BY tbname (checked
    where the table's kind is known), and so do streams without a window (each child
    table's rows are written apart, keyed by their timestamps)."""
    window = stmt.query.window
    per_table = is_interp_query(stmt.query) or stmt.trigger == "FORCE_WINDOW_CLOSE"  # INTERP and FWC too
    if (
        not per_table
        and window is not None
        and not isinstance(window, ast.StateWindow | ast.EventWindow | ast.CountWindow)
    ):
        return False
    return not any(isinstance(e, ast.Column) and e.name.lower() == "tbname" for e in stmt.query.partition_by)


def _validate_interp(stmt: ast.CreateLegacyStream) -> None:
    """TDengine's rules for INTERP streams: points every EVERY as the data passes them (no
    RANGE), at once or at the wall clock, and FILL modes that do not wait for later rows at the
    wall clock."""
    query, clause, opt = stmt.query, stmt.query.interp, stmt.option_pos.get
    if clause is None:
        raise _error(stmt, "INTERP in a stream needs EVERY(interval) FILL(mode) after FROM … [PARTITION BY …]")
    if clause.start is not None:
        raise _error(stmt, "a stream's INTERP has no RANGE: its points are every EVERY(…) the data passes", clause.pos)
    if clause.every is None:
        raise _error(stmt, "INTERP in a stream needs EVERY(interval): the distance between its points", clause.pos)
    if query.window is not None:
        raise _error(stmt, "INTERP cannot be combined with a window clause")
    if stmt.trigger not in ("AT_ONCE", "FORCE_WINDOW_CLOSE"):
        raise _error(
            stmt, f"INTERP in a stream needs TRIGGER AT_ONCE or FORCE_WINDOW_CLOSE, not {stmt.trigger}", opt("TRIGGER")
        )
    mode = clause.fill.mode if clause.fill is not None else "NONE"
    if stmt.trigger == "FORCE_WINDOW_CLOSE" and mode in ("NEXT", "LINEAR", "NEAR"):
        raise _error(
            stmt, f"TRIGGER FORCE_WINDOW_CLOSE writes each point when the clock reaches it: FILL({mode}) would "
            "need later rows", clause.pos,
        )  # fmt: skip


def fill_kind(expr: ast.Expr) -> str:
    """How FILL writes a column (as the equivalent stream's query has it) in a window without
    rows: a window pseudo-column by its name (the window's own), ``keep`` a partition value,
    constant or scalar function of them (the group's: ``timezone()``, ``concat(tbname, 'a')``),
    ``fill`` one that reads the rows (FILL's value)."""
    if isinstance(expr, ast.Column) and expr.name.lower() in WINDOW_NAMES.values():
        return expr.name.lower()
    reads_rows = (
        isinstance(n, ast.Column) or (isinstance(n, ast.Func) and is_aggregate_function(n.name.lower()))
        for n in walk(expr)
    )
    return "fill" if any(reads_rows) else "keep"


def _validate_fill(stmt: ast.CreateLegacyStream, fill: ast.Fill) -> None:
    """FILL of the windows without rows (``compute/fill.py``): window pseudo-columns selected
    bare (the filled window's own), one VALUE per column read from the rows."""
    mode = fill.mode.removesuffix("_F")
    if stmt.query.having is not None:
        message = "FILL with HAVING is not supported: a window HAVING drops would be filled"
        raise _error(stmt, message, stmt.query.having.pos)
    if mode == "NEAR":
        raise _error(
            stmt, "FILL(NEAR) fills INTERP's points; windows fill with NONE, NULL, VALUE, PREV, NEXT or LINEAR"
        )
    filled = 0
    for item in stmt.query.items:
        expr = _trigger_names(item.expr)
        pseudo = [n for n in walk(expr) if isinstance(n, ast.Column) and n.name.lower() in WINDOW_NAMES.values()]
        if pseudo and not (isinstance(expr, ast.Column) and expr is pseudo[0]):
            message = f"with FILL a window pseudo-column is selected as it is, not in {item.text}"
            raise _error(stmt, message, item.expr.pos)
        filled += fill_kind(_group_keys(stmt, expr)) == "fill"
    if mode == "VALUE" and len(fill.values) != filled:
        raise _error(stmt, f"FILL(VALUE, …) needs {filled} value(s), one per filled column; got {len(fill.values)}")


@dataclasses.dataclass(frozen=True)
class _Types:
    """What the mapping knows of the tables' types: the source's columns and tags, and the
    tags of the existing super table the stream writes (empty if it creates its own)."""

    columns: Mapping[str, ast.DataType]
    output_tags: Mapping[str, ast.DataType]


def equivalent_stream(
    stmt: ast.CreateLegacyStream,
    timestamp_column: str,
    column_types: Mapping[str, ast.DataType],
    output_tag_types: Mapping[str, ast.DataType] | None = None,
) -> ast.CreateStream:
    """The 3.3.7 stream the legacy statement is (see the module docstring). ``column_types``:
    the source's columns and tags by lower-case name, the types of tags TAGS names without one;
    ``output_tag_types``: the tags of the existing super table it writes, which those take first."""
    types = _Types(column_types, output_tag_types or {})
    if is_interp_query(stmt.query):
        return _interp_equivalent(stmt, types)
    query = stmt.query
    # without a window each row is its own window: COUNT_WINDOW(1) writes it as it arrives
    window = query.window or ast.CountWindow(1)
    assert isinstance(query.source, ast.TableSource)  # validated at CREATE
    clock_closed = stmt.trigger == "FORCE_WINDOW_CLOSE"
    legacy = ("DELETE_RECALC", ast.PARTITION_BY_VALUES, ast.LEGACY_OUTPUT, ast.RECALC_COUNT_WINDOW, ast.RETRACT_WINDOWS)
    options = [ast.StreamOption(name) for name in legacy]
    if stmt.ignore_expired:
        options += [ast.StreamOption("IGNORE_DISORDER"), ast.StreamOption(ast.TABLE_EXPIRY)]
    if stmt.ignore_update and query.window is not None:
        # (without a window each written row is transformed on its own: nothing to count twice)
        options.append(ast.StreamOption(ast.WRITTEN_ROWS))
    if stmt.fill_history:
        options.append(ast.StreamOption("FILL_HISTORY"))
    if stmt.watermark is not None:
        options.append(ast.StreamOption("WATERMARK", duration=stmt.watermark))
    fill = window.fill if isinstance(window, ast.IntervalWindow) else None
    if fill is not None and fill.mode != "NONE":
        options.append(ast.StreamOption(ast.LEGACY_FILL, fill=fill))
    if isinstance(window, ast.IntervalWindow) and (fill is None or fill.mode == "NONE" or not clock_closed):
        # the legacy engine writes the windows that hold rows, as an INTERVAL query does; FILL
        # writes the others with the next window that holds rows, or (FORCE_WINDOW_CLOSE) as
        # the wall clock closes them
        options.append(ast.StreamOption("IGNORE_NODATA_TRIGGER"))
    if stmt.trigger == "AT_ONCE":
        options.append(ast.StreamOption(ast.AT_ONCE))
    elif stmt.trigger == "MAX_DELAY":
        options.append(ast.StreamOption("MAX_DELAY", duration=stmt.max_delay))
    elif stmt.trigger == "FORCE_WINDOW_CLOSE":
        options.append(ast.StreamOption(ast.FORCE_WINDOW_CLOSE))
    elif stmt.trigger == "CONTINUOUS_WINDOW_CLOSE":
        options.append(ast.StreamOption(ast.STREAM_EVENT_TIME))
        period = stmt.recalculate or ast.Duration(1, "h")  # TDengine's default: 60 minutes
        options.append(ast.StreamOption(ast.RECALC_PERIOD, duration=period))
    if query.where is not None:
        options.append(ast.StreamOption("PRE_FILTER", expr=query.where))
    # unaliased items keep the name they were written with (``_wstart``, not ``_twstart``)
    items = tuple(
        ast.SelectItem(_group_keys(stmt, _trigger_names(item.expr)), item.alias, item.text) for item in query.items
    )
    first = query.items[0].expr if query.items else None
    prepended = not (isinstance(first, ast.Column) and first.name.lower() in ("_wstart", timestamp_column.lower()))
    if prepended:
        # the legacy engine puts the window start first when the query does not, named
        # ``_wstart`` or else ``ts`` (TDengine then tries a random name; here ts_1, ts_2, …)
        taken = {(item.alias or item.text).lower() for item in items}
        fallbacks = (f"ts_{n}" for n in range(1, len(taken) + 2))
        name = next(n for n in ("_wstart", "ts", *fallbacks) if n not in taken)
        items = (ast.SelectItem(ast.Column("_twstart"), name, "_wstart"), *items)
    stream_query = ast.Select(
        items=items,
        source=ast.PlaceholderSource(ast.Placeholder("trows")),
        having=_trigger_names(query.having) if query.having is not None else None,
        text=query.text,
        pos=query.pos,
    )
    return _stream(stmt, _trigger(window), options, stream_query, types, prepended)


def _interp_equivalent(stmt: ast.CreateLegacyStream, types: _Types) -> ast.CreateStream:
    """An INTERP stream is a stream of points in time. At AT_ONCE it is a SLIDING(every)
    stream: a point fires when a row at or after it is written (the row there, or the rows
    around it, are then known). At FORCE_WINDOW_CLOSE it is a PERIOD(every) stream: a point
    fires for every group when the wall clock reaches it (FILL PREV, NULL or VALUE). Either
    way its query is INTERP over the group's rows at the trigger's time
    (``Interp.trigger_point``) with the statement's FILL. Without a window there is nothing
    to recalculate: points already written stay."""
    query, clause = stmt.query, stmt.query.interp
    assert clause is not None and clause.every is not None and isinstance(query.source, ast.TableSource)
    options = [ast.StreamOption(ast.PARTITION_BY_VALUES), ast.StreamOption(ast.LEGACY_OUTPUT)]
    clock = stmt.trigger == "FORCE_WINDOW_CLOSE"
    if stmt.fill_history and not clock:  # the wall clock's points start when the stream does
        options.append(ast.StreamOption("FILL_HISTORY"))
    items = query.items
    first = items[0].expr if items else None
    prepended = not (isinstance(first, ast.Column) and first.name.lower() == "_irowts")
    if prepended:
        # the output's timestamp: the point, first, as TDengine writes it
        items = (ast.SelectItem(ast.Column("_irowts"), None, "_irowts"), *items)
    stream_query = dataclasses.replace(
        query,
        items=items,
        partition_by=(),
        partition_aliases=(),
        interp=ast.Interp(fill=clause.fill, trigger_point="_tlocaltime" if clock else "_tcurrent_ts", pos=clause.pos),
    )
    trigger = ast.PeriodTrigger(clause.every) if clock else ast.SlidingTrigger(sliding=clause.every)
    return _stream(stmt, trigger, options, stream_query, types, prepended)


def _stream(
    stmt: ast.CreateLegacyStream,
    trigger: ast.Trigger,
    options: list[ast.StreamOption],
    query: ast.Select,
    types: _Types,
    prepended: bool,
) -> ast.CreateStream:
    """The 3.3.7 statement: the legacy one's source, partitions, output and notification with
    the trigger, options and query the mapping chose (``prepended``: the query's first item is
    the timestamp the engine put there)."""
    source = stmt.query.source
    assert isinstance(source, ast.TableSource) and query.items
    columns, composite_key = _output_columns(stmt, prepended, query.items[0].alias or query.items[0].text)
    return ast.CreateStream(
        name=stmt.name,
        if_not_exists=stmt.if_not_exists,
        trigger=trigger,
        trigger_table=source.table,
        partition_by=stmt.query.partition_by,
        options=tuple(options),
        notification=stmt.notification,
        into=stmt.into,
        output_subtable=_placeholders(stmt, stmt.subtable) if stmt.subtable is not None else None,
        columns=columns,
        composite_key=composite_key,
        tags=_output_tags(stmt, types),
        query=query,
        pos=stmt.pos,
        text=stmt.text,
    )


def _output_columns(stmt: ast.CreateLegacyStream, prepended: bool, timestamp: str) -> tuple[tuple[str, ...], bool]:
    """The output's column names and whether it has a composite key. A column list names the
    query's columns: when the engine puts the timestamp first itself, the list names the ones
    after it. PRIMARY KEY can only mark the column after the timestamp."""
    columns, key = stmt.columns, stmt.key_column
    if prepended and columns:
        columns, key = (timestamp, *columns), None if key is None else key + 1
    if key is not None and key != 1:
        raise _error(
            stmt,
            f"PRIMARY KEY marks the output column after the timestamp, not {stmt.columns[stmt.key_column or 0]}",
        )
    return columns, key is not None


def _output_tags(stmt: ast.CreateLegacyStream, types: _Types) -> tuple[ast.OutputTag, ...]:
    tags = []
    for i, tag in enumerate(stmt.tags):
        value = _partition_value(stmt, i, tag.name)
        dtype = tag.type or types.output_tags.get(tag.name.lower()) or _partition_type(stmt, value, types.columns)
        tags.append(ast.OutputTag(tag.name, dtype, value, tag.comment))
    return tuple(tags)


def _partition_type(
    stmt: ast.CreateLegacyStream, value: ast.Placeholder, column_types: Mapping[str, ast.DataType]
) -> ast.DataType:
    """The type of the PARTITION BY column an untyped tag takes its value from."""
    part = stmt.query.partition_by[int(value.name) - 1] if stmt.query.partition_by else None
    if isinstance(part, ast.Column):
        if part.name.lower() == "tbname":
            return ast.DataType("VARCHAR", TABLE_NAME_LENGTH)
        if part.name.lower() in column_types:
            return column_types[part.name.lower()]
    raise _error(stmt, "a tag in TAGS without a type takes the type of its PARTITION BY column: name its type")


def _trigger(window: ast.QueryWindow) -> ast.Trigger:
    if isinstance(window, ast.IntervalWindow):
        return ast.SlidingTrigger(
            sliding=window.sliding or window.interval, interval=window.interval, interval_offset=window.offset
        )
    if isinstance(window, ast.SessionWindow):
        gap = window.gap
        assert isinstance(gap, ast.DurationLiteral)
        return ast.SessionTrigger(window.column, gap.duration)
    if isinstance(window, ast.StateWindow):
        return ast.StateTrigger(window.expr, window.true_for)
    if isinstance(window, ast.EventWindow):
        return ast.EventTrigger(window.start, window.end, window.true_for)
    return ast.CountTrigger(window.count, window.sliding, window.columns)


def _trigger_names(expr: ast.Expr) -> ast.Expr:
    """``_wstart`` → ``_twstart`` (and ``_wend``, ``_wduration``) everywhere in the expression."""
    return _rewrite(
        expr,
        lambda node: (
            ast.Column(WINDOW_NAMES[node.name.lower()], pos=node.pos)
            if isinstance(node, ast.Column) and node.name.lower() in WINDOW_NAMES
            else None
        ),
    )


def _group_keys(stmt: ast.CreateLegacyStream, expr: ast.Expr) -> ast.Expr:
    """A PARTITION BY column read outside an aggregate (``select ca, … partition by ca``,
    ``select tbname, … partition by tbname``), and ``_group_key(e)`` of a PARTITION BY
    expression ``e``: the group's value ``%%n``. Inside an aggregate a column stays the rows'."""
    partition = [expr_text(e).lower() for e in stmt.query.partition_by]

    def replace(node: ast.Expr) -> ast.Expr | None:
        if isinstance(node, ast.Func) and node.name == "_group_key" and len(node.args) == 1:
            text = expr_text(node.args[0]).lower()
            if text in partition:
                return ast.Placeholder(str(partition.index(text) + 1), pos=node.pos)
        if isinstance(node, ast.Func) and is_aggregate_function(node.name):
            return node  # not descended into
        if isinstance(node, ast.Column) and node.name.lower() in partition:
            return ast.Placeholder(str(partition.index(node.name.lower()) + 1), pos=node.pos)
        return None

    return _rewrite(expr, replace)


def _partition_value(stmt: ast.CreateLegacyStream, index: int, name: str) -> ast.Expr:
    """A tag's value: the PARTITION BY expression aliased as the tag, else the one at its
    position — as the trigger's group value ``%%n``."""
    aliases = [a.lower() if a else None for a in stmt.query.partition_aliases] or [None] * len(stmt.query.partition_by)
    position = aliases.index(name.lower()) if name.lower() in aliases else index
    return ast.Placeholder(str(position + 1))


def _placeholders(stmt: ast.CreateLegacyStream, expr: ast.Expr) -> ast.Expr:
    """SUBTABLE's references to PARTITION BY aliases or expressions as the group values
    ``%%n`` a 3.3.7 OUTPUT_SUBTABLE reads."""
    partition = stmt.query.partition_by
    aliases = [a.lower() if a else None for a in stmt.query.partition_aliases] or [None] * len(partition)

    def replace(node: ast.Expr) -> ast.Expr | None:
        if not isinstance(node, ast.Column):
            return None
        name = node.name.lower()
        if name in aliases:
            return ast.Placeholder(str(aliases.index(name) + 1), pos=node.pos)
        for i, part in enumerate(partition):
            if isinstance(part, ast.Column) and part.name.lower() == name:
                return ast.Placeholder(str(i + 1), pos=node.pos)
        return None

    return _rewrite(expr, replace)


def _rewrite(expr: ast.Expr, replace: object) -> ast.Expr:
    """``expr`` with every node ``replace`` returns a new node for replaced (bottom-up)."""
    assert callable(replace)
    found = replace(expr)
    if found is not None:
        return found
    changes = {}
    for field in dataclasses.fields(expr):
        value = getattr(expr, field.name)
        if isinstance(value, ast.Expr):
            changes[field.name] = _rewrite(value, replace)
        elif isinstance(value, tuple) and value and all(isinstance(v, ast.Expr) for v in value):
            changes[field.name] = tuple(_rewrite(v, replace) for v in value)
    return dataclasses.replace(expr, **changes) if changes else expr
