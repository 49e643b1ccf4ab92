"""Task records → wire shapes: the native DetailedTask (ext-tasks) and the fallback mirrors (contract §4).

A task record is the plain dict the TaskRegistry owns (see `actors/task_registry.py`). Both views read
the same record, so the native and fallback surfaces can never disagree about a render.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp_protocol.catalog import APPROVE_TOOL, STATUS_TOOL, preview_uri
from mcp_protocol.progress import LIVE_PHASES, RenderProgress
from mcp_protocol.timefmt import duration_text, iso_ms

TERMINAL = ("completed", "failed", "cancelled")
FALLBACK_TERMINAL_STATES = ["succeeded", "failed", "cancelled"]


@dataclass(frozen=True)
class Caller:
    """What this one request declared ([1.negotiated-caps]: never inferred from earlier requests)."""

    principal: str
    tasks: bool = False
    elicitation_form: bool = False


def is_terminal(rec: dict[str, Any]) -> bool:
    return rec["status"] in TERMINAL


def progress_fraction(rec: dict[str, Any]) -> float | None:
    if rec["status"] == "completed" and not rec["result"].get("isError"):
        return 1.0
    return RenderProgress.of(rec).fraction


def _approval_message(rec: dict[str, Any], caller: Caller) -> str:
    req = rec.get("input_request") or {}
    uri = req.get("preview_uri") or preview_uri(rec["task_id"])
    timeout_s = float(req.get("timeout_s", 1800))
    text = (
        f"Waiting for user approval of the watermark preview at {uri}. "
        f"Unanswered approvals time out after {duration_text(timeout_s)}."
    )
    if not caller.elicitation_form:
        # ext-tasks: no ElicitRequest the request did not declare, so name the callable surface instead.
        text += (
            f" To answer, call `{APPROVE_TOOL}` with `{{render_id: '{rec['task_id']}', approved: true|false}}`"
            " (add `note` when rejecting)."
        )
    return text


def status_message(rec: dict[str, Any], caller: Caller) -> str:
    """`statusMessage` carries progress after creation ([7.progress-token]): while a render works, the live
    figures (percent, frames, speed, ETA, phase; see `RenderProgress.message`), monotonic with the frames.
    Awaiting approval it is the contract's fixed text; otherwise the message the registry recorded."""
    status = rec["status"]
    if status == "input_required":
        return _approval_message(rec, caller)
    if status == "working" and rec.get("phase") in LIVE_PHASES:
        return RenderProgress.of(rec).message()
    return rec.get("status_message") or ""


def _task_fields(rec: dict[str, Any], caller: Caller) -> dict[str, Any]:
    return {
        "taskId": rec["task_id"],
        "status": rec["status"],
        "statusMessage": status_message(rec, caller),
        "createdAt": iso_ms(rec["created_at_ms"]),
        "lastUpdatedAt": iso_ms(rec["last_updated_at_ms"]),
        "ttlMs": rec["ttl_ms"],
        "pollIntervalMs": rec["poll_interval_ms"],
    }


def create_task_result(rec: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """ext-tasks CreateTaskResult: flat, `resultType: "task"` — sent only once the task is durable."""
    return {"resultType": "task", **_task_fields(rec, caller)}


def approval_input_request(rec: dict[str, Any]) -> dict[str, Any]:
    """The form `elicitation/create` of contract §3.3."""
    req = rec.get("input_request") or {}
    uri = req.get("preview_uri") or preview_uri(rec["task_id"])
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": f"Approve this watermark? Preview: {uri} ({req.get('position', 'bottom_right')}, "
            f"opacity {req.get('opacity', 1.0):g}). Rejecting ends the render.",
            "requestedSchema": {
                "type": "object",
                "required": ["approved"],
                "properties": {
                    "approved": {
                        "type": "boolean",
                        "description": "true to continue the render with this watermark; false to reject and end it.",
                    },
                    "note": {"type": "string", "description": "Optional reason or requested adjustment when rejecting."},
                },
            },
        },
    }


