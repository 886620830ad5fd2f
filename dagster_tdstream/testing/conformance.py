"""The conformance runner: TDengine's stream test scenarios, run against this project.

Owns reading a directory of scenarios (``cases/*.json``, format in the corpus README), running
each in a fresh warehouse with the case's time zone — setup SQL, the streams, then each data
phase followed by the headless harness until idle — and checking every expectation of the
phase (row counts, cells, schemas, equality with a batch query, expected errors); nothing
is skipped. A case that would start in the last half hour of a day in its time zone runs with
its clocks (NOW and processing time) a minute past midnight: TDengine's tests assume a run
does not cross a day.
Also checks the statement files (one CREATE STREAM per line) when the directory has them.
"""

from __future__ import annotations

import ast as pyast
import contextlib
import dataclasses
import json
import math
import operator
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, tzinfo
from datetime import time as time_of_day
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..compute.spark import LazySpark
from ..errors import SqlSyntaxError, TDStreamError, UnknownDatabaseError
from ..results import Result
from ..session import Session
from ..sql import ast
from ..sql.parser import parse_statement
from ..sql.timeunits import TimeValueError, resolve_timezone
from ..sql.tokens import split_statements
from ..sql.validate import validate_create_stream
from ..storage.registry import load_streams
from ..storage.warehouse import Warehouse
from .benchmark_data import Schema, benchmark_statements, is_benchmark
from .datagen import GeneratorError, generate, render
from .harness import StreamHarness
from .notification_log import NotificationFormatError, NotificationLog, closed_windows, stream_events

# the tables TDengine's stream syntax tests create: an invalid-statements file without a setup
# of its own is checked against them (TDengine rejects some of its lines only by its catalog)
SYNTAX_TEST_TABLES = Path(__file__).with_name("syntax_test_tables.sql")


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
        for path in sorted(directory.glob("*statements.txt")):
            expect_valid = "invalid" not in path.name
            setup = path.with_name(path.name.replace("_statements.txt", "_setup.sql"))
            if setup.exists():
                results.append(run_statements_with_setup(path, setup, expect_valid=expect_valid, spark=spark))
            else:
                tables = None if expect_valid else SYNTAX_TEST_TABLES
                results.append(run_statement_file(path, expect_valid=expect_valid, tables=tables))
    return results


def run_statements_with_setup(path: Path, setup: Path, *, expect_valid: bool, spark: Any = None) -> CaseResult:
    """A statement file whose lines need state: each line runs in a fresh warehouse after the
    setup block its ``_sources.tsv`` names, and must fail (invalid files) or succeed.

    The blocks were derived mechanically from tsim scripts (the statements since the script's
    last CREATE DATABASE), so one may name a database an earlier part of the script made, or
    hold a tsim ``$variable``: TDengine, given the block on a fresh server, rejects such a
    statement and runs on, and so does this (the result names them). Any other failure of a
    setup statement — this engine refusing what TDengine ran — fails the line."""
    started = time.monotonic()
    blocks = setup_blocks(setup.read_text())
    sources = path.with_name(path.name.replace(".txt", "_sources.tsv"))
    block_of = _setup_block_column(sources) if sources.exists() else {}
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    wrong = []
    unbuilt: list[str] = []  # lines whose setup failed: neither accepted nor rejected
    unresolved: list[str] = []  # lines whose setup names what it never makes (TDengine rejects it too)
    for number, line in enumerate(lines, start=1):
        name = block_of.get(number, "")
        block = blocks.get(name, "")
        with tempfile.TemporaryDirectory(prefix="tdstream-stmt-") as tmp:
            warehouse = Warehouse(str(Path(tmp) / "warehouse"))
            try:
                session = Session(warehouse, spark=LazySpark(session=spark))
                try:
                    skipped = _run_setup_block(session, block)
                except Exception as exc:  # rejected, or a bug: the state the line needs is not built
                    unbuilt.append(f"{number} (block {name}: {str(exc).splitlines()[0][:160]})")
                    continue
                if skipped:
                    unresolved.append(f"{number} (block {name}: {skipped[0]}{' …' if len(skipped) > 1 else ''})")
                try:
                    session.execute(line)
                    accepted = True
                except (TDStreamError, TimeValueError):
                    accepted = False
                except Exception:  # a bug, not a rejection: the line counts as wrong, the rest run
                    wrong.append(number)
                    continue
            finally:
                warehouse.close()
        if accepted != expect_valid:
            wrong.append(number)
    result = _statements_result(path, len(lines), wrong, "rejected" if expect_valid else "accepted", started)
    if unresolved:
        note = f"{len(unresolved)} line(s) whose setup names what it never makes: lines {'; '.join(unresolved[:10])}"
        result = dataclasses.replace(result, reason=f"{result.reason}; {note}" if result.reason else note)
    if not unbuilt:
        return result
    failed_setup = f"{len(unbuilt)} line(s) whose setup block failed: lines {'; '.join(unbuilt[:10])}"
    reason = f"{result.reason}; {failed_setup}" if result.reason else failed_setup
    return dataclasses.replace(result, passed=False, reason=reason)


