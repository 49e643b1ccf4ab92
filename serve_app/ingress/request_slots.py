"""A replica's bound on concurrent requests: `VIDFORGE_MAX_ONGOING_REQUESTS` run, `VIDFORGE_MAX_QUEUED_REQUESTS`
wait, and the next one is refused at once with HTTP 503 and `Retry-After: VIDFORGE_BUSY_RETRY_AFTER_S`.

The replica answers HTTP itself (serve_app/ingress/front.py), so this is where a flood stops instead of queueing
without end. The refusal is the contract's envelope on the route's carrier (`internal_error`, temporary, with
`retry_after_ms`), naming both settings. Per-principal caps on long-held requests come after authentication
(serve_app/ingress/admission.py); this bound is the replica's, whoever asks.
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_protocol import errors
from mcp_protocol.envelope import VidforgeError
from serve_app.config import Config
from serve_app.ingress.refusals import refusal
from serve_app.observability.catalog import REFUSALS


class RequestSlots:
    """ASGI middleware: at most `max_ongoing` requests in the app, at most `max_queued` waiting for a slot."""

    def __init__(self, app: ASGIApp, config: Config) -> None:
        self.app = app
        self.max_ongoing = config.max_ongoing_requests
        self.max_queued = config.max_queued_requests
        self.retry_after_s = config.busy_retry_after_s
        self._slots = anyio.Semaphore(self.max_ongoing)
        self._waiting = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan
            await self.app(scope, receive, send)
            return
        if self._slots.value == 0 and self._waiting >= self.max_queued:
            REFUSALS.inc(limit="busy")
            headers = {"Retry-After": str(self.retry_after_s)}
            await refusal(scope, 503, self.busy_error(), headers)(scope, receive, send)
            return
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._slots.release()

    def busy_error(self) -> VidforgeError:
        return errors.internal_error(
            "Server busy: try again shortly.",
            None,
            f"This replica is serving {self.max_ongoing} requests with {self.max_queued} more waiting "
            "(VIDFORGE_MAX_ONGOING_REQUESTS, VIDFORGE_MAX_QUEUED_REQUESTS).",
            self.retry_after_s * 1000,
        )
