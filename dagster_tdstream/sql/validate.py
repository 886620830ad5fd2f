"""Semantic rules of CREATE STREAM that need no catalog.

Owns what TDengine checks from the statement alone: duration units and ranges, option
combinations, which trigger allows which placeholder, notification rules, output clause
rules. Rules that need table schemas (does the column exist, is it the primary key, does an
existing output table match) live with the catalog in ``storage/streamcheck.py``. Where the
documentation and TDengine's own tests disagree the tests win (``MAX_DELAY(1s)`` is
accepted although the prose says the minimum is 3 s).
"""

from __future__ import annotations

from ..errors import StreamValidationError
from . import ast
from .text import expr_text, name_key
from .timeunits import DAY_NANOS, NANOS_PER_UNIT, Duration, TimeValueError, parse_timestamp, resolve_timezone
from .walk import all_expressions, children, sources, walk

PERIOD_PLACEHOLDERS = frozenset({"_tprev_localtime", "_tnext_localtime"})
SLIDING_PLACEHOLDERS = frozenset({"_tprev_ts", "_tcurrent_ts", "_tnext_ts"})
WINDOW_PLACEHOLDERS = frozenset({"_twstart", "_twend", "_twduration", "_twrownum"})
CLOSE_ONLY_PLACEHOLDERS = frozenset({"_twend", "_twduration", "_twrownum"})
COMMON_PLACEHOLDERS = frozenset({"_tgrpid", "_tlocaltime"})
TRIGGER_PLACEHOLDERS = PERIOD_PLACEHOLDERS | SLIDING_PLACEHOLDERS | WINDOW_PLACEHOLDERS | COMMON_PLACEHOLDERS

_FIXED_SMALL_UNITS = ("a", "s", "m", "h")
_PERIOD_UNITS = ("a", "s", "m", "h", "d")
# SLIDING steps and SESSION gaps: TDengine's syntax test accepts a..w and rejects b, u, n, y
_STEP_UNITS = ("a", "s", "m", "h", "d", "w")
# for comparisons only, calendar units count as TDengine's syntax test counts them
_APPROX_NANOS = {"n": 31 * DAY_NANOS, "y": 365 * DAY_NANOS}
_MAX_SLIDING_WINDOWS = 100
_MIN_PERIOD = Duration(10, "a").nanos
_MAX_PERIOD = Duration(3650, "d").nanos
_MAX_COUNT = 2**31 - 1


def _fail(message: str, pos: ast.Pos | None = None) -> StreamValidationError:
    if pos is None or pos.line == 0:
        return StreamValidationError(message)
    return StreamValidationError(message, line=pos.line, column=pos.column)


def _check_units(value: Duration, allowed: tuple[str, ...], what: str, pos: ast.Pos | None) -> None:
    if value.unit not in allowed:
        raise _fail(f"{what} {value}: unit {value.unit!r} is not allowed; allowed units: {', '.join(allowed)}", pos)


def _positive(value: Duration, what: str, pos: ast.Pos | None) -> None:
    if value.value <= 0:
        raise _fail(f"{what} must be greater than 0, got {value}", pos)


def _approx_nanos(value: Duration) -> int:
    return value.value * _APPROX_NANOS[value.unit] if value.is_calendar else value.nanos


def trigger_is_window(trigger: ast.Trigger) -> bool:
    """Window triggers open and close windows; PERIOD and plain SLIDING only tick."""
    return not isinstance(trigger, ast.PeriodTrigger) and not (
        isinstance(trigger, ast.SlidingTrigger) and trigger.interval is None
    )


def validate_create_stream(stmt: ast.CreateStream, *, timezone: str | None = None) -> None:
    """Raise ``StreamValidationError`` (with a position where one is known) for the first
    rule the statement breaks."""
    pos = stmt.pos
    _validate_trigger(stmt.trigger, pos)
    _validate_options(stmt, timezone)
    _validate_source_and_grouping(stmt)
    _validate_notification(stmt)
    _validate_output(stmt)
    if stmt.query is not None:
        _validate_query(stmt)


