"""The wire views of a task record, unit by unit: `fallback_state`, `render_status`, `error_envelope_of`, and the
result a finished render answers with (`mcp_protocol.results`). Pure: records are built here."""

from __future__ import annotations

import pytest

from mcp_protocol import views
from mcp_protocol.domain import (
    ApprovalTimedOut,
    Artifact,
    Cancelled,
    Failed,
    PendingApproval,
    Rejected,
    RenderRequest,
    Succeeded,
    TaskRecord,
    Unsupported,
    Watermark,
)
from mcp_protocol.error_codes import ErrorCode
from mcp_protocol.results import end_result

T_MS = 1_785_333_731_000  # 2026-07-29T14:02:11Z
DAY_S = 86_400
REQUEST = RenderRequest(
    source_asset_uri="vidforge://assets/a_1",
    output_format="mov",
    resolution="4k",
    watermark=Watermark(image_asset_uri="vidforge://assets/a_2"),
    idempotency_key="k",
)
ARTIFACT = Artifact(
    ext="mov",
    size_bytes=2048,
    duration_s=2.5,
    finished_at_ms=T_MS + 3_600_000,
)
ERROR_ENDS = {
    "rejected": Rejected(note="smaller"),
    "approval_timeout": ApprovalTimedOut(timeout_s=1800),
    "unsupported": Unsupported(code=ErrorCode.UNSUPPORTED_CODEC, field="source_asset_uri", reason="no video"),
    "failed": Failed(code=ErrorCode.RENDER_FAILED, reason="RuntimeError: boom"),
}


def record(status: str = "working", **fields) -> TaskRecord:
    values = {
        "task_id": "task_v",
        "principal": "alice",
        "request": REQUEST,
        "status": status,
        "phase": "done" if status in ("completed", "cancelled") else "rendering",
        "status_message": "Render queued; encoding starts shortly.",
        "created_at_ms": T_MS,
        "last_updated_at_ms": T_MS,
        "ttl_ms": DAY_S * 1000,
        "poll_interval_ms": 10_000,
    }
    return TaskRecord.model_validate({**values, **fields})


WAITING = dict(
    status="input_required",
    phase="awaiting_watermark_approval",
    poll_interval_ms=30_000,
    pending=PendingApproval(key="watermark-approval-1", deadline_ms=T_MS + 1_800_000, timeout_s=1800),
)


@pytest.mark.parametrize(
    "rec, state",
    [
        (record(phase="queued"), "queued"),
        (record(phase="probing"), "rendering"),
        (record(phase="muxing"), "rendering"),
        (record(**WAITING), "awaiting_watermark_approval"),
        (record("completed", end=Succeeded(artifact=ARTIFACT)), "succeeded"),
        *[(record("completed", end=end), "failed") for end in ERROR_ENDS.values()],
        (record("cancelled", end=Cancelled()), "cancelled"),
    ],
)
def test_fallback_state_of_every_status_and_outcome(rec, state):
    assert views.fallback_state(rec) == state


def test_render_status_of_a_working_render():
    status = views.render_status(record(phase="queued"), retention_s=7 * DAY_S)
    assert status == {
        "render_id": "task_v",
        "state": "queued",
        "terminal": False,
        "poll_after_ms": 10_000,
        "status_message": "Render queued; encoding starts shortly.",
        "expires_at": "2026-08-05T14:02:11Z",
        "terminal_states": ["succeeded", "failed", "cancelled"],
        "follow_up": {
            "next_step": "poll_render_status",
            "tool": "vidforge_get_render_status",
            "arguments": {"render_id": "task_v"},
        },
    }


def test_render_status_awaiting_approval():
    status = views.render_status(record(**WAITING), retention_s=7 * DAY_S)
    assert status["status_message"] == "Waiting for watermark approval; times out 2026-07-29T14:32:11Z."
    assert status["watermark_preview_uri"] == "vidforge://renders/task_v/watermark-preview.png"
    assert status["follow_up"]["tool"] == "vidforge_approve_watermark" and status["poll_after_ms"] == 30_000


def test_render_status_of_a_success_mirrors_the_result_and_expires_a_retention_after_completion():
    rec = record("completed", end=Succeeded(artifact=ARTIFACT), status_message="Render complete.")
    status = views.render_status(rec, retention_s=DAY_S)
    assert (status["state"], status["terminal"], status["poll_after_ms"], status["progress"]) == (
        "succeeded",
        True,
        0,
        1.0,
    )
    assert status["expires_at"] == "2026-07-30T15:02:11Z"  # a day after completion, not after creation
    result = end_result(rec, retention_s=DAY_S)
    for key in ("video_uri", "duration_seconds", "size_bytes", "resolution", "watermark_applied"):
        assert status[key] == result["structuredContent"][key]
    assert result["structuredContent"]["expires_at"] == status["expires_at"]
    link = result["content"][1]
    assert (link["mimeType"], link["size"], link["annotations"]["lastModified"]) == (
        "video/quicktime",
        2048,
        "2026-07-29T15:02:11Z",
    )
    assert link["description"] == "Rendered 4k mov with approved watermark; retained 24 hours."
    assert "error" not in status and "follow_up" not in status


@pytest.mark.parametrize("outcome", sorted(ERROR_ENDS))
def test_error_envelope_of_an_error_end_is_the_results(outcome):
    rec = record("completed", end=ERROR_ENDS[outcome])
    envelope = views.error_envelope_of(rec)
    result = end_result(rec, retention_s=DAY_S)
    assert result["isError"] is True and result["structuredContent"] == envelope
    assert envelope["request_id"] == ERROR_ENDS[outcome].request_id
    status = views.render_status(rec, retention_s=DAY_S)
    assert status["error"] == envelope and status["state"] == "failed"


def test_error_envelope_of_anything_else_is_none():
    for rec in (
        record(),
        record(**WAITING),
        record("cancelled", end=Cancelled()),
        record("completed", end=Succeeded(artifact=ARTIFACT)),
    ):
        assert views.error_envelope_of(rec) is None


def test_repairs_echo_the_original_request_without_its_key():
    envelope = views.error_envelope_of(record("completed", end=ERROR_ENDS["rejected"]))
    assert envelope["repair"]["arguments"] == {
        "source_asset_uri": "vidforge://assets/a_1",
        "output_format": "mov",
        "resolution": "4k",
        "watermark": {"image_asset_uri": "vidforge://assets/a_2", "position": "bottom_right", "opacity": 1.0},
    }


def test_a_cancelled_render_has_no_result():
    with pytest.raises(ValueError):
        end_result(record("cancelled", end=Cancelled()), retention_s=DAY_S)
    status = views.render_status(record("cancelled", end=Cancelled(), status_message="Render cancelled."), DAY_S)
    assert (status["state"], status["terminal"], status["status_message"]) == ("cancelled", True, "Render cancelled.")
    assert "error" not in status and "follow_up" not in status


@pytest.mark.parametrize(
    "fields",
    [
        {"status": "completed"},  # terminal without an end
        {"status": "cancelled", "phase": "done", "end": Failed(code=ErrorCode.RENDER_FAILED, reason="x")},
        {"status": "working", "end": Cancelled()},
        {"status": "working", "phase": "done"},
        {"status": "input_required", "phase": "awaiting_watermark_approval"},  # no pending approval
        {"status": "failed"},  # ext-tasks' `failed` is never a vidforge status
    ],
)
def test_a_record_holds_only_consistent_states(fields):
    with pytest.raises(ValueError):
        record(**fields)
