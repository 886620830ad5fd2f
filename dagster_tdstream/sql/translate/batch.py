"""A stream query over a batch of triggers: the aggregate-first plan and range buckets, so one
Spark job computes any number of triggers without comparing every row with every trigger.
"""

from __future__ import annotations

import re

from .. import ast
from ..constants import FLIPPED
from ..walk import conjuncts
from .render import Renderer
from .scope import KeyAggregates, OutputColumn, Scope, SpanWidth, StreamScope, data_references, quote_ident
from .sources import data_relation

_PK_BOUND = re.compile(r"\(?(.+?) (>=|>|<=|<) (.+?)\)?")


def _balanced(sql: str) -> bool:
    """Whether ``sql`` is one expression as far as parentheses go (never closes more than
    it opened): so ``a) OR (b`` is not taken for a bound."""
    depth = 0
    for char in sql:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def range_buckets(select: ast.Select, scope: Scope, render: Renderer, stream: StreamScope) -> tuple[str, str] | None:
    """Triggers that bound the data's timestamp from both sides with their own values
    (``ts >= _twstart AND ts < _twend`` on another table, a row window's ``%%trows``, a
    SLIDING point's rows) meet the data on a range: left alone, Spark compares every row with
    every trigger. Both sides get a bucket — the trigger every bucket its range touches, a row
    the one its timestamp falls in, buckets as wide as the widest range of the batch — and the
    join gains the equality on it (a hash join), the range conditions still deciding. Returns
    (the bucketed triggers relation, the bucket equality), or None without two such bounds."""
    conditions = [*scope.trigger_join, *(render.condition(node) for node in conjuncts(select.where))]
    low = high = None
    for condition in conditions:
        match = _PK_BOUND.fullmatch(condition)
        if match is None:
            continue
        left, op, right = match.groups()
        if right == scope.pk:
            left, op, right = right, FLIPPED[op], left
        if left != scope.pk or "__trig." not in right or data_references(right) or not _balanced(right):
            continue  # not the timestamp against the trigger's own values alone
        if op in (">=", ">"):
            low = right
        else:
            high = right
    if low is None or high is None:
        return None
    view = quote_ident(stream.triggers_view)
    # the width is a constant of the batch, evaluated before the query (``parameters``): a
    # scalar subquery inside the join trips Spark ("Subquery … has not finished")
    width = render.ctx.parameter(SpanWidth(stream.triggers_view, low, high))
    # explode_outer: a trigger without bounds (an open window has no end yet) keeps its row
    buckets = f"explode_outer(sequence(floor({low} / {width}), floor({high} / {width})))"
    triggers = f"(SELECT __trig.*, {buckets} AS __bucket FROM {view} __trig) __trig"
    return triggers, f"floor({scope.pk} / {width}) = __trig.__bucket"


_TRIGGER_EQUALITY = re.compile(r"(.+) (<=>|=) (__trig\.\w+)")


_LIFTED = re.compile(r"__a\d+")  # an aggregate computed before the join, as a column of d
_BY_TRIGGER = re.compile(r"__trig\.\w+(?: ASC| DESC)?(?: NULLS (?:FIRST|LAST))?")  # an ORDER BY entry


