"""The result a finished render answers with (contract §3.4), built from its stored end each time it is read.

All of them are `CallToolResult`s: on the task path they sit inline in a `completed` task
([7.failed-task]: `completed` is delivery, not success); on the fallback path the status tool mirrors them. The
registry stores only what happened (`mcp_protocol.domain.RenderEnd`); what the wire says about it, the
expiry included, comes from here and the settings in force, so a change to these shapes needs no migration.

A success names two resources: the video, and its poster (a JPEG frame of it, `vidforge://videos/<id>/poster.jpg`).
With a quality check (mcp_protocol.quality), two more: its report (`qc.json`, also under `_meta` `com.vidforge/qc`)
and its contact sheet (`contact-sheet.jpg`), which also rides inline as an `image` block when the caller has its
bytes: the one picture of the video a model can look at. The text content carries the verdict and its reasons.
A streamed render also links its stream's HLS master playlist and DASH manifest (mcp_protocol.streams).
Where the server mints a watch link (`RenderService.watch_url`: a page that plays the video in a browser, for the
person the agent works for), it rides the text content and the video's `resource_link` description; the
`structuredContent` is the contract's, unchanged.
"""

from __future__ import annotations

import json

from mcp_protocol import errors
from mcp_protocol.catalog import video_uri
from mcp_protocol.domain import (
    ApprovalTimedOut,
    Artifact,
    Failed,
    Rejected,
    RenderRequest,
    Succeeded,
    TaskRecord,
    Unsupported,
)
from mcp_protocol.envelope import VidforgeError, tool_error_result
from mcp_protocol.error_codes import ErrorCode
from mcp_protocol.json_types import JSONObject, with_meta_entry
from mcp_protocol.quality import QC_META_KEY, contact_sheet_block, contact_sheet_uri, qc_uri
from mcp_protocol.streams import with_stream
from mcp_protocol.timefmt import duration_text, iso_ms


def poster_uri(render_id: str) -> str:
    return f"vidforge://videos/{render_id}/poster.jpg"


def render_success_result(
    render_id: str,
    request: RenderRequest,
    artifact: Artifact,
    retention_s: int,
    watch_url: str | None = None,
    contact_sheet: bytes | None = None,
    stream_url: str | None = None,
) -> JSONObject:
    """The success payload: `resource_link`s to the video and its poster, never the video's bytes
    ([3.resource-links]); with `watch_url`, the link to the video's watch page beside them; with a quality report,
    its verdict in the text, the report under `_meta` and links to it and the contact sheet, whose bytes
    (`contact_sheet`) ride as an `image` block; with a stream, its resources and (`stream_url`) players' links."""
    ext = request.output_format
    uri = video_uri(render_id, ext)
    watermarked = request.watermark is not None
    structured: JSONObject = {
        "status": "completed",
        "video_uri": uri,
        "duration_seconds": round(float(artifact.duration_s), 3),
        "size_bytes": artifact.size_bytes,
        "resolution": request.resolution,
        "watermark_applied": watermarked,
        "expires_at": iso_ms(artifact.finished_at_ms + retention_s * 1000),
    }
    summary = {k: structured[k] for k in ("status", "video_uri", "duration_seconds", "size_bytes")}
    if watch_url is not None:
        summary["watch_url"] = watch_url
    if artifact.qc is not None:
        summary["qc"] = artifact.qc.summary()
    watch = f" Watch it in a browser: {watch_url}" if watch_url is not None else ""
    finished = iso_ms(artifact.finished_at_ms)
    content: list[JSONObject] = [
        {"type": "text", "text": json.dumps(summary, separators=(",", ":"))},
        {
            "type": "resource_link",
            "uri": uri,
            "name": f"final.{ext}",
            "description": f"Rendered {request.resolution} {ext}"
            + (f" at {artifact.width}x{artifact.height}" if artifact.width and artifact.height else "")
            + (" with approved watermark" if watermarked else "")
            + f"; retained {duration_text(retention_s)}."
            + watch,
            "mimeType": artifact.mime,
            "size": artifact.size_bytes,
            "annotations": {"audience": ["user"], "priority": 0.9, "lastModified": finished},
        },
        {
            "type": "resource_link",
            "uri": poster_uri(render_id),
            "name": "poster.jpg",
            "description": "A frame of the rendered video, as a JPEG: a thumbnail to show before it plays.",
            "mimeType": "image/jpeg",
            "annotations": {"audience": ["user"], "priority": 0.5, "lastModified": finished},
        },
    ]
    result: JSONObject = {
        "resultType": "complete",
        "isError": False,
        "content": content,
        "structuredContent": structured,
    }
    checked = with_quality(result, render_id, artifact, contact_sheet)
    return with_stream(checked, render_id, request, artifact, stream_url)