def _validate_trigger(trigger: ast.Trigger, pos: ast.Pos) -> None:
    if isinstance(trigger, ast.PeriodTrigger):
        _check_units(trigger.period, _PERIOD_UNITS, "PERIOD", pos)
        if not _MIN_PERIOD <= trigger.period.nanos <= _MAX_PERIOD:
            raise _fail(f"PERIOD {trigger.period} is out of range; allowed: 10a to 3650d", pos)
        if trigger.offset is not None:
            _check_units(trigger.offset, _FIXED_SMALL_UNITS, "PERIOD offset", pos)
            if trigger.offset.nanos >= DAY_NANOS:
                raise _fail(f"PERIOD offset {trigger.offset} must be less than 1 day", pos)
            if trigger.offset.nanos >= trigger.period.nanos:
                raise _fail(f"PERIOD offset {trigger.offset} must be less than the period {trigger.period}", pos)
    elif isinstance(trigger, ast.SlidingTrigger):
        _check_units(trigger.sliding, _STEP_UNITS, "SLIDING", pos)
        _positive(trigger.sliding, "SLIDING", pos)
        if trigger.sliding_offset is not None:
            _check_units(trigger.sliding_offset, _FIXED_SMALL_UNITS, "SLIDING offset", pos)
            if trigger.sliding_offset.nanos >= trigger.sliding.nanos:
                raise _fail(
                    f"SLIDING offset {trigger.sliding_offset} must be less than the sliding {trigger.sliding}", pos
                )
        if trigger.interval is not None:
            _validate_interval(trigger, pos)
    elif isinstance(trigger, ast.SessionTrigger):
        _check_units(trigger.gap, _STEP_UNITS, "SESSION gap", pos)
        _positive(trigger.gap, "SESSION gap", pos)
    elif isinstance(trigger, ast.StateTrigger | ast.EventTrigger):
        if trigger.true_for is not None:
            _check_units(trigger.true_for, tuple(NANOS_PER_UNIT), "TRUE_FOR", pos)
        if isinstance(trigger, ast.StateTrigger) and isinstance(trigger.expr, ast.Cast):
            raise _fail("CAST is not supported in the column of a STATE_WINDOW trigger", trigger.expr.pos)
        if isinstance(trigger, ast.StateTrigger) and not any(isinstance(e, ast.Column) for e in walk(trigger.expr)):
            raise _fail("STATE_WINDOW needs a column of the trigger table, not a constant", trigger.expr.pos)
    elif isinstance(trigger, ast.CountTrigger):
        if not 1 <= trigger.count <= _MAX_COUNT:
            raise _fail(f"COUNT_WINDOW count must be between 1 and {_MAX_COUNT}, got {trigger.count}", pos)
        if trigger.sliding is not None and not 1 <= trigger.sliding <= trigger.count:
            raise _fail(
                f"COUNT_WINDOW sliding must be between 1 and the count {trigger.count}, got {trigger.sliding}",
                pos,
            )


def _validate_interval(trigger: ast.SlidingTrigger, pos: ast.Pos) -> None:
    interval, sliding, offset = trigger.interval, trigger.sliding, trigger.interval_offset
    assert interval is not None
    _positive(interval, "INTERVAL", pos)
    if _approx_nanos(sliding) > _approx_nanos(interval):
        raise _fail(f"SLIDING {sliding} must not be larger than INTERVAL {interval}", pos)
    # a calendar INTERVAL counts its months as 31 days here: the most windows a row can fall in
    windows = _approx_nanos(interval) // _approx_nanos(sliding)
    if windows >= _MAX_SLIDING_WINDOWS:
        raise _fail(
            f"INTERVAL {interval} / SLIDING {sliding} gives up to {windows} overlapping windows per row; at most "
            f"{_MAX_SLIDING_WINDOWS - 1} are allowed",
            pos,
        )
    if offset is not None:
        if offset.is_calendar:
            raise _fail(f"INTERVAL offset {offset} must be a fixed duration (a, s, m, h, d, w), not months", pos)
        if _approx_nanos(offset) >= _approx_nanos(interval):
            raise _fail(f"INTERVAL offset {offset} must be less than the interval {interval}", pos)


