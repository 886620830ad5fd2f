"""A stream run: compute a batch of triggers in one Spark job and write the output.

Owns the triggers view (one row per trigger with its placeholders and group values), the
translation of the stream's query against it (``sql/translate`` in stream mode: ``%%trows``
by window labels, other tables by join conditions, ``%%tbname`` and ``%%n`` by the group),
running it, and handing the rows to ``output.py``. Also the bulk side of recalculation:
deriving every window of a time range from the table data with the same window spec the
sensor uses. No Dagster here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import QueryError, StreamValidationError
from ..faults import failpoint
from ..sql import ast
from ..sql.text import expr_text
from ..sql.timeunits import resolve_timezone
from ..sql.translate import (
    OutputColumn,
    SourceTable,
    StreamScope,
    TranslatedQuery,
    TranslationContext,
    row_condition,
    row_expression,
    translate_select,
)
from ..sql.walk import all_expressions, nested_selects, walk
from ..storage import written
from ..storage.catalog import TableInfo
from ..storage.registry import StreamDefinition
from ..storage.spark_read import SparkViews, spark_schema, table_frame
from ..storage.system import SYSTEM_DB, system_schema
from ..storage.types import arrow_type, float32_value
from ..storage.warehouse import Warehouse
from ..triggers import conditions
from ..triggers.engine import (
    MAX_DELAY,
    RECALC,
    WINDOW_CLOSE,
    WINDOW_INVALIDATION,
    WINDOW_OPEN,
    Fired,
    WindowTrigger,
)
from ..triggers.period import PeriodTrigger
from ..triggers.plan import Trigger, computed_events, stream_trigger
from ..triggers.sliding import ON_TIME, SlidingPointTrigger
from ..triggers.tick import group_identity, queue_row, rows_in_offsets
from .bulk import derive_windows, group_column_sql, pre_filter_sql
from .fill import fill_windows
from .output import Group, group_of, write_results
from .query import run_query
from .shared_rows import SharedRows
from .udf import function_lookup


@dataclass(frozen=True)
class RunOutcome:
    triggers: int
    windows: int
    rows_written: int
    output_version: int | None
    offsets: tuple[int, int] | None
    tables: tuple[str, ...]
    # each computed trigger's result rows (column name → value), for notifications
    results: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


def query_source_types(views: SparkViews, stream: StreamDefinition) -> dict[str, ast.DataType]:
    """Column types of the tables the query reads, for naming output column types."""
    types: dict[str, ast.DataType] = {}
    if stream.trigger_table is not None:
        for col in (*stream.trigger_table.columns, *stream.trigger_table.tags):
            types[col.name] = col.type
    for source in views.sources():
        for col in (*source.columns, *source.tags):
            types.setdefault(col.name, col.type)
    return types


@dataclass(frozen=True)
class PreparedQuery:
    """A batch's query translated, and its data side computed, before its triggers existed
    (a history run's one scan, ``history.py``): the views it reads (closed by whoever
    prepared them), the trigger table's source and ``%%trows`` view, the translation, and
    the name the triggers view is registered under."""

    views: SparkViews
    trigger_source: SourceTable
    trows_view: str
    translated: TranslatedQuery
    triggers_view: str


def compute_triggers(
    spark: Any,
    warehouse: Warehouse,
    stream: StreamDefinition,
    triggers: Sequence[dict[str, Any]],
    *,
    timezone: ZoneInfo,
    replace_range: tuple[int, int] | None = None,
    clock: Callable[[], int] = time.time_ns,
    shared: SharedRows | None = None,
    prepared: PreparedQuery | None = None,
) -> RunOutcome:
    """Evaluate ``triggers`` (queue rows) with the stream's query and write the results
    (unless the stream only notifies: no query, or CALC_NOTIFY_ONLY). ``shared``: a read of
    the trigger table's rows other batches use too; taken when it covers the batch's span.
    ``prepared``: the query as a history scan translated it, its data side computed."""
    query = stream.stmt.query
    if query is None:  # a notify-only stream: the events are all there is
        return RunOutcome(len(triggers), 0, 0, None, _offsets(triggers), ())
    # an open the query does not run on (EVENT_TYPE) fired only to be notified
    events = {WINDOW_CLOSE, RECALC, MAX_DELAY, ON_TIME} | ({WINDOW_OPEN} & set(computed_events(stream.stmt)))
    computable = [t for t in triggers if t["event"] in events]
    views = SparkViews(spark, warehouse, stream.db) if prepared is None else prepared.views
    trigger = stream_trigger(stream)
    label = trigger.spec.label_sql if isinstance(trigger, WindowTrigger) else None
    try:
        if prepared is not None:
            rows = triggers_rows(stream, computable, clock)
            triggers_view = views.register_rows(rows, "triggers", prepared.triggers_view)
            trigger_source, trows_view = prepared.trigger_source, prepared.trows_view
            translated = prepared.translated
        else:
            triggers_view, trigger_source, trows_view, translated = _translated(
                views, stream, trigger, computable, query, timezone, replace_range, clock, shared
            )
        result = _by_trigger(run_query(views, translated)) if computable else pa.table({})
        empty = _emptied_windows(
            views, stream, computable, triggers_view, trows_view or trigger_source, label, timezone
        )
        source_types = query_source_types(views, stream)
        around = None
        late = any(t["event"] == RECALC for t in computable)
        if stream.stmt.option(ast.LEGACY_FILL) is not None and late and replace_range is None:
            around = _rows_around(views, stream, computable, timezone)
    finally:
        if prepared is None:
            views.close()
    return _written(
        warehouse, stream, trigger, triggers, computable, translated, result, empty, source_types, around,
        replace_range=replace_range, clock=clock,
    )  # fmt: skip


def _translated(
    views: SparkViews,
    stream: StreamDefinition,
    trigger: Trigger,
    computable: Sequence[dict[str, Any]],
    query: ast.Select,
    timezone: ZoneInfo,
    replace_range: tuple[int, int] | None,
    clock: Callable[[], int],
    shared: SharedRows | None,
) -> tuple[str, SourceTable | None, str | None, TranslatedQuery]:
    """The batch's triggers view, the trigger table's source and ``%%trows`` view (the rows
    the batch's windows span), and the query translated over them."""
    triggers_view = views.register_rows(triggers_rows(stream, computable, clock), "triggers")
    trigger_source = views.table(stream.trigger_table) if stream.trigger_table is not None else None
    label = trigger.spec.label_sql if isinstance(trigger, WindowTrigger) else None
    spark, warehouse = views.spark, views.warehouse
    if isinstance(trigger, PeriodTrigger) and trigger_source is not None:
        # %%trows of a PERIOD tick: the WAL records the tick consumed, per trigger
        trigger_source = _period_rows(spark, views, warehouse, stream, computable)
    trows_view = None
    span = rows_span(stream, computable)
    table = stream.trigger_table
    if trigger_source is not None and span is not None and table is not None:
        # (a recalculation, RECALCULATE's backfill, reads the table as it stands)
        if written.kept_for(stream, table) and replace_range is None:
            trows_view = views.register(_as_aggregated(spark, warehouse, stream, table, span), "range")
        elif shared is not None and shared.covers(table, *span):
            trows_view = views.register(shared.rows(*span), "range")
        else:  # the batch's rows from the few files its windows span
            trows_view = views.table_range(table, *span, tags=reads_tags(stream))
    if label is not None and uses(query, "_twrownum") and trigger_source is not None:
        # recalculated INTERVAL windows carry no row count: count them at computation time
        counted = trows_view or trigger_source.view
        triggers_view = views.register(
            _with_row_counts(views, triggers_view, counted, stream, label, timezone), "triggers"
        )
    scope = stream_scope(stream, triggers_view, trigger_source, trows_view)
    ctx = TranslationContext(
        views.resolve, timezone, clock(), stream=scope, functions=function_lookup(views.warehouse, views.spark)
    )
    return triggers_view, trigger_source, trows_view, translate_select(query, ctx)


def _written(
    warehouse: Warehouse,
    stream: StreamDefinition,
    trigger: Trigger,
    triggers: Sequence[dict[str, Any]],
    computable: Sequence[dict[str, Any]],
    translated: TranslatedQuery,
    result: pa.Table,
    empty: set[int],
    source_types: dict[str, ast.DataType],
    around: Any,
    *,
    replace_range: tuple[int, int] | None,
    clock: Callable[[], int],
) -> RunOutcome:
    """The batch's results, filled, retracted and written (or only kept for the notifications)."""
    if empty:  # no rows are left in these windows: they are retracted below, not written
        result = _without(result, empty)
    if stream.stmt.option(ast.LEGACY_FILL) is not None and computable:
        assert isinstance(trigger, WindowTrigger)  # the legacy family fills INTERVAL windows only
        result = fill_windows(warehouse, stream, trigger, result, computable, clock(), replace_range, around)
    groups = {int(t["id"]): group_of(t) for t in computable}
    # the rows by trigger are for the notifications: a stream without any is spared them
    notifies = stream.stmt.notification is not None
    results = _results_by_trigger(stream, translated.columns, result) if computable and notifies else {}
    if stream.stmt.option(ast.RETRACT_WINDOWS) is not None:
        # a window pushed open (AT_ONCE, MAX_DELAY) and invalidated later in the same batch:
        # its result is notified, then taken back; it is not written (the retraction wins)
        result = _without(result, _invalidated_later(triggers, computable))
    if stream.output is None or stream.stmt.option("CALC_NOTIFY_ONLY") is not None:
        # results go to the receivers only: no table is written (or created)
        return RunOutcome(len(triggers), len(computable), 0, None, _offsets(triggers), (), results)
    # windows recalculation showed gone or left without rows: where the family retracts them,
    # their output rows are deleted in the same commit; a 3.3.7 stream keeps what it wrote
    retract: list[tuple[Group, int]] = []
    if stream.stmt.option(ast.RETRACT_WINDOWS) is not None:
        retract = [(group_of(t), int(t["wstart"])) for t in triggers if t["event"] == WINDOW_INVALIDATION]
        retract += [(group_of(t), int(t["wstart"])) for t in computable if int(t["id"]) in empty]
    if not computable and replace_range is None and not retract:
        return RunOutcome(len(triggers), 0, 0, None, _offsets(triggers), ())
    if not computable:
        result = pa.table({**{f"__c{i}": pa.array([], pa.int64()) for i in range(len(translated.columns))},
                           "__tid": pa.array([], pa.int64())})  # fmt: skip
    failpoint("before-output-commit")
    outcome = write_results(
        warehouse,
        stream,
        translated.columns,
        result.drop_columns(["__tid"]),
        [groups[tid] for tid in result.column("__tid").to_pylist()],
        source_types,
        replace_range=replace_range,
        retract=retract,
    )
    failpoint("after-output-commit")
    return RunOutcome(
        len(triggers), len(computable), outcome.rows, outcome.version, _offsets(triggers), outcome.tables, results
    )


def _without(result: pa.Table, tids: set[int]) -> pa.Table:
    """The result rows of every trigger but ``tids``."""
    if not tids:
        return result
    column = result.column("__tid")
    return result.filter(pc.invert(pc.is_in(column, pa.array(sorted(tids), column.type))))


def _invalidated_later(triggers: Sequence[dict[str, Any]], computable: Sequence[dict[str, Any]]) -> set[int]:
    """The computable triggers whose window a later trigger of the batch invalidates (by
    group and window start; a trigger's id is its place in the queue)."""
    last_invalidated: dict[tuple[int, int], int] = {}
    for t in triggers:
        if t["event"] == WINDOW_INVALIDATION:
            key = (int(t["group_id"]), int(t["wstart"]))
            last_invalidated[key] = max(last_invalidated.get(key, -1), int(t["id"]))
    if not last_invalidated:
        return set()
    return {
        int(t["id"])
        for t in computable
        if int(t["id"]) < last_invalidated.get((int(t["group_id"]), int(t["wstart"])), -1)
    }


def _by_trigger(result: pa.Table) -> pa.Table:
    """The rows in trigger order, each trigger's rows in the query's own order (a stable sort:
    a query whose order is by trigger columns alone leaves the sort to this)."""
    return result.take(pc.sort_indices(result, [("__tid", "ascending")]))


def _emptied_windows(
    views: SparkViews,
    stream: StreamDefinition,
    triggers: Sequence[dict[str, Any]],
    triggers_view: str,
    rows: Any,
    label: Callable[[str], str] | None,
    timezone: ZoneInfo,
) -> set[int]:
    """DELETE_RECALC with IGNORE_NODATA_TRIGGER (a window is a window only with rows, as in
    the legacy streams): the INTERVAL windows computed again (RECALC, or MAX_DELAY on an open
    window) that have no rows left — all deleted, or moved to another partition — are no
    windows any more. A MAX_DELAY trigger knows its count; a recalculation is counted here.
    (Without IGNORE_NODATA_TRIGGER an empty window is still a window: its count is 0.)"""
    options = stream.stmt
    if options.option("DELETE_RECALC") is None or options.option("IGNORE_NODATA_TRIGGER") is None:
        return set()
    if label is None or rows is None:
        return set()
    empty = {int(t["id"]) for t in triggers if t["event"] in (RECALC, MAX_DELAY) and t["row_count"] == 0}
    if not any(t["event"] == RECALC for t in triggers):
        return empty
    view = rows if isinstance(rows, str) else rows.view
    counted = views.register(_with_row_counts(views, triggers_view, view, stream, label, timezone), "counted")
    found = views.sql(f"SELECT __tid FROM `{counted}` WHERE _twrownum = 0").toArrow().column("__tid").to_pylist()
    recalculated = {int(t["id"]) for t in triggers if t["event"] == RECALC}
    empty |= {int(tid) for tid in found if int(tid) in recalculated}
    # a window closed and then emptied within one batch (rows written, then deleted) has its
    # close computed on the rows left too: every trigger of an emptied window goes
    windows = {(t["group_id"], t["wstart"]) for t in triggers if int(t["id"]) in empty}
    return empty | {int(t["id"]) for t in triggers if (t["group_id"], t["wstart"]) in windows}


def _results_by_trigger(
    stream: StreamDefinition, columns: Sequence[Any], result: pa.Table
) -> dict[int, list[dict[str, Any]]]:
    """The result rows of each trigger, named as the output table names its columns."""
    names = list(stream.stmt.columns) if stream.stmt.columns else [c.name for c in columns]
    values = [
        [float32_value(v) for v in result.column(i).to_pylist()]
        if pa.types.is_float32(result.column(i).type)
        else result.column(i).to_pylist()
        for i in range(len(names))
    ]
    rows: dict[int, list[dict[str, Any]]] = {}
    for index, tid in enumerate(result.column("__tid").to_pylist()):
        rows.setdefault(int(tid), []).append({name: values[i][index] for i, name in enumerate(names)})
    return rows


def _period_rows(
    spark: Any, views: SparkViews, warehouse: Warehouse, stream: StreamDefinition, triggers: Sequence[dict[str, Any]]
) -> SourceTable:
    """The trigger table's rows each PERIOD tick consumed (its WAL offsets), tagged with the
    tick's trigger id, as a view with the table's columns, tags and tbname."""
    table = stream.trigger_table
    assert table is not None
    records = []
    by_offsets: dict[tuple[int, int], dict[str, list[dict[str, Any]]]] = {}
    for t in triggers:
        detail = json.loads(t.get("detail") or "{}")
        span = (int(detail["from"]), int(detail["to"]))
        if span not in by_offsets:  # one tick's groups share its WAL records: read them once
            by_offsets[span] = rows_in_offsets(warehouse, stream, *span)
        for values in by_offsets[span].get(t["group_values"], []):
            records.append({**values, "__tid": int(t["id"])})
    fields = [pa.field("tbname", pa.string())]
    fields += [pa.field(c.name, arrow_type(c.type)) for c in (*table.columns, *table.tags)]
    fields.append(pa.field("__tid", pa.int64()))
    schema = pa.schema(fields)
    data = pa.Table.from_pylist(records, schema=schema)
    frame = (
        spark.createDataFrame(data.to_pylist(), spark_schema(schema))
        if records
        else spark.createDataFrame([], spark_schema(schema))
    )
    view = views.register(frame, "period_rows")
    return SourceTable(view, view, "super", table.columns, table.tags, stream.precision)


def stream_scope(
    stream: StreamDefinition,
    triggers_view: str,
    trigger_source: SourceTable | None,
    trows_view: str | None = None,
    aggregates_view: str | None = None,
) -> StreamScope:
    """What the stream's query sees of a batch of triggers (see ``StreamScope``)."""
    trigger = stream_trigger(stream)
    pre_filter = stream.stmt.option("PRE_FILTER")
    return StreamScope(
        triggers_view=triggers_view,
        trigger_table=trigger_source,
        group_columns=stream.group_columns,
        group_exprs=stream.group_exprs,
        window_label=trigger.spec.label_sql if isinstance(trigger, WindowTrigger) else None,
        trows_filter=pre_filter.expr if pre_filter is not None else None,
        point_rows=isinstance(trigger, SlidingPointTrigger),
        rows_by_trigger=isinstance(trigger, PeriodTrigger),
        force_output=stream.stmt.option("FORCE_OUTPUT") is not None,
        trows_view=trows_view,
        aggregates_view=aggregates_view,
    )


def check_stream_query(warehouse: Warehouse, stream: StreamDefinition, timezone: ZoneInfo) -> tuple[OutputColumn, ...]:
    """Translate the stream's query as its runs will, against the catalog alone (no Spark, no
    data): a function, clause or argument type the translator does not support is rejected
    when the stream is created — with its name and position — not at its first trigger.
    Returns the query's result columns (none for notify-only streams)."""

    def resolve(name: ast.QualifiedName) -> SourceTable:
        db = (name.db or stream.db).lower()
        if db == SYSTEM_DB:
            key = f"{SYSTEM_DB}.{name.name.lower()}"
            return SourceTable(key, key, "normal", system_schema(name.name.lower()), (), "ms")
        info = warehouse.table(db, name.name.lower())
        precision = warehouse.database(info.db).precision
        key = f"{info.db}.{info.name}"
        return SourceTable(key, key, info.kind, info.columns, info.tags, precision)

    table = stream.trigger_table
    source = resolve(ast.QualifiedName(table.name, table.db)) if table is not None else None
    trigger = stream.stmt.trigger
    if isinstance(trigger, ast.StateTrigger) and not isinstance(trigger.expr, ast.Column):
        _check_state_expression(trigger.expr, source, TranslationContext(resolve, timezone))
    query = stream.stmt.query
    if query is None:
        return ()  # notify-only
    scope = stream_scope(stream, "__triggers", source)
    ctx = TranslationContext(resolve, timezone, 0, stream=scope, functions=function_lookup(warehouse))
    return translate_select(query, ctx).columns


def _check_state_expression(node: ast.Expr, source: SourceTable | None, ctx: TranslationContext) -> None:
    """A STATE_WINDOW over an expression is computed on each row in Python (the trigger task)
    and in Spark (the bulk history): one the row evaluator cannot compute, or whose value is
    not a state TDengine keeps (an integer, BOOL or string), is refused with its position."""
    where = {"line": node.pos.line or None, "column": node.pos.column or None}
    try:
        conditions.check(node)
    except conditions.ConditionError as exc:
        raise StreamValidationError(f"STATE_WINDOW over {expr_text(node)}: {exc}", **where) from None
    kind = row_expression(source, node, ctx).kind if source is not None else None
    if kind is not None and kind not in ("int", "bool", "string"):
        raise StreamValidationError(
            f"STATE_WINDOW over {expr_text(node)} gives a {kind} value; a state is an integer, BOOL or string", **where
        )


def rows_span(stream: StreamDefinition, triggers: Sequence[dict[str, Any]]) -> tuple[int, int] | None:
    """The event-time span of the trigger table's rows a batch's ``%%trows`` reads: its
    windows' span; None for PERIOD ticks and SLIDING points, whose rows are not a window's."""
    if isinstance(stream_trigger(stream), PeriodTrigger | SlidingPointTrigger):
        return None
    return _window_span(triggers)


def _window_span(triggers: Sequence[dict[str, Any]]) -> tuple[int, int] | None:
    """The event-time span the batch's windows cover, both ends included (an INTERVAL
    window's end is exclusive, a row window's inclusive: the span holds both)."""
    if not triggers or any(t["wstart"] is None or t["wend"] is None for t in triggers):
        return None
    return min(int(t["wstart"]) for t in triggers), max(int(t["wend"]) for t in triggers)


def _as_aggregated(
    spark: Any, warehouse: Warehouse, stream: StreamDefinition, table: TableInfo, span: tuple[int, int]
) -> Any:
    """A legacy stream's rows as its engine aggregated them (``storage/written.py``): the
    table's, plus the ones rewrites replaced at keys the table still holds (a deleted row is
    gone with all its writes), less the rows expired per their own table."""
    tags, pk = reads_tags(stream), table.primary_key
    rows = table_frame(spark, warehouse, table, key_range=span, tags=tags)
    replaced = written.storage_name(stream.key, written.WRITTEN)
    if warehouse.delta.exists(table.db, replaced):
        kept = table_frame(spark, warehouse, table, key_range=span, tags=tags, storage=replaced)
        rows = rows.unionByName(kept.join(rows.select("tbname", pk), on=["tbname", pk], how="left_semi"))
    expired = written.storage_name(stream.key, written.EXPIRED)
    files = warehouse.delta.file_uris(table.db, expired) if warehouse.delta.exists(table.db, expired) else []
    if files:
        keys = spark.read.parquet(*files).where(f"`{pk}` >= {span[0]} AND `{pk}` <= {span[1]}")
        rows = rows.join(keys, on=["tbname", pk], how="left_anti")
    return rows


def _offsets(triggers: Sequence[dict[str, Any]]) -> tuple[int, int] | None:
    offsets = [int(t["offset"]) for t in triggers if t.get("offset") is not None and int(t["offset"]) >= 0]
    return (min(offsets), max(offsets)) if offsets else None


def reads_tags(stream: StreamDefinition) -> bool:
    """Whether a run may read the trigger table's tags from its rows: a tag named anywhere in
    the query, the grouping or PRE_FILTER (or ``*``); else its rows are read without them."""
    table, query = stream.trigger_table, stream.stmt.query
    if table is None or query is None or not table.tags:
        return False
    tags = {t.name for t in table.tags}
    pre_filter = stream.stmt.option("PRE_FILTER")
    nodes = list(all_expressions(query))
    for expr in [*stream.group_exprs.values(), *([pre_filter.expr] if pre_filter and pre_filter.expr else [])]:
        nodes += walk(expr)
    # ``*`` as a select item takes the tags too; ``count(*)``'s does not
    star = any(isinstance(item.expr, ast.Star) for sub in nested_selects(query) for item in sub.items)
    named = any(isinstance(n, ast.Column) and n.name.lower() in tags for n in nodes)
    return star or named or bool(tags & set(stream.group_columns))


def uses(query: ast.Select, name: str) -> bool:
    return any(isinstance(node, ast.Column) and node.name.lower() == name for node in all_expressions(query))


def _group_types(stream: StreamDefinition) -> list[tuple[str, pa.DataType]]:
    table = stream.trigger_table
    types = []
    for i, column in enumerate(stream.group_columns, start=1):
        if column == "tbname":
            types.append((f"__g{i}", pa.string()))
        elif column in stream.group_exprs:  # a legacy PARTITION BY expression
            types.append((f"__g{i}", arrow_type(stream.group_expr_type(column))))
        else:
            assert table is not None
            # a tag, or (legacy PARTITION BY) an ordinary column
            field = next(c for c in (*table.tags, *table.columns) if c.name == column)
            types.append((f"__g{i}", arrow_type(field.type)))
    return types


def triggers_rows(stream: StreamDefinition, triggers: Sequence[dict[str, Any]], clock: Callable[[], int]) -> pa.Table:
    """The triggers view's rows: one per trigger, its placeholders and group values."""
    group_types = _group_types(stream)
    tbname_index = stream.group_columns.index("tbname") if "tbname" in stream.group_columns else None
    now = clock()
    fields = [
        ("__tid", pa.int64()), ("_twstart", pa.int64()), ("_twend", pa.int64()), ("_twduration", pa.int64()),
        ("_twrownum", pa.int64()), ("_tgrpid", pa.int64()), ("_tlocaltime", pa.int64()),
        ("_tprev_localtime", pa.int64()), ("_tnext_localtime", pa.int64()), ("_tcurrent_ts", pa.int64()),
        ("_tprev_ts", pa.int64()), ("_tnext_ts", pa.int64()), ("__tbname", pa.string()), *group_types,
    ]  # fmt: skip
    rows = []
    for t in triggers:
        if t["event"] != ON_TIME:
            continue  # windows below, column by column
        group = group_of(t)
        detail = json.loads(t.get("detail") or "{}")
        if detail.get("period"):  # a PERIOD tick: processing times, ns
            rows.append(
                (
                    int(t["id"]), None, None, None, t["row_count"], group.group_id, detail["local"],
                    detail["prev"], detail["next"], None, None, None,
                    str(group.values[tbname_index]) if tbname_index is not None else None, *group.values,
                )
            )  # fmt: skip
            continue
        # a time point: _tcurrent_ts and its neighbours, no window
        rows.append(
            (
                int(t["id"]), None, None, None, t["row_count"], group.group_id, int(t.get("fired_at") or now),
                None, None, t["wstart"], detail.get("prev"), detail.get("next"),
                str(group.values[tbname_index]) if tbname_index is not None else None, *group.values,
            )
        )  # fmt: skip
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in fields]
    points = pa.table([pa.array(values, dtype) for values, (_, dtype) in zip(columns, fields, strict=True)],
                      names=[name for name, _ in fields])  # fmt: skip
    windows = _window_triggers(triggers, fields, [name for name, _ in group_types], now, tbname_index)
    return pa.concat_tables([points, windows])


