"""The one vidforge error envelope and its two carriers (contract §3.4, §3.6).

[6.one-envelope]: every failure an agent can act on is the same object —
`{code, message, details{field, value?, reason}, temporary, retry_after_ms, repair, request_id, fingerprint}`.
Tool failures carry it as an `isError: true` result's `structuredContent` (plus a text fallback);
JSON-RPC failures carry it in `error.data`, with `code`/`message` renamed to `machine_code`/`human_message`
([6.rename]) so they cannot be confused with the JSON-RPC `code`/`message` beside them.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

from mcp.shared.exceptions import MCPError

from mcp_protocol.identity import fingerprint

INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

_UNSET: Any = object()


def new_request_id() -> str:
    return "req_" + secrets.token_hex(8)


@dataclass
class VidforgeError(Exception):
    """A contract error. Raise it anywhere below a handler; the handler picks the carrier.

    `value` is emitted only when set: [6.offending-value] allows echoing a value the server minted
    or one known to be safe, never arbitrary caller input by default.
    """

    code: str
    message: str
    field: str | None
    reason: str
    temporary: bool = False
    retry_after_ms: int | None = None
    repair: dict[str, Any] | None = None
    value: Any = _UNSET
    text: str | None = None
    jsonrpc_code: int = INVALID_PARAMS
    request_id: str = field(default_factory=new_request_id)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def envelope(self) -> dict[str, Any]:
        details: dict[str, Any] = {"field": self.field, "reason": self.reason}
        if self.value is not _UNSET:
            details["value"] = self.value
        return {
            "code": self.code,
            "message": self.message,
            "details": details,
            "temporary": self.temporary,
            "retry_after_ms": self.retry_after_ms,
            "repair": self.repair,
            "request_id": self.request_id,
            "fingerprint": fingerprint(),
        }


def repair(next_step: str, tool: str | None, arguments: dict[str, Any], alternative: str | None = None) -> dict:
    """[6.repair-object]: a callable next step — a tool and literally callable arguments."""
    out: dict[str, Any] = {"next_step": next_step, "tool": tool, "arguments": arguments}
    if alternative:
        out["alternative"] = alternative
    return out


def tool_error_result(error: VidforgeError) -> dict[str, Any]:
    """Carrier 1: a `CallToolResult` with `isError: true`, the envelope in `structuredContent`."""
    return {
        "resultType": "complete",
        "isError": True,
        "content": [{"type": "text", "text": error.text or f"{error.code}: {error.message} {error.reason}".strip()}],
        "structuredContent": error.envelope(),
    }


def jsonrpc_error_data(error: VidforgeError) -> dict[str, Any]:
    """Carrier 2: the envelope for `error.data`, `code`/`message` renamed per [6.rename]."""
    env = error.envelope()
    env["machine_code"] = env.pop("code")
    env["human_message"] = env.pop("message")
    return env


def as_mcp_error(error: VidforgeError) -> MCPError:
    """Raise-able JSON-RPC form; the SDK maps `MCPError` onto the wire (and -32602 onto HTTP 400)."""
    return MCPError(code=error.jsonrpc_code, message=error.message, data=jsonrpc_error_data(error))
