"""Structured logs: one JSON object per line (or plain text on a terminal), with the request's context.

Each vidforge process logs through Python's `logging` to stderr: the `vidforge serve` process to its own output,
Ray's workers (ingress replicas, the supervisor, the registry) to their files in the Ray session's `logs/` folder.
A line carries `ts`, `level`, `logger`, `event` (what happened: `log` for a plain message), `message`, the fields the
call site passes (`extra=`: `request_id`, `task_id`, `principal`, `code`, durations in `*_s`), and those the request
being served bound with `log_context` (the principal, the method, the task). Nothing here reads a credential: call
sites log ids and outcomes, never a token, a review link's capability or a key.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, TextIO

# What every LogRecord has of its own (and the timestamp Ray's record factory adds to each: `ts` says it); anything
# else on a record came from `extra=`.
_RECORD_FIELDS = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "_ray_timestamp_ns",
}
_context: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "vidforge_log_context", default=MappingProxyType({})
)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Add `fields` to every line logged inside the block (in this task and the tasks it starts)."""
    token = _context.set({**_context.get(), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def line_fields(record: logging.LogRecord) -> dict[str, object]:
    """The bound context and the record's own extras (the extras win)."""
    extras = {key: value for key, value in record.__dict__.items() if key not in _RECORD_FIELDS}
    return {**_context.get(), **extras}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (a traceback goes in `exception`)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = line_fields(record)
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": fields.pop("event", "log"),
            "message": record.getMessage(),
            **fields,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """`time level logger: message key=value ...`, for a person at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        fields = " ".join(f"{key}={value}" for key, value in line_fields(record).items())
        return f"{super().formatMessage(record)} {fields}".rstrip()


class _VidforgeHandler(logging.StreamHandler[TextIO]):
    """The handler `configure_logging` installs (told apart from others', so a second call replaces it)."""


def configure_logging(log_format: Literal["json", "text"] | None) -> None:
    """Log INFO and above of this process to stderr in `log_format` (None: json)."""
    handler = _VidforgeHandler(sys.stderr)
    handler.setFormatter(TextFormatter() if log_format == "text" else JsonFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _VidforgeHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