def _window_triggers(
    triggers: Sequence[dict[str, Any]],
    fields: list[tuple[str, pa.DataType]],
    group_names: list[str],
    now: int,
    tbname_index: int | None,
) -> pa.Table:
    """The window triggers' rows of the triggers view, built column by column (a history run
    hands over 100,000s): an open window has no end, duration or row count yet."""
    windows = [t for t in triggers if t["event"] != ON_TIME]
    groups = [group_of(t) for t in windows]
    closing = [t["event"] != WINDOW_OPEN for t in windows]
    ends = [t["wend"] if c else None for t, c in zip(windows, closing, strict=True)]
    nulls = [None] * len(windows)
    values: dict[str, list[Any]] = {
        "__tid": [int(t["id"]) for t in windows],
        "_twstart": [t["wstart"] for t in windows],
        "_twend": ends,
        "_twduration": [None if e is None else e - t["wstart"] for t, e in zip(windows, ends, strict=True)],
        "_twrownum": [
            t["row_count"] if c and t["row_count"] is not None and t["row_count"] >= 0 else None
            for t, c in zip(windows, closing, strict=True)
        ],
        "_tgrpid": [g.group_id for g in groups],
        "_tlocaltime": [int(t.get("fired_at") or now) for t in windows],
        "__tbname": [str(g.values[tbname_index]) for g in groups] if tbname_index is not None else nulls,
    }
    for i, name in enumerate(group_names):
        values[name] = [g.values[i] for g in groups]
    return pa.table([pa.array(values.get(name, nulls), dtype) for name, dtype in fields],
                    names=[name for name, _ in fields])  # fmt: skip


