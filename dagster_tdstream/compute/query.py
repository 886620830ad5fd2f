"""Running a translated SELECT in Spark, row windows included.

Owns executing what ``sql.translate`` produced: first the views of its row windows
(SESSION, STATE_WINDOW, EVENT_WINDOW, COUNT_WINDOW) — the rows the window sees (its WHERE
applied), grouped by the query's PARTITION BY, each group's rows sent through
``triggers.replay.query_windows`` in an Arrow UDF, so a query's windows are exactly the
windows a stream trigger closes over the same rows, each row out once per window holding it
with the window's number and bounds — then the query's parameters (constants of the batch,
such as a range join's bucket width), then the SQL that aggregates them. Reads only; Spark's
errors become QueryErrors without a JVM stack.
"""

from __future__ import annotations

import re
import threading
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import QueryError
from ..sql.translate import RowWindowPlan, SpanWidth, TranslatedQuery
from ..storage.spark_read import SparkViews
from ..triggers.replay import query_window_trigger, query_windows
from .bulk import time_ordered

# the columns a labelled row carries besides its own: window number (per group), first and
# last row time
WINDOW_COLUMNS = (("__qid", pa.int64()), ("__qw", pa.int64()), ("__qwe", pa.int64()))


# the line of a Python worker's traceback that names the exception (a UDF's own error)
_RAISED = re.compile(r"^\s*([\w.]*(?:Error|Exception)): (.+)$")


def spark_failure(exc: Exception) -> str:
    """What went wrong, in one line: Spark's first line, or for an exception raised in a Python
    worker (a UDF's), that exception — Spark's first line then only says there was one."""
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    if "Python worker" in lines[0]:
        raised = [m for m in map(_RAISED.match, lines) if m is not None]
        if raised:
            name, message = raised[-1].groups()
            return f"{name.rsplit('.', 1)[-1]}: {message}"
    return lines[0]


def run_query(views: SparkViews, translated: TranslatedQuery, *, timeout_seconds: float | None = None) -> pa.Table:
    """The query's result as an Arrow table (row-window views registered in ``views``).
    Past ``timeout_seconds``, or on Ctrl-C, its Spark jobs are interrupted (the server and the
    session stay up) and a QueryError says so, whichever of its operations was running."""
    spark = views.spark
    tag = f"tdstream-query-{uuid.uuid4().hex}"
    spark.addTag(tag)  # the jobs of this query only: other clients of the server run on
    timed_out = threading.Event()
    finished = threading.Event()

    def watch(limit: float) -> None:
        if finished.wait(limit):
            return
        # set before interrupting: the cancelled job's error can reach the query's thread
        # before interruptTag returns
        timed_out.set()
        # again and again until the query's thread has ended: an interrupt reaches only the
        # operations running at that instant, and between two of them (a view registered, a
        # span width read, the main query not yet started on the server) there are none
        for _ in range(_INTERRUPT_ROUNDS):
            spark.interruptTag(tag)
            if finished.wait(_INTERRUPT_EVERY):
                return

    def go_on() -> None:
        if timed_out.is_set():
            raise _cancelled(timeout_seconds)

    if timeout_seconds:
        threading.Thread(target=watch, args=(timeout_seconds,), name=tag, daemon=True).start()
    try:
        for plan in translated.row_windows:
            go_on()
            views.register_as(_labelled(views, plan), plan.view)
        sql = translated.sql
        for name, parameter in translated.parameters:
            go_on()
            value = span_width(views, parameter)
            sql = sql.replace(name, "NULL" if value is None else repr(value))
        go_on()
        result = views.sql(sql).toArrow()
        go_on()  # a result that came back past the timeout is not one the query may give
        return result
    except QueryError:
        raise
    except KeyboardInterrupt:
        spark.interruptTag(tag)
        raise QueryError("query cancelled (Ctrl-C)") from None
    except Exception as exc:
        if timed_out.is_set():
            raise _cancelled(timeout_seconds) from None  # without Spark's error (a JVM stack) as its context
        raise QueryError(f"query failed in Spark: {spark_failure(exc)}") from None
    finally:
        finished.set()
        spark.removeTag(tag)


def _cancelled(timeout_seconds: float | None) -> QueryError:
    return QueryError(f"query cancelled after {timeout_seconds:g} s (the query timeout)")


# a timed-out query is interrupted every _INTERRUPT_EVERY seconds until it ends, for at most
# a minute (a server that does not answer interrupts is not waited on forever)
_INTERRUPT_EVERY = 0.2
_INTERRUPT_ROUNDS = 300


def span_width(views: SparkViews, span: SpanWidth) -> Any:
    """The batch's widest trigger span: from the trigger rows this process handed to Spark
    when the span is between two of their integer columns (a Spark job less per run),
    otherwise by Spark."""
    rows = views.rows_of(span.view)
    bounds = [_TRIGGER_COLUMN.fullmatch(side) for side in (span.high, span.low)]
    if rows is not None and all(m is not None and m.group(1) in rows.column_names for m in bounds):
        high, low = (rows.column(m.group(1)) for m in bounds if m is not None)
        if pa.types.is_integer(high.type) and pa.types.is_integer(low.type):
            widest = pc.max(pc.subtract(high, low)).as_py()
            return 1 if widest is None else max(widest, 1)  # greatest() passes over a NULL
    return views.sql(span.sql).collect()[0][0]


_TRIGGER_COLUMN = re.compile(r"__trig\.(\w+)")


def _labelled(views: SparkViews, plan: RowWindowPlan) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    frame = views.sql(plan.source_sql)
    keys = list(plan.partition)
    if not keys:  # one group: the whole (filtered) table in time order
        keys = ["__all"]
        frame = frame.withColumn("__all", F.lit(0))
    labels = [T.StructField(name, T.LongType(), False) for name, _ in WINDOW_COLUMNS]
    return frame.groupBy(*keys).applyInArrow(_label_group(plan), T.StructType([*frame.schema.fields, *labels]))


def _label_group(plan: RowWindowPlan) -> Callable[[pa.Table], pa.Table]:
    """The Arrow UDF: one group's rows in; each row out once per window holding it."""
    trigger = query_window_trigger(plan.window, plan.gap, plan.true_for)
    read = plan.values

    def per_group(data: pa.Table) -> pa.Table:
        data, rows = time_ordered(data, "__ts", read)
        stamps = [row.ts for row in rows]
        indices: list[int] = []
        labels: list[list[int]] = [[], [], []]
        for number, window in enumerate(query_windows(trigger, rows)):
            # a row window holds the rows from its first to its last row, in time order
            first, last = bisect_left(stamps, window.start), bisect_right(stamps, window.end)
            indices.extend(range(first, last))
            for values, value in zip(labels, (number, window.start, window.end), strict=True):
                values.extend([value] * (last - first))
        out = data.take(pa.array(indices, pa.int64()))
        for (name, kind), values in zip(WINDOW_COLUMNS, labels, strict=True):
            out = out.append_column(name, pa.array(values, kind))
        return out

    return per_group
