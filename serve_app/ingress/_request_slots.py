"""A replica's bound on concurrent requests: `VIDFORGE_MAX_ONGOING_REQUESTS` run, `VIDFORGE_MAX_QUEUED_REQUESTS`
wait, and the next one is refused at once with HTTP 503 and `Retry-After: VIDFORGE_BUSY_RETRY_AFTER_S`.

The replica answers HTTP itself (serve_app/ingress/front.py), so this is where a flood stops instead of queueing
without end. No one caller may fill the slots either, or a few slow clients would starve every tenant: each
request is first told apart by who sends it (serve_app/ingress/_callers.py), and counts, waiting or running, against
its caller's share:

- anonymous requests (no valid credential, no valid review or watch link) together: `VIDFORGE_MAX_ANONYMOUS_REQUESTS`, and
  never the replica's last slot, refused past it with 503 (`internal_error`, temporary);
- each principal, and each review or watch link: `VIDFORGE_MAX_PRINCIPAL_REQUESTS`, refused past it with 429
  (`concurrency_limit_exceeded`).

Every refusal is the contract's envelope on the route's carrier, with `retry_after_ms`, naming its settings.
`/healthz` and `/readyz` take no slot: a probe must not fail because the replica is busy. Per-principal caps on
long-held requests come after authentication (serve_app/ingress/admission.py); these bounds are the replica's own.
"""

from __future__ import annotations

from collections import Counter

import anyio
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_protocol import errors
from mcp_protocol.envelope import VidforgeError
from serve_app._config import Config
from serve_app.ingress._callers import Caller, CallerKind, Callers
from serve_app.ingress._refusals import refusal
from serve_app.observability.catalog import REFUSALS

PROBE_PATHS = frozenset({"/healthz", "/readyz"})


class RequestSlots:
    """ASGI middleware: at most `max_ongoing` requests in the app, at most `max_queued` waiting for a slot, and
    each caller within its share of both together."""

    def __init__(self, app: ASGIApp, config: Config, callers: Callers) -> None:
        self.app = app
        self.callers = callers
        self.max_ongoing = config.max_ongoing_requests
        self.max_queued = config.max_queued_requests
        self.anonymous_share = min(config.max_anonymous_requests, self.max_ongoing - 1)
        self.principal_share = config.max_principal_requests
        self.retry_after_s = config.busy_retry_after_s
        self._slots = anyio.Semaphore(self.max_ongoing)
        self._waiting = 0
        self._held: Counter[Caller] = Counter()  # each caller's requests, waiting or running

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PROBE_PATHS:  # the lifespan; the probes
            await self.app(scope, receive, send)
            return
        caller = await self.callers.identify(scope)
        refused = self._refusal(scope, caller)
        if refused is not None:
            await refused(scope, receive, send)
            return
        self._held[caller] += 1
        try:
            self._waiting += 1
            try:
                await self._slots.acquire()
            finally:
                self._waiting -= 1
            try:
                await self.app(scope, receive, send)
            finally:
                self._slots.release()
        finally:
            self._held[caller] -= 1
            if not self._held[caller]:
                del self._held[caller]

    def _refusal(self, scope: Scope, caller: Caller) -> Response | None:
        """The answer to a request that may not wait for a slot; None when it may."""
        headers = {"Retry-After": str(self.retry_after_s)}
        if caller.kind is CallerKind.ANONYMOUS and self._held[caller] >= self.anonymous_share:
            REFUSALS.inc(limit="anonymous")
            return refusal(scope, 503, self.anonymous_error(), headers)
        if caller.kind is not CallerKind.ANONYMOUS and self._held[caller] >= self.principal_share:
            REFUSALS.inc(limit="concurrency")
            return refusal(scope, 429, self.share_error(), headers)
        if self._slots.value == 0 and self._waiting >= self.max_queued:
            REFUSALS.inc(limit="busy")
            return refusal(scope, 503, self.busy_error(), headers)
        return None

    def busy_error(self) -> VidforgeError:
        return errors.internal_error(
            "Server busy: try again shortly.",
            None,
            f"This replica is serving {self.max_ongoing} requests with {self.max_queued} more waiting "
            "(VIDFORGE_MAX_ONGOING_REQUESTS, VIDFORGE_MAX_QUEUED_REQUESTS).",
            self.retry_after_s * 1000,
        )

    def anonymous_error(self) -> VidforgeError:
        return errors.internal_error(
            "Server busy for requests without credentials: try again shortly.",
            "Authorization",
            f"This replica serves at most {self.anonymous_share} requests without a valid credential, review link or "
            "watch link at once (VIDFORGE_MAX_ANONYMOUS_REQUESTS, never the last of VIDFORGE_MAX_ONGOING_REQUESTS).",
            self.retry_after_s * 1000,
        )

    def share_error(self) -> VidforgeError:
        return errors.concurrency_limit_exceeded(
            self.principal_share,
            "requests in progress on this replica",
            "VIDFORGE_MAX_PRINCIPAL_REQUESTS",
            "Wait for some of your requests to be answered, then send more.",
            self.retry_after_s,
        )
