"""The outbox as the dispatcher sees it: the TaskRegistry keeps it (its events are written in the transaction of the
change that caused them) and exposes these calls; the dispatcher never writes an event, only what became of it."""

from __future__ import annotations

from typing import Protocol

from mcp_protocol.webhook_events import Attempt, Backlog, Delivery


class Outbox(Protocol):
    async def due(self, now_ms: int, limit: int, lease_until_ms: int) -> list[Delivery]:
        """Pending deliveries due at `now_ms` (next_attempt_at_ms at or before it), oldest due first, at most
        `limit`, each held until `lease_until_ms` (its next_attempt_at_ms set to it, in the same transaction), so no
        later call hands it out again before then; `record_attempt` sets the real next time."""
        ...

    async def record_attempt(self, event_id: str, attempt: Attempt) -> None:
        """Record one attempt's outcome: the attempt count goes up by one, state, next due time and error become
        the attempt's. An event no longer pending (delivered meanwhile by another dispatcher) stays as it is."""
        ...

    async def list_deliveries(
        self, principal: str, limit: int, before: tuple[int, str] | None = None
    ) -> list[Delivery]:
        """The principal's deliveries, newest event first (creation time, then event id), at most `limit`; with
        `before` (a previous page's last (created_at_ms, event_id)), those after it (`GET /webhooks`)."""
        ...

    async def backlog(self) -> Backlog:
        """How many events are pending, the oldest one's creation time, and when the soonest is due."""
        ...

    async def added_since(self, seen: str | None, timeout_s: float) -> str:
        """Wait for new events: returns a token of the events added so far as soon as it differs from `seen` (a
        token this returned before; None: at once), else after `timeout_s`."""
        ...
