"""[6.one-envelope]: the one object every failure an agent can act on is, and its carriers.

`{code, message, details{field, value?, reason}, temporary, retry_after_ms, repair, request_id, fingerprint}`.
Tool failures carry it as an `isError: true` result's `structuredContent` (plus a text fallback); JSON-RPC
failures carry it in `error.data`, with `code`/`message` renamed to `machine_code`/`human_message` ([6.rename])
so they cannot be confused with the JSON-RPC `code`/`message` beside them; the HTTP file routes carry it under
`error`. Which errors exist and what they say is `errors`' business; this module only gives them their shape.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

from mcp_protocol._jsonrpc_error import jsonrpc_error
from mcp_protocol.error_codes import INVALID_PARAMS, ErrorCode, new_request_id
from mcp_protocol.identity import fingerprint
from mcp_protocol.json_types import JSONObject, JSONValue

if TYPE_CHECKING:
    from mcp.shared.exceptions import MCPError

UNSET: JSONValue = object()  # type: ignore[assignment]  # a sentinel: `details.value` is left out

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class VidforgeError(Exception):
    """A contract error. Raise it anywhere below a handler; the handler picks the carrier. Built only by the
    catalog's factory (mcp_protocol._error_table), which takes `temporary` from the code's entry.

    `value` is emitted only when set: [6.offending-value] allows echoing a value the server minted
    or one known to be safe, never arbitrary caller input by default. `jsonrpc_message` replaces `message` as the
    JSON-RPC error's own message where the protocol fixes that text.
    """

    code: ErrorCode
    message: str
    field: str | None
    reason: str
    retry_after_ms: int | None = None
    repair: JSONObject | None = None
    value: JSONValue = UNSET
    text: str | None = None
    jsonrpc_code: int = INVALID_PARAMS
    jsonrpc_message: str | None = None
    request_id: str = dataclasses.field(default_factory=new_request_id)
    temporary: bool = dataclasses.field(kw_only=True)  # the request may succeed unchanged later: its entry says
    # Whether the one log line of this error's request_id has been written (see `report`).
    reported: bool = dataclasses.field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def report(self, cause: BaseException | None = None) -> None:
        """Write the one log line this error's `request_id` appears in — what was refused or failed, and why
        (`cause`: the exception behind it, traceback included) — unless it is written already. Every carrier below
        calls it, so an error answered is logged exactly once whichever way it goes out; a render's stored end
        was logged when the render ended (its error is rebuilt, already reported, on every read)."""
        if self.reported:
            return
        self.reported = True
        level = logging.ERROR if self.code is ErrorCode.INTERNAL_ERROR else logging.INFO
        fields = {"event": "error", "request_id": self.request_id, "code": self.code.value, "field": self.field}
        logger.log(level, "%s: %s %s", self.code.value, self.message, self.reason, extra=fields, exc_info=cause)

    def envelope(self) -> JSONObject:
        details: JSONObject = {"field": self.field, "reason": self.reason}
        if self.value is not UNSET:
            details["value"] = self.value
        return {
            "code": self.code.value,
            "message": self.message,
            "details": details,
            "temporary": self.temporary,
            "retry_after_ms": self.retry_after_ms,
            "repair": self.repair,
            "request_id": self.request_id,
            "fingerprint": fingerprint(),
        }


def repair(next_step: str, tool: str | None, arguments: JSONObject, alternative: str | None = None) -> JSONObject:
    """[6.repair-object]: a callable next step — a tool and literally callable arguments."""
    out: JSONObject = {"next_step": next_step, "tool": tool, "arguments": arguments}
    if alternative:
        out["alternative"] = alternative
    return out


# -- carriers ----------------------------------------------------------------------------------------------


def tool_error_result(error: VidforgeError) -> JSONObject:
    """Carrier 1: a `CallToolResult` with `isError: true`, the envelope in `structuredContent`."""
    error.report()
    return {
        "resultType": "complete",
        "isError": True,
        "content": [
            {"type": "text", "text": error.text or f"{error.code.value}: {error.message} {error.reason}".strip()}
        ],
        "structuredContent": error.envelope(),
    }


def jsonrpc_error_data(error: VidforgeError) -> JSONObject:
    """Carrier 2: the envelope for `error.data`, `code`/`message` renamed per [6.rename]."""
    error.report()
    env = error.envelope()
    env["machine_code"] = env.pop("code")
    env["human_message"] = env.pop("message")
    return env


def as_mcp_error(error: VidforgeError) -> MCPError:
    """Raise-able JSON-RPC form; the SDK maps `MCPError` onto the wire (and -32602 onto HTTP 400)."""
    return jsonrpc_error(error.jsonrpc_code, error.jsonrpc_message or error.message, jsonrpc_error_data(error))