def _validate_options(stmt: ast.CreateStream, timezone: str | None) -> None:
    seen: set[str] = set()
    for opt in stmt.options:
        if opt.name in seen:
            raise _fail(f"stream option {opt.name} given twice", opt.pos)
        seen.add(opt.name)
    if {"FILL_HISTORY", "FILL_HISTORY_FIRST"} <= seen:
        opt = stmt.option("FILL_HISTORY_FIRST")
        raise _fail("FILL_HISTORY and FILL_HISTORY_FIRST cannot be used together", opt.pos if opt else None)
    is_period = isinstance(stmt.trigger, ast.PeriodTrigger)
    for opt in stmt.options:
        if opt.name in ("FILL_HISTORY", "FILL_HISTORY_FIRST") and is_period:
            raise _fail(f"{opt.name} is not supported with a PERIOD trigger (no history computation)", opt.pos)
        if opt.duration is not None:
            if opt.name == "EXPIRED_TIME":
                _check_units(opt.duration, ("a", "s", "m", "h", "d"), opt.name, opt.pos)
            elif opt.name == "MAX_DELAY":
                # the prose says s/m/h/d and at least 3 s; TDengine's tests accept 1s and 1a
                _check_units(opt.duration, ("a", "s", "m", "h", "d"), opt.name, opt.pos)
                _positive(opt.duration, opt.name, opt.pos)
        if opt.start is not None and opt.start.kind == "string":
            try:
                parse_timestamp(str(opt.start.value), "ms", resolve_timezone(timezone), strict=True)
            except TimeValueError as exc:
                raise _fail(f"{opt.name} start time: {exc}", opt.start.pos) from None
        if opt.name == "PRE_FILTER" and stmt.trigger_table is None:
            raise _fail("PRE_FILTER needs a trigger table (FROM ...)", opt.pos)
        if opt.name == "PRE_FILTER" and opt.expr is not None:
            for node in walk(opt.expr):
                if isinstance(node, ast.Column) and node.name.lower() in TRIGGER_PLACEHOLDERS:
                    raise _fail(f"PRE_FILTER cannot use the placeholder {node.name}", node.pos)
    watermark, expired = stmt.option("WATERMARK"), stmt.option("EXPIRED_TIME")
    if (
        watermark
        and expired
        and watermark.duration
        and expired.duration
        and _approx_nanos(expired.duration) <= _approx_nanos(watermark.duration)
    ):
        raise _fail(
            f"EXPIRED_TIME {expired.duration} must be greater than WATERMARK {watermark.duration}",
            expired.pos,
        )
    if "CALC_NOTIFY_ONLY" in seen and stmt.notification is None:
        opt = stmt.option("CALC_NOTIFY_ONLY")
        raise _fail("CALC_NOTIFY_ONLY needs a NOTIFY(...) clause", opt.pos if opt else None)


def _validate_source_and_grouping(stmt: ast.CreateStream) -> None:
    if stmt.trigger_table is None and not isinstance(stmt.trigger, ast.PeriodTrigger):
        raise _fail(f"a {stmt.trigger.kind} trigger needs a trigger table: add FROM table", stmt.pos)
    if stmt.partition_by and stmt.trigger_table is None:
        raise _fail("PARTITION BY needs a trigger table (FROM ...)", stmt.partition_by[0].pos)
    names: set[str] = set()
    for expr in stmt.partition_by:
        if not isinstance(expr, ast.Column):
            raise _fail("PARTITION BY of a stream accepts only tbname and tag columns", expr.pos)
        if expr.name.lower() in names:
            raise _fail(f"PARTITION BY lists {expr.name} twice", expr.pos)
        names.add(expr.name.lower())


def _validate_notification(stmt: ast.CreateStream) -> None:
    note = stmt.notification
    if note is None:
        return
    for url in note.urls:
        # WebSocket is what TDengine delivers over; its syntax test also accepts http(s) URLs at
        # CREATE time, so those are accepted here and fail at delivery (see notify/).
        if not url.lower().startswith(("ws://", "wss://", "http://", "https://")):
            raise _fail(f"notification URL {url!r} must be ws://host:port/path (or wss://)", stmt.pos)
        rest = url.split("://", 1)[1]
        if not rest or rest.startswith(("/", ":")):
            raise _fail(f"notification URL {url!r} needs a host", stmt.pos)
    if trigger_is_window(stmt.trigger):
        # The prose requires ON for window triggers, but TDengine's tests create a SESSION
        # stream with NOTIFY and no ON (s0-0-0-14); the tests win, and the events default to
        # WINDOW_CLOSE when notifications are delivered.
        if "ON_TIME" in note.on:
            raise _fail(f"ON_TIME is for PERIOD and SLIDING triggers, not {stmt.trigger.kind}", stmt.pos)
    elif any(t != "ON_TIME" for t in note.on):
        raise _fail(f"a {stmt.trigger.kind} trigger has no windows; notify ON (ON_TIME) or omit ON", stmt.pos)
    if note.where is not None:
        outputs = output_column_names(stmt)
        if outputs is not None:
            _check_result_references(note.where, {name_key(o) for o in outputs}, outputs)


