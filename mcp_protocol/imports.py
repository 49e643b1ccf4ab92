"""`vidforge_import_asset` on the wire: the import as a task, its result, and the narrow interface to the engine.

An import is not a render: the TaskRegistry keeps renders only. Imports are kept by `AssetImports` (in serve_app:
the import desk, one actor for the cluster, serve_app/importing/), and `ImportJob` is what it hands the wire, the way
`TaskRecord` is the registry's. Their task ids carry `IMPORT_TASK_PREFIX`, so `tasks/*` find the right keeper from
the id alone; like a render's, the id is unguessable and answered only to the principal that started the import.

Two paths, as the contract has for renders: a request that declares the tasks extension gets a task at once
(`import_task_created`) and polls `tasks/get`; one without it waits for the import to end (`ToolCalls` awaits
`AssetImports.wait`): the import's time limit bounds that wait, so no second status surface is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict

from mcp_protocol import errors
from mcp_protocol.catalog import RENDER_TOOL
from mcp_protocol.domain import TaskStatus
from mcp_protocol.json_types import JSONObject
from mcp_protocol.tasks import TaskParams, UpdateTaskParams, check_mcp_name, missing_tasks_capability
from mcp_protocol.timefmt import iso_ms
from mcp_protocol.views import Caller

IMPORT_TASK_PREFIX = "import_"


def is_import_task(task_id: str) -> bool:
    return task_id.startswith(IMPORT_TASK_PREFIX)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ImportRequest(_Frozen):
    """`vidforge_import_asset`'s arguments, once they passed its inputSchema."""

    url: str


class ImportedAsset(_Frozen):
    """What an import stored: the asset and what the parse of it found (the asset's facts, serve_app.media.media_facts)."""

    uri: str
    kind: Literal["video", "image"]
    size_bytes: int
    filename: str
    width: int
    height: int
    duration_s: float | None = None
    fps: float | None = None
    video_codec: str | None = None
    audio_codec: str | None = None
    expires_at_ms: int  # when the retention sweep deletes it, unless a render still uses it


class ImportJob(_Frozen):
    """One import as its keeper holds it: an ext-tasks task (working → completed | cancelled) whose `result` is the
    `CallToolResult` the call answers with, an error envelope included ([7.failed-task]: completed is delivery)."""

    task_id: str
    principal: str
    status: TaskStatus
    status_message: str
    created_at_ms: int
    last_updated_at_ms: int
    ttl_ms: int
    poll_interval_ms: int
    result: object = None  # the call's CallToolResult (JSON), exactly when completed


class AssetImports(Protocol):
    """What the wire needs of whoever runs imports (serve_app.importing.service.DeskImports)."""

    async def start(self, principal: str, url: str) -> ImportJob:
        """Start importing `url` for `principal`; the job is findable by `get` before this returns. Raises
        VidforgeError for a URL refused before anything is fetched (import_refused) and past the principal's cap on
        imports at once (concurrency_limit_exceeded)."""
        ...

    async def get(self, principal: str, task_id: str) -> ImportJob | None:
        """The job, or None when unknown, expired or another principal's (answered identically)."""
        ...

    async def wait(self, principal: str, task_id: str) -> ImportJob | None:
        """The job once it has ended (its own time limits bound the wait); None as for `get`."""
        ...

    async def cancel(self, principal: str, task_id: str) -> ImportJob | None:
        """Stop the import (nothing of it is kept); the job as it is now, or None as for `get`."""
        ...


def _render_follow_up(asset: ImportedAsset) -> JSONObject:
    """The next call: a video is a render's source, an image its watermark (then the source is still to be given)."""
    if asset.kind == "video":
        return {
            "next_step": "render_video",
            "tool": RENDER_TOOL,
            "arguments": {"source_asset_uri": asset.uri, "output_format": "mp4", "resolution": "720p"},
            "alternative": "Choose output_format and resolution as the user wants; add watermark.image_asset_uri "
            "to stamp an image asset on it.",
        }
    return {
        "next_step": "render_with_watermark",
        "tool": RENDER_TOOL,
        "arguments": {"watermark": {"image_asset_uri": asset.uri}},
        "alternative": "Add source_asset_uri (a video asset), output_format and resolution: an image is a "
        "watermark, not a source.",
    }


