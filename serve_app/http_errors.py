"""Starlette's own refusals (no such route, method not allowed) in the contract's envelope.

The file routes answer `{"error": <envelope>}`; without these handlers a wrong path or method would get
Starlette's plain-text 404/405, the one kind of answer an agent could not parse.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse

from mcp_protocol.catalog import CAPABILITIES_TOOL
from mcp_protocol.errors import VidforgeError, repair

ROUTES = "POST /mcp, POST /assets, GET /artifacts/{render_id}/final.{ext}"


def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException), exc
    if exc.status_code == 405:
        code, message = "method_not_allowed", f"{request.method} is not allowed on {request.url.path}."
    else:
        code, message = "route_not_found", "No such route."
    error = VidforgeError(
        code=code,
        message=message,
        field="path",
        reason=f"vidforge serves {ROUTES} (and GET /healthz).",
        repair=repair("read_capabilities", CAPABILITIES_TOOL, {}, "MCP clients connect to POST /mcp."),
    )
    return JSONResponse({"error": error.envelope()}, status_code=exc.status_code, headers=exc.headers)


EXCEPTION_HANDLERS = {HTTPException: http_error}
