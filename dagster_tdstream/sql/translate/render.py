"""Expressions → Spark SQL: columns, literals, operators, placeholders, and every function
(scalars from ``functions.py``, aggregates, time functions, TDengine's format strings), with
TDengine's type and NULL rules. Knows one query's scope; builds no relations.
"""

from __future__ import annotations

import itertools
import math
from zoneinfo import ZoneInfo

from .. import ast
from ..constants import INT64_MAX, INT64_MIN
from ..intervals import CalendarSql
from ..timeunits import PRECISIONS, TimeValueError, now_in, parse_timestamp
from ..tsma import FUNCTION_STATES
from ..walk import conjuncts
from .functions import AGGREGATES, APERCENTILE_UDF, NUMERIC, OTHER, SCALARS, SERIES_FUNCTIONS, TIME_FUNCTIONS, Scalar
from .scope import (
    INTERP_PSEUDO,
    TRIGGER_NAMES,
    WINDOW_PSEUDO,
    Scope,
    TranslationContext,
    Typed,
    UserFunctionRef,
    kind_of,
    query_error,
    quote_string,
)


def replacement_key(expr: ast.Expr) -> ast.Expr:
    """The key ``Renderer.replaced`` holds a node under: identifiers are case-insensitive."""
    if isinstance(expr, ast.Column):
        return ast.Column(expr.name.lower(), expr.table.lower() if expr.table else None)
    return expr


SUPPORTED_FUNCTIONS = tuple(sorted((*AGGREGATES, *SCALARS, *TIME_FUNCTIONS, *SERIES_FUNCTIONS, *OTHER)))


