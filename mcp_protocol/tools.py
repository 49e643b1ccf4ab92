"""`tools/call` for the five vidforge tools (contract §2 and §4).

Every failure below the argument check is a tool error ([6.validation-as-tool-error]); only an unknown
tool name is a JSON-RPC error (`-32602`, core `server/tools.mdx`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from mcp_protocol import views
from mcp_protocol.arguments import validate_arguments
from mcp_protocol.catalog import (
    APPROVE_TOOL,
    CANCEL_TOOL,
    CAPABILITIES_TOOL,
    RENDER_TOOL,
    STATUS_TOOL,
    capability_summary,
)
from mcp_protocol.errors import INTERNAL_ERROR, VidforgeError, repair, tool_error_result
from mcp_protocol.results import render_failed_error, rerender_repair
from mcp_protocol.render_service import RenderService, WireSettings
from mcp_protocol.timefmt import duration_adjective, duration_text
from mcp_protocol.views import Caller

logger = logging.getLogger(__name__)


def _ok(structured: dict[str, Any], text: str | None = None) -> dict[str, Any]:
    return {
        "resultType": "complete",
        "isError": False,
        "content": [{"type": "text", "text": text or json.dumps(structured, separators=(",", ":"))}],
        "structuredContent": structured,
    }


def render_not_found(render_id: str, retention_s: int) -> VidforgeError:
    return VidforgeError(
        code="render_not_found",
        message="No render with this render_id is visible to this credential.",
        field="render_id",
        reason=f"Unknown render_id, another credential's render, or past its {duration_adjective(retention_s)} "
        "retention.",
        repair=repair(
            "start_new_render",
            RENDER_TOOL,
            {},
            "Check the render_id you persisted; to render again, call vidforge_render_video with your original "
            "arguments.",
        ),
    )


def idempotency_conflict(render_id: str) -> VidforgeError:
    """The key already names `render_id`, created with other arguments ([3.idempotency-key]: a key means
    one request). Not temporary: repeating the call cannot succeed; the repair reads the original render."""
    return VidforgeError(
        code="idempotency_conflict",
        message="This idempotency_key already names a render that was created with different arguments.",
        field="idempotency_key",
        reason=f"The key names render {render_id}; a replay must repeat that call's arguments exactly.",
        repair=repair(
            "check_render_status",
            STATUS_TOOL,
            {"render_id": render_id},
            "To start a different render, re-call vidforge_render_video with a new idempotency_key (or none).",
        ),
    )


def unknown_tool(name: str) -> VidforgeError:
    return VidforgeError(
        code="unknown_tool",
        message=f"Unknown tool: {name}",
        field="name",
        reason="vidforge serves vidforge_render_video, vidforge_get_render_status, vidforge_approve_watermark, "
        "vidforge_cancel_render and vidforge_get_capabilities.",
        repair=repair("read_capabilities", CAPABILITIES_TOOL, {}, "Call tools/list for the current catalog."),
    )


class ToolCalls:
    """Dispatches a validated `tools/call` to the service and shapes the result."""

    def __init__(self, service: RenderService, settings: WireSettings) -> None:
        self._service = service
        self._settings = settings
        self._handlers = {
            RENDER_TOOL: self._render,
            STATUS_TOOL: self._status,
            APPROVE_TOOL: self._approve,
            CANCEL_TOOL: self._cancel,
            CAPABILITIES_TOOL: self._capabilities,
        }

    def known(self, name: str) -> bool:
        return name in self._handlers

    async def call(self, caller: Caller, name: str, arguments: Any) -> dict[str, Any]:
        try:
            args = validate_arguments(name, arguments)
            return await self._handlers[name](caller, args)
        except VidforgeError as error:
            return tool_error_result(error)
        except Exception:
            # A fault must still reach the agent as a contract-shaped, retryable error.
            logger.exception("tool %s failed", name)
            return tool_error_result(
                VidforgeError(
                    code="internal_error",
                    message="vidforge hit an unexpected fault handling this call.",
                    field=None,
                    reason="Internal error; details are in the server log under this request_id.",
                    temporary=True,
                    retry_after_ms=2000,
                    repair=repair("retry_call", name, arguments if isinstance(arguments, dict) else {}),
                    jsonrpc_code=INTERNAL_ERROR,
                )
            )

    def _expires_ms(self, rec: dict[str, Any]) -> int:
        """The render handle lives the retention from creation; a finished video the retention from completion."""
        handle = rec["created_at_ms"] + self._settings.result_retention_s * 1000
        return max(handle, (rec.get("artifact") or {}).get("expires_at_ms", 0))

    async def _render(self, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        rec = await self._service.create_render(caller.principal, args)
        if caller.tasks:
            return views.create_task_result(rec, caller)
        if not views.is_terminal(rec):
            return views.accepted_result(rec, self._expires_ms(rec))
        # An idempotent replay of a finished render, without tasks: answer what the render ended with.
        if rec["status"] == "completed":
            return rec["result"]
        if rec["status"] == "cancelled":
            raise VidforgeError(
                code="render_cancelled",
                message="The render this idempotency_key names was cancelled.",
                field="idempotency_key",
                reason="A cancelled render is final; its key keeps naming it for "
                f"{duration_text(self._settings.idempotency_ttl_s)}.",
                repair=rerender_repair(
                    args,
                    "rerender_with_new_key",
                    "Re-call without idempotency_key (or with a new one) to start a new render.",
                ),
            )
        raise render_failed_error(rec["task_id"], rec["status_message"] or "render failed", args)

    async def _get(self, caller: Caller, render_id: str) -> dict[str, Any]:
        rec = await self._service.get_render(caller.principal, render_id)
        if rec is None:
            raise render_not_found(render_id, self._settings.result_retention_s)
        return rec

    async def _status(self, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        rec = await self._get(caller, args["render_id"])
        return _ok(views.render_status(rec, self._expires_ms(rec)))

    async def _approve(self, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        render_id, approved = args["render_id"], args["approved"]
        answer = await self._service.answer_approval(caller.principal, render_id, approved, args.get("note"))
        outcome, rec = answer["outcome"], answer["task"]
        if outcome == "not_found" or rec is None:
            raise render_not_found(render_id, self._settings.result_retention_s)
        status_fix = repair("check_render_status", STATUS_TOOL, {"render_id": render_id})
        if outcome == "conflict":
            recorded = (rec.get("approval") or {}).get("approved")
            raise VidforgeError(
                code="approval_already_recorded",
                message="A different watermark decision was already recorded for this render.",
                field="approved",
                reason=f"Recorded decision: approved={str(recorded).lower()}; a decision cannot be changed.",
                repair=status_fix,
            )
        if outcome not in ("recorded", "replayed"):
            raise VidforgeError(
                code="approval_not_pending",
                message="This render is not awaiting watermark approval.",
                field="render_id",
                reason=f"Render state is {views.fallback_state(rec)}.",
                repair=status_fix,
            )
        structured = {
            "render_id": render_id,
            "approved": approved,
            "state": views.fallback_state(rec),
            "replayed": outcome == "replayed",
            "follow_up": {"next_step": "poll_render_status", "tool": STATUS_TOOL, "arguments": {"render_id": render_id}},
        }
        return _ok(structured)

    async def _cancel(self, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        render_id = args["render_id"]
        rec = await self._service.cancel_render(caller.principal, render_id)
        if rec is None:
            raise render_not_found(render_id, self._settings.result_retention_s)
        state = views.fallback_state(rec) if views.is_terminal(rec) else "cancelling"
        structured = {
            "acknowledged": True,
            "state": state,
            "render_id": render_id,
            "follow_up": {"next_step": "poll_render_status", "tool": STATUS_TOOL, "arguments": {"render_id": render_id}},
        }
        return _ok(structured)

    async def _capabilities(self, caller: Caller, args: dict[str, Any]) -> dict[str, Any]:
        return _ok(capability_summary(self._settings))
