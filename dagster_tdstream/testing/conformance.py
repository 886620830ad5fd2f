"""The conformance runner: TDengine's stream test scenarios, run against this project.

Owns reading a directory of scenarios (``cases/*.json``, format in the corpus README), running
each in a fresh warehouse with the case's time zone — setup SQL, the streams, then each data
phase followed by the headless harness until idle — and checking every expectation of the
phase (row counts, cells, schemas, equality with a batch query, expected errors). A case
whose streams need something not built yet fails with that reason; nothing is skipped.
Also checks the statement files (one CREATE STREAM per line) when the directory has them.
"""

from __future__ import annotations

import json
import math
import re
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

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