class Renderer:
    def __init__(self, scope: Scope, ctx: TranslationContext) -> None:
        self.scope = scope
        self.ctx = ctx
        self.saw_aggregate = False
        self.where: ast.Expr | None = None  # the query's WHERE, for _qstart/_qend
        self.aggregates: dict[str, str | None] = {}  # each aggregate's SQL → its value over no rows
        # nodes a later stage has computed already (INTERP's values and points): their columns
        self.replaced: dict[ast.Expr, Typed] = {}
        self.neighbours: dict[str, tuple[str, str]] = {}  # twa()'s value → its neighbour columns
        self.now = ctx.now_ns // PRECISIONS[scope.precision] if ctx.now_ns else now_in(scope.precision)

    def _query_range(self, name: str) -> Typed:
        """_qstart/_qend/_qduration: the query's time range (``query_bounds``)."""
        low, high = self.query_bounds()
        if name == "_qduration":
            return Typed(str(max(min(high - low, INT64_MAX), 0)), "int")
        return Typed(f"{low if name == '_qstart' else high}L", "ts")

    def query_bounds(self) -> tuple[int, int]:
        """The time range the WHERE puts on the primary key (both ends included, as TDengine
        keeps it: ``ts < b`` ends at b - 1); an open end is the smallest/largest timestamp."""
        low, high = INT64_MIN, INT64_MAX
        for node in conjuncts(self.where):
            for bound_low, bound_high in self._time_bounds(node):
                low, high = max(low, bound_low), min(high, bound_high)
        return low, high

    def _time_bounds(self, node: ast.Expr) -> list[tuple[int, int]]:
        """The primary-key range one WHERE conjunct states (``constants.key_bounds``)."""
        from ..constants import ConstantContext, key_bounds

        now_ns = self.now * PRECISIONS[self.scope.precision]
        constants = ConstantContext(self.scope.precision, self.ctx.timezone, now_ns)

        def is_key(expr: ast.Expr) -> bool:
            return isinstance(expr, ast.Column) and self.scope.pk is not None and self.expr(expr).sql == self.scope.pk

        bounds = key_bounds(node, is_key, constants)
        return [bounds] if bounds is not None else []

    def duration(self, value: ast.Duration | None, node: ast.Expr | ast.Select) -> int:
        assert value is not None
        try:
            return value.in_precision(self.scope.precision)
        except TimeValueError as exc:
            raise query_error(str(exc), node) from None

    def condition(self, expr: ast.Expr) -> str:
        return self.expr(expr).sql

    def timestamp_literal(self, literal: ast.Literal) -> str:
        try:
            return str(parse_timestamp(str(literal.value), self.scope.precision, self.ctx.timezone))
        except TimeValueError as exc:
            raise query_error(str(exc), literal) from None

    def as_ts(self, expr: ast.Expr, typed: Typed) -> Typed:
        """A string literal compared with a timestamp is a timestamp literal."""
        if typed.kind == "string" and isinstance(expr, ast.Literal):
            return Typed(self.timestamp_literal(expr), "ts")
        return typed

    def expr(self, expr: ast.Expr) -> Typed:
        if self.replaced:
            key = replacement_key(expr)
            if key in self.replaced:
                return self.replaced[key]
        method = getattr(self, "_" + type(expr).__name__.lower(), None)
        if method is None:
            raise query_error(f"{type(expr).__name__} expressions are not supported here", expr)
        return method(expr)

    def _literal(self, expr: ast.Literal) -> Typed:
        if expr.kind == "null":
            return Typed("NULL", "null")
        if expr.kind == "bool":
            return Typed("TRUE" if expr.value else "FALSE", "bool")
        if expr.kind == "string":
            return Typed(quote_string(str(expr.value)), "string")
        if expr.kind == "float":
            return Typed(repr(float(expr.value)), "float")  # type: ignore[arg-type]
        return Typed(f"{int(expr.value)}L" if abs(int(expr.value)) >= 2**31 else str(expr.value), "int")  # type: ignore[call-overload]

    def _durationliteral(self, expr: ast.DurationLiteral) -> Typed:
        return Typed(str(self.duration(expr.duration, expr)), "duration")

    def _column(self, expr: ast.Column) -> Typed:
        name = expr.name.lower()
        # (a stream's output keeps `_wstart` as a column name: outside a window it is that column)
        if name in WINDOW_PSEUDO and (self.scope.window is not None or name not in self.scope.columns):
            if self.scope.window is None:
                raise query_error(f"{expr.name} needs a window clause such as INTERVAL(...)", expr)
            return Typed(self.scope.window_sql[name], "ts" if name != "_wduration" else "int")
        if name in INTERP_PSEUDO and name not in self.scope.columns:
            # (an INTERP stream's output keeps them as column names)
            raise query_error(f"{expr.name} is a pseudo-column of INTERP(…) … RANGE(…) EVERY(…) FILL(…)", expr)
        if name in ("_c0", "_rowts") and self.scope.pk is not None:
            return Typed(self.scope.pk, "ts")
        if name in ("_qstart", "_qend", "_qduration"):
            return self._query_range(name)
        if name in TRIGGER_NAMES and (self.ctx.stream is not None or name not in self.scope.columns):
            # a stream's output keeps unaliased placeholders as column names (``_twstart``):
            # outside a stream's query such a name is that column
            if self.ctx.stream is None:
                raise query_error(f"placeholder {expr.name} can only be used inside a stream's query", expr)
            column, kind = TRIGGER_NAMES[name]
            return Typed(f"__trig.{column}", kind)
        if expr.table is not None and f"{expr.table.lower()}.{name}" in self.scope.columns:
            found: tuple[str, str] | None = self.scope.columns[f"{expr.table.lower()}.{name}"]
        elif name in self.scope.ambiguous:
            raise query_error(
                f"column {expr.name} is in more than one joined table: name its table (t.{expr.name})", expr
            )
        else:
            found = self.scope.columns.get(name)
        if found is None:
            known = ", ".join(sorted(self.scope.columns)) or "none"
            raise query_error(f"unknown column {expr.name} (columns: {known})", expr)
        return Typed(found[0], found[1])

    def _star(self, expr: ast.Star) -> Typed:
        raise query_error("* is only allowed as a select item or in count(*)", expr)

    def _placeholder(self, expr: ast.Placeholder) -> Typed:
        stream = self.ctx.stream
        if stream is None:
            raise query_error(f"%%{expr.name} can only be used inside a stream's query", expr)
        if expr.name == "tbname":
            return Typed("__trig.__tbname", "string")
        if expr.name.isdigit() and int(expr.name) <= len(stream.group_columns):
            return Typed(f"__trig.__g{expr.name}", "other")
        return Typed("NULL", "null")  # TDengine reads a %%n beyond the group columns as NULL

    def _unary(self, expr: ast.Unary) -> Typed:
        inner = self.expr(expr.operand)
        if expr.op == "NOT":
            return Typed(f"(NOT {inner.sql})", "bool", inner.aggregate)
        return Typed(f"({expr.op}{inner.sql})", inner.kind, inner.aggregate)

    def _binary(self, expr: ast.Binary) -> Typed:
        calendar = next(
            (
                side
                for side in (expr.right, expr.left)
                if isinstance(side, ast.DurationLiteral) and side.duration.is_calendar
            ),
            None,
        )
        if calendar is not None and expr.op in ("+", "-") and not (expr.op == "-" and calendar is expr.left):
            # ts ± 1n / 1y: a calendar step on the session time zone's calendar
            other = self.expr(expr.left if calendar is expr.right else expr.right)
            if other.kind != "ts":
                raise query_error(f"a calendar duration ({calendar.duration}) is added to a timestamp", expr)
            months = calendar.duration.months * (-1 if expr.op == "-" else 1)  # type: ignore[union-attr]
            return Typed(self.calendar.shift_months(other.sql, months), "ts", other.aggregate)
        left, right = self.expr(expr.left), self.expr(expr.right)
        agg = left.aggregate or right.aggregate
        op = expr.op
        if op in ("=", "<>", "<", "<=", ">", ">="):
            if left.kind == "ts":
                right = self.as_ts(expr.right, right)
            if right.kind == "ts":
                left = self.as_ts(expr.left, left)
            return Typed(f"({left.sql} {op} {right.sql})", "bool", agg)
        if op in ("AND", "OR"):
            return Typed(f"({left.sql} {op} {right.sql})", "bool", agg)
        if op == "LIKE":
            return Typed(f"({left.sql} LIKE {right.sql})", "bool", agg)
        if op == "MATCH":
            return Typed(f"({left.sql} RLIKE {right.sql})", "bool", agg)
        if op == "NMATCH":
            return Typed(f"(NOT ({left.sql} RLIKE {right.sql}))", "bool", agg)
        if op in ("+", "-"):
            kind = "ts" if "ts" in (left.kind, right.kind) and not (left.kind == right.kind == "ts") else None
            if kind is None:
                kind = "float" if "float" in (left.kind, right.kind) else "int"
            return Typed(f"({left.sql} {op} {right.sql})", kind, agg)
        if op in ("*", "%"):
            kind = "float" if "float" in (left.kind, right.kind) else "int"
            return Typed(f"({left.sql} {op} {right.sql})", kind, agg)
        if op == "/":
            if left.kind == right.kind == "int":
                # a DOUBLE holds integers exactly only up to 2**53: dividing a nanosecond epoch
                # (_tlocaltime / 1000000) as doubles lands a hair below the integer, and a
                # cast to TIMESTAMP a millisecond early; the quotient's integer part is exact
                whole = f"CAST(({left.sql} DIV {right.sql}) AS DOUBLE)"
                return Typed(f"({whole} + CAST(({left.sql} % {right.sql}) AS DOUBLE) / {right.sql})", "float", agg)
            return Typed(f"(CAST({left.sql} AS DOUBLE) / {right.sql})", "float", agg)
        if op in ("&", "|"):
            return Typed(f"(CAST({left.sql} AS BIGINT) {op} CAST({right.sql} AS BIGINT))", "int", agg)
        raise query_error(f"operator {op} is not supported", expr)

    def _isnull(self, expr: ast.IsNull) -> Typed:
        inner = self.expr(expr.operand)
        return Typed(f"({inner.sql} IS {'NOT ' if expr.negated else ''}NULL)", "bool", inner.aggregate)

    def _between(self, expr: ast.Between) -> Typed:
        operand = self.expr(expr.operand)
        low, high = self.expr(expr.low), self.expr(expr.high)
        if operand.kind == "ts":
            low, high = self.as_ts(expr.low, low), self.as_ts(expr.high, high)
        neg = "NOT " if expr.negated else ""
        return Typed(f"({operand.sql} {neg}BETWEEN {low.sql} AND {high.sql})", "bool", operand.aggregate)

    def _inlist(self, expr: ast.InList) -> Typed:
        operand = self.expr(expr.operand)
        items = []
        for item in expr.items:
            typed = self.expr(item)
            items.append(self.as_ts(item, typed).sql if operand.kind == "ts" else typed.sql)
        neg = "NOT " if expr.negated else ""
        return Typed(f"({operand.sql} {neg}IN ({', '.join(items)}))", "bool", operand.aggregate)

    def _case(self, expr: ast.Case) -> Typed:
        parts = ["CASE"]
        agg = False
        if expr.operand is not None:
            operand = self.expr(expr.operand)
            parts.append(operand.sql)
            agg |= operand.aggregate
        kind = "other"
        for cond, value in expr.whens:
            c, v = self.expr(cond), self.expr(value)
            agg |= c.aggregate or v.aggregate
            kind = v.kind
            parts += ["WHEN", c.sql, "THEN", v.sql]
        if expr.default is not None:
            d = self.expr(expr.default)
            parts += ["ELSE", d.sql]
        parts.append("END")
        return Typed("(" + " ".join(parts) + ")", kind, agg)

    def _cast(self, expr: ast.Cast) -> Typed:
        target = expr.type.name
        if target == "TIMESTAMP":
            if isinstance(expr.operand, ast.Literal) and expr.operand.kind == "string":
                return Typed(self.timestamp_literal(expr.operand), "ts")
            inner = self.expr(expr.operand)
            return Typed(f"CAST({inner.sql} AS BIGINT)", "ts", inner.aggregate)
        inner = self.expr(expr.operand)
        spark = _SPARK_CAST.get(target)
        if spark is None:
            raise query_error(f"CAST to {expr.type} is not supported", expr)
        if expr.type.name == "DECIMAL":
            spark = f"DECIMAL({expr.type.length or 10},{expr.type.scale or 0})"
        return Typed(f"CAST({inner.sql} AS {spark})", kind_of(expr.type), inner.aggregate)

    def _func(self, expr: ast.Func) -> Typed:
        name = expr.name
        if name == "now":
            return Typed(f"{self.now}L", "ts")
        if name == "today":
            day = 86400 * 10**9 // PRECISIONS[self.scope.precision]
            local_offset = self._utc_offset(self.now)
            return Typed(f"{(self.now + local_offset) // day * day - local_offset}L", "ts")
        if name in AGGREGATES:
            typed = self._aggregate(expr)
            # what the aggregate is over no rows, where Spark's value over none is not NULL
            self.aggregates[typed.sql] = {"count": "0", "hyperloglog": "0", "irate": "0.0"}.get(name)
            return typed
        if name in TIME_FUNCTIONS:
            return self._time_function(expr)
        if name == "interp":  # translated by the INTERP stage
            raise query_error("INTERP(…) needs RANGE(start, end) EVERY(interval) FILL(mode)", expr)
        if name in SERIES_FUNCTIONS:  # translated by the series stage when it is a whole select item
            raise query_error(f"{name}() must be a select item of its own, not part of an expression", expr)
        if name in SCALARS:
            return self._scalar(expr, SCALARS[name])
        function = self.ctx.functions(name) if self.ctx.functions is not None else None
        if function is not None:
            return self._user_function(expr, function)
        raise query_error(f"function {name}() is not supported yet; supported: {', '.join(SUPPORTED_FUNCTIONS)}", expr)

    def _user_function(self, expr: ast.Func, function: UserFunctionRef) -> Typed:
        """A call of a CREATE FUNCTION: a Python UDF runs in Spark (``compute/udf.py``); an
        aggregate one gets its group's rows in time order, as TDengine's scan hands them over."""
        if function.language != "Python":
            raise query_error(
                f"{expr.name}() is a C UDF: its library is built for TDengine's udfd, which does not run here;"
                " write it in Python (LANGUAGE 'Python') to call it",
                expr,
            )
        if not expr.args or any(isinstance(a, ast.Star) for a in expr.args):
            raise query_error(f"{expr.name}() takes columns or expressions as arguments", expr)
        args = [self.expr(a) for a in expr.args]
        kinds = [a.kind if a.kind in ("int", "float", "string", "bool", "ts") else "other" for a in args]
        if not function.aggregate:
            call = f"{function.bind(kinds)}({', '.join(a.sql for a in args)})"
            return Typed(call, function.kind, any(a.aggregate for a in args))
        if any(a.aggregate for a in args):
            raise query_error(f"{expr.name}() is an aggregate UDF: its arguments cannot be aggregates", expr)
        self.saw_aggregate = True
        order = f"CAST({self.scope.pk} AS BIGINT)" if self.scope.pk is not None else "0L"
        row = f"struct({order} AS t, {', '.join(f'{a.sql} AS c{i}' for i, a in enumerate(args))})"
        if self.scope.base is not None:  # an unmatched trigger's empty window has no rows
            row = f"CASE WHEN d.__m IS NOT NULL THEN {row} END"
        typed = Typed(f"{function.bind(kinds)}(sort_array(collect_list({row})))", function.kind, True)
        self.aggregates[typed.sql] = None
        return typed

    def _scalar(self, expr: ast.Func, fn: Scalar) -> Typed:
        if len(expr.args) not in fn.forms:
            counts = fn.arities
            wanted = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
            raise query_error(f"{expr.name}() takes {wanted} argument(s), got {len(expr.args)}", expr)
        args = [self.expr(a) for a in expr.args]
        for arg, node in zip(args, expr.args, strict=True):
            literal_null = isinstance(node, ast.Literal) and node.kind == "null"
            if arg.kind not in fn.args and not literal_null:
                wanted = "a number" if fn.args == NUMERIC else "a string"
                raise query_error(f"{expr.name}() needs {wanted}, got a {arg.kind} value", node)
        kind = args[0].kind if fn.result == "same" else fn.result
        sql = fn.spark([a.sql for a in args])
        if fn.result == "same" and kind == "float":
            sql = f"CAST({sql} AS DOUBLE)"  # Spark's ceil/floor/round/sign of a DOUBLE are not all DOUBLE
        return Typed(sql, kind, any(a.aggregate for a in args))

    def _ts_arg(self, expr: ast.Func, index: int) -> Typed:
        """A timestamp argument: a timestamp value, an integer (an epoch in the precision, as
        TDengine takes it), or a string literal read as a timestamp."""
        node = expr.args[index]
        typed = self.as_ts(node, self.expr(node))
        if typed.kind not in ("ts", "int"):
            raise query_error(f"{expr.name}() needs a timestamp, got a {typed.kind} value", node)
        return typed

    @property
    def calendar(self) -> CalendarSql:
        """Timestamp values on the session time zone's calendar in Spark SQL."""
        return CalendarSql(self.scope.precision, self.ctx.timezone.key)

    def _local(self, ts_sql: str) -> str:
        return self.calendar.local(ts_sql)

    def _from_local(self, local_sql: str) -> str:
        return self.calendar.from_local(local_sql)

    def _time_function(self, expr: ast.Func) -> Typed:
        name, args = expr.name, expr.args
        arities = {"timediff": (2, 3), "timetruncate": (2, 3), "to_iso8601": (1, 1), "to_unixtimestamp": (1, 1),
                   "timezone": (0, 0), "weekday": (1, 1), "dayofweek": (1, 1), "weekofyear": (1, 1),
                   "to_char": (2, 2), "to_timestamp": (2, 2)}  # fmt: skip
        low, high = arities[name]
        if not low <= len(args) <= high:
            wanted = str(low) if low == high else f"{low} to {high}"
            raise query_error(f"{name}() takes {wanted} argument(s), got {len(args)}", expr)
        per_second = 10**9 // PRECISIONS[self.scope.precision]
        if name == "timezone":
            return Typed(f"'{_zone_label(self.ctx.timezone, self.now, per_second)}'", "string")
        if name == "to_unixtimestamp":
            node = args[0]
            if isinstance(node, ast.Literal) and node.kind == "string":
                return Typed(self.timestamp_literal(node), "int")
            text = self.expr(node)
            if text.kind != "string":
                raise query_error(f"to_unixtimestamp() needs a timestamp string, got a {text.kind} value", node)
            return Typed(self._from_local(f"to_timestamp({text.sql})"), "int", text.aggregate)
        if name == "to_timestamp":
            text = self.expr(args[0])
            if text.kind != "string":
                raise query_error(f"to_timestamp() needs a string, got a {text.kind} value", args[0])
            pattern = "".join(piece if literal else spark for piece, spark, literal, _ in self._format(expr, 1))
            return Typed(self._from_local(f"to_timestamp({text.sql}, '{pattern}')"), "ts", text.aggregate)
        ts = self._ts_arg(expr, 0)
        if name == "to_char":
            local = self._local(ts.sql)
            pieces = []
            for piece, spark, literal, case in self._format(expr, 1):
                if literal:
                    pieces.append(quote_string(piece))
                    continue
                formatted = f"date_format({local}, '{spark}')"
                pieces.append(f"{case}({formatted})" if case else formatted)  # case: upper | lower
            return Typed(f"concat({', '.join(pieces)})", "string", ts.aggregate)
        if name == "timediff":
            other = self._ts_arg(expr, 1)
            unit = self.time_unit(expr, 2) if len(args) == 3 else 1
            # TDengine truncates toward zero, in the unit asked for (default: the precision)
            return Typed(f"CAST(({ts.sql} - {other.sql}) DIV {unit} AS BIGINT)", "int", ts.aggregate or other.aggregate)
        if name == "timetruncate":
            return self._timetruncate(expr, ts)
        local = self._local(ts.sql)
        if name == "weekday":  # 0 = Monday … 6 = Sunday
            return Typed(f"weekday({local})", "int", ts.aggregate)
        if name == "dayofweek":  # 1 = Sunday … 7 = Saturday
            return Typed(f"dayofweek({local})", "int", ts.aggregate)
        if name == "weekofyear":  # the ISO week
            return Typed(f"weekofyear({local})", "int", ts.aggregate)
        # to_iso8601: local wall-clock time, the precision's fraction, and the offset in force
        fraction = {"ms": ".SSS", "us": ".SSSSSS", "ns": ".SSSSSS"}[self.scope.precision]
        minutes = f"CAST((unix_micros({local}) - {self._micros(ts.sql)}) DIV 60000000 AS INT)"
        sign = f"CASE WHEN {minutes} < 0 THEN '-' ELSE '+' END"
        hours = f"lpad(CAST(abs({minutes}) DIV 60 AS STRING), 2, '0')"
        mins = f"lpad(CAST(abs({minutes}) % 60 AS STRING), 2, '0')"
        text = f"concat(date_format({local}, \"yyyy-MM-dd'T'HH:mm:ss{fraction}\"), {sign}, {hours}, ':', {mins})"
        return Typed(text, "string", ts.aggregate)

    def _format(self, expr: ast.Func, index: int) -> list[tuple[str, str, bool, str]]:
        """A TDengine format string (``yyyy-mm-dd hh24:mi:ss.ms``) as pieces: (text, Spark
        pattern, is literal text, case of month/day names: upper, lower or as Spark writes
        them). Quoted text ("…") and characters that are no token stay literal."""
        node = expr.args[index]
        if not (isinstance(node, ast.Literal) and node.kind == "string"):
            raise query_error(f"{expr.name}() takes a constant format string such as 'yyyy-mm-dd hh24:mi:ss'", node)
        text, pieces, i = str(node.value), [], 0
        while i < len(text):
            if text[i] == '"':
                end = text.find('"', i + 1)
                end = len(text) if end < 0 else end
                pieces.append((text[i + 1 : end], "", True, ""))
                i = end + 1
                continue
            for token, spark in _FORMAT_TOKENS:
                written = text[i : i + len(token)]
                if written.upper() == token:
                    case = "upper" if written.isupper() else "lower" if written.islower() else ""
                    pieces.append((written, spark, False, case if token in _NAMED_TOKENS else ""))
                    i += len(token)
                    break
            else:
                pieces.append((text[i], "", True, ""))
                i += 1
        return pieces

    def _micros(self, ts_sql: str) -> str:
        return self.calendar.micros(ts_sql)

    def time_unit(self, expr: ast.Func, index: int) -> int:
        """A function's time-unit argument (``1s``, ``5m``) in the precision: fixed length, not
        finer than the precision, errors at the argument."""
        node = expr.args[index]
        if not isinstance(node, ast.DurationLiteral) or node.duration.is_calendar:
            raise query_error(f"{expr.name}() takes a time unit such as 1s, 1m, 1h or 1d", node)
        unit = self.duration(node.duration, node)
        if unit <= 0:
            raise query_error(f"{expr.name}() time unit {node.duration} is finer than the database precision", node)
        return unit

    def _timetruncate(self, expr: ast.Func, ts: Typed) -> Typed:
        """Down to a multiple of the unit; whole days (and longer) at midnight of the session
        time zone unless the third argument is 0 (then UTC midnight), as TDengine does."""
        unit = self.time_unit(expr, 1)
        local_zone = True
        if len(expr.args) == 3:
            flag = expr.args[2]
            if not (isinstance(flag, ast.Literal) and flag.value in (0, 1)):
                raise query_error("timetruncate()'s third argument is 0 (UTC) or 1 (the session time zone)", flag)
            local_zone = flag.value == 1
        per_day = 86400 * 10**9 // PRECISIONS[self.scope.precision]  # PRECISIONS: ns per unit
        if unit % per_day or not local_zone:
            return Typed(f"({ts.sql} - pmod({ts.sql}, {unit}))", "ts", ts.aggregate)
        if unit // per_day != 1:
            raise query_error("timetruncate() to several days is not supported yet; use 1d", expr.args[1])
        return Typed(self._from_local(f"date_trunc('DAY', {self._local(ts.sql)})"), "ts", ts.aggregate)

    def _utc_offset(self, value: int) -> int:
        from datetime import datetime

        seconds = value * PRECISIONS[self.scope.precision] // 10**9
        offset = datetime.fromtimestamp(seconds, self.ctx.timezone).utcoffset()
        return int(offset.total_seconds()) * 10**9 // PRECISIONS[self.scope.precision] if offset else 0

    def _aggregate(self, expr: ast.Func) -> Typed:
        name = expr.name
        self.saw_aggregate = True
        if self.scope.states:
            return self._merged(expr)
        if name == "count":
            if len(expr.args) != 1:
                raise query_error("count() takes one argument: count(*) or count(column)", expr)
            if isinstance(expr.args[0], ast.Star):
                # count the rows of the data side: an unmatched trigger (empty window) counts 0
                return Typed("count(d.__m)" if self.scope.base is not None else "count(1)", "int", True)
            arg = self._plain_arg(expr)
            return Typed(f"count({'DISTINCT ' if expr.distinct else ''}{arg.sql})", "int", True)
        if name in ("percentile", "apercentile"):
            return self._percentile(expr)
        if name == "leastsquares":
            return self._leastsquares(expr)
        if name == "elapsed":
            return self._elapsed(expr)
        if name == "histogram":
            return self._histogram(expr)
        if len(expr.args) != 1 or isinstance(expr.args[0], ast.Star):
            raise query_error(f"{name}() takes one column argument", expr)
        arg = self._plain_arg(expr)
        if name == "irate":
            # the rate per second between the last two rows (a counter reset counts from zero)
            if self.scope.pk is None or arg.kind not in NUMERIC:
                raise query_error("irate() needs a numeric column of a table with a timestamp primary key", expr)
            ranked = f"slice({self._points(arg.sql, newest_first=True)}, 1, 2)"  # the last two
            per_second = 10**9 // PRECISIONS[self.scope.precision]
            last, before = f"element_at({ranked}, 1)", f"element_at({ranked}, 2)"
            delta = f"CASE WHEN {last}.v < {before}.v THEN {last}.v ELSE {last}.v - {before}.v END"
            return Typed(
                f"CASE WHEN size({ranked}) < 2 THEN 0.0 ELSE {delta} * {per_second} / ({last}.t - {before}.t) END",
                "float",
                True,
            )
        if name == "twa":
            return self._twa(expr, arg)
        if name == "hyperloglog":
            return Typed(f"approx_count_distinct({arg.sql})", "int", True)
        if name == "mode":
            # the most frequent non-NULL value; among equally frequent ones the smallest, so the
            # answer does not depend on how Spark split the rows
            return Typed(f"mode({arg.sql}, true)", arg.kind, True)
        if name in ("stddev_pop", "var_pop") and arg.kind not in NUMERIC:
            raise query_error(f"{name}() needs a numeric argument, got a {arg.kind} column", expr)
        if name in ("stddev_pop", "var_pop"):
            return Typed(f"{name}({arg.sql})", "float", True)
        spread_of_time = name == "spread" and arg.kind == "ts"
        if name in ("sum", "avg", "spread", "stddev") and arg.kind in ("string", "ts", "bool") and not spread_of_time:
            raise query_error(f"{name}() needs a numeric argument, got a {arg.kind} column", expr)
        if name == "sum":
            return Typed(f"sum({arg.sql})", "float" if arg.kind == "float" else "int", True)
        if name == "avg":
            return Typed(f"avg({arg.sql})", "float", True)
        if name in ("min", "max"):
            return Typed(f"{name}({arg.sql})", arg.kind, True)
        if name == "spread":
            return Typed(f"CAST(max({arg.sql}) - min({arg.sql}) AS DOUBLE)", "float", True)
        if name == "stddev":
            return Typed(f"stddev_pop({arg.sql})", "float", True)
        pk = self.scope.pk
        if pk is None:
            raise query_error(f"{name}() needs a table with a timestamp primary key", expr)
        if name == "first":
            if arg.sql == pk:
                return Typed(f"min({pk})", "ts", True)
            return Typed(f"min_by({arg.sql}, CASE WHEN {arg.sql} IS NOT NULL THEN {pk} END)", arg.kind, True)
        if name == "last":
            if arg.sql == pk:
                return Typed(f"max({pk})", "ts", True)
            return Typed(f"max_by({arg.sql}, CASE WHEN {arg.sql} IS NOT NULL THEN {pk} END)", arg.kind, True)
        # last_row: the newest row's value, NULL included
        return Typed(f"max_by({arg.sql}, {pk})", arg.kind, True)

    def _merged(self, expr: ast.Func) -> Typed:
        """An aggregate over a TSMA's view: the merge of the intermediate states the TSMA keeps
        for it (``sql/tsma.py FUNCTION_STATES``) — avg as sum over count, stddev from count,
        sum and sum of squares as TDengine computes it, first/last by the times they were kept
        with."""
        name, args = expr.name, expr.args
        star = name == "count" and len(args) == 1 and isinstance(args[0], ast.Star)
        if (not star and not (len(args) == 1 and isinstance(args[0], ast.Column))) or expr.distinct:
            raise query_error(f"{name}() over a TSMA takes one column", expr)
        kind = "int" if star else self._plain_arg(expr).kind
        column = self.scope.tables[0].columns[0].name if star else args[0].name  # type: ignore[union-attr]
        kept = {k: f"{k}_{column}".lower() for k in FUNCTION_STATES.get(name, ())}
        if not kept or not set(kept.values()) <= self.scope.states:
            raise query_error(f"{name}({column}) is not kept by TSMA {self.scope.tables[0].tsma}", expr)
        state = {k: f"d.`{c}`" for k, c in kept.items()}
        if name == "count":
            return Typed(f"coalesce(sum({state['count']}), 0)", "int", True)
        if name == "sum":
            dtype = next((c.type for c in self.scope.tables[0].columns if c.name.lower() == column.lower()), None)
            if dtype is not None and dtype.name == "DECIMAL":  # the type Spark gives the raw rows' sum
                digits = min(38, (dtype.length or 10) + 10)
                return Typed(f"CAST(sum({state['sum']}) AS DECIMAL({digits},{dtype.scale or 0}))", "float", True)
            return Typed(f"sum({state['sum']})", "float" if kind == "float" else "int", True)
        if name in ("min", "max"):
            return Typed(f"{name}({state[name]})", kind, True)
        if name in ("first", "last"):  # the value of the earliest (latest) time, over all tables
            by = "min_by" if name == "first" else "max_by"
            return Typed(f"{by}({state[name]}, {state[name + 'ts']})", kind, True)
        if name == "spread":
            return Typed(f"CAST(max({state['max']}) - min({state['min']}) AS DOUBLE)", "float", True)
        count = f"nullif(sum({state['count']}), 0)"
        mean = f"(CAST(sum({state['sum']}) AS DOUBLE) / {count})"
        if name == "avg":
            return Typed(mean, "float", True)
        # stddev: TDengine's own formula over the states, never the root of a rounding below 0,
        # and NULL without values as over the raw rows (greatest() would skip the NULL)
        variance = f"(sum({state['sumsq']}) / {count} - {mean} * {mean})"
        return Typed(f"sqrt(CASE WHEN {variance} < 0 THEN 0.0 ELSE {variance} END)", "float", True)

    def _percentile(self, expr: ast.Func) -> Typed:
        """percentile(col, p): the exact p-th percentile, interpolated; apercentile(col, p[,
        algorithm]): TDengine's approximation (a Python UDF over the values in time order,
        ``compute/apercentile.py``). p is a constant in [0, 100]."""
        name = expr.name
        most = 3 if name == "apercentile" else 2
        if not 2 <= len(expr.args) <= most:
            raise query_error(f"{name}() takes a column and a percentile (0 to 100)", expr)
        if name == "percentile" and any(t.kind == "super" for t in self.scope.tables):
            # TDengine scans a table twice for the exact percentile (a repeat-scan function),
            # which it does for one child or normal table only
            raise query_error(
                "percentile is only supported in single table query (use apercentile() over a super table)", expr
            )
        arg = self._plain_arg(expr)
        if arg.kind not in NUMERIC:
            raise query_error(f"{name}() needs a numeric argument, got a {arg.kind} column", expr.args[0])
        p = expr.args[1]
        if not (isinstance(p, ast.Literal) and p.kind in ("int", "float") and 0 <= float(p.value) <= 100):  # type: ignore[arg-type]
            raise query_error(f"{name}() takes a constant percentile from 0 to 100", p)
        algorithm = "default"
        if len(expr.args) == 3:
            given = expr.args[2]
            if not (isinstance(given, ast.Literal) and str(given.value).lower() in ("default", "t-digest")):
                raise query_error("apercentile() algorithm is 'default' or 't-digest'", given)
            algorithm = str(given.value).lower()
        if name == "percentile":
            return Typed(f"percentile({arg.sql}, {float(p.value) / 100})", "float", True)  # type: ignore[arg-type]
        if self.scope.pk is not None:
            values = f"transform({self._points(arg.sql, newest_first=False)}, p -> p.v)"
        else:  # no time to order by: the values as Spark collects them
            values = f"collect_list(CAST({arg.sql} AS DOUBLE))"
        return Typed(f"{APERCENTILE_UDF}({values}, {float(p.value)}D, '{algorithm}')", "float", True)  # type: ignore[arg-type]

    def _points(self, value_sql: str, *, newest_first: bool) -> str:
        """The group's non-NULL values as (t, v) structs sorted by time: an aggregate over
        the whole group, for functions that need the values in order (irate, leastsquares)."""
        pair = f"struct(CAST({self.scope.pk} AS BIGINT) AS t, CAST({value_sql} AS DOUBLE) AS v)"
        collected = f"collect_list(CASE WHEN {value_sql} IS NOT NULL THEN {pair} END)"
        return f"sort_array({collected}, {'false' if newest_first else 'true'})"

    def _leastsquares(self, expr: ast.Func) -> Typed:
        """leastsquares(expr, start, step): the line fitting the non-NULL values in time order
        against x = start, start + step, …, as TDengine prints it: ``{slop:a, intercept:b}``."""
        if len(expr.args) != 3:
            raise query_error("leastsquares() takes a column, a start value and a step", expr)
        arg = self._plain_arg(expr)
        if arg.kind not in NUMERIC or self.scope.pk is None:
            raise query_error("leastsquares() needs a numeric column of a table with a timestamp primary key", expr)
        start, step = (self.expr(a) for a in expr.args[1:])
        if not (start.kind in NUMERIC and step.kind in NUMERIC) or start.aggregate or step.aggregate:
            raise query_error("leastsquares()'s start and step are numbers", expr.args[1])
        points = self._points(arg.sql, newest_first=False)
        xs = f"transform({points}, (p, i) -> CAST({start.sql} AS DOUBLE) + CAST({step.sql} AS DOUBLE) * i)"
        n = f"size({points})"
        sx = f"aggregate({xs}, 0D, (a, x) -> a + x)"
        sy = f"aggregate({points}, 0D, (a, p) -> a + p.v)"
        sxy = f"aggregate(zip_with({points}, {xs}, (p, x) -> p.v * x), 0D, (a, z) -> a + z)"
        sxx = f"aggregate({xs}, 0D, (a, x) -> a + x * x)"
        slope = f"(({n} * {sxy} - {sx} * {sy}) / ({n} * {sxx} - {sx} * {sx}))"
        intercept = f"(({sy} - {slope} * {sx}) / {n})"
        text = f"format_string('{{slop:%f, intercept:%f}}', {slope}, {intercept})"
        self.saw_aggregate = True
        return Typed(f"CASE WHEN {n} < 2 THEN NULL ELSE {text} END", "string", True)

    def _twa(self, expr: ast.Func, arg: Typed) -> Typed:
        """The time-weighted average of the non-NULL values: the trapezoids between consecutive
        values summed, over the time from the first to the last (one value: that value). In an
        INTERVAL window TDengine first interpolates the line to the window's bounds: to its
        start from the row before the window, to its last instant (end - 1) from the row after,
        where the window's own first/last row is not there already and both rows of the pair
        have a value (``_window_bounds``)."""
        if self.scope.pk is None or arg.kind not in NUMERIC:
            raise query_error("twa() needs a numeric column of a table with a timestamp primary key", expr)
        points = self._points(arg.sql, newest_first=False)
        if self._interpolates():
            points = self._window_bounds(arg.sql, points)
        # one lambda binds the points once (Spark SQL has no LET): p is the sorted (t, v) list
        area = "aggregate(zip_with(slice(p, 1, greatest(size(p) - 1, 0)), slice(p, 2, greatest(size(p) - 1, 0)), "
        area += "(a, b) -> (a.v + b.v) / 2 * (b.t - a.t)), 0D, (s, x) -> s + x)"
        first, last = "element_at(p, 1)", "element_at(p, -1)"
        formula = (
            f"CASE WHEN size(p) = 0 THEN NULL WHEN {last}.t = {first}.t THEN {first}.v "
            f"ELSE {area} / ({last}.t - {first}.t) END"
        )
        return Typed(f"element_at(transform(array({points}), p -> {formula}), 1)", "float", True)

    def _interpolates(self) -> bool:
        """Whether twa() interpolates to window bounds: in a query's own INTERVAL windows. A
        stream's query reads each trigger's rows joined to it, which have no neighbours to
        interpolate from (TDengine's stream query reads the window's range too)."""
        return (
            isinstance(self.scope.window, ast.IntervalWindow)
            and "_wend" in self.scope.window_sql
            and self.ctx.stream is None
            and not self.scope.labelled
        )

    def _window_bounds(self, value_sql: str, points: str) -> str:
        """``points`` with the value interpolated at the window's start and last instant in
        front and behind where TDengine adds them: the row before (after) the window is each
        row's neighbour in its timeline among the rows the WHERE keeps (``Scope.neighbours``),
        read at the window's first (last) row."""
        pk = self.scope.pk
        assert pk is not None
        point = f"struct(CAST({pk} AS BIGINT) AS t, CAST({value_sql} AS DOUBLE) AS v)"
        keys = ", ".join(self.scope.timeline)
        over = f"OVER ({f'PARTITION BY {keys} ' if keys else ''}ORDER BY {pk})"
        if value_sql not in self.neighbours:  # a twa() rendered again (HAVING, ORDER BY) reads them again
            before, after = self.ctx.fresh("twa_before"), self.ctx.fresh("twa_after")
            self.scope.neighbours += [f"lag({point}) {over} AS {before}", f"lead({point}) {over} AS {after}"]
            self.neighbours[value_sql] = (before, after)
        before, after = self.neighbours[value_sql]
        edge = "struct(CAST({pk} AS BIGINT) AS t, CAST({v} AS DOUBLE) AS v, d.{n} AS n)"
        first = f"min_by({edge.format(pk=pk, v=value_sql, n=before)}, {pk})"
        last = f"max_by({edge.format(pk=pk, v=value_sql, n=after)}, {pk})"
        start, end = self.scope.window_sql["_wstart"], f"({self.scope.window_sql['_wend']} - 1)"

        def at(when: str, a: str, b: str) -> str:  # the line through a and b, at ``when``
            return f"{a}.v + ({b}.v - {a}.v) * CAST({when} - {a}.t AS DOUBLE) / CAST({b}.t - {a}.t AS DOUBLE)"

        head = (
            f"CASE WHEN e.f.t <> {start} AND e.f.v IS NOT NULL AND e.f.n.v IS NOT NULL "
            f"THEN struct(CAST({start} AS BIGINT) AS t, {at(start, 'e.f.n', 'e.f')} AS v) END"
        )
        tail = (
            f"CASE WHEN e.l.t <> {end} AND e.l.v IS NOT NULL AND e.l.n.v IS NOT NULL "
            f"THEN struct(CAST({end} AS BIGINT) AS t, {at(end, 'e.l', 'e.l.n')} AS v) END"
        )
        edges = f"struct({first} AS f, {last} AS l, {points} AS p)"
        with_bounds = f"filter(concat(array({head}), e.p, array({tail})), q -> q IS NOT NULL)"
        return f"element_at(transform(array({edges}), e -> {with_bounds}), 1)"

    def _histogram(self, expr: ast.Func) -> Typed:
        """histogram(expr, bin_type, bins, normalized): one output row per bin (lower, upper],
        as TDengine prints it; the bins from a JSON list ('user_input') or a JSON object
        ('linear_bin': start, width, count, infinity; 'log_bin': start, factor, count,
        infinity). A select item of its own: it turns a group into several rows."""
        if len(expr.args) != 4:
            raise query_error(
                "histogram() takes a column, 'user_input', 'linear_bin' or 'log_bin', the bins and 0 or 1", expr
            )
        arg = self._plain_arg(expr)
        if arg.kind not in NUMERIC:
            raise query_error(f"histogram() needs a numeric column, got a {arg.kind} value", expr.args[0])
        kind_node, bins_node, normalized = expr.args[1:]
        for node in (kind_node, bins_node):
            if not (isinstance(node, ast.Literal) and node.kind == "string"):
                raise query_error("histogram()'s bin type and bins are string constants", node)
        if not (isinstance(normalized, ast.Literal) and normalized.value in (0, 1)):
            raise query_error("histogram()'s last argument is 0 (counts) or 1 (fractions)", normalized)
        edges = histogram_edges(str(kind_node.value).lower(), str(bins_node.value), bins_node)  # type: ignore[union-attr]
        texts = []
        for low, high in itertools.pairwise(edges):
            inside = " AND ".join(
                [*([f"{arg.sql} > {low!r}"] if low != -math.inf else []),
                 *([f"{arg.sql} <= {high!r}"] if high != math.inf else [])]
            ) or "TRUE"  # fmt: skip
            count = f"count(CASE WHEN {arg.sql} IS NOT NULL AND {inside} THEN 1 END)"
            template = '{"lower_bin":%g, "upper_bin":%g, "count":' % (low, high)  # noqa: UP031 (C's %g)
            if normalized.value == 1:
                share = f"coalesce(CAST({count} AS DOUBLE) / nullif(count({arg.sql}), 0), 0D)"
                texts.append(f"format_string({quote_string(template + '%f}')}, {share})")
            else:
                texts.append(f"format_string({quote_string(template + '%d}')}, {count})")
        return Typed(f"explode(array({', '.join(texts)}))", "string", True)

    def _elapsed(self, expr: ast.Func) -> Typed:
        """elapsed(ts[, unit]): the time between the first and the last row, in ``unit``
        (default: the database precision), as DOUBLE."""
        if not 1 <= len(expr.args) <= 2:
            raise query_error("elapsed() takes the timestamp column and an optional time unit", expr)
        arg = self._plain_arg(expr)
        if arg.kind != "ts":
            raise query_error(f"elapsed() needs the timestamp column, got a {arg.kind} value", expr.args[0])
        unit = self.time_unit(expr, 1) if len(expr.args) == 2 else 1
        return Typed(f"CAST(max({arg.sql}) - min({arg.sql}) AS DOUBLE) / {unit}", "float", True)

    def _plain_arg(self, expr: ast.Func) -> Typed:
        arg = self.expr(expr.args[0])
        if arg.aggregate:
            raise query_error(f"{expr.name}() cannot contain another aggregate", expr)
        return arg


