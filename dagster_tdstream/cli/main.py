"""Entry point of the ``tdstream`` command (see the package docstring)."""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..errors import TDStreamError
from ..sql import ast
from ..sql.parser import parse_statement
from ..sql.timeunits import TimeValueError, resolve_timezone
from ..sql.validate import validate_create_stream
from .options import warehouse_option as _warehouse
from .spark import spark as spark_commands
from .writer import writer as writer_commands

TIMEZONE_ENV = "TDSTREAM_TIMEZONE"


def _report(exc: BaseException, debug: bool) -> None:
    if debug:
        traceback.print_exception(exc)
    message = str(exc) if isinstance(exc, TDStreamError) else f"error: {type(exc).__name__}: {exc}"
    click.echo(message, err=True)


def _guarded(debug: bool, action: Callable[[], Any]) -> Any:
    try:
        return action()
    except Exception as exc:  # an unexpected failure still prints one line unless --debug
        _report(exc, debug)
    # exit outside the except block: the failed call's frames (and a Spark result stream they
    # may hold open) are released first; exiting inside it left them to interpreter shutdown,
    # where closing the Spark Connect channel waited on that stream forever
    gc.collect()
    sys.exit(1)


def _session(
    warehouse: str | None,
    metadata_url: str | None,
    database: str | None,
    timezone: str | None,
    query_timeout: float | None = None,
    dialect: str = "3.x",
) -> Any:
    """A SQL session on the warehouse; when a Dagster serves it (recorded by its code location,
    or named by DAGSTER_HOME / TDSTREAM_DAGSTER_URL), stream statements take effect there."""
    from ..orchestration.control import DagsterLink, DagsterStreamControl
    from ..session import Session
    from ..storage.warehouse import Warehouse

    opened = Warehouse(warehouse, metadata_url=metadata_url)
    link = DagsterLink.recorded(opened)
    control = DagsterStreamControl(link) if link is not None else None
    return Session(
        opened, database=database, timezone=timezone, control=control, query_timeout=query_timeout, dialect=dialect
    )


@click.group()
@click.version_option(package_name="dagster-tdstream")
def main() -> None:
    """TDengine stream computing on Dagster, Spark and Delta Lake."""


_metadata = click.option(
    "--metadata-url", envvar="TDSTREAM_METADATA_URL", default=None, help="SQLAlchemy URL of the catalog."
)
_timezone = click.option(
    "--timezone", envvar=TIMEZONE_ENV, default=None, help="Session time zone (IANA name; default: local)."
)
_debug = click.option("--debug", is_flag=True, help="Show tracebacks.")
_query_timeout = click.option(
    "--query-timeout",
    envvar="TDSTREAM_QUERY_TIMEOUT",
    type=float,
    default=None,
    help="Cancel a SELECT running longer than this many seconds (Ctrl-C cancels one too).",
)