def _statements_result(path: Path, lines: int, wrong: list[int], verb: str, started: float) -> CaseResult:
    reason = f"{len(wrong)} of {lines} line(s) {verb}: lines {', '.join(map(str, wrong[:10]))}" if wrong else ""
    return CaseResult(f"statements:{path.name}", not wrong, reason, time.monotonic() - started)


def _run_setup_block(session: Session, block: str) -> list[str]:
    """Runs a setup block statement by statement (each ends its line with ``;``); returns the
    statements rejected because the block never makes what they name — no database selected,
    a database that does not exist, a tsim variable — and raises on any other failure."""
    skipped = []
    for statement in _block_statements(block):
        try:
            session.execute(statement)
        except UnknownDatabaseError as exc:
            skipped.append(f"{statement.strip()[:80]} → {exc.message}")
        except SqlSyntaxError as exc:
            if not _at_tsim_variable(statement, exc):
                raise
            skipped.append(f"{statement.strip()[:80]} → a tsim variable")
    return skipped


def _block_statements(block: str) -> list[str]:
    """A setup block's statements: lines up to one ending with ``;`` (the last may lack it);
    comment lines between statements left out. Split on lines, not by the tokenizer, which
    rejects a whole block for one tsim ``$variable``."""
    statements, pending = [], []
    for text in block.splitlines():
        if not text.strip() or (not pending and text.lstrip().startswith("--")):
            continue
        pending.append(text)
        if text.rstrip().endswith(";"):
            statements.append("\n".join(pending))
            pending = []
    return statements + (["\n".join(pending)] if pending else [])


def _at_tsim_variable(statement: str, exc: SqlSyntaxError) -> bool:
    """The syntax error is at a tsim script's variable left in the statement (``$db``)."""
    lines = statement.splitlines()
    if exc.line is None or exc.column is None or not 0 < exc.line <= len(lines):
        return False
    return re.match(r"\$[A-Za-z_]", lines[exc.line - 1][exc.column - 1 :]) is not None