def histogram_edges(kind: str, text: str, node: ast.Expr) -> list[float]:
    """The bin edges of TDengine's HISTOGRAM: at most 1000 bins, edges strictly increasing."""
    import json

    try:
        spec = json.loads(text)
    except ValueError:
        raise query_error(f"histogram() bins {text!r} are not JSON", node) from None
    if kind == "user_input":
        if not (isinstance(spec, list) and len(spec) >= 2 and all(isinstance(v, int | float) for v in spec)):
            raise query_error(
                "histogram() 'user_input' bins are a JSON list of two or more numbers, e.g. '[1, 3, 5]'", node
            )
        edges = [float(v) for v in spec]
    elif kind in ("linear_bin", "log_bin"):
        step = "width" if kind == "linear_bin" else "factor"
        if not (isinstance(spec, dict) and all(isinstance(spec.get(k), int | float) for k in ("start", step, "count"))):
            raise query_error(
                f"histogram() '{kind}' bins are a JSON object with start, {step}, count and infinity", node
            )
        count = int(spec["count"])
        if count < 1 or spec[step] == 0 or (kind == "log_bin" and (spec[step] <= 0 or spec[step] == 1)):
            raise query_error(f"histogram() '{kind}' needs count >= 1 and a usable {step}", node)
        if kind == "linear_bin":
            edges = sorted(float(spec["start"] + spec["width"] * i) for i in range(count + 1))
        else:
            edges = sorted(float(spec["start"] * spec["factor"] ** i) for i in range(count + 1))
        if spec.get("infinity"):
            edges = [-math.inf, *edges, math.inf]
    else:
        raise query_error(f"histogram() bin type is 'user_input', 'linear_bin' or 'log_bin', not {kind!r}", node)
    if any(b <= a for a, b in itertools.pairwise(edges)) or len(edges) > 1001:
        raise query_error("histogram() bin edges must increase strictly, at most 1000 bins", node)
    return edges


