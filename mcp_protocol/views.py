"""Task records → wire shapes: the native DetailedTask (ext-tasks) and the fallback mirrors (contract §4).

Both views read the same `TaskRecord` (the TaskRegistry's), so the native and fallback surfaces can never
disagree about a render. A finished render's result is built from its stored end by `mcp_protocol.results`,
with the retention in force when it is read. Where they name the watermark preview they also give the review link the
server minted for the outstanding approval (`review_url`, from `RenderService.review_url`): the `vidforge://` URI is
for clients, the link for the person, who can open it in a browser. A finished video is named the same way: its
`vidforge://videos/…` URI, and the link of its watch page (`watch_url`, from `RenderService.watch_url`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mcp_protocol._caller_metadata import with_metadata
from mcp_protocol._elicitation import ElicitationMode, approval_mode, approval_request
from mcp_protocol.catalog import APPROVE_TOOL, STATUS_TOOL, preview_uri
from mcp_protocol.domain import Phase, Succeeded, TaskRecord, TaskStatus
from mcp_protocol.json_types import JSONObject
from mcp_protocol.progress import LIVE_PHASES, RenderProgress, poll_interval_ms
from mcp_protocol.results import end_error, end_result
from mcp_protocol.timefmt import duration_text, iso_ms, now_ms


class FallbackState(StrEnum):
    """A render's `state` on the fallback surface (contract §4), for clients without the tasks extension."""

    QUEUED = "queued"
    RENDERING = "rendering"
    AWAITING_WATERMARK_APPROVAL = "awaiting_watermark_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # completed with an error result (never the ext-tasks status, which vidforge never uses)
    CANCELLED = "cancelled"


FALLBACK_TERMINAL_STATES = [FallbackState.SUCCEEDED, FallbackState.FAILED, FallbackState.CANCELLED]


@dataclass(frozen=True)
class Caller:
    """What this one request declared ([1.negotiated-caps]: never inferred from earlier requests)."""

    principal: str
    tasks: bool = False
    elicitation: frozenset[ElicitationMode] = frozenset()  # the modes `clientCapabilities.elicitation` declares
    ui: bool = False  # shown the render view (mcp_protocol.app_view: who is)


def progress_fraction(rec: TaskRecord) -> float | None:
    if isinstance(rec.end, Succeeded):
        return 1.0
    return RenderProgress.of(rec).fraction


def _in_browser(review_url: str | None) -> str:
    return f" (in a browser: {review_url})" if review_url is not None else ""


def _approval_message(rec: TaskRecord, timeout_s: float, caller: Caller, review_url: str | None) -> str:
    text = (
        f"Waiting for user approval of the watermark preview at {preview_uri(rec.task_id)}{_in_browser(review_url)}. "
        f"Unanswered approvals time out after {duration_text(timeout_s)}."
    )
    if approval_mode(caller.elicitation, review_url) is None:
        # ext-tasks: no ElicitRequest the request did not declare, so name the callable surface instead.
        text += (
            f" To answer, call `{APPROVE_TOOL}` with `{{render_id: '{rec.task_id}', approved: true|false}}`"
            " (add `note` when rejecting)."
        )
    return text


def status_message(rec: TaskRecord, caller: Caller, review_url: str | None = None) -> str:
    """`statusMessage` carries progress after creation ([7.progress-token]): while a render works, the live
    figures (percent, frames, speed, ETA, phase; see `RenderProgress.message`), monotonic with the frames.
    Awaiting approval it is the contract's fixed text, with the review link beside the preview's URI when there is
    one; otherwise the message the registry recorded."""
    if rec.pending is not None:
        return _approval_message(rec, rec.pending.timeout_s, caller, review_url)
    if rec.status is TaskStatus.WORKING and rec.phase in LIVE_PHASES:
        return RenderProgress.of(rec).message()
    return rec.status_message


def _task_fields(rec: TaskRecord, caller: Caller, review_url: str | None = None) -> JSONObject:
    return {
        "taskId": rec.task_id,
        "status": rec.status.value,
        "statusMessage": status_message(rec, caller, review_url),
        "createdAt": iso_ms(rec.created_at_ms),
        "lastUpdatedAt": iso_ms(rec.last_updated_at_ms),
        "ttlMs": rec.ttl_ms,
        "pollIntervalMs": poll_interval_ms(rec, now_ms()),
    }


def create_task_result(rec: TaskRecord, caller: Caller) -> JSONObject:
    """ext-tasks CreateTaskResult: flat, `resultType: "task"` — sent only once the task is durable; the caller's
    metadata under `_meta`."""
    return with_metadata({"resultType": "task", **_task_fields(rec, caller)}, rec.request.metadata)


