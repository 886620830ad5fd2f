"""The scalar functions the translator maps to Spark, in one table.

Owns each function's arity, the argument kinds it accepts, its result kind and its Spark
form, with TDengine's NULL rule (a NULL argument gives NULL: Spark's functions behave so) and
type rule (a numeric function on a string or timestamp column is an error at translation,
hence at CREATE STREAM). ``docs/sql-support.md`` is generated from these tables
(``sql_support_markdown``; ``scripts/sql_support.py`` writes it, a test keeps it current).
No SQL parsing, no Spark session.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..intervals import CALENDAR_RULES
from ..limits import LIMITS
from ..tsma import FUNCTION_STATES, TSMA_FUNCTIONS

NUMERIC = ("int", "float")
STRING = ("string",)
ANY = ("int", "float", "string", "bool", "ts", "other")

# the Python UDF every Spark session registers for apercentile (``compute/apercentile.py``)
APERCENTILE_UDF = "tdstream_apercentile"


@dataclass(frozen=True)
class Scalar:
    """``forms`` maps an argument count to a Spark template over the arguments' SQL
    (``{0}``, ``{1}`` …; ``{*}`` joins them all); ``result`` is a kind, or ``same`` for the
    first argument's kind."""

    forms: dict[int, str]
    args: tuple[str, ...]
    result: str
    doc: str

    @property
    def arities(self) -> tuple[int, ...]:
        return tuple(sorted(self.forms))

    def spark(self, args: list[str]) -> str:
        return self.forms[len(args)].replace("{*}", ", ".join(args)).format(*args)


def _variadic(low: int, high: int, template: str) -> dict[int, str]:
    return {n: template for n in range(low, high + 1)}


SCALARS: dict[str, Scalar] = {
    # math: NULL in, NULL out; out-of-domain arguments give NULL (TDengine) — Spark gives NaN
    # for sqrt/log of negatives, which notifications send as null and tables store as NaN
    "abs": Scalar({1: "abs({0})"}, NUMERIC, "same", "absolute value"),
    "acos": Scalar({1: "acos({0})"}, NUMERIC, "float", "arc cosine (radians)"),
    "asin": Scalar({1: "asin({0})"}, NUMERIC, "float", "arc sine (radians)"),
    "atan": Scalar({1: "atan({0})"}, NUMERIC, "float", "arc tangent (radians)"),
    "ceil": Scalar({1: "ceil({0})"}, NUMERIC, "same", "smallest integer not below; keeps the argument's type"),
    "cos": Scalar({1: "cos({0})"}, NUMERIC, "float", "cosine"),
    "degrees": Scalar({1: "degrees({0})"}, NUMERIC, "float", "radians to degrees"),
    "exp": Scalar({1: "exp({0})"}, NUMERIC, "float", "e to the power"),
    "floor": Scalar({1: "floor({0})"}, NUMERIC, "same", "largest integer not above; keeps the argument's type"),
    "ln": Scalar({1: "ln({0})"}, NUMERIC, "float", "natural logarithm"),
    "log": Scalar({1: "ln({0})", 2: "log({1}, {0})"}, NUMERIC, "float", "log(x) natural, log(x, base) to a base"),
    "mod": Scalar({2: "(CAST({0} AS DOUBLE) % {1})"}, NUMERIC, "float", "remainder, with the dividend's sign"),
    "pi": Scalar({0: "pi()"}, NUMERIC, "float", "π"),
    "pow": Scalar({2: "pow({0}, {1})"}, NUMERIC, "float", "x to the power y"),
    "radians": Scalar({1: "radians({0})"}, NUMERIC, "float", "degrees to radians"),
    "round": Scalar(
        {1: "round({0})", 2: "round({0}, {1})"}, NUMERIC, "same", "round half away from zero, to 0 or d decimals"
    ),
    "sign": Scalar({1: "sign({0})"}, NUMERIC, "same", "-1, 0 or 1"),
    "sin": Scalar({1: "sin({0})"}, NUMERIC, "float", "sine"),
    "sqrt": Scalar({1: "sqrt({0})"}, NUMERIC, "float", "square root"),
    "tan": Scalar({1: "tan({0})"}, NUMERIC, "float", "tangent"),
    # strings
    "ascii": Scalar({1: "ascii({0})"}, STRING, "int", "code of the first character"),
    "char_length": Scalar({1: "char_length({0})"}, STRING, "int", "length in characters"),
    "concat": Scalar(_variadic(2, 8, "concat({*})"), ANY, "string", "2 to 8 values joined; NULL if any is NULL"),
    "concat_ws": Scalar(
        _variadic(3, 9, "concat_ws({*})"),
        ANY,
        "string",
        "values joined by a separator (the first); NULL values skipped",
    ),
    "length": Scalar({1: "octet_length({0})"}, STRING, "int", "length in bytes"),
    "lower": Scalar({1: "lower({0})"}, STRING, "string", "lower case"),
    "ltrim": Scalar({1: "ltrim({0})"}, STRING, "string", "leading blanks removed"),
    "repeat": Scalar({2: "repeat({0}, {1})"}, ANY, "string", "the string n times"),
    "replace": Scalar({3: "replace({0}, {1}, {2})"}, STRING, "string", "every occurrence replaced"),
    "rtrim": Scalar({1: "rtrim({0})"}, STRING, "string", "trailing blanks removed"),
    "substr": Scalar(
        {2: "substr({0}, {1})", 3: "substr({0}, {1}, {2})"}, ANY, "string", "substring from a 1-based position"
    ),
    "substring": Scalar({2: "substr({0}, {1})", 3: "substr({0}, {1}, {2})"}, ANY, "string", "the same as substr"),
    "trim": Scalar({1: "trim({0})"}, STRING, "string", "leading and trailing blanks removed"),
    "upper": Scalar({1: "upper({0})"}, STRING, "string", "upper case"),
}

