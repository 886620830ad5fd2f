"""Failpoints: the moments a fault test kills the process, to prove a crash there loses and
repeats nothing.

Owns only the check. ``TDSTREAM_FAILPOINT`` names one point; when execution reaches it the
process SIGKILLs itself — no cleanup, no finally blocks, as a power cut. Unset (always, outside
fault tests) a failpoint is one environment lookup.
"""

from __future__ import annotations

import os
import signal

FAILPOINT_ENV = "TDSTREAM_FAILPOINT"
# the points, in the order a run passes them
FAILPOINTS = ("before-output-commit", "after-output-commit", "after-triggers-finished", "notification-sent")
# the points of a write: its Delta commit is made, the catalog's marks are not yet recorded;
# a statement's first table is committed, the next not yet; the writer process has received
# a group of requests and committed none of them; the writer has committed a group and
# answered its clients, the marks not yet recorded
WRITE_FAILPOINTS = ("after-data-commit", "between-table-commits", "writer-received", "after-acknowledged")
# the points of a trigger tick's own commits: a virtual table's feed synced (its rows computed,
# then committed) and a legacy stream's replaced rows kept, each before the tick's checkpoint
TICK_FAILPOINTS = ("feed-rows-computed", "after-feed-commit", "after-written-commit")


def failpoint(name: str) -> None:
    assert name in FAILPOINTS or name in WRITE_FAILPOINTS or name in TICK_FAILPOINTS, name
    if os.environ.get(FAILPOINT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