def _group_keys_and_filter(
    views: SparkViews, stream: StreamDefinition, timezone: ZoneInfo
) -> tuple[list[tuple[str, str]], str]:
    """Over the trigger table's rows aliased ``d``: each group column's SQL with its name
    (``__g1`` …), and the WHERE of the rows that enter the trigger (PRE_FILTER; "" for all)."""
    table = stream.trigger_table
    assert table is not None
    ctx = TranslationContext(views.resolve, timezone, time.time_ns())
    names = [f"__g{i}" for i in range(1, len(stream.group_columns) + 1)]
    keys = list(zip(group_column_sql(stream, views.table(table), ctx), names, strict=True))
    pre_filter = stream.stmt.option("PRE_FILTER")
    if pre_filter is None or pre_filter.expr is None:
        return keys, ""
    return keys, f" WHERE {row_condition(views.table(table), pre_filter.expr, ctx)}"


def _rows_around(
    views: SparkViews, stream: StreamDefinition, triggers: Sequence[dict[str, Any]], timezone: ZoneInfo
) -> dict[Group, tuple[int | None, int | None]]:
    """Per group of the batch: the trigger table's newest row (entering the trigger) before
    the batch's first window and its oldest at or after its last window's end — the windows a
    legacy FILL fills a late window against (``fill.fill_windows``)."""
    table = stream.trigger_table
    assert table is not None
    spans: dict[Group, tuple[int, int]] = {}
    for t in triggers:
        group, start, end = group_of(t), int(t["wstart"]), int(t["wend"])
        low, high = spans.get(group, (start, end))
        spans[group] = (min(low, start), max(high, end))
    groups = list(spans)
    names = [f"__g{i}" for i in range(1, len(stream.group_columns) + 1)]
    bounds = pa.table(
        {
            **{name: [g.values[i] for g in groups] for i, name in enumerate(names)},
            "__i": list(range(len(groups))),
            "__lo": [spans[g][0] for g in groups],
            "__hi": [spans[g][1] for g in groups],
        }
    )
    bounds_view = views.register_rows(bounds, "around")
    keyed, where = _group_keys_and_filter(views, stream, timezone)
    keys = "".join(f"{k} AS {g}, " for k, g in keyed)
    source = views.table(table)
    pk = f"`{table.primary_key}`"
    on = " AND ".join([f"d.{g} <=> s.{g}" for g in names]) or "TRUE"
    found = views.sql(
        f"SELECT s.__i, max(CASE WHEN d.__ts < s.__lo THEN d.__ts END) AS __before, "
        f"min(CASE WHEN d.__ts >= s.__hi THEN d.__ts END) AS __after "
        f"FROM (SELECT {keys}CAST(d.{pk} AS BIGINT) AS __ts FROM `{source.view}` d{where}) d "
        f"JOIN `{bounds_view}` s ON {on} GROUP BY s.__i"
    ).toArrow()
    return {
        groups[i]: (before, after)
        for i, before, after in zip(*(found.column(c).to_pylist() for c in ("__i", "__before", "__after")), strict=True)
    }


