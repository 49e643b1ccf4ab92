"""Starlette's own refusals (no such route, method not allowed), and the task state out of reach, in the contract's
envelope.

The file routes answer `{"error": <envelope>}`; without these handlers a wrong path or method would get
Starlette's plain-text 404/405, the one kind of answer an agent could not parse, and a request that needs the task
state while its database is down a bare 500: it gets 503 with `Retry-After` and the temporary error instead, on the
carrier of its route.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcp_protocol import http_refusals
from mcp_protocol.state_outage import StateUnavailable
from serve_app.ingress._refusals import error_response, refusal

ROUTES = "POST /mcp, POST /assets, GET /artifacts/{render_id}/final.{ext}, GET /assets, GET /renders[/{render_id}]"


def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException), exc
    if exc.status_code == 405:
        error = http_refusals.method_not_allowed(request.method, request.url.path, ROUTES)
    else:
        error = http_refusals.route_not_found(ROUTES)
    return error_response(exc.status_code, error, dict(exc.headers or {}))


def state_unavailable(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StateUnavailable), exc
    retry_after_s = str(max(1, -(-exc.retry_after_ms // 1000)))
    return refusal(request.scope, 503, exc.error(), {"Retry-After": retry_after_s})


EXCEPTION_HANDLERS = {HTTPException: http_error, StateUnavailable: state_unavailable}
