"""The `Outbox` the dispatcher and `GET /webhooks` use: the TaskRegistry's, whose store holds the events (written in
the commit of the change that caused them) and where their deliveries stand."""

from __future__ import annotations

from actors.client import RegistryApi
from mcp_protocol.webhook_events import Attempt, Backlog, Delivery


class RegistryOutbox:
    """`serve_app.webhooks.outbox.Outbox` over the registry's calls (in-process, or its actor's client)."""

    def __init__(self, registry: RegistryApi) -> None:
        self._registry = registry

    async def due(self, now_ms: int, limit: int, lease_until_ms: int) -> list[Delivery]:
        return await self._registry.webhooks_due(now_ms, limit, lease_until_ms)

    async def record_attempt(self, event_id: str, attempt: Attempt) -> None:
        await self._registry.record_webhook_attempt(event_id, attempt)

    async def list_deliveries(
        self, principal: str, limit: int, before: tuple[int, str] | None = None
    ) -> list[Delivery]:
        return await self._registry.list_webhook_deliveries(principal, limit, before)

    async def backlog(self) -> Backlog:
        return await self._registry.webhook_backlog()

    async def added_since(self, seen: str | None, timeout_s: float) -> str:
        return await self._registry.webhooks_added(seen, timeout_s)