def _with_row_counts(
    views: SparkViews,
    triggers_view: str,
    trows_view: str,
    stream: StreamDefinition,
    label: Callable[[str], str],
    timezone: ZoneInfo,
) -> Any:
    """``_twrownum``: the trigger table's rows in each trigger's window and group that entered
    the trigger (PRE_FILTER), counted at computation time (recalculated windows count again)."""
    table = stream.trigger_table
    assert table is not None
    pk = f"`{table.primary_key}`"
    keys, where = _group_keys_and_filter(views, stream, timezone)
    select_keys = "".join(f"{k} AS {g}, " for k, g in keys)
    group_by = "".join(f"{k}, " for k, _ in keys)
    labelled = f"(SELECT d.*, {label(pk)} AS __w FROM `{trows_view}` d{where}) d"
    counts = f"SELECT {select_keys}d.__w, count(*) AS __n FROM {labelled} GROUP BY {group_by}d.__w"
    on = " AND ".join([f"t.{g} <=> c.{g}" for _, g in keys] + ["t._twstart = c.__w"])
    return views.sql(
        f"SELECT t.* EXCEPT (_twrownum), CASE WHEN t._twend IS NULL THEN NULL ELSE coalesce(c.__n, 0) END "
        f"AS _twrownum FROM `{triggers_view}` t LEFT JOIN ({counts}) c ON {on}"
    )


