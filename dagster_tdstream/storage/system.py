"""``information_schema``: the catalog as tables.

Owns the system tables TDengine users query — ``ins_databases``, ``ins_stables``,
``ins_tables``, ``ins_tags``, ``ins_streams``, ``ins_stream_tasks``, ``ins_tsmas``,
``ins_functions`` — built from the catalog as Arrow tables with TDengine's column names
(timestamps as epoch milliseconds). ``SHOW …`` statements and SELECTs over
``information_schema.*`` both read them. Reads only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple, dataclass

import pyarrow as pa

from ..errors import CatalogError
from ..sql import tsma
from ..sql.ast import ColumnDef, CreateTsma, DataType
from ..sql.parser import parse_statement
from ..sql.timeunits import PRECISIONS
from .catalog import TICK_ERROR, StreamInfo
from .registry import StreamDefinition, resolve_stream, tsma_root
from .warehouse import Warehouse

SYSTEM_DB = "information_schema"
# (performance_schema's perf_* tables are not provided: it is listed, and can be USEd, empty)
SYSTEM_DATABASES = (SYSTEM_DB, "performance_schema")

TS, INT, BIGINT, BOOL = DataType("TIMESTAMP"), DataType("INT"), DataType("BIGINT"), DataType("BOOL")


def _name(length: int = 192) -> DataType:
    return DataType("VARCHAR", length)


_SCHEMAS: dict[str, tuple[ColumnDef, ...]] = {
    "ins_databases": (
        ColumnDef("name", _name()), ColumnDef("create_time", TS), ColumnDef("vgroups", INT),
        ColumnDef("precision", _name(2)), ColumnDef("keep", _name(64)),
    ),
    "ins_stables": (
        ColumnDef("stable_name", _name()), ColumnDef("db_name", _name()), ColumnDef("create_time", TS),
        ColumnDef("columns", INT), ColumnDef("tags", INT), ColumnDef("isvirtual", BOOL),
    ),
    "ins_tables": (
        ColumnDef("table_name", _name()), ColumnDef("db_name", _name()), ColumnDef("create_time", TS),
        ColumnDef("columns", INT), ColumnDef("stable_name", _name()), ColumnDef("uid", BIGINT),
        ColumnDef("type", _name(21)),
    ),
    "ins_tags": (
        ColumnDef("table_name", _name()), ColumnDef("db_name", _name()), ColumnDef("stable_name", _name()),
        ColumnDef("tag_name", _name(64)), ColumnDef("tag_type", _name(64)), ColumnDef("tag_value", _name(16384)),
    ),
    "ins_streams": (
        ColumnDef("stream_name", _name()), ColumnDef("db_name", _name()), ColumnDef("create_time", TS),
        ColumnDef("sql", _name(65535)), ColumnDef("status", _name(20)), ColumnDef("trigger_table", _name(386)),
        ColumnDef("output_table", _name(386)), ColumnDef("progress", TS), ColumnDef("lag_ms", BIGINT),
        ColumnDef("pending_triggers", BIGINT), ColumnDef("recalculations", BIGINT),
        ColumnDef("last_error", _name(4096)), ColumnDef("notify_pending", BIGINT),
        ColumnDef("notify_dropped", BIGINT),
    ),
    # TDengine's ins_tsmas: func_list as the functions are written, interval as given
    "ins_tsmas": (
        ColumnDef("tsma_name", _name()), ColumnDef("db_name", _name(64)), ColumnDef("table_name", _name()),
        ColumnDef("target_db", _name(64)), ColumnDef("target_stb", _name()), ColumnDef("stream_name", _name()),
        ColumnDef("create_time", TS), ColumnDef("interval", _name(64)), ColumnDef("create_sql", _name(65535)),
        ColumnDef("func_list", _name(65535)),
    ),
    # TDengine's ins_functions: the user-defined functions (func_body: a Python UDF's source)
    "ins_functions": (
        ColumnDef("name", _name(64)), ColumnDef("comment", _name(255)), ColumnDef("aggregate", INT),
        ColumnDef("output_type", _name(32)), ColumnDef("create_time", TS), ColumnDef("code_len", INT),
        ColumnDef("bufsize", INT), ColumnDef("func_language", _name(32)), ColumnDef("func_body", _name(65535)),
        ColumnDef("func_version", INT),
    ),
    # TDengine's stream tasks as they run here: the Reader is the trigger table's Delta log
    # (its versions are the WAL), the Trigger the stream's Dagster sensor or schedule, the
    # Runner the runs of its asset
    "ins_stream_tasks": (
        ColumnDef("stream_name", _name()), ColumnDef("db_name", _name()), ColumnDef("task_id", INT),
        ColumnDef("type", _name(10)), ColumnDef("node_type", _name(16)), ColumnDef("node_id", _name(400)),
        ColumnDef("status", _name(20)), ColumnDef("last_update", TS), ColumnDef("extra_info", _name(256)),
        ColumnDef("message", _name(4096)),
    ),
}  # fmt: skip


def system_schema(name: str) -> tuple[ColumnDef, ...]:
    schema = _SCHEMAS.get(name)
    if schema is None:
        raise CatalogError(f"table {SYSTEM_DB}.{name} does not exist (system tables: {', '.join(_SCHEMAS)})")
    return schema


def system_table(warehouse: Warehouse, name: str, db: str | None = None) -> pa.Table:
    """The rows of a system table; ``db`` narrows per-database tables (SHOW … in a db)."""
    schema = system_schema(name)
    rows = _ROWS[name](warehouse, db)
    columns = {}
    for i, col in enumerate(schema):
        values = [row[i] for row in rows]
        arrow = {"TIMESTAMP": pa.int64(), "BIGINT": pa.int64(), "INT": pa.int32(), "BOOL": pa.bool_()}.get(
            col.type.name, pa.string()
        )
        columns[col.name] = pa.array(values, arrow)
    return pa.table(columns)


def _databases(warehouse: Warehouse, db: str | None) -> list[list[object]]:
    # TDengine lists its two system databases first (tests count them: one user database
    # makes three rows); their creation time, vgroups and keep are NULL there too
    system: list[list[object]] = [[name, None, None, "ms", None] for name in SYSTEM_DATABASES]
    return [row for row in system if db is None or row[0] == db] + [
        [d.name, d.created_at, _integer(d.options.get("VGROUPS", "2")), d.precision, d.options.get("KEEP")]
        for d in warehouse.catalog.list_databases()
        if db is None or d.name == db
    ]


def _integer(text: str) -> int | None:
    """An option stored before options were checked at CREATE shows as NULL: one bad row
    must not break the view for everyone."""
    try:
        return int(text)
    except ValueError:
        return None


def _dbs(warehouse: Warehouse, db: str | None) -> list[str]:
    return [db] if db is not None else [d.name for d in warehouse.catalog.list_databases()]


def _stables(warehouse: Warehouse, db: str | None) -> list[list[object]]:
    hidden = tsma_outputs(warehouse)
    return [
        [t.name, t.db, t.created_at, len(t.columns), len(t.tags), t.virtual]
        for name in _dbs(warehouse, db)
        for t in warehouse.catalog.list_tables(name, ["super"])
        if (t.db, t.name) not in hidden
    ]


def tsma_outputs(warehouse: Warehouse) -> set[tuple[str, str]]:
    """The TSMAs' output super tables, which TDengine keeps out of sight."""
    return {(info.db, info.name + tsma.OUTPUT_SUFFIX) for info, _ in tsma_statements(warehouse)}


