"""``tdstream spark start|stop|status``: the warm local Spark Connect server by hand.

Owns the commands only; the server's life cycle is ``compute/spark_server.py``'s. Runs and
SQL sessions start the server themselves on first use, so these are for starting it ahead of
time (the run command does), stopping it, and seeing where it listens and logs.
"""

from __future__ import annotations

import time

import click

from ..compute.spark import resolve_master
from ..compute.spark_server import ensure_server, running_server, server_home, stop_server
from .options import warehouse_option as _warehouse


@click.group()
def spark() -> None:
    """The warm local Spark Connect server every run and sensor shares."""


@spark.command()
@click.option("--master", default=None, help="Its Spark master (default TDSTREAM_SPARK_MASTER, then local[2]).")
@_warehouse
def start(master: str | None, warehouse: str | None) -> None:
    """Start the server (or report the one running); prints its URL."""
    chosen = resolve_master(master)
    if chosen.startswith("sc://"):
        raise click.UsageError(f"{chosen} is a Spark Connect endpoint, not a master to start a server on")
    home = server_home(warehouse)
    began = time.monotonic()
    state = ensure_server(chosen, home)
    click.echo(
        f"Spark Connect {state.url} (pid {state.pid}, master {state.master}) ready in {time.monotonic() - began:.1f} s"
    )
    click.echo(f"log: {state.log}")


@spark.command()
@_warehouse
def stop(warehouse: str | None) -> None:
    """Stop the server."""
    state = stop_server(server_home(warehouse))
    click.echo(
        "no Spark Connect server was running"
        if state is None
        else f"stopped Spark Connect {state.url} (pid {state.pid})"
    )


@spark.command()
@_warehouse
def status(warehouse: str | None) -> None:
    """Show the server: URL, pid, master, uptime, log."""
    home = server_home(warehouse)
    state = running_server(home)
    if state is None:
        click.echo(f"no Spark Connect server is running for {home} (`tdstream spark start` starts one)")
        raise SystemExit(1)
    click.echo(
        f"Spark Connect {state.url} (pid {state.pid}, master {state.master}), up {time.time() - state.started:.0f} s"
    )
    click.echo(f"log: {state.log}")
