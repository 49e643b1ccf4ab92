"""The HTTP door's refusals, before any tool or route runs: the credential, its scope, the Origin and Host headers,
and the routes. Entries of the error catalog (mcp_protocol.errors, which holds them in `CATALOG`), built by the one
factory (mcp_protocol._error_table) from the records of mcp_protocol._error_inputs.
"""

from __future__ import annotations

from mcp_protocol import _error_inputs as inputs
from mcp_protocol._error_table import Entry, Input, Repair
from mcp_protocol.catalog import CAPABILITIES_TOOL
from mcp_protocol.error_codes import INVALID_REQUEST, ErrorCode

_TRY_MCP = Repair("read_capabilities", "MCP clients connect to POST /mcp.", CAPABILITIES_TOOL)

unauthorized = Entry(
    ErrorCode.UNAUTHORIZED,
    inputs.Reason,
    temporary=False,
    message="Unauthorized: missing or invalid bearer token.",
    field="Authorization",
    reason=Input("reason"),
    repair=None,
    jsonrpc_code=INVALID_REQUEST,
)

route_not_found = Entry(
    ErrorCode.ROUTE_NOT_FOUND,
    inputs.Routes,
    temporary=False,
    message="No such route.",
    field="path",
    reason="vidforge serves {routes} (and GET /healthz).",
    repair=_TRY_MCP,
)

method_not_allowed = Entry(
    ErrorCode.METHOD_NOT_ALLOWED,
    inputs.MethodRoutes,
    temporary=False,
    message="{method} is not allowed on {path}.",
    field="path",
    reason="vidforge serves {routes} (and GET /healthz).",
    repair=_TRY_MCP,
)

insufficient_scope = Entry(
    ErrorCode.INSUFFICIENT_SCOPE,
    inputs.Reason,
    temporary=False,
    message="Forbidden: the access token lacks a required scope.",
    field="Authorization",
    reason=Input("reason"),
    repair=None,
    jsonrpc_code=INVALID_REQUEST,
)

origin_not_allowed = Entry(
    ErrorCode.ORIGIN_NOT_ALLOWED,
    inputs.NoInputs,
    temporary=False,
    message="Forbidden: this server does not answer requests with this Origin header.",
    field="Origin",
    reason="Browser pages from other origins may not call this server (cross-site request and DNS-rebinding "
    "protection). The operator can allow an origin with VIDFORGE_ALLOWED_ORIGINS.",
    repair=None,
    jsonrpc_code=INVALID_REQUEST,
)

host_not_allowed = Entry(
    ErrorCode.HOST_NOT_ALLOWED,
    inputs.NoInputs,
    temporary=False,
    message="Forbidden: this server does not answer requests with this Host header.",
    field="Host",
    reason="The Host header names a server other than this one (DNS-rebinding protection). The operator can "
    "allow a host name with VIDFORGE_ALLOWED_HOSTS or VIDFORGE_PUBLIC_URL.",
    repair=None,
    jsonrpc_code=INVALID_REQUEST,
)
