"""Tool results a render ends with (contract §3.4): the success payload and the semantic failures.

All of them are `CallToolResult`s: on the task path they sit inline in a `completed` task
([7.failed-task]: `completed` is delivery, not success); on the fallback path the status tool mirrors them.
"""

from __future__ import annotations

import json
from typing import Any

from mcp_protocol.catalog import RENDER_TOOL, STATUS_TOOL, video_uri
from mcp_protocol.errors import VidforgeError, repair, tool_error_result
from mcp_protocol.timefmt import duration_text, iso_ms

MIME_BY_EXT = {"mp4": "video/mp4", "webm": "video/webm", "mov": "video/quicktime"}


def render_success_result(
    render_id: str, arguments: dict[str, Any], artifact: dict[str, Any], finished_ms: int, retention_s: int
) -> dict[str, Any]:
    """The success payload: a `resource_link` to the video, never inline bytes ([3.resource-links])."""
    ext = arguments["output_format"]
    uri = video_uri(render_id, ext)
    watermarked = arguments.get("watermark") is not None
    expires_ms = finished_ms + retention_s * 1000
    structured = {
        "status": "completed",
        "video_uri": uri,
        "duration_seconds": round(float(artifact["duration_s"]), 3),
        "size_bytes": int(artifact["size_bytes"]),
        "resolution": arguments["resolution"],
        "watermark_applied": watermarked,
        "expires_at": iso_ms(expires_ms),
    }
    summary = {k: structured[k] for k in ("status", "video_uri", "duration_seconds", "size_bytes")}
    return {
        "resultType": "complete",
        "isError": False,
        "content": [
            {"type": "text", "text": json.dumps(summary, separators=(",", ":"))},
            {
                "type": "resource_link",
                "uri": uri,
                "name": f"final.{ext}",
                "description": f"Rendered {arguments['resolution']} {ext}"
                + (" with approved watermark" if watermarked else "")
                + f"; retained {duration_text(retention_s)}.",
                "mimeType": MIME_BY_EXT[ext],
                "size": int(artifact["size_bytes"]),
                "annotations": {"audience": ["user"], "priority": 0.9, "lastModified": iso_ms(finished_ms)},
            },
        ],
        "structuredContent": structured,
    }


def rerender_repair(arguments: dict[str, Any], next_step: str, alternative: str) -> dict[str, Any]:
    """[6.repair-intent]: the caller's still-valid original arguments, literally callable."""
    original = {k: v for k, v in arguments.items() if k != "idempotency_key"}
    return repair(next_step, RENDER_TOOL, original, alternative)


def watermark_rejected_result(arguments: dict[str, Any], note: str | None) -> dict[str, Any]:
    quoted = f"'{note}'" if note else "no note given"
    error = VidforgeError(
        code="watermark_rejected",
        message="User declined the watermark preview; the render was not finalized.",
        field="watermark",
        reason=f"User note: {quoted}.",
        repair=rerender_repair(
            arguments,
            "revise_watermark_and_rerender",
            "Adjust `watermark.position` or `watermark.opacity` per the user's note before re-calling, "
            "or omit `watermark` to render without one.",
        ),
        text=f"User rejected the watermark ({quoted}). Adjust `watermark` and re-call {RENDER_TOOL}.",
    )
    return tool_error_result(error)


def approval_timeout_result(arguments: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    span = duration_text(timeout_s)
    error = VidforgeError(
        code="watermark_approval_timeout",
        message=f"No watermark approval arrived within {span}; the render was not finalized.",
        field="watermark",
        reason=f"Approval window of {span} elapsed without a decision.",
        repair=rerender_repair(
            arguments, "rerender_and_approve", "Re-call to start a new render, then approve the preview promptly."
        ),
    )
    return tool_error_result(error)


def render_timeout_error(limit_s: float) -> VidforgeError:
    """A render past the operator's wall-clock limit: the same request would take as long again, so it is not
    temporary; the way on is a cheaper render (shorter source, lower resolution) or a higher limit."""
    return VidforgeError(
        code="render_timeout",
        message="The render was stopped: it ran past this server's time limit for one render.",
        field=None,
        reason=f"the render took longer than the {limit_s:g} s limit (VIDFORGE_RENDER_TIMEOUT_S)",
        repair=repair(
            "upload_smaller_asset",
            None,
            {},
            "Render a shorter source or at a lower resolution (answer a watermark approval promptly: the wait "
            "counts), or ask the operator to raise VIDFORGE_RENDER_TIMEOUT_S.",
        ),
    )


def render_failed_error(render_id: str | None, reason: str, arguments: dict[str, Any] | None) -> VidforgeError:
    """A renderer fault: temporary, safe to re-call (a new job unless the idempotency key is reused)."""
    if arguments is not None:
        fix = rerender_repair(arguments, "retry_render", "Re-calling starts a new render job.")
    else:
        fix = repair("check_render_status", STATUS_TOOL, {"render_id": render_id})
    return VidforgeError(
        code="render_failed",
        message="The renderer failed before the video was finished.",
        field=None,
        reason=reason,
        temporary=True,
        retry_after_ms=5000,
        repair=fix,
    )