@main.command()
@click.argument("statements", required=False)
@click.option("-f", "--file", "file", type=click.Path(exists=True, dir_okay=False), help="Run a SQL file.")
@click.option("-d", "--database", default=None, help="Database to USE first.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
@click.option(
    "--dialect",
    type=click.Choice(["3.x", "2.x"]),
    default="3.x",
    show_default=True,
    help="2.x: results as the 2.x client shows them (INTERVAL rows led by the window start, 2.x SHOW STREAMS).",
)
@_warehouse
@_metadata
@_timezone
@_query_timeout
@_debug
def sql(
    statements: str | None,
    file: str | None,
    database: str | None,
    fmt: str,
    dialect: str,
    warehouse: str | None,
    metadata_url: str | None,
    timezone: str | None,
    query_timeout: float | None,
    debug: bool,
) -> None:
    """Run SQL statements ("STMT; STMT; …" or -f file.sql) against the warehouse."""
    if (statements is None) == (file is None):
        raise click.UsageError("give the statements as an argument or with -f FILE (one of the two)")
    script = statements if statements is not None else Path(file).read_text()  # type: ignore[arg-type]

    def run() -> None:
        session = _session(warehouse, metadata_url, database, timezone, query_timeout, dialect)
        for result in session.iter_execute(script):
            if result.table is None:
                if fmt != "json":
                    click.echo(result.message)
                continue
            click.echo(result.render(fmt, session.timezone))

    _guarded(debug, run)


@main.command()
@click.argument("source", type=click.File("r"), default="-")
@click.option("-d", "--database", required=True, help="The database the lines are written into.")
@click.option(
    "--precision",
    type=click.Choice(["ns", "us", "ms", "s"]),
    default="ns",
    show_default=True,
    help="The lines' timestamp unit (converted to the database's precision).",
)
@click.option("--child-table-tag", default=None, help="Name child tables by this tag's value instead of t_<md5>.")
@click.option("--batch", type=int, default=10_000, show_default=True, help="Lines per write (one commit per table).")
@_warehouse
@_metadata
@_debug
def ingest(
    source: Any,
    database: str,
    precision: str,
    child_table_tag: str | None,
    batch: int,
    warehouse: str | None,
    metadata_url: str | None,
    debug: bool,
) -> None:
    """Write InfluxDB line protocol (TDengine's schemaless format) from SOURCE (a file, or - for
    stdin) into a database: super tables and child tables are created as the lines need."""

    def run() -> None:
        session = _session(warehouse, metadata_url, database, None, None, "3.x")
        total, lines = 0, []
        for line in [*source, None]:
            if line is not None:
                lines.append(line)
            if lines and (line is None or len(lines) >= batch):
                total += session.write_lines(lines, precision=precision, child_table_tag=child_table_tag).affected or 0
                lines = []
        click.echo(f"Insert OK, {total} row(s) affected")

    _guarded(debug, run)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, required=True, help="Port to listen on (the NOTIFY URL's port).")
@click.option("--count", type=int, default=None, help="Stop after this many messages.")
@click.option("--seconds", type=float, default=None, help="Stop after this many seconds.")
@click.option("--raw", is_flag=True, help="One message per line as received, instead of indented JSON.")
@_debug
def listen(host: str, port: int, count: int | None, seconds: float | None, raw: bool, debug: bool) -> None:
    """Receive stream notifications over WebSocket and print them (ws://HOST:PORT/any/path)."""
    import json

    from ..notify.listen import listen as serve

    def show(text: str) -> None:
        if raw:
            click.echo(text)
            return
        try:
            click.echo(json.dumps(json.loads(text), indent=2, ensure_ascii=False))
        except ValueError:
            click.echo(text)

    def ready() -> None:
        click.echo(f"listening on ws://{host}:{port} (Ctrl-C stops)", err=True)

    try:
        received = _guarded(debug, lambda: serve(host, port, show, count=count, seconds=seconds, on_ready=ready))
    except KeyboardInterrupt:
        return
    click.echo(f"{received} message(s) received", err=True)


@main.command()
@click.option("-d", "--database", default=None, help="Database to USE first.")
@click.option(
    "--history",
    type=click.Path(dir_okay=False),
    default=str(Path.home() / ".tdstream_history"),
    show_default=True,
    help="Where the prompt history is kept.",
)
@_warehouse
@_metadata
@_timezone
@_query_timeout
@_debug
def shell(
    database: str | None,
    history: str,
    warehouse: str | None,
    metadata_url: str | None,
    timezone: str | None,
    query_timeout: float | None,
    debug: bool,
) -> None:
    """An interactive SQL prompt: statements end with ';', 'source FILE' runs a file, 'quit' leaves."""
    from .shell import Shell, interactive_reader, lines_from

    session = _guarded(debug, lambda: _session(warehouse, metadata_url, database, timezone, query_timeout))
    interactive = sys.stdin.isatty()
    if interactive:
        click.echo("tdstream shell — statements end with ';', 'help' for commands, 'quit' to leave.")
    read = interactive_reader(Path(history)) if interactive else lines_from(sys.stdin)
    Shell(session, click.echo).run(read)


