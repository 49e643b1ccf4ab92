"""The narrow interface between the wire and the engine.

`mcp_protocol` speaks only to this protocol; `serve_app` implements it over Ray (TaskRegistry actor,
render driver, asset and artifact stores) in `serve_app/ingress/ray_render_service.py`. Records are the TaskRegistry's
`TaskRecord`s. Keeping Ray out of this room lets the wire be tested in-process (tests/fast/ serves it from an
in-memory implementation).
"""

from __future__ import annotations

from typing import Protocol

from mcp_protocol.app_view import ViewLinks
from mcp_protocol.domain import ApprovalAnswer, Artifact, RenderRequest, TaskRecord


class RenderService(Protocol):
    async def create_render(self, principal: str, request: RenderRequest) -> TaskRecord:
        """Validate the sources, create the task durably and start rendering; return its record.

        Raises `VidforgeError` (source_not_found, unsupported_codec, media_limit_exceeded, render_quota_exceeded,
        idempotency_conflict). A replayed `idempotency_key` returns the existing record.
        """
        ...

    async def get_render(self, principal: str, render_id: str, *, fresh: bool = False) -> TaskRecord | None:
        """The record, or None when unknown or another principal's (answered identically). A read may lag a change
        made through another replica by milliseconds; `fresh` asks the owner of task state itself, for a decision
        a write depends on. Raises `VidforgeError` (internal_error, temporary) when the task state does not answer
        in time."""
        ...

    async def answer_approval(
        self, principal: str, render_id: str, approved: bool, note: str | None, key: str | None = None
    ) -> ApprovalAnswer:
        """Record a watermark decision (for the outstanding round `key`, when given)."""
        ...

    async def cancel_render(self, principal: str, render_id: str) -> TaskRecord | None:
        """Ask the render to stop (cooperative); None when unknown or foreign."""
        ...

    async def watch(
        self, principal: str, render_ids: list[str], versions: dict[str, int], timeout_s: float
    ) -> list[TaskRecord]:
        """Long-poll: records among `render_ids` whose version moved past `versions`."""
        ...

    async def read_video(self, principal: str, render_id: str, ext: str) -> tuple[Artifact, bytes]:
        """The finished video and its bytes; raises VidforgeError (resource_not_found, resource_too_large)."""
        ...

    def review_url(self, rec: TaskRecord) -> str | None:
        """The absolute link of the page where a person sees `rec`'s watermark preview and decides, while an approval
        is outstanding; None otherwise, or when the server mints none. Minted outside this room (serve_app's review
        page) and handed down, so the wire can name it wherever it names the preview."""
        ...

    async def read_preview(self, principal: str, render_id: str) -> bytes:
        """The watermark preview PNG; raises VidforgeError when there is none for this principal."""
        ...

    def watch_url(self, rec: TaskRecord) -> str | None:
        """The absolute link of the page where a person watches `rec`'s finished video in a browser, for as long as
        the result is kept; None for a render without a video, or when the server mints none. Minted outside this
        room (serve_app's watch page), like `review_url`."""
        ...

    def stream_url(self, rec: TaskRecord) -> str | None:
        """The absolute, signed link of the folder of `rec`'s stream (ending in `/`; a player appends a file's name,
        and the playlists' relative URIs resolve under it), for as long as the result is kept; None for a render
        without a stream, or when the server mints none. Minted outside this room (serve_app's watch page)."""
        ...

    def view_links(self, rec: TaskRecord) -> ViewLinks:
        """The signed HTTP links of `rec` that the render view (mcp_protocol.app_view) loads: the review page's
        pictures while an approval is outstanding, the watch page's files once the video is finished; none where the
        server mints no links. Minted outside this room, like `review_url` and `watch_url`."""
        ...

    async def read_poster(self, principal: str, render_id: str) -> bytes:
        """The finished video's poster JPEG; raises VidforgeError (resource_not_found) when there is none for this
        principal."""
        ...

    async def read_stream_file(self, principal: str, render_id: str, name: str) -> bytes:
        """One file of the finished, streamed render's stream (mcp_protocol.streams); raises VidforgeError
        (resource_not_found) when there is none for this principal."""
        ...

    async def contact_sheet(self, rec: TaskRecord) -> bytes | None:
        """The contact sheet JPEG of `rec`'s finished video (mcp_protocol.quality), for its result's `image` block;
        None when it has none (no video, the quality check off, or the file gone)."""
        ...
