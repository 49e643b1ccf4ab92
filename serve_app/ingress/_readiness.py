"""`GET /readyz`: whether this replica can serve — the TaskRegistry answers, the media store is reachable and the
render supervisor is ready, its warm pool of render workers included (serve_app/rendering/_warm_pool.py), and the task
state (SQLite or PostgreSQL) answers.

Unauthenticated, like the OAuth metadata: an orchestrator's probe holds no token (deploy/rayservice.yaml's
readinessProbe). It says which part fails and why the state does not answer, nothing else: `{"status": "ready", "state":
"available"}`, or 503 with `{"status": "unready", "failing": [...], "state": ...}` naming `registry`, `state`,
`media_store` and/or `render_pool`; `state` is `available`, `unavailable` (with `state_reason`: what failed, naming the
store without its credentials) or `unknown` (the registry did not answer). Each check is
bounded by READY_TIMEOUT_S, so a hung dependency answers 503 rather than a probe timeout. `/healthz` is liveness:
the process answers (behind authentication, so 401 without a token also says so), 503 once this node's raylet has
died.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from actors.client import RegistryApi, SupervisorApi
from actors.held_records import StateHealth
from media_store.base import MediaStore

READY_TIMEOUT_S = 5.0
PROBE_KEY = "readyz"  # a key nothing stores: asking its size reaches the store without writing to it

logger = logging.getLogger(__name__)


class Readiness:
    """The `/readyz` endpoint (an ASGI app) over the replica's registry handle, media store and, on a cluster,
    render supervisor."""

    def __init__(self, registry: RegistryApi, media: MediaStore, supervisor: SupervisorApi | None = None) -> None:
        self.registry = registry
        self.media = media
        self.supervisor = supervisor

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (await self.answer())(scope, receive, send)

    async def answer(self) -> JSONResponse:
        checks = {"registry": self._state_health(), "media_store": self._media_answers()}
        if self.supervisor is not None:
            checks["render_pool"] = self._pool_warm(self.supervisor)
        results = await asyncio.gather(*checks.values(), return_exceptions=True)
        failing, body = [], {"state": "unknown"}
        for name, result in zip(checks, results, strict=True):
            if isinstance(result, StateHealth):
                body["state"] = "available" if result.available else "unavailable"
                if not result.available:
                    failing.append("state")
                    body["state_reason"] = result.reason or "unknown"
            elif result is not None:  # the check's exception (a timeout included)
                failing.append(name)
                logger.warning("not ready: %s", name, exc_info=result, extra={"event": "not_ready", "failing": name})
        if failing:
            return JSONResponse({"status": "unready", "failing": failing, **body}, status_code=503)
        return JSONResponse({"status": "ready", **body})

    async def _state_health(self) -> StateHealth:
        async with asyncio.timeout(READY_TIMEOUT_S):
            return await self.registry.state_health()

    async def _pool_warm(self, supervisor: SupervisorApi) -> None:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await supervisor.ready()  # answers once the warm pool's first round's workers are ready

    async def _media_answers(self) -> None:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await asyncio.to_thread(self.media.size, PROBE_KEY)
