"""The conformance runner: TDengine's stream test scenarios, run against this project.

Owns reading a directory of scenarios (``cases/*.json``, format in the corpus README), running
each in a fresh warehouse with the case's time zone — setup SQL, the streams, then each data
phase followed by the headless harness until idle — and checking every expectation of the
phase (row counts, cells, schemas, equality with a batch query, expected errors). A case
whose streams need something not built yet fails with that reason; nothing is skipped.
Also checks the statement files (one CREATE STREAM per line) when the directory has them.
"""

from __future__ import annotations

import ast as pyast
import json
import math
import operator
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..compute.spark import LazySpark
from ..errors import TDStreamError
from ..results import Result
from ..session import Session
from ..sql import ast
from ..sql.parser import parse_statement
from ..sql.timeunits import TimeValueError
from ..sql.tokens import split_statements
from ..sql.validate import validate_create_stream
from ..storage.registry import load_streams
from ..storage.warehouse import Warehouse
from ..triggers.plan import not_built
from .harness import StreamHarness


@dataclass(frozen=True)
class CaseResult:
    id: str
    passed: bool
    reason: str
    seconds: float


class CaseFailed(Exception):
    pass


def run_directory(directory: Path, *, only: str | None = None, spark: Any = None) -> list[CaseResult]:
    results = []
    for path in sorted((directory / "cases").glob("*.json")):
        case = json.loads(path.read_text())
        if only is not None and case.get("id", path.stem) != only:
            continue
        results.append(run_case(case, spark=spark))
    if only is None:
        for name, expect_valid in (("create_stream_statements.txt", True), ("invalid_statements.txt", False)):
            if (directory / name).exists():
                results.append(run_statement_file(directory / name, expect_valid=expect_valid))
    return results


def run_statement_file(path: Path, *, expect_valid: bool) -> CaseResult:
    started = time.monotonic()
    wrong = []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    for number, line in enumerate(lines, start=1):
        try:
            stmt = parse_statement(line)
            if isinstance(stmt, ast.CreateStream):
                validate_create_stream(stmt)
            accepted = True
        except (TDStreamError, TimeValueError):
            accepted = False
        if accepted != expect_valid:
            wrong.append(number)
    reason = ""
    if wrong:
        verb = "rejected" if expect_valid else "accepted (they need the tables' schemas to reject)"
        reason = f"{len(wrong)} of {len(lines)} line(s) {verb}: lines {', '.join(map(str, wrong[:10]))}"
    return CaseResult(f"statements:{path.name}", not wrong, reason, time.monotonic() - started)


def run_case(case: dict[str, Any], *, spark: Any = None) -> CaseResult:
    started = time.monotonic()
    case_id = case.get("id", "?")
    try:
        with tempfile.TemporaryDirectory(prefix="tdstream-case-") as tmp:
            _run(case, Path(tmp), spark)
        return CaseResult(case_id, True, "", time.monotonic() - started)
    except CaseFailed as exc:
        return CaseResult(case_id, False, str(exc), time.monotonic() - started)
    except (TDStreamError, TimeValueError) as exc:
        return CaseResult(case_id, False, str(exc), time.monotonic() - started)


def _run(case: dict[str, Any], tmp: Path, spark: Any) -> None:
    timezone = case.get("timezone")
    warehouse = Warehouse(str(tmp / "warehouse"))
    try:
        session = Session(warehouse, timezone=timezone, spark=LazySpark(session=spark))
        harness = StreamHarness(warehouse, timezone=timezone)
        for sql in case.get("setup_sql", []):
            _execute(session, sql, "setup")
        for sql in case.get("stream_sql", []):
            _execute(session, sql, "stream")
        missing = sorted({m for stream in load_streams(warehouse) for m in not_built(stream.stmt)})
        if missing:
            raise CaseFailed("not built yet: " + ", ".join(missing))
        expected = case.get("expected", [])
        streams = load_streams(warehouse)
        delays = [
            opt.duration.nanos / 1e9
            for stream in streams
            for opt in stream.stmt.options
            if opt.name == "MAX_DELAY" and opt.duration is not None
        ]
        # PERIOD ticks are processing time too: let at least one tick pass after each phase
        delays += [s.stmt.trigger.period.nanos / 1e9 for s in streams if isinstance(s.stmt.trigger, ast.PeriodTrigger)]
        delay = max(delays) + 1 if delays else 0
        for phase in case.get("data_sql", []):
            for sql in phase.get("sql", []):
                _execute(session, sql, phase.get("phase", "data"))
            if "generator" in phase:
                for sql in generated_inserts(phase["generator"]):
                    _execute(session, sql, phase.get("phase", "data"))
            report = harness.run_until_idle()
            if delay and not report.failures:
                # the tests poll until results converge; open windows come out through
                # MAX_DELAY, which is processing time: move it past the delay and run again
                harness.advance_clock(delay)
                report = harness.run_until_idle()
            if report.failures:
                raise CaseFailed(f"after phase {phase.get('phase')}: {report.failures[0]}")
            for check in expected:
                if check.get("after_phase") == phase.get("phase"):
                    _check(session, check)
    finally:
        warehouse.close()