_SPARK_CAST = {
    "BOOL": "BOOLEAN",
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INT": "INT",
    "INTEGER": "INT",
    "BIGINT": "BIGINT",
    "TINYINT UNSIGNED": "SMALLINT",
    "SMALLINT UNSIGNED": "INT",
    "INT UNSIGNED": "BIGINT",
    "BIGINT UNSIGNED": "BIGINT",
    "FLOAT": "FLOAT",
    "DOUBLE": "DOUBLE",
    "VARCHAR": "STRING",
    "BINARY": "STRING",
    "NCHAR": "STRING",
    "DECIMAL": "DECIMAL",
}


def _zone_label(zone: ZoneInfo, now: int, per_second: int) -> str:
    """TDengine's TIMEZONE(): ``Asia/Shanghai (CST, +0800)``, as in force at ``now``."""
    from datetime import datetime

    moment = datetime.fromtimestamp(now / per_second, zone)
    return f"{zone.key} ({moment.tzname()}, {moment.strftime('%z')})"


# TDengine's TO_CHAR/TO_TIMESTAMP format tokens → Spark datetime patterns, longest first
_FORMAT_TOKENS: tuple[tuple[str, str], ...] = (
    ("MONTH", "MMMM"), ("YYYY", "yyyy"), ("HH24", "HH"), ("HH12", "hh"), ("DAY", "EEEE"), ("MON", "MMM"),
    ("DDD", "DDD"), ("A.M.", "a"), ("P.M.", "a"), ("YY", "yy"), ("MM", "MM"), ("DD", "dd"), ("DY", "EEE"),
    ("HH", "hh"), ("MI", "mm"), ("SS", "ss"), ("MS", "SSS"), ("US", "SSSSSS"), ("AM", "a"), ("PM", "a"),
)  # fmt: skip


# name tokens whose case in the format is the case of the name (MONTH → NOVEMBER, Month → November)
_NAMED_TOKENS = frozenset(["MONTH", "MON", "DAY", "DY", "AM", "PM", "A.M.", "P.M."])