def tsma_statements(warehouse: Warehouse, db: str | None = None) -> list[tuple[StreamInfo, CreateTsma]]:
    """The TSMAs (of ``db``, or of every database) with their statements."""
    found = []
    for info in warehouse.catalog.list_streams(db):
        # stored in the canonical form families/tsma.py writes
        written = parse_statement(info.sql) if info.sql.startswith(tsma.STORED_PREFIXES) else None
        if isinstance(written, CreateTsma):
            found.append((info, written))
    return found


def _tsmas(warehouse: Warehouse, db: str | None) -> list[list[object]]:
    rows: list[list[object]] = []
    for info, written in tsma_statements(warehouse, db):
        _, chain = tsma_root(warehouse, info)
        root = chain[-1].table
        functions = ",".join(f"{f.name}({f.column})" for f in chain[-1].functions)
        rows.append(
            [
                info.name,
                info.db,
                root.name,
                info.db,
                info.name + tsma.OUTPUT_SUFFIX,
                info.name,
                info.created_at,
                str(written.interval),
                info.sql,
                functions,
            ]
        )
    return rows


def _functions(warehouse: Warehouse, db: str | None) -> list[list[object]]:
    return [
        [f.name, None, int(f.aggregate), str(f.output_type), f.created_at, f.code_len, f.bufsize, f.language, f.code,
         f.version]
        for f in warehouse.functions.all()
    ]  # fmt: skip


