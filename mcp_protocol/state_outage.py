"""The task state out of reach for now: its database down, hung, failing over, read-only or full.

Raised below the wire (the registry and its stores) and answered by every carrier as the contract's temporary
`internal_error`, with a retry hint: a JSON-RPC error with the envelope in `data`, a tool error, or an HTTP 503 with
`Retry-After`. It keeps its arguments in `args`, so it crosses Ray's pickling as itself.
"""

from __future__ import annotations

from mcp_protocol import errors
from mcp_protocol.envelope import VidforgeError


class StateUnavailable(Exception):
    """The task state cannot be read or written now; the same request may succeed after ``retry_after_ms``."""

    def __init__(self, reason: str, retry_after_ms: int) -> None:
        super().__init__(reason, retry_after_ms)
        self.reason = reason  # names the store (never its credentials) and what failed
        self.retry_after_ms = retry_after_ms

    def __str__(self) -> str:
        return f"the task state is unavailable: {self.reason}"

    def error(self) -> VidforgeError:
        """The contract's envelope for it."""
        return errors.state_unavailable(self.reason, self.retry_after_ms)
