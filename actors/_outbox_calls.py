"""The TaskRegistry's calls on the webhook outbox (serve_app/webhooks/: the dispatcher and `GET /webhooks`). The
outbox lives in the task store, its events written in the commit of the change that caused them
(``TaskRegistry._commit``). One of the registry's parts (actors._registry_parts).
"""

import asyncio

from actors._registry_parts import RegistryParts
from mcp_protocol.webhook_events import Attempt, Backlog, Delivery


class OutboxCalls(RegistryParts):
    """The outbox's calls, mixed into the registry."""

    async def webhooks_due(self, now_ms: int, limit: int, lease_until_ms: int) -> list[Delivery]:
        """Pending deliveries due at ``now_ms``, oldest due first, each leased until ``lease_until_ms``."""
        return self._store.webhooks_due(now_ms, limit, lease_until_ms)

    async def record_webhook_attempt(self, event_id: str, attempt: Attempt) -> None:
        """One delivery attempt's outcome; a delivery no longer pending stays as it is."""
        self._store.record_webhook_attempt(event_id, attempt)

    async def list_webhook_deliveries(
        self, principal: str, limit: int, before: tuple[int, str] | None = None
    ) -> list[Delivery]:
        """A page of the principal's deliveries, newest event first; ``before``: the previous page's last
        (created_at_ms, event_id)."""
        return self._store.list_webhook_deliveries(principal, limit, before)

    async def webhook_backlog(self) -> Backlog:
        """The pending deliveries (the dispatcher's metrics, and when its next pass is due)."""
        return self._store.webhook_backlog()

    async def webhooks_added(self, seen: str | None, timeout_s: float) -> str:
        """Long-poll for new webhook events (the dispatcher's wait between passes): a token of the outbox's adds,
        as soon as it differs from ``seen`` (events added since, or another registry instance), else after
        ``timeout_s``."""
        self._bind_loop()
        assert self._changed is not None
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(lambda: self._outbox_token() != seen), timeout_s)
            except TimeoutError:
                pass
        return self._outbox_token()

    def _outbox_token(self) -> str:
        return f"{self._feed.epoch}/{self._outbox_adds}"