def _execute(session: Session, sql: str, where: str) -> None:
    try:
        session.execute(sql)
    except (TDStreamError, TimeValueError) as exc:
        raise CaseFailed(f"{where} statement failed: {exc} [{sql.strip()[:120]}]") from None


def _check(session: Session, check: dict[str, Any]) -> None:
    # transcribed queries sometimes carry a remark after the statement ("…; (each database)")
    parts = split_statements(check["query"])
    query = parts[0].text if parts else check["query"]
    label = f"after {check.get('after_phase')}: {query[:80]}"
    schema_of = re.match(r"(?i)^schema of (.+)$", query)
    if schema_of:
        query = f"describe {schema_of.group(1)}"
    if check.get("expect_error"):
        try:
            session.execute(query)
        except (TDStreamError, TimeValueError):
            return
        raise CaseFailed(f"{label}: expected an error, the query succeeded")
    result = _query(session, query, label)
    rows = result.display_rows(session.timezone)
    if "schema" in check:
        for i, expected_row in enumerate(check["schema"]):
            if i >= len(rows):
                raise CaseFailed(f"{label}: schema has {len(rows)} column(s), expected {len(check['schema'])}")
            for j, value in enumerate(expected_row):
                if not _same(rows[i][j], value):
                    raise CaseFailed(f"{label}: schema row {i} field {j} is {rows[i][j]!r}, expected {value!r}")
    if "row_count" in check and len(rows) != check["row_count"]:
        raise CaseFailed(f"{label}: {len(rows)} row(s), expected {check['row_count']}")
    if "row_count_predicate" in check:
        predicate = re.fullmatch(r"\s*(>=|<=|==|!=|>|<)\s*(\d+)\s*", check["row_count_predicate"])
        if predicate is None:
            raise CaseFailed(f"{label}: row_count_predicate {check['row_count_predicate']!r} is not '<op> <count>'")
        if not _COMPARE[predicate.group(1)](len(rows), int(predicate.group(2))):
            raise CaseFailed(f"{label}: {len(rows)} row(s), expected {check['row_count_predicate'].strip()}")
    if "eventually_equals" in check:
        if not rows or not rows[0]:
            raise CaseFailed(f"{label}: no rows, expected {check['eventually_equals']!r}")
        if not _same(rows[0][0], check["eventually_equals"]):
            raise CaseFailed(f"{label}: {rows[0][0]!r}, expected {check['eventually_equals']!r}")
    if "property" in check:
        _check_property(result, check["property"], label)
    for row, column, value in check.get("cells", []):
        if row >= len(rows) or column >= len(rows[row]):
            raise CaseFailed(f"{label}: no cell [{row},{column}] in a result of {len(rows)} row(s)")
        if not _same(rows[row][column], value):
            raise CaseFailed(f"{label}: cell [{row},{column}] is {rows[row][column]!r}, expected {value!r}")
    if "equals_query" in check:
        other = _query(session, check["equals_query"].strip().rstrip(";"), label).display_rows(session.timezone)
        mine, theirs = sorted(map(_row_key, rows)), sorted(map(_row_key, other))
        if mine != theirs:
            diff = next((f"{a} != {b}" for a, b in zip(mine, theirs, strict=False) if a != b), "")
            raise CaseFailed(f"{label}: {len(rows)} row(s) differ from the batch query's {len(other)} {diff}")