def _tables(warehouse: Warehouse, db: str | None) -> list[list[object]]:
    if db == SYSTEM_DB:  # SHOW TABLES there: its system tables, as TDengine lists them
        return [[name, db, None, len(schema), None, None, "SYSTEM_TABLE"] for name, schema in _SCHEMAS.items()]
    if db in SYSTEM_DATABASES:  # performance_schema's perf_* tables are not provided
        return []
    hidden = tsma_outputs(warehouse)
    return [
        [
            t.name,
            t.db,
            t.created_at,
            len(t.columns),
            t.stable,
            t.uid,
            ("VIRTUAL_" if t.virtual else "") + ("CHILD_TABLE" if t.kind == "child" else "NORMAL_TABLE"),
        ]
        for name in _dbs(warehouse, db)
        for t in warehouse.catalog.list_tables(name, ["child", "normal"])
        if (t.db, t.stable) not in hidden
    ]


def _tags(warehouse: Warehouse, db: str | None) -> list[list[object]]:
    """One row per tag of each child table, its value as text (NULL when unset)."""
    return [
        [t.name, t.db, t.stable, tag.name, str(tag.type), _tag_text(t.tag_values.get(tag.name))]
        for name in _dbs(warehouse, db)
        for t in warehouse.catalog.list_tables(name, ["child"])
        for tag in t.tags
    ]


def _tag_text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


@dataclass(frozen=True)
class StreamStatus:
    """What a stream's row in ``ins_streams`` says (also its asset metadata and lag check)."""

    status: str
    trigger_table: str | None
    output_table: str | None
    progress_ms: int | None  # newest event time processed, epoch ms
    lag_ms: int | None  # the trigger table's newest timestamp minus the progress
    pending: int
    recalculations: int
    last_error: str | None  # or, while paused, why
    notify_pending: int  # notifications in the outbox not delivered yet
    notify_dropped: int  # given up after the default policy's attempts


def stream_status(warehouse: Warehouse, info: StreamInfo) -> StreamStatus:
    stream = resolve_stream(warehouse, info)
    trigger = stream.trigger_table
    output = stream.output
    progress = stream_progress(warehouse, stream)
    bounds = warehouse.key_bounds(trigger) if trigger is not None else None
    per_ms = PRECISIONS[stream.precision] / 1e6
    progress_ms = int(progress * per_ms) if progress is not None else None
    latest_ms = int(bounds[1] * per_ms) if bounds is not None else None
    lag = max(0, latest_ms - progress_ms) if latest_ms is not None and progress_ms is not None else None
    return StreamStatus(
        _status(info),
        f"{trigger.db}.{trigger.name}" if trigger is not None else stream.trigger_missing,
        f"{output[0]}.{output[1]}" if output is not None else None,
        progress_ms,
        lag,
        warehouse.catalog.count_pending(info.key),
        warehouse.catalog.count_events(info.key, "RECALC"),
        info.paused if _status(info) == "Paused" else info.last_error,
        warehouse.catalog.count_notifications(info.key, "pending"),
        warehouse.catalog.count_notifications(info.key, "dropped"),
    )


