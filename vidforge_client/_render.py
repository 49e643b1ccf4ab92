"""`vidforge render SOURCE`: upload, render through MCP as a task, follow it, download the video.

1. The output is decided before anything is sent (default: beside a local source, named for what was asked, e.g.
   clip.720p.mp4; never the source itself), and local inputs are checked to exist.
2. A health check proves the server and the credential; local files are uploaded (`POST /assets`); a
   `vidforge://assets/…` URI is used as it is.
3. `vidforge_render_video` is called through the official SDK client with the tasks extension (vidforge_client.tasks),
   which follows the task at the server's poll interval. Every state polled updates the progress view.
4. A watermark is approved by a person on the server's review page (the link is printed; the render waits), or, with
   `--approve`, by this command itself through `vidforge_approve_watermark`, which the server allows for one's own
   render (if it refuses, the link is printed and the render waits as without the flag).
5. The finished video is downloaded to the output and its place printed on stdout. Where the server checked its
   quality, the check's contact sheet (the result's `image` block) is written beside it as
   `<output stem>.contact-sheet.jpg`, and the verdict and its reasons are printed after it (vidforge_client._quality).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import anyio
import httpx2
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitRequestURLParams, ElicitResult, Implementation

from mcp_protocol.answers import ErrorEnvelope, RenderSucceeded
from mcp_protocol.catalog import APPROVE_TOOL, RENDER_TOOL
from mcp_protocol.domain import OutputFormat, Position, RenderRequest, Resolution, Watermark
from vidforge_client._interrupt import Interrupt
from vidforge_client._progress import ProgressFigures, ProgressView
from vidforge_client._quality import QualityAnswer, ResultQuality
from vidforge_client.address import ServerAddress
from vidforge_client.failures import ClientFailure, ExitCode, read_as
from vidforge_client.tasks import ElicitParams, TasksExtension, TaskState
from vidforge_client.transfers import ServerFiles

ASSET_URI_PREFIX = "vidforge://assets/"
HTTP_TIMEOUT_S = 120.0  # per read or write, not per request: an upload of gigabytes streams for as long as it takes


@dataclass(frozen=True)
class RenderOrder:
    """What `vidforge render` was asked for."""

    source: str  # a local path or a vidforge://assets/<id> URI
    resolution: Resolution
    output_format: OutputFormat
    watermark: str | None  # a local image or a vidforge://assets/<id> URI
    position: Position
    opacity: float
    output: Path | None  # None: the default (`default_output`)
    approve: bool

    def output_path(self) -> Path:
        """Where the video goes, checked before anything is sent (ClientFailure when it cannot be written there)."""
        out = self.output or default_output(self.source, self.resolution, self.output_format)
        if not out.parent.is_dir():
            raise ClientFailure(ExitCode.USAGE, f"cannot write {out}: no such directory {out.parent}")
        if out.is_dir():
            raise ClientFailure(ExitCode.USAGE, f"cannot write {out}: it is a directory (give a file name with -o)")
        if not is_asset_uri(self.source) and out.resolve() == Path(self.source).resolve():
            raise ClientFailure(ExitCode.USAGE, f"-o {out} is the source itself; choose another output file")
        return out


@dataclass(frozen=True)
class RenderedVideo:
    render_id: str
    video_uri: str
    path: Path
    size_bytes: int
    duration_seconds: float
    quality: QualityAnswer | None  # the server's quality check of the video, when it made one
    contact_sheet: Path | None  # where its contact sheet was written, when the result carried one

    def lines(self) -> list[str]:
        """What the command prints on stdout: where the video (and its contact sheet) went, then the check's verdict
        and reasons."""
        lines = [f"saved {self.path} ({self.size_bytes} bytes, {self.duration_seconds:g} s, {self.render_id})"]
        if self.contact_sheet is not None:
            lines.append(f"saved {self.contact_sheet} (the quality check's contact sheet)")
        return lines + (self.quality.lines() if self.quality is not None else [])


def is_asset_uri(value: str) -> bool:
    return value.startswith(ASSET_URI_PREFIX)


def default_output(source: str, resolution: str, output_format: str) -> Path:
    """Beside a local source, named for the render (clip.mp4 at 720p as mp4: clip.720p.mp4); for an asset URI, in
    the current directory under the asset's id."""
    if is_asset_uri(source):
        return Path(f"{source.removeprefix(ASSET_URI_PREFIX)}.{resolution}.{output_format}")
    path = Path(source)
    return path.with_name(f"{path.stem}.{resolution}.{output_format}")


