"""The names a stream's objects carry in Dagster: its asset function, trigger sensor and PERIOD
schedule. In one place because the SQL side (STOP/START, ``ins_stream_tasks``) and the
definitions must agree on them. Pure functions of the stream key; imports nothing.
"""

from __future__ import annotations

import re


def definition_name(stream_key: str) -> str:
    """The Python identifier a stream's Dagster objects are named from: ``db__name``."""
    return re.sub(r"\W", "_", stream_key.replace(".", "__", 1))


def sensor_name(stream_key: str) -> str:
    return f"{definition_name(stream_key)}__trigger"


def schedule_name(stream_key: str) -> str:
    return f"{definition_name(stream_key)}__period"
