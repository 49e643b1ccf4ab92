"""Times on the wire: RFC 3339 UTC timestamps ([8.timestamps]; the tasks schema calls them ISO 8601 and its
examples use `Z`), and configured durations as people say them ("30 minutes", "7 days", "24h")."""

from __future__ import annotations

import time
from datetime import UTC, datetime

# Largest first: a duration is said in the largest unit it is a whole number (at least 2) of.
_UNITS = (("day", "d", 86_400), ("hour", "h", 3_600))


def now_ms() -> int:
    """The wall clock in epoch milliseconds, as records keep times."""
    return int(time.time() * 1000)


def iso_ms(epoch_ms: float) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _count_and_unit(seconds: float) -> tuple[float, str, str]:
    for unit, short, size in _UNITS:
        if seconds >= 2 * size and seconds % size == 0:
            return seconds / size, unit, short
    if seconds >= 60:
        return seconds / 60, "minute", "min"
    return seconds, "second", "s"


def duration_text(seconds: float) -> str:
    """A window as people say it: "30 minutes", "24 hours", "7 days", "4 seconds"."""
    count, unit, _ = _count_and_unit(seconds)
    return f"{count:g} {unit}" + ("" if count == 1 else "s")


def duration_adjective(seconds: float) -> str:
    """The same, before a noun: "7-day retention", "30-minute window"."""
    count, unit, _ = _count_and_unit(seconds)
    return f"{count:g}-{unit}"


def duration_short(seconds: float) -> str:
    """The compact form: "24h", "7d", "30min"."""
    count, _, short = _count_and_unit(seconds)
    return f"{count:g}{short}"