def triggers_for_range(
    spark: Any, warehouse: Warehouse, stream: StreamDefinition, start: int, end: int
) -> list[dict[str, Any]]:
    """Every window of the stream whose start lies in [start, end), derived from the trigger
    table's current data with the window spec the sensor uses: windows with rows, plus the
    empty ones a group has passed unless IGNORE_NODATA_TRIGGER, closed ones only (end at or
    before the group's newest row less the watermark)."""
    if stream.trigger_table is None:
        raise QueryError(
            f"stream {stream.key} cannot recalculate: its trigger table {stream.trigger_missing} was dropped"
        )
    trigger = stream_trigger(stream)
    if not isinstance(trigger, WindowTrigger):
        return _row_windows_for_range(spark, warehouse, stream, start, end)
    spec = trigger.spec
    table = stream.trigger_table
    views = SparkViews(spark, warehouse, stream.db)
    try:
        names, keyed, bounds = _keyed_rows(views, stream)
        pk = f"`{table.primary_key}`"
        name_list = "".join(f"{k}, " for k in names)
        low_ts, high_ts = start - spec.reach, end + spec.reach
        if stream.history_start is not None:
            low_ts = max(low_ts, stream.history_start)
        windows = views.sql(
            f"SELECT {name_list}__w, count(*) AS n FROM (SELECT *, {spec.label_sql(pk)} AS __w FROM {keyed} "
            f"WHERE {pk} >= {low_ts} AND {pk} < {high_ts}) WHERE __w >= {start} AND __w < {end} "
            f"GROUP BY {name_list}__w"
        )
        bound_rows = bounds.toArrow().to_pylist()
        counts = windows.toArrow().to_pylist()
    finally:
        views.close()
    per_group: dict[str, dict[int, int]] = {}
    for row in counts:
        values = [row[name] for name in names]
        per_group.setdefault(repr(values), {})[row["__w"]] = row["n"]
    triggers = []
    # the legacy CONTINUOUS_WINDOW_CLOSE: the stream's newest event time closes every group's windows
    newest = max((row["hi"] for row in bound_rows), default=None) if trigger.stream_close else None
    for row in bound_rows:
        values = [row[name] for name in names]
        group_counts = per_group.get(repr(values), {})
        last = spec.last_closed((row["hi"] if newest is None else newest) - trigger.watermark)
        if trigger.ignore_nodata:
            starts = sorted(s for s in group_counts if s <= last)
        else:
            first = max(spec.first_start(row["lo"]), spec.after(spec.floor(start - 1)))
            starts = list(spec.between(first, min(last, end - 1)))
        group_id = group_identity(warehouse, stream, values)
        fired = [Fired(WINDOW_CLOSE, s, spec.end(s), group_counts.get(s, 0)) for s in starts]
        if trigger.max_delay is not None:
            # MAX_DELAY (and the legacy AT_ONCE) wrote the open windows with rows too: they are
            # written again as they stand, not removed with the range they lie in
            opened = sorted(s for s in group_counts if s > last and start <= s < end and group_counts[s])
            fired += [Fired(MAX_DELAY, s, spec.end(s), group_counts[s]) for s in opened]
        for f in fired:
            triggers.append({**queue_row(f, values, group_id, -1, time.time_ns()), "id": len(triggers)})
    return triggers