def _check_result_references(expr: ast.Expr, known: set[str], outputs: list[str]) -> None:
    """NOTIFY WHERE sees the result row: a sub-expression whose text names a result column
    (``count(q_col1)``) is that column; any other column reference is an error."""
    if name_key(expr_text(expr)) in known:
        return
    if isinstance(expr, ast.Column | ast.Placeholder):
        raise _fail(
            f"NOTIFY WHERE references {expr_text(expr)}, which is not a result column "
            f"(result columns: {', '.join(outputs) or 'none'})",
            expr.pos,
        )
    if isinstance(expr, ast.Func) and expr.name in _AGGREGATE_NAMES:
        raise _fail(f"NOTIFY WHERE may use only result columns and constants, not {expr_text(expr)}", expr.pos)
    for child in children(expr):
        _check_result_references(child, known, outputs)


def _validate_output(stmt: ast.CreateStream) -> None:
    calc_notify_only = stmt.option("CALC_NOTIFY_ONLY") is not None
    if stmt.query is None:
        if stmt.notification is None:
            raise _fail("a stream without AS query must NOTIFY: give AS subquery or NOTIFY(...)", stmt.pos)
        if stmt.into is not None:
            raise _fail("INTO needs AS subquery: a notify-only stream writes no table", stmt.into.pos)
    elif stmt.into is None and not calc_notify_only:
        raise _fail("a stream with AS subquery needs INTO table (or CALC_NOTIFY_ONLY with NOTIFY)", stmt.pos)
    if stmt.into is None:
        for present, clause in (
            (stmt.output_subtable is not None, "OUTPUT_SUBTABLE"),
            (bool(stmt.columns), "an output column list"),
            (bool(stmt.tags), "TAGS"),
        ):
            if present:
                raise _fail(f"{clause} needs INTO table: it describes the output table", stmt.pos)
    if stmt.output_subtable is not None and not stmt.partition_by:
        raise _fail("OUTPUT_SUBTABLE needs PARTITION BY: without groups there is one output table", stmt.pos)
    if stmt.tags and not stmt.partition_by:
        raise _fail("TAGS needs PARTITION BY: without groups the output is a normal table", stmt.pos)
    tag_names = [t.name.lower() for t in stmt.tags]
    if len(set(tag_names)) != len(tag_names):
        raise _fail("TAGS lists a tag name twice", stmt.pos)
    if len({c.lower() for c in stmt.columns}) != len(stmt.columns):
        raise _fail("the output column list names a column twice", stmt.pos)
    if stmt.into is not None and stmt.query is not None and not stmt.columns:
        # the output's columns are named by the query: two alike would be one column twice
        # (TDengine's old basic1 case: ``select _twstart, count(*), _twstart …`` is refused)
        seen: set[str] = set()
        for item in stmt.query.items:
            name = name_key(item.alias or item.text)
            if name in seen and not isinstance(item.expr, ast.Star):
                raise _fail(
                    f"duplicate output column name {item.alias or item.text!r}: give one of them an alias",
                    item.expr.pos,
                )
            seen.add(name)
    if stmt.into is not None and stmt.trigger_table is not None:
        same_db = (stmt.into.db or "").lower() == (stmt.trigger_table.db or "").lower()
        if same_db and stmt.into.name.lower() == stmt.trigger_table.name.lower():
            raise _fail("the output table cannot be the trigger table", stmt.into.pos)
    if stmt.query is not None and stmt.columns:
        has_star = any(isinstance(item.expr, ast.Star) for item in stmt.query.items)
        if not has_star and len(stmt.columns) != len(stmt.query.items):
            raise _fail(
                f"the output column list has {len(stmt.columns)} names but the query returns "
                f"{len(stmt.query.items)} columns",
                stmt.pos,
            )