# aggregates and selectors (translated in select.py) with what they compute, for the docs
AGGREGATES: dict[str, str] = {
    "count": "count(*) counts rows; count(col) counts non-NULL values",
    "sum": "sum of non-NULL values (NULL when there are none)",
    "avg": "mean of non-NULL values, as DOUBLE",
    "min": "smallest value",
    "max": "largest value",
    "first": "the value of the oldest row whose value is not NULL",
    "last": "the value of the newest row whose value is not NULL",
    "last_row": "the value of the newest row, NULL included",
    "spread": "max - min, as DOUBLE",
    "stddev": "population standard deviation",
    "stddev_pop": "population standard deviation",
    "var_pop": "population variance",
    "percentile": "percentile(col, p): the exact p-th percentile (0-100), interpolated",
    "apercentile": "apercentile(col, p[, 'default'|'t-digest']): an approximate p-th percentile, by"
    " TDengine's own algorithms: its histogram of at most 500 bins (default) or its t-digest (compression"
    " 300), over the values in time order",
    "hyperloglog": "approximate number of distinct non-NULL values",
    "mode": "the most frequent non-NULL value (the smallest of equally frequent ones)",
    "elapsed": "elapsed(ts[, unit]): time from the first to the last row, in unit (default: the precision)",
    "leastsquares": "leastsquares(expr, start, step): the fitted line over x = start + step·i, as"
    " '{slop:a, intercept:b}'",
    "irate": "the rate per second between the last two non-NULL values (after a decrease: the last value)",
    "twa": "time-weighted average: the area under the line through the non-NULL values in time order"
    " (trapezoids) over the time they span; one row: its value. In a query's INTERVAL windows the line"
    " first reaches the window's start and last instant (end - 1), interpolated from the rows before and"
    " after the window (the WHERE's rows, per timeline) where both have a value, as TDengine does",
    "histogram": "histogram(expr, 'user_input'|'linear_bin'|'log_bin', bins, 0|1): one row per bin"
    ' (lower, upper], as \'{"lower_bin":l, "upper_bin":u, "count":n}\'; 1 normalises the counts',
}
# time functions (translated in select.py: they need the precision and the session time zone)
TIME_FUNCTIONS: dict[str, str] = {
    "timediff": "timediff(t1, t2[, unit]): t1 - t2 in unit (default: the precision), truncated toward zero",
    "timetruncate": "timetruncate(ts, unit[, 0|1]): down to the unit; 1d at midnight of the session time zone (0: UTC)",
    "weekday": "0 = Monday … 6 = Sunday, in the session time zone",
    "dayofweek": "1 = Sunday … 7 = Saturday, in the session time zone",
    "weekofyear": "the ISO week, in the session time zone",
    "timezone": "the session time zone, e.g. Asia/Shanghai (CST, +0800)",
    "to_iso8601": "the timestamp as ISO 8601 text in the session time zone, with its offset",
    "to_unixtimestamp": "a timestamp string (session time zone) as an epoch number in the precision",
    "to_char": "to_char(ts, 'yyyy-mm-dd hh24:mi:ss.ms'): TDengine format tokens (yyyy yy month mon mm dd ddd"
    ' day dy hh24 hh12 hh mi ss ms us am pm; "quoted" text) in the session time zone',
    "to_timestamp": "to_timestamp(text, format): text read with the same tokens, in the session time zone",
}
# time-series functions and multi-row selectors: one output row per input row they keep
# (translated in select.py)
SERIES_FUNCTIONS: dict[str, str] = {
    "diff": "diff(expr[, 0|1|2|3]): the value minus the nearest earlier non-NULL value; 0/1 drop the first"
    " row, 1/3 make negative differences NULL, 2/3 drop rows whose differences are all NULL",
    "csum": "the running sum of the non-NULL values (NULL rows have no output)",
    "derivative": "derivative(expr, interval, 0|1): change per interval against the previous non-NULL value;"
    " 1 drops negative rates; the first row has no output",
    "mavg": "mavg(expr, k): the mean of the last k non-NULL values (the first k-1 have no output)",
    "top": "top(expr, k): the rows of the k largest non-NULL values (ties: the earlier row), in time order",
    "bottom": "bottom(expr, k): the rows of the k smallest non-NULL values, in time order",
    "tail": "tail(expr, k[, offset]): the last k rows after skipping the newest offset",
    "unique": "each value's first row",
    "sample": "sample(expr, k): k rows at random",
    "statecount": "statecount(expr, 'LT'|'GT'|'LE'|'GE'|'NE'|'EQ', value): how many consecutive rows so far meet the"
    " condition, -1 on a row that does not; a NULL row gives NULL and does not break the run",
    "stateduration": "stateduration(expr, oper, value[, unit]): the time since the run of rows meeting the condition"
    " began, in unit (default: the precision); -1 on a row that does not; NULL rows give NULL",
}
OTHER = {
    "cast": "CAST(expr AS type) to the TDengine types (TIMESTAMP from strings in the session time zone)",
    "interp": "INTERP(expr[, ignore_null_values]) … RANGE(start, end) EVERY(d) or RANGE(t), then FILL(NONE (the"
    " default), NULL, VALUE, PREV, NEXT, NEAR or LINEAR): at each point the row there (its NULL too, unless"
    " ignore_null_values is 1), else FILL's value from the neighbouring rows (NEAR: the closer, the earlier on a"
    " tie; PREV, NEXT and LINEAR leave out points without their neighbours); per PARTITION BY group; with"
    " `_irowts`, `_isfilled` and (PREV, NEXT, NEAR) `_irowts_origin`. A legacy stream's `TRIGGER AT_ONCE …"
    " EVERY(d) FILL(…)` writes each point once a row at or after it is written",
    "now": "the statement's time, in the database precision",
    "today": "midnight of the session time zone's current day",
}