def detailed_task(
    rec: TaskRecord,
    caller: Caller,
    retention_s: int,
    review_url: str | None = None,
    watch_url: str | None = None,
    contact_sheet: bytes | None = None,
    stream_url: str | None = None,
) -> JSONObject:
    """ext-tasks DetailedTask (the `tasks/get` result and the `notifications/tasks` params). An outstanding approval
    is asked in the elicitation mode this request declared (mcp_protocol._elicitation), or not at all; a finished
    video's result names its watch page (`watch_url`, from `RenderService.watch_url`). The caller's metadata rides
    under `_meta` on the task and on its result (never in the result's closed structuredContent)."""
    body: JSONObject = {"resultType": "complete", **_task_fields(rec, caller, review_url)}
    if rec.pending is not None:
        mode = approval_mode(caller.elicitation, review_url) if rec.approval is None else None
        body["inputRequests"] = {rec.pending.key: approval_request(rec, mode, review_url)} if mode is not None else {}
    elif rec.status is TaskStatus.COMPLETED:
        result = end_result(rec, retention_s, watch_url, contact_sheet, stream_url)
        body["result"] = with_metadata(result, rec.request.metadata)
    return with_metadata(body, rec.request.metadata)


def fallback_state(rec: TaskRecord) -> FallbackState:
    if rec.status is TaskStatus.WORKING:
        return FallbackState.QUEUED if rec.phase is Phase.QUEUED else FallbackState.RENDERING
    if rec.status is TaskStatus.INPUT_REQUIRED:
        return FallbackState.AWAITING_WATERMARK_APPROVAL
    if rec.status is TaskStatus.COMPLETED:
        return FallbackState.SUCCEEDED if isinstance(rec.end, Succeeded) else FallbackState.FAILED
    return FallbackState.CANCELLED


def _status_follow_up(render_id: str) -> JSONObject:
    return {"next_step": "poll_render_status", "tool": STATUS_TOOL, "arguments": {"render_id": render_id}}


def accepted_result(rec: TaskRecord, retention_s: int) -> JSONObject:
    """Contract §4 create for clients without the tasks extension: `status: "accepted"` right away.

    Only for a render still in flight; an idempotent replay of a finished one answers what it ended with
    (see `ToolCalls._render`)."""
    render_id = rec.task_id
    structured: JSONObject = {
        "status": "accepted",
        "render_id": render_id,
        "state": fallback_state(rec).value,
        "poll_after_ms": rec.poll_interval_ms,
        "expires_at": iso_ms(rec.expires_ms(retention_s)),
        "follow_up": _status_follow_up(render_id),
    }
    return {
        "resultType": "complete",
        "isError": False,
        "content": [{"type": "text", "text": f"Render accepted as {render_id}; poll {STATUS_TOOL}."}],
        "structuredContent": structured,
    }


def error_envelope_of(rec: TaskRecord) -> JSONObject | None:
    """The §6 envelope of a render that ended in an error; None for any other."""
    error = end_error(rec)
    return error.envelope() if error is not None else None


def render_status(
    rec: TaskRecord, retention_s: int, review_url: str | None = None, watch_url: str | None = None
) -> JSONObject:
    """`vidforge_get_render_status`: mirrors the native signals for clients without tasks. Its outputSchema is
    closed, so the review link rides in `status_message` (and, once the video is there, its watch page's link);
    `watermark_preview_uri` stays the resource's URI."""
    render_id = rec.task_id
    state = fallback_state(rec)
    terminal = rec.status.terminal
    out: JSONObject = {
        "render_id": render_id,
        "state": state.value,
        "terminal": terminal,
        "poll_after_ms": 0 if terminal else poll_interval_ms(rec, now_ms()),
    }
    if (fraction := progress_fraction(rec)) is not None:
        out["progress"] = fraction
    out["status_message"] = status_message(rec, Caller(principal=rec.principal))
    if rec.pending is not None:
        in_browser = f" Review the preview and decide in a browser: {review_url}" if review_url is not None else ""
        out["status_message"] = (
            f"Waiting for watermark approval; times out {iso_ms(rec.pending.deadline_ms)}.{in_browser}"
        )
        out["watermark_preview_uri"] = preview_uri(render_id)
    out["expires_at"] = iso_ms(rec.expires_ms(retention_s))
    out["terminal_states"] = [state.value for state in FALLBACK_TERMINAL_STATES]
    if isinstance(rec.end, Succeeded):
        result = end_result(rec, retention_s)["structuredContent"]
        assert isinstance(result, dict)
        for key in ("video_uri", "duration_seconds", "size_bytes", "resolution", "watermark_applied"):
            out[key] = result[key]
        if (qc := rec.end.artifact.qc) is not None:
            out["status_message"] = f"{out['status_message']} {qc.sentence()}"
        if watch_url is not None:  # last: the link ends the line, as it does without a check
            out["status_message"] = f"{out['status_message']} Watch it in a browser: {watch_url}"
    elif state is FallbackState.FAILED:
        out["error"] = error_envelope_of(rec)
    if rec.pending is not None:
        out["follow_up"] = {
            "next_step": "approve_watermark",
            "tool": APPROVE_TOOL,
            "arguments": {"render_id": render_id, "approved": True},
            "alternative": "Pass approved: false with a `note` to reject; rejection ends the render.",
        }
    elif not terminal:
        out["follow_up"] = _status_follow_up(render_id)
    if rec.request.metadata:
        out["metadata"] = dict(rec.request.metadata)
    return out
