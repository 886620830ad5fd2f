"""Options several ``tdstream`` commands share (one definition, the same flag and help)."""

from __future__ import annotations

import click

warehouse_option = click.option(
    "--warehouse", envvar="TDSTREAM_WAREHOUSE", default=None, help="Warehouse URI (default ./.tdstream)."
)
