"""HTTP refusals in the contract's envelope, on the carrier of the route they answer.

The file routes answer `{"error": <envelope>}`; `/mcp` answers a JSON-RPC error whose `data` is the envelope
(`code`/`message` renamed, contract §3.6), so an MCP client parses a refusal the same way as any other error.
Middleware that refuses before routing (Origin/Host, admission caps) picks the carrier from the path.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import Scope

from mcp_protocol.envelope import VidforgeError, jsonrpc_error_data
from mcp_protocol.http import jsonrpc_error

MCP_PATH = "/mcp"


def error_response(status: int, error: VidforgeError, headers: dict[str, str] | None = None) -> JSONResponse:
    """The file-route carrier: `{"error": <envelope>}`."""
    return JSONResponse({"error": error.envelope()}, status_code=status, headers=headers)


def refusal(scope: Scope, status: int, error: VidforgeError, headers: dict[str, str] | None = None) -> JSONResponse:
    """`error` on the carrier of the requested route (a JSON-RPC error without `id` on `/mcp`)."""
    if scope.get("path") == MCP_PATH:
        body = jsonrpc_error(error.jsonrpc_code, error.message, jsonrpc_error_data(error))
        return JSONResponse(body, status_code=status, headers=headers)
    return error_response(status, error, headers)