def setup_blocks(text: str) -> dict[str, str]:
    """The blocks of a ``*_setup.sql`` file, by the name of their ``-- [block: name]`` line."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = re.match(r"\s*--\s*\[block:\s*([^\]]+)\]", line)
        if header:
            current = blocks.setdefault(header.group(1).strip(), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in blocks.items()}


def _setup_block_column(path: Path) -> dict[int, str]:
    rows = [line.split("\t") for line in path.read_text().splitlines()]
    header, body = rows[0], rows[1:]
    if "setup_block" not in header:
        return {}
    line_at, block_at = header.index("line"), header.index("setup_block")
    return {int(row[line_at]): row[block_at] for row in body if len(row) > block_at and row[line_at].isdigit()}


def run_statement_file(path: Path, *, expect_valid: bool, tables: Path | None = None) -> CaseResult:
    """One statement per line, parsed and validated; with ``tables`` (DDL), a line that passes
    is also checked against those tables' catalog, without running it."""
    started = time.monotonic()
    wrong = []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    with tempfile.TemporaryDirectory(prefix="tdstream-stmt-") as tmp:
        catalog = None
        if tables is not None:
            catalog = Session(Warehouse(str(Path(tmp) / "warehouse")), timezone="UTC")
            catalog.execute(tables.read_text())
        for number, line in enumerate(lines, start=1):
            try:
                stmt = parse_statement(line)
                if isinstance(stmt, ast.CreateStream):
                    validate_create_stream(stmt)
                if catalog is not None:
                    catalog.check(line)
                accepted = True
            except (TDStreamError, TimeValueError):
                accepted = False
            if accepted != expect_valid:
                wrong.append(number)
        if catalog is not None:
            catalog.warehouse.close()
    verb = "rejected" if expect_valid else "accepted"
    return _statements_result(path, len(lines), wrong, verb, started)


# TDengine's tests write rows relative to NOW and read them back in day windows (INTERVAL(1d))
# as if a run never crossed a day: near midnight in the case's time zone those rows straddle two
# days, the newer part in the day still open (TDengine splits them the same way). A case that
# would start in the last half hour of a day starts, clocks and all, a minute after midnight
DAY_END_MARGIN_NS = 30 * 60 * 10**9


def clear_of_day_end(start_ns: int, zone: tzinfo) -> int:
    """How far (ns) to move a case's clocks forward from ``start_ns`` so that it starts clear of
    the end of a day in ``zone``: 0, or to a minute past the next midnight from its last half
    hour."""
    local = datetime.fromtimestamp(start_ns / 1e9, zone)
    midnight = datetime.combine(local.date() + timedelta(days=1), time_of_day(), zone)
    left = int(midnight.timestamp()) * 10**9 - start_ns
    return left + 60 * 10**9 if left <= DAY_END_MARGIN_NS else 0


def run_case(case: dict[str, Any], *, spark: Any = None, start_ns: int | None = None) -> CaseResult:
    """Run one scenario; ``start_ns``: the wall-clock time it runs as if started at (tests of
    time-of-day behaviour; the clocks move on from there at the real pace)."""
    started = time.monotonic()
    case_id = case.get("id", "?")
    try:
        with tempfile.TemporaryDirectory(prefix="tdstream-case-") as tmp:
            _run(case, Path(tmp), spark, start_ns)
        return CaseResult(case_id, True, "", time.monotonic() - started)
    except (CaseFailed, GeneratorError) as exc:
        return CaseResult(case_id, False, str(exc), time.monotonic() - started)
    except (TDStreamError, TimeValueError) as exc:
        return CaseResult(case_id, False, str(exc), time.monotonic() - started)
    except Exception as exc:  # a bug: counted against this case, the other cases still run
        return CaseResult(case_id, False, f"internal error: {type(exc).__name__}: {exc}", time.monotonic() - started)


