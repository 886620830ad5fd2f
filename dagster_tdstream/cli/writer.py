"""``tdstream writer start|serve|stop|status``: the warehouse's writer process by hand.

Owns the commands only; the writer itself (its socket, grouping and commits) is
``storage/writer.py``'s. While a writer runs, every process's single-table writes to the
warehouse go through it (unless ``TDSTREAM_WRITER=off``); without one, processes commit
themselves, as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from ..errors import TDStreamError
from ..storage.delta import is_local, local_path
from ..storage.warehouse import resolve_warehouse_uri
from ..storage.writer import address, request
from .options import warehouse_option as _warehouse

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 150.0  # it answers what is queued first; one table's lock may take 120 s
LOG_FILE = ".writer.log"

_metadata = click.option(
    "--metadata-url", envvar="TDSTREAM_METADATA_URL", default=None, help="SQLAlchemy URL of the catalog."
)
_idle = click.option("--idle-seconds", type=float, default=None, help="Stop after this long without clients.")


def _located(warehouse: str | None, metadata_url: str | None) -> tuple[Path, bytes]:
    """The warehouse's folder and its writer's socket name."""
    uri = resolve_warehouse_uri(warehouse)
    if not is_local(uri):
        raise click.UsageError(f"{uri} is not a local folder: a writer serves local warehouses only")
    root = local_path(uri)
    url = metadata_url or f"sqlite:///{root / 'catalog.sqlite'}"
    return root, address(root, url)


def _describe(status: dict[str, Any]) -> str:
    return (
        f"writer (pid {status['pid']}) of {status['warehouse']}: up {time.time() - status['started']:.0f} s, "
        f"{status['requests']} writes ({status.get('statements', 0)} sent as SQL) in {status['commits']} commits, "
        f"{status['connections']} connected"
    )


@click.group()
def writer() -> None:
    """The warehouse's writer: one process that group-commits every client's small writes."""


@writer.command()
@_warehouse
@_metadata
@_idle
def start(warehouse: str | None, metadata_url: str | None, idle_seconds: float | None) -> None:
    """Start the writer in the background (or report the one running)."""
    root, name = _located(warehouse, metadata_url)
    running = request(name, {"op": "status"})
    if running is not None:
        click.echo(_describe(running))
        return
    root.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "dagster_tdstream.cli.main", "writer", "serve", "--warehouse", str(root)]
    if metadata_url is not None:
        command += ["--metadata-url", metadata_url]
    if idle_seconds is not None:
        command += ["--idle-seconds", str(idle_seconds)]
    log = root / LOG_FILE
    began = time.monotonic()
    with open(log, "ab") as sink:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, start_new_session=True)
    while time.monotonic() - began < START_TIMEOUT_SECONDS:
        status = request(name, {"op": "status"})
        if status is not None:
            click.echo(f"{_describe(status)}; ready in {time.monotonic() - began:.1f} s")
            click.echo(f"log: {log}")
            return
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise click.ClickException("the writer exited at start:\n" + "\n".join(tail))
        time.sleep(0.1)
    process.kill()
    raise click.ClickException(f"the writer did not answer within {START_TIMEOUT_SECONDS:.0f} s (log: {log})")


@writer.command()
@_warehouse
@_metadata
@_idle
def serve(warehouse: str | None, metadata_url: str | None, idle_seconds: float | None) -> None:
    """Run the writer in the foreground until stopped."""
    from ..families.writer_insert import writer_statements
    from ..storage.warehouse import Warehouse
    from ..storage.writer import WriterServer

    root, _ = _located(warehouse, metadata_url)
    try:
        opened = Warehouse(str(root), metadata_url=metadata_url)
        server = WriterServer(opened, root, idle_seconds, writer_statements(opened))
        click.echo(f"writer (pid {os.getpid()}) serving {root}", err=True)
        server.serve()
    except TDStreamError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"writer stopped after {server.requests} writes in {server.commits} commits", err=True)


@writer.command()
@_warehouse
@_metadata
def stop(warehouse: str | None, metadata_url: str | None) -> None:
    """Stop the writer once it has answered every write sent to it."""
    _, name = _located(warehouse, metadata_url)
    answer = request(name, {"op": "stop"})
    if answer is None:
        click.echo("no writer was running")
        return
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while request(name, {"op": "status"}) is not None:
        if time.monotonic() > deadline:
            raise click.ClickException(f"the writer (pid {answer['pid']}) is still running")
        time.sleep(0.1)
    click.echo(f"stopped the writer (pid {answer['pid']})")


@writer.command()
@_warehouse
@_metadata
def status(warehouse: str | None, metadata_url: str | None) -> None:
    """Show the writer: pid, uptime, writes and commits."""
    root, name = _located(warehouse, metadata_url)
    running = request(name, {"op": "status"})
    click.echo(
        _describe(running) if running is not None else f"no writer is running for {root} (`tdstream writer start`)"
    )
