"""Statement results as Python sees them and as the CLI prints them.

Owns the ``Result`` of one statement (an Arrow table whose timestamp columns carry the
database precision, or a message for DDL/DML) and its renderings: aligned text table, CSV,
JSON (timestamps as strings in the session time zone, NULL as null). No SQL, no storage.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa

from .sql.timeunits import format_timestamp
from .storage.types import float32_value

TSMA_METADATA_KEY = b"tdstream.tsma"  # in a query result's schema metadata: the TSMAs it read


@dataclass(frozen=True)
class Result:
    """``table`` is None for statements without a result set (then ``message`` says what
    happened, e.g. ``Insert OK, 3 row(s) affected``)."""

    table: pa.Table | None = None
    message: str = "OK"
    affected: int | None = None

    @property
    def columns(self) -> list[str]:
        return [] if self.table is None else list(self.table.column_names)

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        """Rows as Python values; timestamps as timezone-aware UTC datetimes (nanoseconds
        are truncated to microseconds by Python: use ``to_arrow()`` for exact values)."""
        if self.table is None:
            return []
        columns = [col.to_pylist() for col in self.table.columns]
        return list(zip(*columns, strict=True)) if columns else []

    def to_arrow(self) -> pa.Table:
        if self.table is None:
            raise ValueError(f"statement returned no result set ({self.message})")
        return self.table

    def to_pandas(self) -> Any:
        return self.to_arrow().to_pandas()

    # ------------------------------------------------------------------ rendering

    def display_rows(self, timezone: ZoneInfo) -> list[list[Any]]:
        """Rows with timestamps as local time strings and other values JSON-friendly."""
        if self.table is None:
            return []
        rendered: list[list[Any]] = []
        converters = [_converter(field.type, timezone) for field in self.table.schema]
        raw = [
            col.cast(pa.int64()).to_pylist() if pa.types.is_timestamp(col.type) else col.to_pylist()
            for col in self.table.columns
        ]
        for row in zip(*raw, strict=True):
            rendered.append([convert(v) for convert, v in zip(converters, row, strict=True)])
        return rendered

    def render(self, fmt: str, timezone: ZoneInfo) -> str:
        if self.table is None:
            return json.dumps({"message": self.message}) if fmt == "json" else self.message
        rows = self.display_rows(timezone)
        if fmt == "json":
            return json.dumps({"columns": self.columns, "rows": rows}, ensure_ascii=False)
        if fmt == "csv":
            out = io.StringIO()
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(self.columns)
            writer.writerows([["NULL" if v is None else v for v in row] for row in rows])
            return out.getvalue().rstrip("\n")
        return _aligned(self.columns, rows, self.tsma_read)

    @property
    def tsma_read(self) -> str | None:
        """The TSMAs a query read instead of raw rows (``db.name, …``), None when it read none:
        the CLI and the shell say so after the table, as the result's message does."""
        metadata = (self.table.schema.metadata or {}) if self.table is not None else {}
        value = metadata.get(TSMA_METADATA_KEY)
        return value.decode() if value else None


def _converter(arrow_type: pa.DataType, timezone: ZoneInfo) -> Any:
    if pa.types.is_timestamp(arrow_type):
        precision = arrow_type.unit  # Arrow's units are TDengine's precisions: ms, us, ns
        return lambda v: None if v is None else format_timestamp(v, precision, timezone)
    if pa.types.is_float32(arrow_type):  # FLOAT as TDengine prints it: 10.149, not 10.14900016784668
        return lambda v: str(v) if isinstance(v, float) and not math.isfinite(v) else float32_value(v)

    def plain(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return str(v)
        if isinstance(v, Decimal):
            return str(v)
        if isinstance(v, bytes):
            return "\\x" + v.hex()
        if isinstance(v, datetime):
            return v.isoformat()
        return v

    return plain


def _aligned(columns: list[str], rows: list[list[Any]], tsma: str | None) -> str:
    def text(v: Any) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v)

    cells = [[text(v) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(v)) for w, v in zip(widths, row, strict=True)]
    lines = [" | ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines.append("=" * max(len(lines[0]), 1))
    for row in cells:
        lines.append(" | ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    lines.append(f"Query OK, {len(rows)} row(s) in set" + (f" (read from TSMA {tsma})" if tsma else ""))
    return "\n".join(lines)