def _run(case: dict[str, Any], tmp: Path, spark: Any, start_ns: int | None) -> None:
    timezone = case.get("timezone")
    real = time.time_ns()
    start = real if start_ns is None else start_ns
    offset = start - real + clear_of_day_end(start, resolve_timezone(timezone))

    def clock() -> int:  # the client's and processing time alike
        return time.time_ns() + offset

    expected = case.get("expected", [])
    history: dict[str, list[list[Any]]] = {}  # query → rows at its latest check (unchanged_cells)
    warehouse = Warehouse(str(tmp / "warehouse"))
    # the WebSocket logger TDengine's notify tests start: {port} in the statements is its port
    log = NotificationLog() if any(_PORT.search(sql) for sql in case.get("stream_sql", [])) else None
    harness = StreamHarness(warehouse, timezone=timezone, clock=clock)
    try:
        session = Session(
            warehouse, timezone=timezone, spark=LazySpark(session=spark), dialect=case_dialect(case), clock=clock
        )
        now_ms = clock() // 10**6  # <NOW>: the client clock, captured once at test start
        # the data the setup's comment stands for: created first, a taosBenchmark run (which
        # writes into the setup's tables) after the setup
        described = _describes_data(case)
        if described and not is_benchmark(case["data_generator"]):
            for statement in generate(case["data_generator"]):
                _execute(session, statement, "setup")
        for sql in case.get("setup_sql", []):
            for statement in expand(sql, now_ms):
                _execute(session, statement, "setup")
        if described and is_benchmark(case["data_generator"]):
            for statement in _benchmark(session, case):
                _execute(session, statement, "setup")
        for sql in case.get("stream_sql", []):
            _execute(session, _with_now(_PORT.sub(str(log.port), sql) if log else sql, now_ms), "stream")
        streams = load_streams(warehouse)
        # MAX_DELAY, and the 10 s a 2.x continuous query waits after CREATE before it computes
        delays = [
            opt.duration.nanos / 1e9
            for stream in streams
            for opt in stream.stmt.options
            if opt.name in ("MAX_DELAY", ast.FIRST_LAUNCH_DELAY) and opt.duration is not None
        ]
        # PERIOD ticks are processing time too: let at least one tick pass after each phase
        delays += [s.stmt.trigger.period.nanos / 1e9 for s in streams if isinstance(s.stmt.trigger, ast.PeriodTrigger)]
        # windows closed by the wall clock (2.x continuous queries, FORCE_WINDOW_CLOSE): the
        # tests poll until one is over; let one interval pass after each phase
        delays += [
            s.stmt.trigger.interval.nanos / 1e9
            for s in streams
            if s.stmt.option(ast.FORCE_WINDOW_CLOSE) is not None
            and isinstance(s.stmt.trigger, ast.SlidingTrigger)
            and s.stmt.trigger.interval is not None
        ]
        delay = max(delays) + 1 if delays else 0
        setup_checks = [check for check in expected if check.get("after_phase") == "setup"]
        outputs = {s.output[1] for s in streams if s.output is not None}
        held = False
        if any(_reads(check.get("query", ""), outputs) for check in setup_checks):
            # a check of a stream's output after the setup sees the stream converged: FILL_HISTORY
            # computes what the setup wrote before the stream existed (the tests poll until it
            # has); checks of the source tables only run before any stream does
            held = _settle(harness, delay, "setup", partial(_holding, session, setup_checks, history))
        for check in setup_checks if not held else []:
            _check(session, check, history)
        subscriptions = Subscriptions(session, tmp / "subscriptions")
        for phase in case.get("data_sql", []):
            for sql in phase.get("sql", []):
                api = re.match(r"\s*--\s*api:\s*(.+)$", sql, re.S)
                if api:
                    subscriptions.call(_with_now(api.group(1).strip(), now_ms))
                    continue
                if _runs_generator(sql):  # a taosBenchmark run here, as the data_generator describes it
                    for statement in _benchmark(session, case):
                        _execute(session, statement, phase.get("phase", "data"))
                    continue
                sleep = re.fullmatch(r"\s*--\s*sleep\s+(\d+)\s*ms\s*;?\s*", sql)
                if sleep:
                    # the test sleeps here: TDengine's streams catch up on what was written, and
                    # processing time passes (MAX_DELAY, FORCE_WINDOW_CLOSE and PERIOD fire in it)
                    _sleep(harness, int(sleep.group(1)) / 1000, str(phase.get("phase")))
                    continue
                for statement in expand(sql, now_ms):
                    if phase.get("phase") == "cleanup":
                        _tidy(session, statement)
                    else:
                        _execute(session, statement, phase.get("phase", "data"))
            if "generator" in phase:
                for sql in generated_inserts(phase["generator"]):
                    _execute(session, sql, phase.get("phase", "data"))
            checks = [check for check in expected if check.get("after_phase") == phase.get("phase")]
            if _settle(harness, delay, str(phase.get("phase")), partial(_holding, session, checks, history)):
                continue
            for check in checks:
                if check.get("query", "").startswith(_CONSUMED):
                    _check_rows(subscriptions.last_rows(), check, "after " + str(phase.get("phase")))
                elif _NOTIFIED.match(check.get("query", "")):
                    _check_notifications(session, log, check)
                else:
                    _check(session, check, history)
    finally:
        harness.close()
        warehouse.close()
        if log is not None:
            log.close()