def detailed_task(rec: dict[str, Any], caller: Caller) -> dict[str, Any]:
    """ext-tasks DetailedTask (the `tasks/get` result and the `notifications/tasks` params)."""
    body = {"resultType": "complete", **_task_fields(rec, caller)}
    status = rec["status"]
    if status == "input_required":
        pending = rec.get("input_key") and not rec.get("approval")
        body["inputRequests"] = (
            {rec["input_key"]: approval_input_request(rec)} if pending and caller.elicitation_form else {}
        )
    elif status == "completed":
        body["result"] = rec["result"]
    elif status == "failed":
        body["error"] = rec["error"]
    return body


def fallback_state(rec: dict[str, Any]) -> str:
    status = rec["status"]
    if status == "working":
        return "queued" if rec.get("phase") == "queued" else "rendering"
    if status == "input_required":
        return "awaiting_watermark_approval"
    if status == "completed":
        return "failed" if rec["result"].get("isError") else "succeeded"
    return status  # failed | cancelled


def _status_follow_up(render_id: str) -> dict[str, Any]:
    return {"next_step": "poll_render_status", "tool": STATUS_TOOL, "arguments": {"render_id": render_id}}


def accepted_result(rec: dict[str, Any], expires_ms: int) -> dict[str, Any]:
    """Contract §4 create for clients without the tasks extension: `status: "accepted"` right away.

    Only for a render still in flight; an idempotent replay of a finished one answers what it ended with
    (see `ToolCalls._render`)."""
    render_id = rec["task_id"]
    structured = {
        "status": "accepted",
        "render_id": render_id,
        "state": fallback_state(rec),
        "poll_after_ms": rec["poll_interval_ms"],
        "expires_at": iso_ms(expires_ms),
        "follow_up": _status_follow_up(render_id),
    }
    return {
        "resultType": "complete",
        "isError": False,
        "content": [{"type": "text", "text": f"Render accepted as {render_id}; poll {STATUS_TOOL}."}],
        "structuredContent": structured,
    }


def error_envelope_of(rec: dict[str, Any]) -> dict[str, Any] | None:
    """The §6 envelope of a failed render, whichever carrier it arrived on."""
    if rec["status"] == "completed" and rec["result"].get("isError"):
        return rec["result"]["structuredContent"]
    if rec["status"] == "failed":
        data = dict(rec["error"].get("data") or {})
        data["code"] = data.pop("machine_code", "render_failed")
        data["message"] = data.pop("human_message", rec["error"].get("message", ""))
        return data
    return None


def render_status(rec: dict[str, Any], expires_ms: int) -> dict[str, Any]:
    """`vidforge_get_render_status`: mirrors the native signals for clients without tasks."""
    render_id = rec["task_id"]
    state = fallback_state(rec)
    terminal = is_terminal(rec)
    out: dict[str, Any] = {
        "render_id": render_id,
        "state": state,
        "terminal": terminal,
        "poll_after_ms": 0 if terminal else rec["poll_interval_ms"],
    }
    if (fraction := progress_fraction(rec)) is not None:
        out["progress"] = fraction
    out["status_message"] = status_message(rec, Caller(principal=rec["principal"]))
    if state == "awaiting_watermark_approval":
        deadline = rec.get("approval_deadline_ms")
        if deadline:
            out["status_message"] = f"Waiting for watermark approval; times out {iso_ms(deadline)}."
        out["watermark_preview_uri"] = (rec.get("input_request") or {}).get("preview_uri") or preview_uri(render_id)
    out["expires_at"] = iso_ms(expires_ms)
    out["terminal_states"] = list(FALLBACK_TERMINAL_STATES)
    if state == "succeeded":
        sc = rec["result"]["structuredContent"]
        for key in ("video_uri", "duration_seconds", "size_bytes", "resolution", "watermark_applied"):
            out[key] = sc[key]
    elif state == "failed":
        out["error"] = error_envelope_of(rec)
    if state == "awaiting_watermark_approval":
        out["follow_up"] = {
            "next_step": "approve_watermark",
            "tool": APPROVE_TOOL,
            "arguments": {"render_id": render_id, "approved": True},
            "alternative": "Pass approved: false with a `note` to reject; rejection ends the render.",
        }
    elif not terminal:
        out["follow_up"] = _status_follow_up(render_id)
    return out
