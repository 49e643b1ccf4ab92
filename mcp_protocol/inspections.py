"""`vidforge_inspect_video` on the wire: its arguments, what it answers, and the narrow interface to the engine.

An inspection reads a video that is already there — an asset (uploaded or imported) or a finished render's video —
and answers with what the probe found (`VideoFacts`: which way is up, the frame size as shown, the sound) and the
same quality check a render's result carries (mcp_protocol.quality, without fidelity: there is nothing to compare
with), its contact sheet as an `image` block. Read-only and idempotent: a principal's inspection of one URI is one
job while its desk keeps it, so calling again asks after it rather than starting another.

An inspection is a desk job (mcp_protocol.desk_jobs) kept by `VideoInspections` (in serve_app: the inspection desk,
serve_app/inspecting/), its task id carrying `INSPECT_TASK_PREFIX`. Which answer a call gets (`ToolCalls._inspect`):
with the tasks extension, a video longer than the answer-in-call bound is a task at once; otherwise the call waits
a bounded time for the result, and answers the task (with the extension) or `accepted` with a `follow_up` to call
again (without it) if the inspection is still running then.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from mcp_protocol.catalog import INSPECT_TOOL
from mcp_protocol.desk_jobs import DeskJob
from mcp_protocol.json_types import JSONObject
from mcp_protocol.quality import QC_META_KEY, QcReport, contact_sheet_block

INSPECT_TASK_PREFIX = "inspect_"


def is_inspect_task(task_id: str) -> bool:
    return task_id.startswith(INSPECT_TASK_PREFIX)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InspectRequest(_Frozen):
    """`vidforge_inspect_video`'s arguments, once they passed its inputSchema."""

    uri: str


class AudioFacts(_Frozen):
    codec: str
    sample_rate: int
    channels: int


class VideoFacts(_Frozen):
    """What the probe found in the video: as stored (`width` x `height`, `video_codec`, `pixel_format`) and as
    players show it (`display_width` x `display_height`, after `rotation` clockwise degrees and `mirrored`)."""

    width: int
    height: int
    display_width: int
    display_height: int
    rotation: int = Field(description="clockwise degrees that turn a decoded picture upright")
    mirrored: bool
    duration_seconds: float
    frame_rate: float
    frame_count: int
    video_codec: str
    pixel_format: str
    interlaced: bool
    audio: AudioFacts | None


class StartedInspection(_Frozen):
    """An inspection taken on (or found running, or finished, for the same URI) and the video's length, which
    decides whether the call answers in place or with a task."""

    job: DeskJob
    duration_s: float


class VideoInspections(Protocol):
    """What the wire needs of whoever runs inspections (serve_app.inspecting.service.DeskInspections)."""

    async def start(self, principal: str, uri: str) -> StartedInspection:
        """Inspect `uri` for `principal`: the job held for that URI when there is one, else a new one. Raises
        VidforgeError: source_not_found (no such asset or video for this principal, or a URI of neither kind),
        unsupported_codec (an image asset: no video stream), concurrency_limit_exceeded (past the cap)."""
        ...

    async def get(self, principal: str, task_id: str) -> DeskJob | None:
        """The job, or None when unknown, expired or another principal's (answered identically)."""
        ...

    async def wait(self, principal: str, task_id: str, timeout_s: float) -> DeskJob | None:
        """The job once it has ended or `timeout_s` has passed, whichever is first; None as for `get`."""
        ...

    async def cancel(self, principal: str, task_id: str) -> DeskJob | None:
        """Stop the inspection; the job as it is now, or None as for `get`."""
        ...


def inspected_result(uri: str, facts: VideoFacts, qc: QcReport, contact_sheet: bytes) -> JSONObject:
    """The `CallToolResult` of a finished inspection: the facts and the report (structuredContent), a line a
    person can read with the verdict, and the contact sheet as an `image` block for the model."""
    shown = f"{facts.display_width}x{facts.display_height}"
    turned = f", turned {facts.rotation}° to show upright" if facts.rotation else ""
    sound = f"{facts.audio.codec} audio, {facts.audio.channels} ch" if facts.audio else "no audio"
    text = (
        f"{uri}: {facts.duration_seconds:g} s of {facts.video_codec} at {facts.frame_rate:g} fps, shown {shown}"
        f"{turned}; {sound}. {qc.sentence()}"
    )
    return {
        "resultType": "complete",
        "isError": False,
        "content": [{"type": "text", "text": text}, contact_sheet_block(contact_sheet)],
        "structuredContent": {
            "status": "completed",
            "uri": uri,
            "facts": facts.model_dump(mode="json"),
            "qc": qc.to_json(),
        },
        "_meta": {QC_META_KEY: qc.to_json()},
    }


def inspection_accepted(uri: str, job: DeskJob) -> JSONObject:
    """Still running when the call's wait ended, for a caller without the tasks extension: call again (the same
    URI finds this inspection) after `poll_after_ms`."""
    return {
        "resultType": "complete",
        "isError": False,
        "content": [
            {"type": "text", "text": f"Inspecting {uri}: {job.status_message} Call {INSPECT_TOOL} again for it."}
        ],
        "structuredContent": {
            "status": "accepted",
            "uri": uri,
            "poll_after_ms": job.poll_interval_ms,
            "status_message": job.status_message,
            "follow_up": {"next_step": "poll_inspection", "tool": INSPECT_TOOL, "arguments": {"uri": uri}},
        },
    }