def aggregated_before_join(
    select: ast.Select,
    scope: Scope,
    render: Renderer,
    items: list[tuple[str, str, OutputColumn]],
    where_sql: str | None,
    order: list[str],
    stream: StreamScope,
) -> str | None:
    """A stream query whose data appears only inside aggregates is computed aggregate-first,
    then left-joined to the triggers on its keys — one row per key crosses that join instead of
    every data row, and a trigger without data keeps its row (count 0, other aggregates NULL):

    - triggers meeting the data on equalities only (``%%trows`` of INTERVAL windows: group and
      window label; ``%%tbname``; a subquery's trigger id): the data grouped by those keys,
      without the triggers at all (Spark aggregates partially before its shuffle);
    - any other condition (``ts >= _twstart AND ts < _twend`` on another table, a row window's
      ``%%trows``): the data inner-joined to the *broadcast* triggers (bucketed when a range
      bounds the timestamp, ``range_buckets``), grouped by trigger.

    Other shapes: None, and the join-then-aggregate plan."""
    if select.window is not None or select.partition_by or select.group_by or select.distinct:
        return None
    if select.limit is not None or select.offset is not None or not render.aggregates:
        return None
    keys: list[tuple[str, str, str]] = []  # (data side, operator, trigger column)
    filters = [where_sql] if where_sql else []
    equalities = True
    for condition in scope.trigger_join:
        match = _TRIGGER_EQUALITY.fullmatch(condition)
        if "__trig." not in condition:
            filters.append(condition)
        elif match is None or "__trig." in match.group(1):
            equalities = False
        else:
            keys.append((match.group(1), match.group(2), match.group(3)))
    if any("__trig." in sql for sql in filters):
        equalities = False
    aggregates = sorted(render.aggregates, key=len, reverse=True)  # longest first: none is part of another
    if any("explode(" in sql or (equalities and "__trig." in sql) for sql in aggregates):
        return None
    columns = {sql: f"__a{i}" for i, sql in enumerate(aggregates)}

    def lifted(sql: str) -> str:
        for aggregate in aggregates:
            empty = render.aggregates[aggregate]
            column = f"d.{columns[aggregate]}"
            sql = sql.replace(aggregate, f"coalesce({column}, {empty})" if empty else column)
        return sql

    select_list = [f"{lifted(sql)} AS {alias}" for sql, alias, _ in items]
    having = lifted(render.condition(select.having)) if select.having is not None else None
    ordering = [lifted(entry) for entry in order]
    outer = [*select_list, *ordering, *([having] if having else [])]
    if any(not _LIFTED.fullmatch(ref) for sql in outer for ref in data_references(sql)):
        return None  # data outside an aggregate (a companion, a data column): join first
    computed = ", ".join(f"{sql} AS {name}" for sql, name in columns.items())
    if equalities:
        key_select = "".join(f"{data} AS __k{i}, " for i, (data, _, _) in enumerate(keys))
        # computed before the triggers, which a history run derives from the runs
        ahead = stream.aggregates_view is not None and scope.pk is not None
        if ahead:
            computed += f", min({scope.pk}) AS __first, max({scope.pk}) AS __last, count(1) AS __rows"
            computed += "".join(f", {measure}" for measure in stream.aggregates_measures)
        inner = f"SELECT {key_select}{computed} FROM {data_relation(scope)}"
        inner += f" WHERE {' AND '.join(filters)}" if filters else ""
        inner += (" GROUP BY " + ", ".join(data for data, _, _ in keys)) if keys else ""
        on = " AND ".join(f"{trigger} {op} d.__k{i}" for i, (_, op, trigger) in enumerate(keys)) or "TRUE"
        if ahead:
            trigger_columns = tuple(trigger.removeprefix("__trig.") for _, _, trigger in keys)
            aggregates_first = KeyAggregates(inner, trigger_columns, where_sql is not None, tuple(select_list), having)
            render.ctx.key_aggregates.append(aggregates_first)
            inner = f"SELECT * FROM {quote_ident(stream.aggregates_view)}"
    else:
        triggers = f"{quote_ident(stream.triggers_view)} __trig"
        conditions = [*scope.trigger_join, *filters]
        bucketed = range_buckets(select, scope, render, stream)
        if bucketed is not None:
            triggers, bucket_match = bucketed
            conditions.append(bucket_match)
        inner = (
            f"SELECT /*+ BROADCAST(__trig) */ __trig.__tid AS __k0, {computed} FROM {data_relation(scope)} "
            f"JOIN {triggers} ON {' AND '.join(conditions)} GROUP BY __trig.__tid"
        )
        on = "__trig.__tid = d.__k0"
    sql = (
        f"SELECT {', '.join(select_list)}, __trig.__tid AS __tid FROM {quote_ident(stream.triggers_view)} __trig "
        f"LEFT JOIN ({inner}) d ON {on}"
    )
    if having:
        sql += f" WHERE {having}"
    if all(_BY_TRIGGER.fullmatch(entry) for entry in ordering):
        # one row per trigger, and trigger columns are functions of __tid: the order is by
        # __tid, which the stream's run gives its result on the driver. Spark's global sort
        # (a sampling job and a range shuffle) was a third of a small batch's Spark time.
        return sql
    return sql + " ORDER BY " + ", ".join(ordering)