# how many TSMAs may exist: families/server_options.py owns the option
TSMA_LIMIT = (
    "At most `maxTsmaNum` TSMAs exist at once. TDengine 3.3.7's taosd defaults it to 10 (range",
    "0–10); the spec's TSMA page gives 3, the value of the release that introduced TSMAs and of",
    "TDengine's TSMA tests, which set it explicitly. Here it is a server option of the warehouse:",
    "`ALTER ALL DNODES 'maxTsmaNum' 'n'` or `ALTER DNODE 1 'maxTsmaNum' 'n'` (the warehouse is one",
    "dnode, id 1) sets it for every session, `SHOW VARIABLES [LIKE 'p']` and `SHOW DNODE 1",
    "VARIABLES` show it.",
)


UDF_RULES = (
    "`CREATE [OR REPLACE] [AGGREGATE] FUNCTION [IF NOT EXISTS] name AS 'path' OUTPUTTYPE type",
    "[BUFSIZE n] [LANGUAGE 'C' | 'Python']`, `DROP FUNCTION [IF EXISTS] name`, `SHOW FUNCTIONS` and",
    "`information_schema.ins_functions`. A Python UDF is TDengine's interface: `process(block)`",
    "(scalar), or `start()`, `reduce(block, buf)` and `finish(buf)` (aggregate, `buf` at most",
    "BUFSIZE bytes), optional `init()` / `destroy()`; `block.shape()` is (rows, columns) and",
    "`block.data(row, col)` a value (None for NULL, strings as bytes, timestamps as integers). It",
    "runs in Spark's Python workers: a scalar one per Arrow batch, an aggregate one over its group's",
    "rows in time order. Its file is read into the catalog at CREATE. A C UDF is recorded (its",
    "library is built for TDengine's udfd, which does not run here) and a call of it is refused.",
    "A built-in function's name cannot be taken; TSMAs keep built-in functions only.",
)