_COMPARE: dict[str, Callable[[int, int], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}
# the one property form the corpora use: a constant step between consecutive timestamps
_STEP_PROPERTY = re.compile(
    r"for every pair of consecutive rows, \((\w+)\[i\] - \1\[i-1\]\)\.total_seconds\(\) == ([0-9.]+)"
)


def _check_property(result: Result, text: str, label: str) -> None:
    match = _STEP_PROPERTY.fullmatch(text.strip())
    if match is None:
        raise CaseFailed(f"{label}: property {text!r} is not one the runner can check")
    column, step = match.group(1), float(match.group(2))
    if column not in result.columns:
        raise CaseFailed(f"{label}: property names column {column}, the result has {result.columns}")
    values = result.to_arrow().column(column).cast(pa.int64()).to_pylist()  # timestamps in their unit
    unit = result.to_arrow().schema.field(column).type.unit
    per_second = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}[unit]
    for i in range(1, len(values)):
        if not math.isclose((values[i] - values[i - 1]) / per_second, step, abs_tol=1e-9):
            raise CaseFailed(f"{label}: rows {i - 1} and {i} of {column} are not {step} s apart")


_BATCH_ROWS = 5000  # rows per generated INSERT: the final table is the same as one row per statement
_TEMPLATE = re.compile(r"(?i)\binsert\s+into\s+\S+\s+values\s*\(.*?\)(?=\s+\u2014|\s*$)")


def generated_inserts(generator: dict[str, Any]) -> list[str]:
    """A phase's ``generator``: a writer template ``for i in range(N): insert into T values
    (…{expr}…)`` whose ``{…}`` fields are integer arithmetic over the row number ``i`` and the
    writer ``j`` (one writer: 0), expanded into multi-row INSERTs of consecutive rows."""
    writer, count = generator.get("writer", ""), generator.get("N")
    template = _TEMPLATE.search(writer)
    if template is None or not isinstance(count, int):
        raise CaseFailed(f"generator {writer[:80]!r}: expected a writer with an INSERT … VALUES (…) template and N")
    parts = re.split(r"\{([^}]*)\}", template.group(0))  # text, field, text, field, …, text
    fields = [_expression(part) for part in parts[1::2]]
    statements: list[str] = []
    prefix, rows = "", []
    for i in range(count):
        names = {"i": i, "j": 0}
        text = "".join(
            part if k % 2 == 0 else str(_evaluate(fields[k // 2], names, parts[k])) for k, part in enumerate(parts)
        )
        head, _, values = text.partition(" values ")
        if head != prefix or len(rows) == _BATCH_ROWS:
            if rows:
                statements.append(f"{prefix} values {' '.join(rows)}")
            prefix, rows = head, []
        rows.append(values.strip())
    if rows:
        statements.append(f"{prefix} values {' '.join(rows)}")
    return statements


def _expression(text: str) -> pyast.expr:
    try:
        return pyast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise CaseFailed(f"generator field {{{text}}} is not an expression") from None


def _evaluate(node: pyast.expr, names: dict[str, int], text: str) -> int:
    if isinstance(node, pyast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, pyast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, pyast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left, names, text), _evaluate(node.right, names, text))
    raise CaseFailed(f"generator field {{{text}}}: only integer arithmetic over {sorted(names)} is understood")


_OPERATORS: dict[type, Callable[[int, int], int]] = {
    pyast.Add: operator.add,
    pyast.Sub: operator.sub,
    pyast.Mult: operator.mul,
    pyast.FloorDiv: operator.floordiv,
    pyast.Mod: operator.mod,
}


def _query(session: Session, query: str, label: str) -> Result:
    try:
        return session.query(query)
    except (TDStreamError, TimeValueError) as exc:
        raise CaseFailed(f"{label}: {exc}") from None


# transcribed expectations sometimes drop a leading zero ('00:00:4'): read each field as a number
_TIMESTAMP = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2}) (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d+))?$")


def _normal(value: Any) -> Any:
    if value is None or (isinstance(value, str) and value.upper() in ("NULL", "NONE")):
        return None
    match = _TIMESTAMP.match(value) if isinstance(value, str) else None
    if match:
        *fields, fraction = match.groups()
        return (datetime(*map(int, fields)), int((fraction or "").ljust(9, "0")))
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _same(actual: Any, expected: Any) -> bool:
    a, b = _normal(actual), _normal(expected)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b


def _row_key(row: list[Any]) -> tuple[str, ...]:
    return tuple(f"{v:.6g}" if isinstance(v, float) else repr(v) for v in (_normal(x) for x in row))


def summary(results: list[CaseResult]) -> dict[str, Any]:
    passed = sum(r.passed for r in results)
    return {"passed": passed, "failed": len(results) - passed, "cases": [asdict(r) for r in results]}