def imported_result(asset: ImportedAsset) -> JSONObject:
    """The `CallToolResult` of an import that stored its asset."""
    structured: JSONObject = {
        "status": "completed",
        "asset_uri": asset.uri,
        "kind": asset.kind,
        "size_bytes": asset.size_bytes,
        "filename": asset.filename,
        "width": asset.width,
        "height": asset.height,
    }
    found = f"{asset.kind}, {asset.width}x{asset.height}"
    if asset.kind == "video":
        structured.update(
            duration_seconds=round(asset.duration_s or 0.0, 3),
            frame_rate=round(asset.fps or 0.0, 3),
            video_codec=asset.video_codec or "",
            audio_codec=asset.audio_codec,
        )
        sound = f"{asset.audio_codec} audio" if asset.audio_codec else "no audio"
        found += f", {structured['duration_seconds']:g} s, {asset.video_codec}, {sound}"
    structured["expires_at"] = iso_ms(asset.expires_at_ms)
    structured["follow_up"] = _render_follow_up(asset)
    text = (
        f"Imported {asset.filename} as {asset.uri} ({found}; {asset.size_bytes} bytes). "
        f"Pass it to {RENDER_TOOL} ({'source_asset_uri' if asset.kind == 'video' else 'watermark.image_asset_uri'})."
    )
    return {
        "resultType": "complete",
        "isError": False,
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
    }


def _task_fields(job: ImportJob) -> JSONObject:
    return {
        "taskId": job.task_id,
        "status": job.status.value,
        "statusMessage": job.status_message,
        "createdAt": iso_ms(job.created_at_ms),
        "lastUpdatedAt": iso_ms(job.last_updated_at_ms),
        "ttlMs": job.ttl_ms,
        "pollIntervalMs": job.poll_interval_ms,
    }


def import_task_created(job: ImportJob) -> JSONObject:
    """ext-tasks CreateTaskResult for an import (its keeper already holds it: `tasks/get` resolves)."""
    return {"resultType": "task", **_task_fields(job)}


def import_detailed_task(job: ImportJob) -> JSONObject:
    """ext-tasks DetailedTask for an import: the result inline once completed. An import never asks for input."""
    body: JSONObject = {"resultType": "complete", **_task_fields(job)}
    if job.status is TaskStatus.COMPLETED and job.result is not None:
        body["result"] = cast(JSONObject, job.result)  # built by `imported_result` or `tool_error_result`
    return body


class ImportTaskMethods:
    """`tasks/get`, `tasks/update` and `tasks/cancel` for an import's task id, under the rules renders' follow
    (mcp_protocol.tasks): `Mcp-Name` must match, the request must declare the extension, and an unknown, expired or
    foreign id is one answer."""

    def __init__(self, imports: AssetImports) -> None:
        self._imports = imports

    async def _job(self, caller: Caller, headers: Mapping[str, str] | None, task_id: str) -> ImportJob:
        check_mcp_name(headers, task_id)
        if not caller.tasks:
            raise missing_tasks_capability()
        job = await self._imports.get(caller.principal, task_id)
        if job is None:
            raise errors.task_not_found()
        return job

    async def get(self, caller: Caller, headers: Mapping[str, str] | None, params: TaskParams) -> JSONObject:
        return import_detailed_task(await self._job(caller, headers, params.task_id))

    async def update(self, caller: Caller, headers: Mapping[str, str] | None, params: UpdateTaskParams) -> JSONObject:
        """An import asks for no input, so every response is one to an unknown key: ignored (ext-tasks SHOULD)."""
        await self._job(caller, headers, params.task_id)
        return {"resultType": "complete"}

    async def cancel(self, caller: Caller, headers: Mapping[str, str] | None, params: TaskParams) -> JSONObject:
        """Cooperative, like a render's: the ack says the request was taken; `tasks/get` shows the end."""
        job = await self._job(caller, headers, params.task_id)
        await self._imports.cancel(caller.principal, job.task_id)
        return {"resultType": "complete"}
