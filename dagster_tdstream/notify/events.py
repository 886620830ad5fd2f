"""Notification events: what a run's triggers and results tell the NOTIFY receivers.

Owns the event objects of TDengine's protocol (``tableName``, ``eventType``, ``eventTime``,
``triggerId``, ``triggerType`` — for legacy streams ``windowId``, ``windowType`` —,
``groupId`` and per trigger type ``windowStart``/``windowEnd``, ``prevState``/``curState``/
``nextState``, ``triggerCondition``, ``result``), which triggers notify (``ON``,
``NOTIFY_HISTORY``, ``WHERE`` on the result), and how result values become JSON (NaN and
infinities as null, decimals as exact strings, bytes as text or hex). Reads no tables and sends
nothing: the run records these in the outbox, ``delivery.py`` sends them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from ..compute.output import Group, child_table_name, group_of
from ..sql import ast
from ..sql.text import name_key
from ..sql.timeunits import PRECISIONS
from ..storage.catalog import Notification
from ..storage.registry import StreamDefinition
from ..storage.types import float32_value
from ..triggers.conditions import ConditionError, ResultRow, holds
from ..triggers.engine import MAX_DELAY, RECALC, WINDOW_CLOSE, WINDOW_INVALIDATION, WINDOW_OPEN
from ..triggers.sliding import ON_TIME

TRIGGER_TYPES = {
    "PERIOD": "Period",
    "SLIDING": "Sliding",
    "INTERVAL": "Interval",
    "SESSION": "Session",
    "STATE_WINDOW": "State",
    "EVENT_WINDOW": "Event",
    "COUNT_WINDOW": "Count",
}
WINDOW_TRIGGERS = ("INTERVAL", "SESSION", "STATE_WINDOW", "EVENT_WINDOW", "COUNT_WINDOW")
# the legacy (3.0–3.3.6) message names the window (``windowId``, ``windowType``) where 3.3.7
# names the trigger
WINDOW_TYPES = {
    "INTERVAL": "Time",
    "SESSION": "Session",
    "STATE_WINDOW": "State",
    "EVENT_WINDOW": "Event",
    "COUNT_WINDOW": "Count",
}


def notified_event_types(stmt: ast.CreateStream) -> tuple[str, ...]:
    """The event types the stream's NOTIFY sends (besides WINDOW_INVALIDATION): ``ON``, or for
    window triggers without ON (TDengine's tests create such streams) WINDOW_CLOSE; PERIOD and
    SLIDING points send ON_TIME."""
    note = stmt.notification
    if note is None:
        return ()
    if stmt.trigger.kind not in WINDOW_TRIGGERS:
        return (ON_TIME,)
    return note.on or (WINDOW_CLOSE,)


def json_value(value: Any, precision: str = "ms") -> Any:
    """A result value as JSON can carry it, never failing: NaN and ±inf have no JSON number
    (null), a decimal keeps its digits as a string, bytes are UTF-8 text or ``0x`` hex, a
    datetime is an epoch number in the table's precision."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else None
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return "0x" + raw.hex()
    if isinstance(value, datetime):
        return int(value.timestamp() * 1e9) // PRECISIONS[precision]  # PRECISIONS: ns per unit
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return json_value(item(), precision)
    return str(value)


def notification_events(
    stream: StreamDefinition,
    triggers: Sequence[Mapping[str, Any]],
    results: Mapping[int, Sequence[Mapping[str, Any]]],
    *,
    history: bool,
    source: str,
) -> list[Notification]:
    """The outbox rows for a run's triggers, in trigger order, one per event and URL.

    ``results`` maps a trigger's ``id`` to its result rows (column name → value); ``history``
    says whether the run fills history or recalculates a range (sent only with
    NOTIFY_HISTORY); ``source`` prefixes each row's idempotency key (``q`` for queue rows,
    whose ids are unique, a run id for runs whose triggers are derived)."""
    note = stream.stmt.notification
    if note is None or (history and "NOTIFY_HISTORY" not in note.options):
        return []
    wanted = notified_event_types(stream.stmt)
    windowed = stream.stmt.trigger.kind in WINDOW_TRIGGERS
    # a legacy stream notifies WINDOW_CLOSE with every result it writes (TDengine's legacy
    # engine adds the event to each result block), an open window's under MAX_DELAY or AT_ONCE too
    pushed = (RECALC, MAX_DELAY) if stream.family == "legacy_stream" else (RECALC,)
    events: list[tuple[str, dict[str, Any]]] = []
    for t in triggers:
        tid = int(t["id"])
        kind = t["event"]
        rows = list(results.get(tid, ()))
        if kind == WINDOW_OPEN and WINDOW_OPEN in wanted:
            events.append((f"{tid}:open", _event(stream, t, WINDOW_OPEN, None)))
        elif kind in (WINDOW_INVALIDATION, RECALC) and windowed:
            # a window recalculation removed or changed: receivers drop what they had of it
            events.append((f"{tid}:invalid", _event(stream, t, WINDOW_INVALIDATION, None)))
        if (kind == WINDOW_CLOSE or (kind in pushed and windowed)) and WINDOW_CLOSE in wanted:
            events += _with_results(stream, t, WINDOW_CLOSE, rows, note.where, f"{tid}:close")
        elif kind == ON_TIME and ON_TIME in wanted:
            events += _with_results(stream, t, ON_TIME, rows, note.where, f"{tid}:time")
    return [
        Notification(stream.key, url, f"{source}:{key}", _id(event), json.dumps(event, separators=(",", ":")))
        for key, event in events
        for url in note.urls
    ]


def _id(event: Mapping[str, Any]) -> str:
    """The trigger's id (3.3.7) or the window's (legacy): the same value under either name."""
    return str(event["triggerId"] if "triggerId" in event else event["windowId"])


def _with_results(
    stream: StreamDefinition,
    trigger: Mapping[str, Any],
    event_type: str,
    rows: Sequence[Mapping[str, Any]],
    where: ast.Expr | None,
    key: str,
) -> list[tuple[str, dict[str, Any]]]:
    """One event per result row that passes WHERE; a closing trigger without results (a
    notify-only stream, a query that selected nothing) still notifies, without ``result``."""
    if not rows:
        return [(key, _event(stream, trigger, event_type, None))] if where is None else []
    events = []
    for i, row in enumerate(rows):
        if where is not None and not _passes(where, row):
            continue
        events.append((f"{key}:{i}", _event(stream, trigger, event_type, row)))
    return events


def _passes(where: ast.Expr, row: Mapping[str, Any]) -> bool:
    try:
        return holds(where, ResultRow({name_key(k): v for k, v in row.items()}))
    except (ConditionError, TypeError):  # a value WHERE cannot compare: the event is not sent
        return False


def _event(
    stream: StreamDefinition, trigger: Mapping[str, Any], event_type: str, row: Mapping[str, Any] | None
) -> dict[str, Any]:
    group = group_of(dict(trigger))
    kind = stream.stmt.trigger.kind
    detail = json.loads(trigger.get("detail") or "{}")
    event: dict[str, Any] = {
        "tableName": _table_name(stream, group),
        "eventType": event_type,
        "eventTime": int(trigger.get("fired_at") or 0) // 1_000_000,
    }
    if stream.family == "legacy_stream":
        # the id is the group's and the window's start: the same for a window's open and close
        # events and after a restart, as the legacy documentation promises
        event["windowId"] = str(trigger["trigger_id"])
        event["windowType"] = WINDOW_TYPES[kind]
    else:
        event["triggerId"] = str(trigger["trigger_id"])
        event["triggerType"] = TRIGGER_TYPES[kind]
    event["groupId"] = str(group.group_id)
    if event_type != ON_TIME:
        event["windowStart"] = trigger["wstart"]
        if event_type != WINDOW_OPEN:
            event["windowEnd"] = trigger["wend"]
    if kind == "STATE_WINDOW" and event_type == WINDOW_OPEN:
        event["prevState"] = json_value(detail.get("prevState"))
        event["curState"] = json_value(detail.get("curState"))
    elif kind == "STATE_WINDOW" and event_type == WINDOW_CLOSE:
        event["curState"] = json_value(detail.get("curState"))
        event["nextState"] = json_value(detail.get("nextState"))
    elif kind == "EVENT_WINDOW" and event_type in (WINDOW_OPEN, WINDOW_CLOSE) and "conditionIndex" in detail:
        columns = stream.trigger_table.columns if stream.trigger_table is not None else ()
        floats = {c.name for c in columns if c.type.name == "FLOAT"}
        fields = {
            name: json_value(float32_value(value) if name in floats else value)
            for name, value in (detail.get("fieldValue") or {}).items()
        }
        event["triggerCondition"] = {"conditionIndex": detail["conditionIndex"], "fieldValue": fields}
    if row is not None:
        event["result"] = {name: json_value(value, stream.precision) for name, value in row.items()}
    return event


def _table_name(stream: StreamDefinition, group: Group) -> str:
    """The output (child) table the group's results go to — or would, for streams that
    write none (CALC_NOTIFY_ONLY, notify-only)."""
    if stream.group_columns or stream.stmt.option(ast.LEGACY_OUTPUT) is not None:
        return child_table_name(stream, group)
    return stream.output[1] if stream.output is not None else stream.name