@main.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--expect-invalid", is_flag=True, help="Every line must be rejected.")
@click.option(
    "--setup",
    type=click.Path(exists=True, dir_okay=False),
    help="DDL to run first in a scratch warehouse, so statements are also checked against those tables.",
)
@_timezone
@_debug
def parse(file: str, expect_invalid: bool, setup: str | None, timezone: str | None, debug: bool) -> None:
    """Check one statement per line; ends with 'N passed, M failed'."""
    lines = [
        (number, text.strip())
        for number, text in enumerate(Path(file).read_text().splitlines(), start=1)
        if text.strip() and not text.strip().startswith(("--", "#"))
    ]

    def run() -> tuple[int, int]:
        check = _checker(setup, timezone)
        passed = failed = 0
        for number, text in lines:
            try:
                check(text)
                error = None
            except (TDStreamError, TimeValueError) as exc:
                error = exc
            if debug and error is not None:
                traceback.print_exception(error)
            where = f"line {number}"
            if error is not None and getattr(error, "line", None) is not None:
                where = f"line {number}, column {error.column}"  # type: ignore[attr-defined]
            message = getattr(error, "message", str(error)) if error is not None else ""
            if expect_invalid:
                ok = error is not None
                click.echo(f"{'ok' if ok else 'FAIL'} {where}: " + (f"rejected: {message}" if ok else "accepted"))
            else:
                ok = error is None
                click.echo(f"{'ok' if ok else 'FAIL'} {where}" + ("" if ok else f": {message}"))
            passed += ok
            failed += not ok
        return passed, failed

    passed, failed = _guarded(debug, run)
    click.echo(f"{passed} passed, {failed} failed")
    sys.exit(0 if failed == 0 else 1)


@main.command("run")
@click.option("--until-idle", is_flag=True, required=True, help="Tick sensors and run until nothing is pending.")
@click.option("--max-rounds", default=50, show_default=True, help="Upper bound on sensor rounds.")
@_warehouse
@_metadata
@_timezone
@_debug
def run_streams(
    until_idle: bool,
    max_rounds: int,
    warehouse: str | None,
    metadata_url: str | None,
    timezone: str | None,
    debug: bool,
) -> None:
    """Headless mode: drive every stream's sensor and runs in-process (no daemon needed)."""
    del until_idle  # the only mode; the flag keeps the command's intent explicit

    def run() -> None:
        from ..storage.warehouse import Warehouse
        from ..testing.harness import StreamHarness

        report = StreamHarness(Warehouse(warehouse, metadata_url=metadata_url), timezone=timezone).run_until_idle(
            max_rounds
        )
        click.echo(f"{report.ticks} sensor tick(s), {report.runs} run(s)")
        for sensor_name, reason in sorted(report.skipped.items()):
            click.echo(f"{sensor_name}: {reason}")
        for failure in report.failures:
            click.echo(f"failed: {failure}", err=True)
        if report.failures:
            sys.exit(1)

    _guarded(debug, run)


@main.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--only", default=None, help="Run one case by id.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write results as JSON.")
@_debug
def conformance(directory: str, only: str | None, json_path: str | None, debug: bool) -> None:
    """Run TDengine stream scenarios (cases/*.json) and statement files; ends with 'N passed, M failed'."""
    import json

    def run() -> None:
        from ..compute.spark import build_spark_session
        from ..testing.conformance import run_directory, summary

        # one Spark client for every case, closed here: clients left to interpreter shutdown
        # could wait forever there on a result stream nobody reads
        spark = build_spark_session()
        try:
            results = run_directory(Path(directory), only=only, spark=spark)
        finally:
            spark.stop()
        for result in results:
            status = "PASS" if result.passed else "FAIL"
            detail = f" — {result.reason}" if result.reason else ""
            click.echo(f"{status} {result.id} ({result.seconds:.1f}s){detail}")
        totals = summary(results)
        if json_path:
            Path(json_path).write_text(json.dumps(totals, indent=2))
        click.echo(f"{totals['passed']} passed, {totals['failed']} failed")
        sys.exit(0 if totals["failed"] == 0 else 1)

    _guarded(debug, run)