def _keyed_rows(views: SparkViews, stream: StreamDefinition) -> tuple[list[str], str, Any]:
    """The trigger table's rows that reach the trigger (from the FILL_HISTORY start, those
    PRE_FILTER admits: a refused row closes no window) with their group values (``__g1`` …,
    by PARTITION BY) as SQL, those names, and each group's first and last row (``lo``,
    ``hi``: what decides which of its windows exist and closed) as a DataFrame."""
    table = stream.trigger_table
    assert table is not None
    ctx = TranslationContext(views.resolve, resolve_timezone(stream.info.timezone), time.time_ns())
    names = [f"__g{i}" for i in range(1, len(stream.group_columns) + 1)]
    source = views.table(table)
    keys = [f"{sql} AS {name}" for sql, name in zip(group_column_sql(stream, source, ctx), names, strict=True)]
    pk = f"`{table.primary_key}`"
    group_by = f" GROUP BY {', '.join(names)}" if names else ""
    admitted = [f"d.{pk} >= {stream.history_start}"] if stream.history_start is not None else []
    admitted += [f"({condition})" for condition in [pre_filter_sql(stream)] if condition is not None]
    where = f" WHERE {' AND '.join(admitted)}" if admitted else ""
    keyed = f"(SELECT {', '.join(['d.*', *keys])} FROM `{source.view}` d{where})"
    name_list = "".join(f"{k}, " for k in names)
    return names, keyed, views.sql(f"SELECT {name_list}min({pk}) AS lo, max({pk}) AS hi FROM {keyed}{group_by}")


