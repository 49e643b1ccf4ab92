"""Starlette's own refusals (no such route, method not allowed) in the contract's envelope.

The file routes answer `{"error": <envelope>}`; without these handlers a wrong path or method would get
Starlette's plain-text 404/405, the one kind of answer an agent could not parse.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from mcp_protocol import errors
from serve_app.ingress.refusals import error_response

ROUTES = "POST /mcp, POST /assets, GET /artifacts/{render_id}/final.{ext}, GET /assets, GET /renders[/{render_id}]"


def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException), exc
    if exc.status_code == 405:
        error = errors.method_not_allowed(request.method, request.url.path, ROUTES)
    else:
        error = errors.route_not_found(ROUTES)
    return error_response(exc.status_code, error, dict(exc.headers or {}))


EXCEPTION_HANDLERS = {HTTPException: http_error}
