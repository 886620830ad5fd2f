"""Durations and timestamp literals of the TDengine dialect.

Owns the units (``b u a s m h d w n y``), database precisions (``ms us ns``), and the
conversion of timestamp strings / epoch integers / ``now`` into integers in a precision
and back into display strings in a session time zone. Pure functions: no catalog, no I/O.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

NANOS_PER_UNIT: dict[str, int] = {
    "b": 1,
    "u": 1_000,
    "a": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
    "d": 86400 * 1_000_000_000,
    "w": 7 * 86400 * 1_000_000_000,
}
CALENDAR_UNITS = ("n", "y")
ALL_UNITS = (*NANOS_PER_UNIT, *CALENDAR_UNITS)

PRECISIONS: dict[str, int] = {"ms": 1_000_000, "us": 1_000, "ns": 1}
DAY_NANOS = NANOS_PER_UNIT["d"]


class TimeValueError(ValueError):
    """A duration or timestamp literal is malformed; the parser adds the position."""


@dataclass(frozen=True)
class Duration:
    """A duration literal such as ``10s``; ``n`` (month) and ``y`` (year) are calendar units."""

    value: int
    unit: str

    def __str__(self) -> str:
        return f"{self.value}{self.unit}"

    @property
    def is_calendar(self) -> bool:
        return self.unit in CALENDAR_UNITS

    @property
    def months(self) -> int:
        if not self.is_calendar:
            raise TimeValueError(f"{self} is not a calendar duration")
        return self.value * (12 if self.unit == "y" else 1)

    @property
    def nanos(self) -> int:
        if self.is_calendar:
            raise TimeValueError(f"{self} is a calendar duration and has no fixed length")
        return self.value * NANOS_PER_UNIT[self.unit]

    def in_precision(self, precision: str) -> int:
        """The duration as an integer count of the precision's unit (``1s`` in ms → 1000)."""
        nanos = self.nanos
        per = PRECISIONS[precision]
        if nanos % per:
            raise TimeValueError(f"duration {self} is finer than the database precision '{precision}'")
        return nanos // per


_DURATION = re.compile(r"^(\d+)([a-zA-Z])$")


def parse_duration(text: str, *, allowed_units: tuple[str, ...] = ALL_UNITS) -> Duration:
    """``10s`` → Duration(10, 's'); fractions and unknown units are errors."""
    m = _DURATION.match(text.strip())
    if m is None:
        if re.match(r"^\d*\.\d*[a-zA-Z]+$", text.strip()):
            raise TimeValueError(f"fractional duration {text!r} is not allowed; use a smaller unit")
        raise TimeValueError(f"malformed duration {text!r}; expected an integer and a unit such as 10s")
    value, unit = int(m.group(1)), m.group(2).lower()
    if unit not in allowed_units:
        raise TimeValueError(f"unit {unit!r} is not allowed in {text!r}; allowed units: {', '.join(allowed_units)}")
    return Duration(value, unit)


_TS_STRING = re.compile(
    r"^(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,9}))?)?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?$"
)


_TS_STRICT = re.compile(r"^\d{4}-\d{1,2}-\d{1,2}(?: \d{1,2}:\d{1,2}:\d{1,2}(?:\.\d{1,9})?)?$")


def parse_timestamp(text: str, precision: str, tz: ZoneInfo, *, strict: bool = False) -> int:
    """A timestamp string (``2025-01-01 00:00:00[.fff][+08:00]`` or a bare date) as an
    integer in ``precision``; the session time zone applies when the string has none.
    ``strict`` accepts only ``YYYY-MM-DD[ HH:MM:SS[.fff]]``, the form TDengine's syntax test
    allows for stream start times (no ``T``, no zone)."""
    m = _TS_STRING.match(text.strip())
    if m is None or (strict and not _TS_STRICT.match(text.strip())):
        raise TimeValueError(f"invalid timestamp {text!r}; expected 'YYYY-MM-DD HH:MM:SS[.fff]' or 'YYYY-MM-DD'")
    year, month, day, hour, minute, second, frac, zone = m.groups()
    try:
        naive = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0))
    except ValueError as exc:
        raise TimeValueError(f"invalid timestamp {text!r}: {exc}") from None
    if zone is None:
        aware = naive.replace(tzinfo=tz)
    elif zone == "Z":
        aware = naive.replace(tzinfo=UTC)
    else:
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
        aware = naive.replace(tzinfo=UTC) - sign * offset
        aware = aware.replace(tzinfo=UTC)
    seconds = int(aware.timestamp())
    frac_nanos = int((frac or "").ljust(9, "0"))
    nanos = seconds * 1_000_000_000 + frac_nanos
    per = PRECISIONS[precision]
    return nanos // per


def now_in(precision: str) -> int:
    return time.time_ns() // PRECISIONS[precision]


def format_timestamp(value: int, precision: str, tz: ZoneInfo) -> str:
    """TDengine's display form: local time with 3, 6 or 9 fraction digits."""
    per = PRECISIONS[precision]
    nanos = value * per
    seconds, rest = divmod(nanos, 1_000_000_000)
    local = datetime.fromtimestamp(seconds, tz)
    digits = {"ms": 3, "us": 6, "ns": 9}[precision]
    fraction = str(rest).rjust(9, "0")[:digits]
    return f"{local:%Y-%m-%d %H:%M:%S}.{fraction}"


def resolve_timezone(name: str | None) -> ZoneInfo:
    """A time zone by IANA name; ``None`` means the machine's local zone."""
    if name:
        try:
            return ZoneInfo(name)
        except Exception:
            raise TimeValueError(f"unknown time zone {name!r}") from None
    local = datetime.now().astimezone().tzinfo
    key = getattr(local, "key", None)
    if key:
        return ZoneInfo(key)
    try:
        return ZoneInfo(time.tzname[0]) if time.tzname[0] != "UTC" else ZoneInfo("UTC")
    except Exception:
        return ZoneInfo("UTC")
