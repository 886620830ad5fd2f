"""The scenario field ``data_generator`` when it describes a taosBenchmark run in prose
(``"name": "taosBenchmark -f …"``): child tables, rows per table, a start time, a timestamp
step, interlacing, random values, a disorder ratio — turned into the statements that create
such data.

Owns reading that description (the forms TDengine's transcribed tests use: ``5 child tables
ct0..ct4 auto-created, tag groupid random INT in [1,100]``; ``10000 rows per child table,
random values for c0..c12 (types as in the table), start 2025-01-13 17:30:00.000,
timestamp_step 500 ms, interlace_rows 50``; ``"disorder_ratio": 10``) and generating values of
each column's type, seeded so a run repeats. The table's schema comes from the caller (the
description says "types as in the table"); executes nothing. The loop language of other
descriptions is ``datagen.py``'s.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from ..sql import ast
from .datagen import GeneratorError

_PRECISION_PER_MS = {"ms": 1, "us": 1_000, "ns": 1_000_000}
_STEP_UNITS_MS = {"ms": 1, "a": 1, "s": 1000, "m": 60_000}
# what taosBenchmark draws for a column without a range of its own (its defaults are wider;
# the streams the scenarios run only compare their own results, so any spread serves)
_INT_SPAN = {"TINYINT": 127, "SMALLINT": 1000, "INT": 1000, "BIGINT": 1000}


@dataclass(frozen=True)
class Schema:
    """What the description needs of the super table it writes into."""

    columns: tuple[ast.ColumnDef, ...]
    tags: tuple[ast.ColumnDef, ...]
    precision: str


def is_benchmark(generator: dict[str, Any]) -> bool:
    return str(generator.get("name", "")).lstrip().lower().startswith("taosbenchmark")


def benchmark_statements(
    generator: dict[str, Any], schema_of: Callable[[str, str], Schema], timezone: str | None, seed: int = 0
) -> list[str]:
    """The statements of a taosBenchmark description: the child tables, then the rows as
    INSERTs of one interlace round each (every table's next ``interlace_rows`` rows), as
    taosBenchmark sends them."""
    ddl = " ".join(generator.get("ddl", []))
    rows = " ".join(generator.get("rows", []))
    db = _required(r"\bdatabase\s+(\w+)", ddl, "the database ('database test exists')")
    stable = _required(r"\bsuper\s+table\s+(\w+)", ddl, "the super table ('super table st exists')")
    children = re.search(r"(\d+)\s+child\s+tables?\s+([A-Za-z_]\w*?)(\d+)\s*\.\.\s*\w*?(\d+)", ddl)
    if children is None:
        raise GeneratorError(f"taosBenchmark description: no child tables ('5 child tables ct0..ct4') in {ddl!r}")
    prefix, first = children.group(2), int(children.group(3))
    names = [f"{prefix}{first + i}" for i in range(int(children.group(1)))]
    per_table = int(_required(r"(\d+)\s+rows\s+per\s+child\s+table", rows, "the rows per child table"))
    start_text = _required(r"\bstart\s+(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?)", rows, "the start time")
    step = re.search(r"timestamp_step\s+(\d+)\s*(ms|a|s|m)?\b", rows)
    if step is None:
        raise GeneratorError(f"taosBenchmark description: no timestamp_step in {rows!r}")
    interlace = int(_optional(r"interlace_rows\s+(\d+)", rows) or per_table)
    disorder_ratio, disorder_range = _disorder(str(generator.get("name", "")), f"{ddl} {rows}")

    schema = schema_of(db, stable)
    per_ms = _PRECISION_PER_MS[schema.precision]
    zone = ZoneInfo(timezone) if timezone else None
    start_ms = int(datetime.fromisoformat(start_text.replace(" ", "T")).replace(tzinfo=zone).timestamp() * 1000)
    step_ms = int(step.group(1)) * _STEP_UNITS_MS[step.group(2) or "ms"]
    valued = _valued_columns(rows, schema.columns[1:])
    rng = random.Random(seed)

    statements = []
    for name in names:
        tags = [_tag_value(tag, ddl, rng) for tag in schema.tags]
        statements.append(f"create table if not exists {db}.{name} using {db}.{stable} tags ({', '.join(tags)})")
    for offset in range(0, per_table, interlace):
        parts = []
        for name in names:
            values = []
            for j in range(offset, min(offset + interlace, per_table)):
                ts = start_ms + j * step_ms
                if disorder_ratio and rng.randrange(100) < disorder_ratio:
                    ts -= rng.randrange(disorder_range)  # taosBenchmark's out-of-order rows
                cells = [str(ts * per_ms)] + [
                    _value(column, rng) if column.name in valued else "NULL" for column in schema.columns[1:]
                ]
                values.append("(" + ", ".join(cells) + ")")
            parts.append(f"{db}.{name} values " + " ".join(values))
        statements.append("insert into " + " ".join(parts))
    return statements


def _disorder(name: str, text: str) -> tuple[int, int]:
    """taosBenchmark's ``disorder_ratio`` (percent of rows out of order) and ``disorder_range``
    (ms back, 1000 by default): from the description, or from the name when the run's file is
    a disorder one (``-f …disorder.json``; the name may mention a ratio for another file)."""
    ratio = _optional(r"disorder_ratio\"?\s*:?\s*(\d+)", text)
    run_file = _optional(r"-f\s+(\S+)", name) or ""
    if ratio is None and "disorder" in run_file.lower():
        ratio = _optional(r"disorder_ratio\"?\s*:?\s*(\d+)", name) or "10"
    spread = _optional(r"disorder_range\"?\s*:?\s*(\d+)", text) or _optional(r"disorder_range\"?\s*:?\s*(\d+)", name)
    return int(ratio or 0), int(spread or 1000)


def _required(pattern: str, text: str, what: str) -> str:
    found = _optional(pattern, text)
    if found is None:
        raise GeneratorError(f"taosBenchmark description: no {what} in {text!r}")
    return found


def _optional(pattern: str, text: str) -> str | None:
    match = re.search(pattern, text, re.I)
    return match.group(1) if match else None


def _valued_columns(rows: str, columns: Sequence[ast.ColumnDef]) -> set[str]:
    """``random values for c0..c12``: those columns (by their numbered names); all without."""
    span = re.search(r"random\s+values\s+for\s+([A-Za-z_]\w*?)(\d+)\s*\.\.\s*\w*?(\d+)", rows, re.I)
    if span is None:
        return {c.name for c in columns}
    prefix, low, high = span.group(1), int(span.group(2)), int(span.group(3))
    return {f"{prefix}{i}" for i in range(low, high + 1)}


def _tag_value(tag: ast.ColumnDef, ddl: str, rng: random.Random) -> str:
    """``tag groupid random INT in [1,100]``, else a random value of the tag's type."""
    ranged = re.search(rf"\btag\s+{re.escape(tag.name)}\s+random\s+\w+\s+in\s+\[(-?\d+)\s*,\s*(-?\d+)\]", ddl, re.I)
    if ranged is not None:
        return str(rng.randint(int(ranged.group(1)), int(ranged.group(2))))
    return _value(tag, rng)


def _value(column: ast.ColumnDef, rng: random.Random) -> str:
    name = column.type.name
    if name == "BOOL":
        return rng.choice(("true", "false"))
    if name in ("FLOAT", "DOUBLE"):
        return repr(round(rng.uniform(-1000, 1000), 3))
    if name == "TIMESTAMP":
        return str(rng.randrange(1, 2**40))
    if name.endswith("UNSIGNED"):
        return str(rng.randrange(_INT_SPAN.get(name.split()[0], 1000)))
    if name in _INT_SPAN:
        span = _INT_SPAN[name]
        return str(rng.randint(-span, span))
    if name in ("VARCHAR", "BINARY", "NCHAR"):
        length = rng.randint(1, column.type.length or 10)
        return "'" + "".join(rng.choice(string.ascii_letters) for _ in range(length)) + "'"
    raise GeneratorError(f"taosBenchmark description: no random values for column {column.name} of type {name}")
