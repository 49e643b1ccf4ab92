"""RFC 3339 UTC timestamps ([8.timestamps]); the tasks schema calls them ISO 8601 and its examples use `Z`."""

from __future__ import annotations

from datetime import datetime, timezone


def iso_ms(epoch_ms: int | float) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration_text(seconds: float) -> str:
    """A window as people say it: "30 minutes", "4 seconds"."""
    return f"{seconds / 60:g} minutes" if seconds >= 60 else f"{seconds:g} seconds"