def _streams(warehouse: Warehouse, db: str | None) -> list[list[object]]:
    rows: list[list[object]] = []
    for info in warehouse.catalog.list_streams(db):
        status = stream_status(warehouse, info)
        rows.append([info.name, info.db, info.created_at, info.sql, *astuple(status)])
    return rows


def _stream_tasks(warehouse: Warehouse, db: str | None) -> list[list[object]]:
    from ..names import definition_name, schedule_name, sensor_name
    from ..triggers.plan import period_crons

    rows: list[list[object]] = []
    for info in warehouse.catalog.list_streams(db):
        stream = resolve_stream(warehouse, info)
        tick_error = info.last_error if info.last_error and info.last_error.startswith(TICK_ERROR) else None
        run_error = info.last_error if info.last_error and tick_error is None else None
        checkpointed = warehouse.catalog.last_checkpoint_at(info.key)
        offset = warehouse.catalog.latest_checkpoint_offset(info.key)
        tasks: list[list[object]] = []
        table = stream.trigger_table
        if table is not None:
            latest = warehouse.delta.version(table.db, table.storage_name)
            read = f"read to version {offset}" if offset is not None else "nothing read yet"
            tasks.append(
                [
                    "Reader",
                    "delta",
                    f"{table.db}.{table.storage_name}",
                    info.status,
                    checkpointed,
                    f"WAL {read}, latest version {latest}",
                    None,
                ]
            )
        elif stream.trigger_missing is not None:
            tasks.append(
                [
                    "Reader",
                    "delta",
                    stream.trigger_missing,
                    "Failed",
                    checkpointed,
                    None,
                    f"trigger table {stream.trigger_missing} was dropped",
                ]
            )
        on_schedule = stream.trigger_missing is None and period_crons(stream) is not None
        instigator = ("schedule", schedule_name(info.key)) if on_schedule else ("sensor", sensor_name(info.key))
        pending = warehouse.catalog.count_pending(info.key)
        tasks.append(
            [
                "Trigger",
                *instigator,
                "Failed" if tick_error and info.status == "Running" else info.status,
                checkpointed,
                f"{pending} pending trigger(s)",
                tick_error,
            ]
        )
        waiting = len(warehouse.catalog.pending_recalculations(info.key))
        recalculated = warehouse.catalog.count_events(info.key, "RECALC")
        tasks.append(
            [
                "Runner",
                "asset",
                definition_name(info.key),
                "Failed" if run_error and info.status == "Running" else info.status,
                None,
                f"{recalculated} window(s) recalculated, {waiting} recalculation(s) waiting",
                run_error,
            ]
        )
        rows += [[info.name, info.db, task_id, *task] for task_id, task in enumerate(tasks)]
    return rows


def stream_progress(warehouse: Warehouse, stream: StreamDefinition) -> int | None:
    """The newest event time the stream's trigger has processed (its latest checkpoint, over
    all groups, in the table's precision); None before the first tick and for PERIOD."""
    offset = warehouse.catalog.latest_checkpoint_offset(stream.key)
    state = warehouse.catalog.load_checkpoint(stream.key, offset) if offset is not None else None
    if not state or "next_tick" in state:  # nothing yet, or a PERIOD state (processing time)
        return None
    newest = [
        group["max_ts"] for group in state.values() if isinstance(group, dict) and group.get("max_ts") is not None
    ]
    return max(newest) if newest else None


def _status(stream: StreamInfo) -> str:
    """Paused while ON_FAILURE_PAUSE holds it, Failed while its last tick or run failed;
    otherwise what START/STOP set."""
    if stream.status != "Running":
        return stream.status
    if stream.paused:
        return "Paused"
    return "Failed" if stream.last_error else stream.status


_ROWS: dict[str, Callable[[Warehouse, str | None], list[list[object]]]] = {
    "ins_databases": _databases,
    "ins_stables": _stables,
    "ins_tables": _tables,
    "ins_tags": _tags,
    "ins_streams": _streams,
    "ins_stream_tasks": _stream_tasks,
    "ins_tsmas": _tsmas,
    "ins_functions": _functions,
}