def _validate_query(stmt: ast.CreateStream) -> None:
    query = stmt.query
    assert query is not None
    trigger = stmt.trigger
    is_sliding = isinstance(trigger, ast.SlidingTrigger)
    is_interval = is_sliding and trigger.interval is not None  # type: ignore[union-attr]
    is_window = trigger_is_window(trigger)
    event_type = stmt.option("EVENT_TYPE")
    open_only = event_type is not None and "WINDOW_CLOSE" not in event_type.event_types
    grouped_by_tbname = any(isinstance(e, ast.Column) and e.name.lower() == "tbname" for e in stmt.partition_by)
    for node in all_expressions(query):
        if isinstance(node, ast.Column):
            name = node.name.lower()
            if name in PERIOD_PLACEHOLDERS and not isinstance(trigger, ast.PeriodTrigger):
                raise _fail(f"placeholder {node.name} is only for PERIOD triggers", node.pos)
            if name in SLIDING_PLACEHOLDERS and not is_sliding:
                raise _fail(f"placeholder {node.name} is only for SLIDING triggers", node.pos)
            if name in WINDOW_PLACEHOLDERS and not (is_window or is_interval):
                raise _fail(f"placeholder {node.name} is only for window triggers, not {trigger.kind}", node.pos)
            if name in CLOSE_ONLY_PLACEHOLDERS and open_only:
                raise _fail(f"placeholder {node.name} needs WINDOW_CLOSE events", node.pos)
        elif isinstance(node, ast.Placeholder) and node.name == "trows":
            raise _fail("%%trows can only be used as a table: FROM %%trows", node.pos)
    for source in sources(query):
        if isinstance(source, ast.PlaceholderSource):
            node = source.placeholder
            _check_placeholder_table(node, stmt, grouped_by_tbname)
            if node.name == "trows" and open_only:
                raise _fail("%%trows needs WINDOW_CLOSE events", node.pos)
    first = query.items[0].expr
    if isinstance(first, ast.Func) and first.name in _NON_TIMESTAMP_FUNCS:
        raise _fail(
            f"the first column of the query must be a timestamp (the output primary key), found {first.name}(...)",
            first.pos,
        )
    if isinstance(first, ast.Literal):
        raise _fail("the first column of the query must be a timestamp (the output primary key)", first.pos)


def _check_placeholder_table(node: ast.Placeholder, stmt: ast.CreateStream, grouped_by_tbname: bool) -> None:
    """``FROM %%trows`` / ``FROM %%tbname``. In expressions, ``%%n`` beyond the partition
    columns and ``%%tbname`` without PARTITION BY tbname are accepted by TDengine's own tests
    (s0-0-0-9-3, s0-0-0-3-9) and read as NULL, so only the table use is checked."""
    if node.name == "trows":
        if stmt.trigger_table is None:
            raise _fail("%%trows needs a trigger table (FROM ...)", node.pos)
    elif not grouped_by_tbname:
        raise _fail("FROM %%tbname needs PARTITION BY tbname", node.pos)


_AGGREGATE_NAMES = frozenset(
    [
        "count",
        "sum",
        "avg",
        "min",
        "max",
        "first",
        "last",
        "last_row",
        "spread",
        "stddev",
        "stddev_pop",
        "var_pop",
        "apercentile",
        "percentile",
        "leastsquares",
        "hyperloglog",
        "histogram",
        "elapsed",
        "twa",
        "irate",
        "mode",
        "top",
        "bottom",
        "sample",
        "tail",
        "unique",
    ]
)
_SELECTORS = frozenset(["min", "max", "first", "last", "last_row", "mode", "top", "bottom", "sample", "tail", "unique"])


def is_aggregate_function(name: str) -> bool:
    """Whether ``name`` (lower case) is an aggregate or selector function."""
    return name in _AGGREGATE_NAMES


# the first result column must be a timestamp: these never return one
_NON_TIMESTAMP_FUNCS = (_AGGREGATE_NAMES - _SELECTORS) | {"length", "concat", "concat_ws", "lower", "upper", "abs"}


def output_column_names(stmt: ast.CreateStream) -> list[str] | None:
    """The output table's column names, or None when the query selects ``*`` (unknown here)."""
    if stmt.columns:
        return list(stmt.columns)
    if stmt.query is None:
        return []
    if any(isinstance(item.expr, ast.Star) for item in stmt.query.items):
        return None
    return [item.alias or item.text for item in stmt.query.items]
