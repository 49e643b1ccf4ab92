"""Per-principal caps on the requests that hold an ingress slot for long: listen streams, uploads, downloads.

Every request occupies one of a replica's `VIDFORGE_MAX_ONGOING_REQUESTS` slots while it runs. Most answer in
milliseconds, but a `subscriptions/listen` stream, an upload trickling in or a large download can hold its
slot for minutes; a principal that opens hundreds of them starves every other principal (their requests
queue behind it). So each such request first takes a lease from the cluster-wide ledger
(`serve_app/ingress/leases.py`) and returns it when it ends — completed, failed, or cancelled because the client went
away. Past its cap a principal is refused at once: HTTP 429, `Retry-After`, and the contract's envelope
(`concurrency_limit_exceeded`, temporary, naming the limit) on the route's carrier. Other principals, and
this principal's short requests (`tasks/get`, `tools/call`, ...), are unaffected.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_protocol import errors
from mcp_protocol.envelope import VidforgeError
from serve_app._config import Config
from serve_app.ingress._direct_uploads import UPLOADS_PATH
from serve_app.ingress._refusals import MCP_PATH, refusal
from serve_app.ingress.leases import LedgerClient
from serve_app.observability.catalog import REFUSALS

LISTEN_METHOD = "subscriptions/listen"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cap:
    limit: int
    setting: str  # the environment variable that sets it, named in every refusal
    what: str
    advice: str


def caps(config: Config) -> dict[str, Cap]:
    return {
        "listen": Cap(
            config.max_listen_streams,
            "VIDFORGE_MAX_LISTEN_STREAMS",
            "open subscriptions/listen streams",
            "Close one of your open subscriptions/listen streams, or poll tasks/get (polling is authoritative).",
        ),
        "upload": Cap(
            config.max_uploads,
            "VIDFORGE_MAX_UPLOADS",
            "uploads in progress (POST /assets, and direct uploads being completed)",
            "Wait for one of your uploads to finish, then upload again.",
        ),
        "download": Cap(
            config.max_downloads,
            "VIDFORGE_MAX_DOWNLOADS",
            "downloads in progress (GET /artifacts)",
            "Wait for one of your downloads to finish (Range requests resume a download where it stopped).",
        ),
    }


def is_completion(path: str) -> bool:
    """`POST /assets/uploads/{upload_id}/complete` (serve_app/ingress/_direct_uploads.py)."""
    return path.startswith(UPLOADS_PATH + "/") and path.endswith("/complete")


def kind_of(scope: Scope) -> str | None:
    """Which capped kind a request is, if any. A listen stream is told by its `Mcp-Method` header, which the
    SDK refuses (400/-32020) unless it equals the body's method; 2025-era requests have no listen method."""
    path, method = scope["path"], scope["method"]
    if method == "POST" and (path == "/assets" or is_completion(path)):  # a direct upload is checked as it completes
        return "upload"
    if path.startswith("/artifacts/") and method == "GET":
        return "download"
    if path == MCP_PATH and method == "POST" and Headers(scope=scope).get("mcp-method") == LISTEN_METHOD:
        return "listen"
    return None


class Admission:
    """A replica's side of the ledger: takes and returns leases, and proves the replica alive (heartbeats)."""

    def __init__(self, ledger: LedgerClient, ttl_s: float) -> None:
        self.ledger = ledger
        self.holder = "replica_" + secrets.token_hex(8)
        self.heartbeat_s = ttl_s / 3
        self.held: dict[str, tuple[str, str]] = {}  # lease id -> (principal, kind)

    async def acquire(self, principal: str, kind: str, limit: int) -> str | None:
        """A lease id, or None when `principal` is at `limit`."""
        lease_id = secrets.token_hex(12)
        # Listed before asking: a heartbeat sent meanwhile covers it, and an ask cut short still returns it.
        self.held[lease_id] = (principal, kind)
        try:
            granted = await self.ledger.acquire(self.holder, lease_id, principal, kind, limit)
        except BaseException:
            self.release(lease_id)
            raise
        if not granted:
            self.release(lease_id)
            return None
        return lease_id

    def release(self, lease_id: str) -> None:
        """Not a coroutine: it must run in a `finally` of a cancelled request, so the actor call is sent, not
        awaited (the ledger processes it after the acquire this replica sent earlier)."""
        self.held.pop(lease_id, None)
        self.ledger.release(lease_id)

    @contextlib.asynccontextmanager
    async def heartbeats(self) -> AsyncIterator[None]:
        """Run for the app's lifetime (its lifespan): the ledger frees a silent replica's leases."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._heartbeat_forever)
            yield
            group.cancel_scope.cancel()

    async def _heartbeat_forever(self) -> None:
        while True:
            try:
                await self.ledger.heartbeat(self.holder, dict(self.held))
            except Exception:  # the ledger restarting: Ray retries it; the next beat re-adopts our leases
                log.warning("lease ledger heartbeat failed", exc_info=True)
            await anyio.sleep(self.heartbeat_s)


class AdmissionGuard:
    """ASGI middleware (after authentication: it needs the principal) applying the caps of `caps(config)`."""

    def __init__(self, app: ASGIApp, admission: Admission, config: Config) -> None:
        self.app = app
        self.admission = admission
        self.caps = caps(config)
        self.retry_after_s = config.busy_retry_after_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = kind_of(scope) if scope["type"] == "http" else None
        if kind is None:
            await self.app(scope, receive, send)
            return
        cap = self.caps[kind]
        lease = await self.admission.acquire(scope["user"].identity, kind, cap.limit)
        if lease is None:
            REFUSALS.inc(limit="concurrency")
            headers = {"Retry-After": str(self.retry_after_s)}
            await refusal(scope, 429, self.limit_error(cap), headers)(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.admission.release(lease)

    def limit_error(self, cap: Cap) -> VidforgeError:
        return errors.concurrency_limit_exceeded(cap.limit, cap.what, cap.setting, cap.advice, self.retry_after_s)
