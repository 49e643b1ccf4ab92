"""Each authenticated request's context for the logs, and the time `/mcp` requests take by method.

ASGI middleware inside the authenticated mount (it needs the principal): every line logged while the request runs
carries `principal`, and on `/mcp` the JSON-RPC `method` and, for `tasks/*`, the `task_id` — both from the headers
2026-07-28 requires and the SDK checks against the body (`Mcp-Method`, `Mcp-Name`). 2025-era requests send
neither: their method is `legacy` in the latency histogram. No header value but those two is read or logged.
"""

from __future__ import annotations

import time

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from serve_app.ingress._refusals import MCP_PATH
from serve_app.observability.catalog import REQUEST_DURATION
from serve_app.observability.logs import log_context

# The methods timed under their own name; any other /mcp method is `other` (a label's values must stay few).
TIMED_METHODS = frozenset(
    {
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "subscriptions/listen",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
    }
)
LEGACY = "legacy"


class RequestContext:
    """Binds the log context of each request; times each `/mcp` request into `vidforge_request_duration_seconds`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        fields = {"principal": scope["user"].identity}
        if scope["path"] != MCP_PATH:
            with log_context(**fields):
                await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        method = headers.get("mcp-method")
        fields["method"] = method or LEGACY
        if method is not None and method.startswith("tasks/") and (task_id := headers.get("mcp-name")):
            fields["task_id"] = task_id
        started = time.perf_counter()
        try:
            with log_context(**fields):
                await self.app(scope, receive, send)
        finally:
            label = LEGACY if method is None else method if method in TIMED_METHODS else "other"
            REQUEST_DURATION.observe(time.perf_counter() - started, method=label)
