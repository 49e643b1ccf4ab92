"""The SDK's raise-able JSON-RPC error, built where a handler raises one.

Importing any part of the `mcp` SDK loads all of it (its package imports the client and the server: about 0.7 CPU-s
and 25 MiB per process), while the actors import the envelope and the error catalog for their records and never
answer JSON-RPC themselves. So the SDK's class is imported when the first such error is built, not with this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp_protocol.json_types import JSONObject

if TYPE_CHECKING:
    from mcp.shared.exceptions import MCPError


def jsonrpc_error(code: int, message: str, data: JSONObject | None = None) -> MCPError:
    """An `MCPError` the SDK maps onto the wire (and -32602 onto HTTP 400)."""
    from mcp.shared.exceptions import MCPError

    return MCPError(code=code, message=message, data=data)