def with_quality(result: JSONObject, render_id: str, artifact: Artifact, contact_sheet: bytes | None) -> JSONObject:
    """`result` (a CallToolResult about the finished video `artifact`) with its quality check, when it has one:
    links to the report and the contact sheet, the sheet's bytes (when given) as an `image` block for the model, and
    the report under `_meta`."""
    qc = artifact.qc
    if qc is None:
        return result
    content = result["content"]
    assert isinstance(content, list), "a CallToolResult's content"
    finished = iso_ms(artifact.finished_at_ms)
    blocks: list[JSONObject] = [
        {
            "type": "resource_link",
            "uri": contact_sheet_uri(render_id),
            "name": "contact-sheet.jpg",
            "description": f"Frames of the video with their times, and one at each defect found. {qc.sentence()}",
            "mimeType": "image/jpeg",
            "annotations": {"audience": ["assistant", "user"], "priority": 0.7, "lastModified": finished},
        },
        {
            "type": "resource_link",
            "uri": qc_uri(render_id),
            "name": "qc.json",
            "description": "The quality check's report: verdict, defects with their times, loudness, fidelity.",
            "mimeType": "application/json",
            "annotations": {"audience": ["assistant"], "priority": 0.6, "lastModified": finished},
        },
    ]
    if contact_sheet is not None:
        blocks.append(contact_sheet_block(contact_sheet))
    return {**with_meta_entry(result, QC_META_KEY, qc.to_json()), "content": [*content, *blocks]}


def end_error(rec: TaskRecord) -> VidforgeError | None:
    """The error a render ended with (its request_id the one stored with the end); None unless it ended in one."""
    end, request = rec.end, rec.request
    if isinstance(end, Rejected):
        error = errors.watermark_rejected(request, end.note)
    elif isinstance(end, ApprovalTimedOut):
        error = errors.watermark_approval_timeout(request, end.timeout_s)
    elif isinstance(end, Unsupported):
        unusable = {
            ErrorCode.SOURCE_NOT_FOUND: errors.source_not_found,
            ErrorCode.UNSUPPORTED_CODEC: errors.unsupported_codec,
            ErrorCode.MEDIA_LIMIT_EXCEEDED: errors.media_limit_exceeded,
        }
        error = unusable[end.code](end.field, end.reason)
    elif isinstance(end, Failed):
        if end.code is ErrorCode.RENDER_TIMEOUT:
            error = errors.render_timeout(end.reason)
        elif end.code is ErrorCode.STORAGE_FULL:
            error = errors.storage_full(request)
        else:
            error = errors.render_failed(request, end.reason)
    else:
        return None
    error.request_id = end.request_id
    error.reported = True  # its one log line was written when the render ended (serve_app/observability)
    return error


def end_result(
    rec: TaskRecord,
    retention_s: int,
    watch_url: str | None = None,
    contact_sheet: bytes | None = None,
    stream_url: str | None = None,
) -> JSONObject:
    """The `CallToolResult` a completed render answers with: its video (and `watch_url`, its watch page; its contact
    sheet's bytes; `stream_url`, its stream's signed folder), or the error it ended in."""
    if isinstance(rec.end, Succeeded):
        artifact = rec.end.artifact
        return render_success_result(
            rec.task_id, rec.request, artifact, retention_s, watch_url, contact_sheet, stream_url
        )
    error = end_error(rec)
    if error is None:
        raise ValueError(f"task {rec.task_id} has no result: it is {rec.status}")
    return tool_error_result(error)