# a check of the windows a stream's notifications closed against a query of its results
_NOTIFIED = re.compile(r"notifications of stream (\w+)\b")
# the logger's port in a statement: {port}, or {port1}, {port2} … where a test starts one
# logger per address (here one logger takes them all)
_PORT = re.compile(r"\{port\d*\}")


def _check_notifications(session: Session, log: NotificationLog | None, check: dict[str, Any]) -> None:
    """The (windowStart, windowEnd, tableName) of the windows the stream's events closed (and
    did not invalidate since) equal ``equals_query``'s rows, once delivery has gone quiet;
    every message is held to TDengine's format on the way. Without ``equals_query`` (a stream
    subscribed to window_open only, say) the check is the format, on at least one event."""
    match = _NOTIFIED.match(check["query"])
    assert match is not None
    label = f"after {check.get('after_phase')}: notifications of stream {match.group(1)}"
    if log is None:
        raise CaseFailed(f"{label}: the scenario's statements name no notification receiver ({{port}})")
    stream = next((s for s in load_streams(session.warehouse) if s.name == match.group(1).lower()), None)
    if stream is None or stream.stmt.notification is None:
        raise CaseFailed(f"{label}: no stream {match.group(1)} with a notification")
    note = stream.stmt.notification
    logged = sum(1 for url in note.urls if re.fullmatch(rf"wss?://127\.0\.0\.1:{log.port}(/.*)?", url))
    try:
        events = stream_events(log.settled(), stream.name, note.on, copies=max(logged, 1))
    except NotificationFormatError as exc:
        raise CaseFailed(f"{label}: {exc}") from None
    if "equals_query" not in check:
        if not events:
            raise CaseFailed(f"{label}: the stream sent no event")
        return
    windows = [list(w) for w in closed_windows(events)]
    expected = [list(row) for row in _query(session, check["equals_query"], label).rows]
    if windows != expected:
        extra = [w for w in windows if w not in expected][:3]
        absent = [w for w in expected if w not in windows][:3]
        raise CaseFailed(
            f"{label}: {len(windows)} closed window(s) notified, {len(expected)} result row(s);"
            f" notified only: {extra}; in the results only: {absent}"
        )


def _runs_generator(sql: str) -> bool:
    """A data line that stands for the ``data_generator`` run (``-- taosBenchmark -f …``)."""
    return bool(re.match(r"\s*--\s*(taosBenchmark\b|.*\bsee data_generator\b)", sql, re.I))


def _benchmark(session: Session, case: dict[str, Any]) -> list[str]:
    generator = case.get("data_generator")
    if not isinstance(generator, dict):
        raise CaseFailed("a data line runs the data_generator, which the scenario does not give")
    if not is_benchmark(generator):
        return generate(generator)

    def schema_of(db: str, stable: str) -> Schema:
        table = session.warehouse.find_table(db, stable)
        if table is None:
            raise CaseFailed(f"the data_generator writes into {db}.{stable}, which the setup did not create")
        return Schema(table.columns, table.tags, session.warehouse.database(db).precision)

    return benchmark_statements(generator, schema_of, case.get("timezone"))


# a check of the rows a subscription call returned, not a query
_CONSUMED = "rows returned by the last sub.consume()"


def _reads(query: str, tables: set[str]) -> bool:
    """Whether a check's query names one of the tables (as a whole word, any case)."""
    words = {w.lower() for w in re.findall(r"\w+", query)}
    return bool(words & tables)


