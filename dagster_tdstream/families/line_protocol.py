"""Schemaless writes: InfluxDB line protocol as TDengine accepts it.

Owns reading ``measurement[,tag=value…] field=value[,field=value…] [timestamp]`` lines (with
the protocol's escapes: ``\\,`` ``\\=`` ``\\ `` in names and tag values, ``\\"`` ``\\\\`` in
strings; ``#`` comments and blank lines skipped) and TDengine's schemaless mapping: the
measurement is a super table created on first sight with ``_ts TIMESTAMP`` first, then the
fields in the order they appear, and the tags (NCHAR); field types by suffix — ``i8 i16 i32``
``i64``/``i`` TINYINT…BIGINT, ``u8 … u64``/``u`` unsigned, ``f32`` FLOAT, ``f64`` or none
DOUBLE, ``t/true/f/false`` (any case as TDengine lists them) BOOL, ``"…"`` VARCHAR, ``L"…"``
NCHAR; a child table per tag set, named ``t_`` + the MD5 of the measurement and its sorted tags
(or the value of the tag the caller names); timestamps in the precision given (``ns`` by
default) converted to the database's, or now when absent. New tags are added to an existing
super table as TDengine does; a field the super table lacks, or of another type, is refused
at its line. All lines go in one write (one commit per super table, all or nothing). Must not
write storage itself: ``storage/bulk.py`` and the warehouse do.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import WriteRejectedError
from ..results import Result
from ..sql.ast import ColumnDef, DataType
from ..storage.bulk import frame_batch
from ..storage.catalog import TableInfo

if TYPE_CHECKING:
    from ..session import Session

_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_INTEGER = re.compile(r"^([+-]?\d+)(i8|i16|i32|i64|i|u8|u16|u32|u64|u)$")
_FLOAT = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(f32|f64)?$")
_BOOLS = {"t": True, "T": True, "true": True, "True": True, "TRUE": True}
_BOOLS |= {"f": False, "F": False, "false": False, "False": False, "FALSE": False}
_INT_TYPES = {
    "i8": "TINYINT", "i16": "SMALLINT", "i32": "INT", "i64": "BIGINT", "i": "BIGINT",
    "u8": "TINYINT UNSIGNED", "u16": "SMALLINT UNSIGNED", "u32": "INT UNSIGNED", "u64": "BIGINT UNSIGNED",
    "u": "BIGINT UNSIGNED",
}  # fmt: skip
MIN_STRING_LENGTH = 16  # a new VARCHAR/NCHAR column or tag is at least this long (TDengine widens)


@dataclass
class _Line:
    number: int
    measurement: str
    tags: dict[str, str]
    fields: dict[str, tuple[str, Any]]  # name → (TDengine type, value)
    timestamp: int | None


@dataclass
class _Measurement:
    lines: list[_Line] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)  # first-seen order and type
    tags: list[str] = field(default_factory=list)
    lengths: dict[str, int] = field(default_factory=dict)  # the longest string per name


def write_lines(
    session: Session, db: str, lines: Iterable[str], *, precision: str = "ns", child_table_tag: str | None = None
) -> Result:
    if precision not in _PER_SECOND:
        raise WriteRejectedError(f"unknown precision {precision!r}: expected one of {', '.join(_PER_SECOND)}")
    database = session.warehouse.database(db)
    now = time.time_ns() // (1_000_000_000 // _PER_SECOND[database.precision])
    groups: dict[str, _Measurement] = {}
    for number, text in enumerate(lines, start=1):
        text = text.strip()
        if not text or text.startswith("#"):
            continue
        line = _parse(text, number)
        group = groups.setdefault(line.measurement, _Measurement())
        _collect(group, line)
    batches, children = [], []
    total = 0
    for measurement, group in groups.items():
        stable = _super_table(session, db, measurement, group)
        frame = _frame(stable, group, precision, database.precision, now, child_table_tag)
        batch, new = frame_batch(session.warehouse, stable, frame, database.precision)
        batches.append(batch)
        children.extend(new)
        total += frame.num_rows
    session.warehouse.write(batches, children)
    return Result(message=f"Insert OK, {total} row(s) affected", affected=total)


def _collect(group: _Measurement, line: _Line) -> None:
    for name, (kind, value) in line.fields.items():
        known = group.fields.setdefault(name, kind)
        if known != kind:
            raise _error(line.number, f"field {name} is {kind} here but {known} on an earlier line")
        if isinstance(value, str):
            group.lengths[name] = max(group.lengths.get(name, 0), len(value.encode()))
    for name, value in line.tags.items():
        if name not in group.tags:
            group.tags.append(name)
        group.lengths[name] = max(group.lengths.get(name, 0), len(value))
    group.lines.append(line)


def _super_table(session: Session, db: str, measurement: str, group: _Measurement) -> TableInfo:
    """The measurement's super table: created if missing, new tags added; its columns must
    hold the lines' fields."""
    warehouse = session.warehouse
    info = warehouse.find_table(db, measurement)
    wanted_tags = [_string_def(name, "NCHAR", group.lengths[name]) for name in group.tags]
    if info is None:
        columns = (
            ColumnDef("_ts", DataType("TIMESTAMP")),
            *(
                _string_def(name, kind, group.lengths.get(name, 0))
                if kind in ("VARCHAR", "NCHAR")
                else ColumnDef(name, DataType(kind))
                for name, kind in group.fields.items()
            ),
        )
        tags = tuple(wanted_tags) or (ColumnDef("_tag_noname", DataType("NCHAR", MIN_STRING_LENGTH)),)
        warehouse.create_table(db, measurement, columns, tags, is_super=True, if_not_exists=True)
        return warehouse.table(db, measurement)
    if info.kind != "super":
        raise WriteRejectedError(f"{measurement} exists and is not a super table: schemaless lines need one")
    by_name = {c.name: c for c in info.columns}
    for name, kind in group.fields.items():
        column = by_name.get(name)
        first = next(line.number for line in group.lines if name in line.fields)
        if column is None:
            raise _error(first, f"super table {measurement} has no column {name} (adding columns is not supported)")
        if column.type.name != kind:
            raise _error(first, f"field {name} is {kind} but column {measurement}.{name} is {column.type}")
    missing = [tag for tag in wanted_tags if tag.name not in {t.name for t in info.tags}]
    if missing:  # TDengine adds the tags a line brings
        with warehouse.catalog.transaction() as conn:
            warehouse.catalog.set_tags(conn, db, measurement, (*info.tags, *missing))
        info = warehouse.table(db, measurement)
    return info


