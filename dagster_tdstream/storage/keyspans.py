"""Where a table name's stored keys may lie: a few spans of timestamps per child table.

Owns the rule that lets a write append instead of merge: rows can be appended only if none of
their keys is stored yet, and a key outside every span of its table name is certainly not.
Spans always cover every stored key (a superset: deletes leave them, joining neighbours only
widens them), at most ``MAX_SPANS`` per name, so the check stays a few comparisons however
long a table is fed. One span ending at the newest key is the plain watermark (what a catalog
that recorded no spans is read as); several spans let rows arriving out of order into a gap —
several writers of one child table at different times, a device replaying its buffer — skip
the merge. Must not read or write storage: the warehouse keeps the spans in the catalog.
"""

from __future__ import annotations

import json

import numpy as np

Span = tuple[int, int]  # inclusive [low, high]
Spans = tuple[Span, ...]  # sorted, disjoint

MAX_SPANS = 16  # per table name: a gap narrower than the rest is given up first
NO_KEY = -(2**63)


def up_to(mark: int) -> Spans:
    """Every key up to ``mark``: all that is known when only the newest key was recorded."""
    return ((NO_KEY, mark),)


def decode(text: str | None, mark: int) -> Spans:
    """Spans as the catalog keeps them (JSON pairs), or ``up_to(mark)`` when none were kept."""
    if text is None:
        return up_to(mark)
    return tuple((int(low), int(high)) for low, high in json.loads(text))


def encode(spans: Spans) -> str:
    return json.dumps([list(span) for span in spans], separators=(",", ":"))


def increasing(keys: np.ndarray) -> bool:
    """Whether ``keys`` strictly increase (no key repeats, none out of order)."""
    return len(keys) < 2 or bool(np.all(keys[1:] > keys[:-1]))


def of_keys(keys: np.ndarray) -> Spans:
    """At most ``MAX_SPANS`` spans covering ``keys`` exactly at their ends, split at the widest
    gaps between consecutive keys."""
    ordered = keys if increasing(keys) else np.unique(keys)  # most writes come in time order: no sort
    if len(ordered) == 1:
        return ((int(ordered[0]), int(ordered[0])),)
    gaps = np.diff(ordered)
    cuts = min(MAX_SPANS - 1, len(gaps))
    # the positions after which a span ends: the ``cuts`` widest gaps
    ends = np.sort(np.argpartition(gaps, len(gaps) - cuts)[len(gaps) - cuts :])
    starts = np.concatenate(([0], ends + 1))
    stops = np.concatenate((ends, [len(ordered) - 1]))
    return tuple((int(ordered[a]), int(ordered[b])) for a, b in zip(starts, stops, strict=True))


def union(left: Spans, right: Spans) -> Spans:
    """Spans covering both, overlapping ones joined, then the narrowest gaps closed until at
    most ``MAX_SPANS`` remain."""
    joined: list[list[int]] = []
    for low, high in sorted(left + right):
        if joined and low <= joined[-1][1] + 1:
            joined[-1][1] = max(joined[-1][1], high)
        else:
            joined.append([low, high])
    while len(joined) > MAX_SPANS:
        narrowest = min(range(len(joined) - 1), key=lambda i: joined[i + 1][0] - joined[i][1])
        joined[narrowest][1] = joined.pop(narrowest + 1)[1]
    return tuple((low, high) for low, high in joined)


def overlaps(spans: Spans, low: int, high: int) -> bool:
    """Whether [low, high] meets any span."""
    return any(a <= high and low <= b for a, b in spans)


def covers_any(spans: Spans, keys: np.ndarray) -> bool:
    """Whether any key lies inside a span."""
    lows = np.fromiter((span[0] for span in spans), dtype=np.int64, count=len(spans))
    highs = np.fromiter((span[1] for span in spans), dtype=np.int64, count=len(spans))
    index = np.searchsorted(lows, keys, side="right") - 1
    inside = index >= 0
    return bool(np.any(keys[inside] <= highs[index[inside]]))