def _settle(harness: StreamHarness, delay: float, phase: str, holding: Callable[[], bool]) -> bool:
    """Run the streams until they have nothing left to do, as the tests poll until results
    converge; open windows come out through MAX_DELAY, which is processing time: move it past
    the delay and run again. The tests poll: whether the phase's checks (``holding``) held
    before the clock moved, so they are not taken again after it."""
    report = harness.run_until_idle()
    held = False
    if delay and not report.failures:
        held = holding()
        harness.advance_clock(delay)
        report = harness.run_until_idle()
    if report.failures:
        raise CaseFailed(f"after phase {phase}: {report.failures[0]}")
    return held


def _holding(session: Session, checks: list[dict[str, Any]], history: dict[str, list[list[Any]]]) -> bool:
    """Whether every check holds already: a poll that succeeds at once (its rows then count as
    read, for later ``unchanged_cells``). Only queries are polled: a statement expected to fail,
    or a subscription's rows, is taken once, after the delay."""
    if not checks or any(
        c.get("expect_error") or c.get("query", "").startswith(_CONSUMED) or _NOTIFIED.match(c.get("query", ""))
        for c in checks
    ):
        return False
    trial = dict(history)
    try:
        for check in checks:
            _check(session, check, trial)
    except CaseFailed:
        return False
    history.update(trial)
    return True


def _sleep(harness: StreamHarness, seconds: float, phase: str) -> None:
    """A test's sleep: the streams compute what was written, then the clock moves on and
    what falls due in the meantime runs."""
    reports = [harness.run_until_idle()]
    harness.advance_clock(seconds)
    reports.append(harness.run_until_idle())
    failures = [failure for report in reports for failure in report.failures]
    if failures:
        raise CaseFailed(f"in phase {phase}: {failures[0]}")


def _describes_data(case: dict[str, Any]) -> bool:
    """A ``data_generator`` to run: unless the setup expands the same data itself with a
    ``-- data_generator: for …`` line (the field then only describes it)."""
    if "data_generator" not in case:
        return False
    if any(_runs_generator(sql) for phase in case.get("data_sql", []) for sql in phase.get("sql", [])):
        return False  # a data phase runs it
    return not any(re.match(r"\s*--\s*data_generator:\s*for\b", sql) for sql in case.get("setup_sql", []))


_LOOKUP = re.compile(r"<uid of (\w+) from information_schema\.(\w+) column (\d+)>")


def _with_lookups(session: Session, sql: str) -> str:
    """``<uid of NAME from information_schema.TABLE column N>``: column N of NAME's row there
    (the tests read a table's uid before dropping it by uid)."""

    def value(match: re.Match[str]) -> str:
        name, table, column = match.group(1), match.group(2), int(match.group(3))
        data = session.query(f"select * from information_schema.{table}").to_arrow()
        names, values = data.column(0).to_pylist(), data.column(column).to_pylist()
        found = [v for n, v in zip(names, values, strict=True) if n == name.lower()]
        if not found:
            raise CaseFailed(f"{match.group(0)}: no row for {name} in information_schema.{table}")
        return str(found[0])

    return _LOOKUP.sub(value, sql)


def _execute(session: Session, sql: str, where: str) -> None:
    try:
        session.execute(_with_lookups(session, sql) if "<uid of " in sql else sql)
    except (TDStreamError, TimeValueError) as exc:
        raise CaseFailed(f"{where} statement failed: {exc} [{sql.strip()[:120]}]") from None


def _tidy(session: Session, sql: str) -> None:
    """A cleanup statement: the transcribed tests end by restoring what the suite around them
    shares (``use test`` of a database an earlier test made); run alone, such a statement may
    have nothing to act on, which is not the scenario's failure."""
    with contextlib.suppress(TDStreamError, TimeValueError):
        session.execute(sql)