def sql_support_markdown() -> str:
    """``docs/sql-support.md``: what the translator supports, from the tables above."""
    lines = [
        "# SQL support",
        "",
        "Generated from `dagster_tdstream/sql/translate/functions.py` by `scripts/sql_support.py`;",
        "do not edit by hand. A function not listed is rejected — by CREATE STREAM for a stream's",
        "query — with its position and this list.",
        "",
        "## Aggregates and selectors",
        "",
        "| function | computes |",
        "|---|---|",
        *(f"| `{name}` | {doc} |" for name, doc in sorted(AGGREGATES.items())),
        "",
        "## Scalar functions",
        "",
        "NULL in, NULL out. Arguments of the wrong kind are rejected when the query is translated.",
        "",
        "| function | arguments | result | computes |",
        "|---|---|---|---|",
    ]
    for name, fn in sorted(SCALARS.items()):
        counts = fn.arities
        arity = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
        kinds = "any" if fn.args == ANY else " or ".join(fn.args)
        result = "the argument's type" if fn.result == "same" else fn.result
        lines.append(f"| `{name}` | {arity} ({kinds}) | {result} | {fn.doc} |")
    lines += ["", "## Time functions", "", "| function | computes |", "|---|---|"]
    lines += [f"| `{name}` | {doc} |" for name, doc in sorted(TIME_FUNCTIONS.items())]
    lines += ["", "## Time-series functions", "", "In time order per partition; not beside aggregates.", ""]
    lines += ["| function | computes |", "|---|---|"]
    lines += [f"| `{name}` | {doc} |" for name, doc in sorted(SERIES_FUNCTIONS.items())]
    lines += ["", "## Other", "", "| function | computes |", "|---|---|"]
    lines += [f"| `{name}` | {doc} |" for name, doc in sorted(OTHER.items())]
    lines += ["", "## User-defined functions", "", *UDF_RULES]
    lines += [
        "",
        "## TSMA functions",
        "",
        "What `CREATE TSMA … FUNCTION(f(col))` keeps per window (`count(*)`",
        "is written `count(ts)`).",
        "",
    ]
    lines += ["| function | states kept |", "|---|---|"]
    lines += [
        f"| `{name}` | {', '.join(f'`{kind}_col`' for kind in FUNCTION_STATES[name])} |" for name in TSMA_FUNCTIONS
    ]
    lines += ["", *TSMA_LIMIT]
    lines += ["", "## Calendar windows", "", *CALENDAR_RULES]
    lines += ["", "## Limits", "", "Beyond them a statement is refused with its position.", ""]
    lines += ["| limit | value |", "|---|---|", *(f"| {name} | {value} |" for name, value in LIMITS.items())]
    return "\n".join(lines) + "\n"