def _string_def(name: str, kind: str, length: int) -> ColumnDef:
    return ColumnDef(name, DataType(kind, max(length, MIN_STRING_LENGTH)))


def _frame(
    stable: TableInfo, group: _Measurement, precision: str, db_precision: str, now: int, child_table_tag: str | None
) -> pa.Table:
    scale_num, scale_den = _PER_SECOND[db_precision], _PER_SECOND[precision]
    names, stamps = [], []
    columns: dict[str, list[Any]] = {c.name: [] for c in stable.columns[1:]}
    tag_values: dict[str, list[Any]] = {t.name: [] for t in stable.tags}
    for line in group.lines:
        names.append(_child_name(line, child_table_tag))
        stamps.append(now if line.timestamp is None else line.timestamp * scale_num // scale_den)
        for name, values in columns.items():
            values.append(line.fields[name][1] if name in line.fields else None)
        for name, values in tag_values.items():
            values.append(line.tags.get(name))
    data: dict[str, Any] = {"tbname": names, stable.columns[0].name: pa.array(stamps, pa.int64())}
    for column in stable.columns[1:]:
        try:
            data[column.name] = pa.array(columns[column.name], _arrow_input(column.type.name))
        except OverflowError:
            raise WriteRejectedError(f"a value of field {column.name} is out of range for {column.type}") from None
    for tag in stable.tags:
        data[tag.name] = pa.array(tag_values[tag.name], pa.string())
    return pa.table(data)


def _arrow_input(kind: str) -> pa.DataType:
    """The Arrow type the lines' values arrive in (the bulk write then checks them against the
    column: ranges of the smaller integers, float32, string lengths)."""
    return {"BOOL": pa.bool_(), "FLOAT": pa.float64(), "DOUBLE": pa.float64()}.get(
        kind, pa.string() if kind in ("VARCHAR", "NCHAR") else pa.int64()
    )


def _child_name(line: _Line, child_table_tag: str | None) -> str:
    if child_table_tag is not None and child_table_tag in line.tags:
        return line.tags[child_table_tag].lower()
    key = ",".join([line.measurement, *(f"{k}={v}" for k, v in sorted(line.tags.items()))])
    return "t_" + hashlib.md5(key.encode()).hexdigest()


def _error(number: int, message: str) -> WriteRejectedError:
    return WriteRejectedError(f"line {number}: {message}")


def _split(text: str, separator: str, number: int) -> list[str]:
    """``text`` split at ``separator`` outside quotes and escapes (escapes kept)."""
    parts, current, quoted, i = [], [], False, 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if char == '"':
            quoted = not quoted
        if char == separator and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    if quoted:
        raise _error(number, 'a string field is not closed with "')
    parts.append("".join(current))
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\([,= \\\"])", r"\1", text)


def _parse(text: str, number: int) -> _Line:
    sections = [s for s in _split(text, " ", number) if s != ""]
    if len(sections) not in (2, 3):
        raise _error(number, "expected measurement[,tags] fields [timestamp]")
    head = _split(sections[0], ",", number)
    measurement = _unescape(head[0]).lower()
    if not measurement:
        raise _error(number, "the measurement name is empty")
    tags = {}
    for pair in head[1:]:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise _error(number, f"tag {pair!r} is not key=value")
        tags[_unescape(key).lower()] = _unescape(value)
    fields: dict[str, tuple[str, Any]] = {}
    for pair in _split(sections[1], ",", number):
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise _error(number, f"field {pair!r} is not key=value")
        fields[_unescape(key).lower()] = _field_value(value, number)
    stamp = None
    if len(sections) == 3:
        if not re.fullmatch(r"-?\d+", sections[2]):
            raise _error(number, f"timestamp {sections[2]!r} is not an integer")
        stamp = int(sections[2])
    return _Line(number, measurement, tags, fields, stamp)


def _field_value(text: str, number: int) -> tuple[str, Any]:
    if text.startswith('L"') and text.endswith('"') and len(text) >= 3:
        return "NCHAR", _unescape(text[2:-1])
    if text.startswith('"') and text.endswith('"') and len(text) >= 2:
        return "VARCHAR", _unescape(text[1:-1])
    if text in _BOOLS:
        return "BOOL", _BOOLS[text]
    if match := _INTEGER.match(text):
        return _INT_TYPES[match.group(2)], int(match.group(1))
    if match := _FLOAT.match(text):
        return ("FLOAT" if match.group(2) == "f32" else "DOUBLE"), float(match.group(1))
    raise _error(number, f"field value {text!r} is not a number, bool or string as line protocol writes them")