def group_bounds(views: SparkViews, stream: StreamDefinition) -> pa.Table:
    """Each group's values (``__g1`` …) with its first and last row in the trigger table
    (``lo``, ``hi``), as ``triggers_for_range`` decides a range's windows by them."""
    return _keyed_rows(views, stream)[2].toArrow()


def _row_windows_for_range(
    spark: Any, warehouse: Warehouse, stream: StreamDefinition, start: int, end: int
) -> list[dict[str, Any]]:
    """Row windows (STATE/SESSION/EVENT/COUNT) and SLIDING points starting in [start, end):
    every group's rows replayed in Spark through the trigger the sensor runs (``bulk.py``)."""
    return range_triggers(derive_windows(spark, warehouse, stream).triggers, start, end)


def range_triggers(triggers: Sequence[dict[str, Any]], start: int, end: int) -> list[dict[str, Any]]:
    """The closed windows and SLIDING points of ``triggers`` (a whole history's) that start
    in [start, end), numbered afresh."""
    kept = [t for t in triggers if t["event"] in (WINDOW_CLOSE, ON_TIME) and start <= t["wstart"] < end]
    return [{**t, "id": i} for i, t in enumerate(kept)]


__all__ = ["Group", "RunOutcome", "compute_triggers", "group_bounds", "range_triggers", "triggers_for_range"]