def _checker(setup: str | None, timezone: str | None) -> Callable[[str], None]:
    resolve_timezone(timezone)
    if setup is None:

        def check(text: str) -> None:
            stmt = parse_statement(text)
            if isinstance(stmt, ast.CreateStream):
                validate_create_stream(stmt, timezone=timezone)

        return check
    from ..session import Session
    from ..storage.warehouse import Warehouse

    scratch = tempfile.mkdtemp(prefix="tdstream-parse-")
    session = Session(
        Warehouse(os.path.join(scratch, "warehouse"), metadata_url=f"sqlite:///{scratch}/catalog.sqlite"),
        timezone=timezone,
    )
    session.execute(Path(setup).read_text())

    def check_with_catalog(text: str) -> None:
        session.check(text)

    return check_with_catalog


@main.command()
@click.argument("table")
@click.option("--from", "start", default=None, help="Only rows at or after this time ('2021-07-20 08:00:00' or epoch).")
@click.option("--where", default=None, help="Only rows matching this condition (columns, tags, tbname).")
@click.option("--interval", default=1000, show_default=True, help="Poll the table every MS milliseconds.")
@click.option(
    "--progress-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Keep the progress here: started again with it, the subscription resumes after the last row printed.",
)
@click.option("--restart", is_flag=True, help="Ignore the saved progress: start from the table's rows.")
@click.option("--max-polls", type=int, default=None, help="Stop after this many polls (default: until Ctrl-C).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
@_warehouse
@_metadata
@_timezone
@_debug
def subscribe(
    table: str,
    start: str | None,
    where: str | None,
    interval: int,
    progress_file: str | None,
    restart: bool,
    max_polls: int | None,
    fmt: str,
    warehouse: str | None,
    metadata_url: str | None,
    timezone: str | None,
    debug: bool,
) -> None:
    """Print the rows written to TABLE (db.table or a super table) as they arrive (TDengine
    2.x subscription): first the rows it holds, then new and updated rows in commit order."""
    from ..sql.timeunits import format_timestamp

    def run() -> None:
        session = _session(warehouse, metadata_url, None, timezone)
        epoch = int(start) if start is not None and start.lstrip("-").isdigit() else start
        sub = session.subscribe(
            table, where=where, start=epoch, progress_file=progress_file, restart=restart, interval_ms=interval
        )
        info = sub.spec.table
        precision = session.warehouse.database(info.db).precision
        stamps = {c.name for c in (*info.columns, *info.tags) if c.type.name == "TIMESTAMP"}
        polls = 0
        while max_polls is None or polls < max_polls:
            started = time.monotonic()
            # progress is saved after the rows are printed: a kill in between prints that batch
            # again after a restart, never loses it
            for row in sub.consume(commit=False):
                shown = {
                    k: format_timestamp(v, precision, session.timezone) if k in stamps and v is not None else v
                    for k, v in row.items()
                }
                click.echo(json.dumps(shown, default=str) if fmt == "json" else "\t".join(map(str, shown.values())))
            sys.stdout.flush()
            sub.commit()
            polls += 1
            if max_polls is None or polls < max_polls:
                time.sleep(max(0.0, interval / 1000 - (time.monotonic() - started)))

    try:
        _guarded(debug, run)
    except KeyboardInterrupt:  # Ctrl-C ends it; the progress of every printed batch is saved
        click.echo("", err=True)


main.add_command(spark_commands)
main.add_command(writer_commands)


if __name__ == "__main__":  # `python -m dagster_tdstream.cli.main`: how `tdstream writer start` starts it
    main()
