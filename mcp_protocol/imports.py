"""`vidforge_import_asset` on the wire: its arguments, its result, and the narrow interface to the engine.

An import is kept as a desk job (mcp_protocol.desk_jobs) by `AssetImports` (in serve_app: the import desk, one actor
for the cluster, serve_app/importing/). Its task id carries `IMPORT_TASK_PREFIX`, so `tasks/*` find its keeper from
the id alone.

Two paths, as the contract has for renders: a request that declares the tasks extension gets a task at once
(`desk_task_created`) and polls `tasks/get`; one without it waits for the import to end (`ToolCalls` awaits
`AssetImports.wait`): the import's time limit bounds that wait, so no second status surface is needed.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from mcp_protocol.catalog import RENDER_TOOL
from mcp_protocol.desk_jobs import DeskJob
from mcp_protocol.json_types import JSONObject
from mcp_protocol.timefmt import iso_ms

IMPORT_TASK_PREFIX = "import_"


def is_import_task(task_id: str) -> bool:
    return task_id.startswith(IMPORT_TASK_PREFIX)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ImportRequest(_Frozen):
    """`vidforge_import_asset`'s arguments, once they passed its inputSchema."""

    url: str


class ImportedAsset(_Frozen):
    """What an import stored: the asset and what the parse of it found (the asset's facts, serve_app.media._media_facts)."""

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


class AssetImports(Protocol):
    """What the wire needs of whoever runs imports (serve_app.importing.service.DeskImports)."""

    async def start(self, principal: str, url: str) -> DeskJob:
        """Start importing `url` for `principal`; the job is findable by `get` before this returns. Raises
        VidforgeError for a URL refused before anything is fetched (import_refused) and past the principal's cap on
        imports at once (concurrency_limit_exceeded)."""
        ...

    async def get(self, principal: str, task_id: str) -> DeskJob | None:
        """The job, or None when unknown, expired or another principal's (answered identically)."""
        ...

    async def wait(self, principal: str, task_id: str) -> DeskJob | None:
        """The job once it has ended (its own time limits bound the wait); None as for `get`."""
        ...

    async def cancel(self, principal: str, task_id: str) -> DeskJob | None:
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