def local_file(value: str, role: str) -> Path | None:
    """A local input, checked now (None for an asset URI); ClientFailure when there is no readable file."""
    if is_asset_uri(value):
        return None
    path = Path(value)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise ClientFailure(ExitCode.USAGE, f"{role} {value} {what} (give a file, or a vidforge://assets/… URI)")
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ClientFailure(ExitCode.USAGE, f"cannot read {role} {value}: {exc.strerror}") from None
    return path


class RenderFollower:
    """The tasks extension's `TaskFollower` for a command line: progress to the view, the approval round trip."""

    def __init__(self, view: ProgressView, approve: bool) -> None:
        self.view = view
        self.approve = approve
        self.task_id: str | None = None

    def started(self, task_id: str) -> None:
        self.task_id = task_id
        self.view.note(f"render {task_id} started (Ctrl-C cancels it)")

    def polled(self, state: TaskState) -> None:
        self.view.show(ProgressFigures.of(state))

    async def answer(self, state: TaskState, request: ElicitParams, session: ClientSession) -> ElicitResult | None:
        link = request.url if isinstance(request, ElicitRequestURLParams) else None
        if self.approve and await self._approve(state.task_id, session):
            return None
        if link is not None:
            self.view.note(f"review the watermark preview, then approve or reject it: {link}")
        else:
            self.view.note(request.message)
        self.view.note("waiting for the decision (Ctrl-C cancels the render)")
        return None

    async def _approve(self, render_id: str, session: ClientSession) -> bool:
        """`--approve`: approve through the approval tool, as the render's owner; False when the server refused."""
        result = await session.call_tool(APPROVE_TOOL, {"render_id": render_id, "approved": True})
        if result.is_error:
            refusal = ErrorEnvelope.in_body({"error": result.structured_content})
            self.view.note(f"--approve was refused: {refusal.text() if refusal else 'no reason given'}")
            return False
        self.view.note("watermark approved (--approve)")
        return True


async def render(order: RenderOrder, address: ServerAddress, view: ProgressView, interrupt: Interrupt) -> RenderedVideo:
    """Run the order to a downloaded video. Otherwise it ends in a ClientFailure, or in the tasks extension's
    TaskEnded (the task failed or was cancelled elsewhere) or TaskCancelled (Ctrl-C while it ran), which
    `failures.failure_of` reads as one."""
    out = order.output_path()
    source_file, watermark_file = local_file(order.source, "source"), None
    if order.watermark is not None:
        watermark_file = local_file(order.watermark, "watermark")
    async with httpx2.AsyncClient(headers=address.headers, timeout=HTTP_TIMEOUT_S) as http:
        files = ServerFiles(http, address)
        await files.check()
        source = (await _upload(files, source_file, view)) if source_file else order.source
        watermark = None
        if order.watermark is not None:
            image = (await _upload(files, watermark_file, view)) if watermark_file else order.watermark
            watermark = Watermark(image_asset_uri=image, position=order.position, opacity=order.opacity)
        request = RenderRequest(
            source_asset_uri=source,
            output_format=order.output_format,
            resolution=order.resolution,
            watermark=watermark,
        )
        follower = RenderFollower(view, order.approve)
        with interrupt.cancels_task() as cancel:
            result = await _call_as_task(address, http, follower, cancel, request)
        render_id = follower.task_id or "the render"
        if result.is_error or not isinstance(result.structured_content, dict):
            refusal = ErrorEnvelope.in_body({"error": result.structured_content})
            why = f"{refusal.code}: {refusal.text()}" if refusal else str(result.content)
            raise ClientFailure(ExitCode.FAILED, f"{render_id} failed: {why}")
        what = f"{RENDER_TOOL} ({render_id})"
        done = read_as(RenderSucceeded, result.structured_content, what)
        quality = ResultQuality.of(result, what)
        size = await files.download(done.video_uri, out)
    sheet = quality.save_sheet(out)
    return RenderedVideo(render_id, done.video_uri, out, size, done.duration_seconds, quality.report, sheet)


async def _upload(files: ServerFiles, path: Path, view: ProgressView) -> str:
    view.note(f"uploading {path} ({path.stat().st_size} bytes)")
    return (await files.upload(path)).uri


async def _call_as_task(
    address: ServerAddress,
    http: httpx2.AsyncClient,
    follower: RenderFollower,
    cancel: anyio.Event,
    request: RenderRequest,
) -> CallToolResult:
    tasks = TasksExtension(follower, cancel)
    transport = streamable_http_client(address.mcp_url, http_client=http)
    client_info = Implementation(name="vidforge-cli", version=version("vidforge"))
    async with Client(
        transport, extensions=[tasks], elicitation_callback=tasks.elicitation_callback, client_info=client_info
    ) as client:
        return await client.call_tool(RENDER_TOOL, request.arguments())