class Subscriptions:
    """The ``-- api:`` lines of 2.x subscription scenarios, on ``Session.subscribe``:
    ``sub = subscribe(restart=…, topic=…, sql=…, interval=…)``, ``sub.consume()``,
    ``sub.close(keepProgress=…)``. Topic progress is kept beside the case's warehouse (never in
    the user's home)."""

    def __init__(self, session: Session, progress_dir: Path) -> None:
        self.session = session
        self.progress_dir = progress_dir
        self.current: Any = None
        self.rows: list[list[Any]] | None = None

    def call(self, text: str) -> None:
        try:
            node = pyast.parse(text, mode="exec").body[0]
        except SyntaxError:
            raise CaseFailed(f"api call {text!r} is not a call") from None
        call = node.value if isinstance(node, pyast.Assign | pyast.Expr) else None
        if not isinstance(call, pyast.Call):
            raise CaseFailed(f"api call {text!r} is not a call")
        kwargs = {k.arg: pyast.literal_eval(k.value) for k in call.keywords if k.arg}
        name = call.func.attr if isinstance(call.func, pyast.Attribute) else getattr(call.func, "id", "")
        if name == "subscribe":
            self.current = self.session.subscribe(
                kwargs["sql"],
                topic=kwargs.get("topic"),
                restart=bool(kwargs.get("restart", False)),
                progress_dir=self.progress_dir,
            )
        elif self.current is None:
            raise CaseFailed(f"api call {text!r} before subscribe()")
        elif name == "consume":
            self.rows = [list(row.values()) for row in self.current.consume()]
        elif name == "close":
            self.current.close(keep_progress=bool(kwargs.get("keepProgress", True)))
            self.current = None
        else:
            raise CaseFailed(f"api call {name}() is not part of the 2.x subscription API")

    def last_rows(self) -> list[list[Any]]:
        if self.rows is None:
            raise CaseFailed("no sub.consume() ran before this check")
        return self.rows


# TDengine's 2.x test suites (3.x moved its tests to tests/script/tsim, tests/system-test, …)
_TWO_X_SUITES = ("tests/script/general/", "tests/pytest/")


def case_dialect(case: dict[str, Any]) -> str:
    """The query dialect a scenario's expectations were recorded in: 2.x for scenarios
    transcribed from the 2.x suites (their INTERVAL queries show the window start)."""
    path = str(case.get("source", {}).get("path", ""))
    return "2.x" if path.startswith(_TWO_X_SUITES) else "3.x"


def _with_now(sql: str, now_ms: int) -> str:
    """``<NOW>`` and ``<NOW> + k``: the client's epoch milliseconds at test start."""
    return re.sub(r"<NOW>(\s*\+\s*(\d+))?", lambda m: str(now_ms + int(m.group(2) or 0)), sql)


_LOOP = re.compile(r"for\s+(\w+)\s+in\s+(-?\d+)\.\.(-?\d+)\s*:\s*")


def expand(sql: str, now_ms: int) -> list[str]:
    """A phase entry as the statements it stands for: itself, or the statements of a
    ``-- data_generator: for i in 0..9: stmt; for j in 0..19: stmt`` comment (nested loops,
    bounds inclusive, ``{expr}`` fields of integer arithmetic over the loop variables)."""
    generator = re.match(r"\s*--\s*data_generator:\s*(for\b.*)$", sql, re.S)
    if generator is None:
        return [_with_now(sql, now_ms)]
    return [_with_now(statement, now_ms) for statement in _loop(generator.group(1).strip(), {})]


def _loop(text: str, names: dict[str, int]) -> list[str]:
    loop = _LOOP.match(text)
    if loop is None:
        raise CaseFailed(f"data_generator {text[:80]!r}: expected 'for VAR in A..B: statements'")
    var, low, high = loop.group(1), int(loop.group(2)), int(loop.group(3))
    body = text[loop.end() :]
    if _LOOP.match(body):  # ``for i in …: for j in …: stmt``: the body is the inner loop
        return [statement for value in range(low, high + 1) for statement in _loop(body, {**names, var: value})]
    nested = re.search(r";\s*for\s+\w+\s+in\s", body)
    head, tail = (body[: nested.start()], body[nested.start() + 1 :].strip()) if nested else (body, "")
    statements = []
    for value in range(low, high + 1):
        scope = {**names, var: value}
        for part in head.split(";"):
            if part.strip():
                statements.append(_fill(part.strip(), scope))
        if tail:
            statements += _loop(tail, scope)
    return statements


