"""HTTP refusals in the contract's envelope, on the carrier of the route they answer.

The file routes answer `{"error": <envelope>}`; `/mcp` answers a JSON-RPC error whose `data` is the envelope
(`code`/`message` renamed, contract §3.6), so an MCP client parses a refusal the same way as any other error.
Middleware that refuses before routing (Origin/Host, admission caps) picks the carrier from the path; on the review
and watch pages' paths, which people open in a browser, the carrier is an HTML page.
"""

from __future__ import annotations

from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from mcp_protocol.envelope import VidforgeError, jsonrpc_error_data
from mcp_protocol.http import jsonrpc_error
from serve_app.ingress.review.links import REVIEW_PATH
from serve_app.ingress.review.pages import refused_page
from serve_app.ingress.watch.links import WATCH_PATH

MCP_PATH = "/mcp"
PAGE_PATHS = tuple(f"{path}/" for path in (REVIEW_PATH, WATCH_PATH))  # what people open in a browser


def error_response(status: int, error: VidforgeError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The file-route carrier: `{"error": <envelope>}`."""
    error.report()
    return JSONResponse({"error": error.envelope()}, status_code=status, headers=headers)


def refusal(scope: Scope, status: int, error: VidforgeError, headers: dict[str, str] | None = None) -> Response:
    """`error` on the carrier of the requested route (a JSON-RPC error without `id` on `/mcp`, a page on `/review` and
    `/watch`)."""
    path = scope.get("path", "")
    if path.startswith(PAGE_PATHS):
        error.report()
        response = refused_page(status, error.message, f"{error.code}: {error.reason}")
        response.headers.update(headers or {})
        return response
    if path == MCP_PATH:
        body = jsonrpc_error(error.jsonrpc_code, error.message, jsonrpc_error_data(error))
        return JSONResponse(body, status_code=status, headers=headers)
    return error_response(status, error, headers)