def _fill(template: str, names: dict[str, int]) -> str:
    return render(template, names)


def _check(session: Session, check: dict[str, Any], history: dict[str, list[list[Any]]]) -> None:
    # transcribed queries sometimes carry a remark after the statement ("…; (each database)")
    try:
        parts = split_statements(check["query"])
    except TDStreamError:  # not even tokens: the statement as written (an expected error, say)
        parts = []
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
    # a query checked against its skip_tsma() form runs with querySmaOptimize on, as TDengine's
    # TSMA tests run it: then it reads a TSMA wherever one covers it
    chosen = session.options.query_sma_optimize
    session.options.query_sma_optimize = chosen or "equals_query" in check
    try:
        result = _query(session, query, label)
    finally:
        session.options.query_sma_optimize = chosen
    rows = result.display_rows(session.timezone)
    if check.get("empty_result_acceptable") and not rows:
        return
    previous = history.get(query)
    history[query] = rows
    for row, column in check.get("unchanged_cells", []):
        if previous is None or row >= len(previous) or row >= len(rows):
            raise CaseFailed(f"{label}: no earlier value of cell [{row},{column}] to compare with")
        if not _same(rows[row][column], previous[row][column]):
            raise CaseFailed(
                f"{label}: cell [{row},{column}] changed from {previous[row][column]!r} to {rows[row][column]!r}"
            )
    for key, column, value in check.get("cells_by_first_column", []):
        found = [r for r in rows if r and _same(r[0], key)]
        if not found or column >= len(found[0]) or not _same(found[0][column], value):
            shown = found[0][column] if found and column < len(found[0]) else "no such row"
            raise CaseFailed(f"{label}: row {key!r} column {column} is {shown!r}, expected {value!r}")
    for row, column, value in check.get("cells_not", []):
        if row < len(rows) and column < len(rows[row]) and _same(rows[row][column], value):
            raise CaseFailed(f"{label}: cell [{row},{column}] is {value!r}, which it must not be")
    _check_rows(rows, check, label)
    if "schema" in check:
        for i, expected_row in enumerate(check["schema"]):
            if i >= len(rows):
                raise CaseFailed(f"{label}: schema has {len(rows)} column(s), expected {len(check['schema'])}")
            for j, value in enumerate(expected_row):
                if not _same(rows[i][j], value):
                    raise CaseFailed(f"{label}: schema row {i} field {j} is {rows[i][j]!r}, expected {value!r}")
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


_COUNT_CHECKS: dict[str, tuple[Callable[[int, int], bool], str]] = {
    "row_count": (operator.eq, ""),
    "row_count_at_least": (operator.ge, "at least "),
    "row_count_at_most": (operator.le, "at most "),
    "row_count_greater_than": (operator.gt, "more than "),
    "row_count_not": (operator.ne, "anything but "),
}


def _check_rows(rows: list[list[Any]], check: dict[str, Any], label: str) -> None:
    """The row-count checks, on a query's rows or on what a subscription consumed."""
    for field_name, (compare, wording) in _COUNT_CHECKS.items():
        if field_name in check and not compare(len(rows), check[field_name]):
            raise CaseFailed(f"{label}: {len(rows)} row(s), expected {wording}{check[field_name]}")


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
    statements: list[str] = []
    prefix, rows = "", []
    for i in range(count):
        text = render(template.group(0), {"i": i, "j": 0})
        head, _, values = text.partition(" values ")
        if head != prefix or len(rows) == _BATCH_ROWS:
            if rows:
                statements.append(f"{prefix} values {' '.join(rows)}")
            prefix, rows = head, []
        rows.append(values.strip())
    if rows:
        statements.append(f"{prefix} values {' '.join(rows)}")
    return statements


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
