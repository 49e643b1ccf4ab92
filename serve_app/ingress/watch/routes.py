"""The watch page's routes, outside bearer authentication (the link's capability is the credential):

- `GET /watch/{task_id}?cap=…` — the page;
- `GET /watch/{task_id}/video?cap=…` — the video for its `<video>` (inline, Range requests; HEAD too);
- `GET /watch/{task_id}/download?cap=…` — the same bytes as a download (`final.<ext>`);
- `GET /watch/{task_id}/poster.jpg?cap=…` — the poster frame;
- `GET /watch/{task_id}/contact-sheet.jpg?cap=…` — the quality check's contact sheet (the page shows it, with the
  check's verdict and reasons, when the render has one);
- `GET /watch/{task_id}/stream/{cap}/{file}` — a file of the render's stream, for players (HEAD too): the capability
  is in the path, so the playlists' and the manifest's relative URIs resolve to links that carry it. Any origin may
  fetch them (the link is the credential), so a player embedded elsewhere plays the stream.

Where the bucket serves the video (serve_app/ingress/_http_files.py: `artifact_response`), the video and the download
are 307s to presigned URLs of the object (so are a stream's segments and pictures; its playlists, manifest and
storyboard are served here, for their relative URIs), and the page's Content-Security-Policy allows media from the bucket's
endpoint too. Every answer, the refusals included, carries the review page's browser hardening headers
(serve_app/ingress/review/pages.py); a refused link is a page a person can read, as on the review page: 403 for a
link this server did not issue for this video (tampered, another task's, a review link, none), 410 for an expired
one or a video no longer kept.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from mcp_protocol.domain import Artifact, Succeeded, TaskRecord
from mcp_protocol.envelope import VidforgeError
from mcp_protocol.streams import MASTER_PLAYLIST, STORYBOARD
from media_store.opening import is_storage_fault
from serve_app._config import Config
from serve_app.ingress._stored_media import ArtifactFile, artifact_response, storage_unavailable
from serve_app.ingress.review.capability import LinkRefused, ReviewSigner
from serve_app.ingress.review.links import CAPABILITY_PARAM, with_capability
from serve_app.ingress.review.pages import SECURITY_HEADERS, STREAM_SCRIPT_PATHS, Moment, html_page, refused_page
from serve_app.ingress.review.quality import CONTACT_SHEET, QualityView, quality_report
from serve_app.ingress.watch._view import WatchView
from serve_app.ingress.watch.links import STREAM_PATH, WATCH_PATH, stream_path, watch_path, watch_signer

TEMPLATES = "serve_app.ingress.watch"  # templates/watch.html
CSP = "Content-Security-Policy"
# What the page loads or links to, each through the capability.
WATCH_FILES = ("video", "download", "poster.jpg", CONTACT_SHEET)
# A stream's files are fetched by players wherever they are embedded: the link in the path is the credential.
STREAM_HEADERS = {
    **SECURITY_HEADERS,
    "Access-Control-Allow-Origin": "*",
    "Cross-Origin-Resource-Policy": "cross-origin",
}


class WatchBackend(Protocol):
    """What the watch routes need of the server (serve_app.ingress.ray_render_service.RayRenderService)."""

    async def watch_render(self, task_id: str) -> TaskRecord | None:
        """The render, whoever owns it (the capability was checked), from the registry itself; None once deleted."""
        ...

    async def artifact_file(self, principal: str, render_id: str, ext: str) -> ArtifactFile:
        """The principal's finished video (http_files.FileService.artifact_file)."""
        ...

    async def watch_poster(self, task_id: str) -> bytes | None:
        """The stored poster JPEG; None when there is none."""
        ...

    async def contact_sheet(self, rec: TaskRecord) -> bytes | None:
        """The contact sheet JPEG of `rec`'s quality check; None without a check, or when its sheet is not stored."""
        ...

    async def stream_file(self, rec: TaskRecord, name: str) -> ArtifactFile:
        """File `name` of `rec`'s stream; VidforgeError (resource_not_found) when there is none."""
        ...


class _Refused(Exception):
    def __init__(self, response: Response) -> None:
        self.response = response


def _refusal(status: int, title: str, reason: str, ended_s: int | None = None) -> _Refused:
    ended = Moment.of_ms(ended_s * 1000) if ended_s is not None else None
    return _Refused(refused_page(status, title, reason, ended=ended))


def not_valid() -> _Refused:
    return _refusal(
        403,
        "This watch link is not valid",
        "The link is not one this server issued for this video. Open the link exactly as the agent gave it.",
    )


def not_in_stream() -> _Refused:
    return _refusal(404, "Not part of this stream", "This video's stream has no such file.")


def gone() -> _Refused:
    return _refusal(410, "This video is no longer available", "It was deleted after its retention.")


class WatchRoutes:
    def __init__(self, config: Config, backend: WatchBackend, signer: ReviewSigner) -> None:
        self.backend = backend
        self.signer = signer
        self.retention_s = config.result_retention_s

    def routes(self) -> list[BaseRoute]:
        return [
            Route(WATCH_PATH + "/{task_id}", self.page, methods=["GET"]),
            Route(WATCH_PATH + "/{task_id}/video", self.video, methods=["GET", "HEAD"]),
            Route(WATCH_PATH + "/{task_id}/download", self.download, methods=["GET", "HEAD"]),
            Route(WATCH_PATH + "/{task_id}/poster.jpg", self.poster, methods=["GET"]),
            Route(WATCH_PATH + f"/{{task_id}}/{CONTACT_SHEET}", self.contact_sheet, methods=["GET"]),
            Route(WATCH_PATH + "/{task_id}" + STREAM_PATH + "/{cap}/{name}", self.stream, methods=["GET", "HEAD"]),
        ]

    async def _authorized(self, request: Request) -> tuple[TaskRecord, Artifact]:
        """The finished video the link in `request` grants a look at: a link this server signed for this task, unexpired,
        of a render whose video is still kept. The capability is the query's, or the path's for a stream's files."""
        task_id = request.path_params["task_id"]
        cap = request.path_params.get("cap", request.query_params.get(CAPABILITY_PARAM))
        try:
            self.signer.verify(task_id, cap, time.time())
        except LinkRefused as refused:
            if refused.status != 410:
                raise not_valid() from None
            raise _refusal(
                410,
                "This watch link has expired",
                "The video was kept for a limited time, and its link with it. Ask the agent to render it again.",
                refused.ended_s,
            ) from None
        rec = await self.backend.watch_render(task_id)
        if rec is None or not isinstance(rec.end, Succeeded):
            raise gone()
        return rec, rec.end.artifact

    async def _file(self, rec: TaskRecord, artifact: Artifact) -> ArtifactFile:
        return await self._stored(self.backend.artifact_file(rec.principal, rec.task_id, artifact.ext), gone)

    async def _stored(self, opening: Awaitable[ArtifactFile], missing: Callable[[], _Refused]) -> ArtifactFile:
        """The stored file `opening` finds; the `missing` refusal when there is none, and a page saying so (503) when
        the store does not answer."""
        try:
            return await opening
        except VidforgeError:
            raise missing() from None
        except Exception as exc:
            if not is_storage_fault(exc):
                raise
            error = storage_unavailable()
            error.report(cause=exc)  # the one line of its request_id, with the store's own exception
            raise _refusal(
                503, "The video cannot be reached right now", f"{error.message} ({error.request_id})"
            ) from exc

    async def page(self, request: Request) -> Response:
        try:
            rec, artifact = await self._authorized(request)
            file = await self._file(rec, artifact)
        except _Refused as refused:
            return refused.response
        token = request.query_params[CAPABILITY_PARAM]
        links = {name: with_capability(watch_path(rec.task_id, f"/{name}"), token) for name in WATCH_FILES}
        stream = None
        if rec.request.streaming is not None:
            folder = stream_path(rec.task_id, token, "")
            stream = {
                "hls": folder + MASTER_PLAYLIST,
                "storyboard": folder + STORYBOARD,
                "scripts": STREAM_SCRIPT_PATHS,
            }
        report = quality_report(rec)
        # The sheet is shown only when it is there (the service keeps the last ones read, so the image's own request
        # right after reads it again from memory): no broken image where a render has none.
        quality = QualityView.of(report, await self.backend.contact_sheet(rec) is not None) if report else None
        response = html_page(
            "watch.html",
            package=TEMPLATES,
            view=WatchView.of(rec, artifact, self.retention_s),
            quality=quality,
            links=links,
            stream=stream,
        )
        response.headers[CSP] = media_policy(file, streamed=stream is not None)
        return response

    async def video(self, request: Request) -> Response:
        return await self._video(request, attachment=False)

    async def download(self, request: Request) -> Response:
        return await self._video(request, attachment=True)

    async def _video(self, request: Request, attachment: bool) -> Response:
        try:
            file = await self._file(*await self._authorized(request))
        except _Refused as refused:
            return refused.response
        return artifact_response(file, request, attachment, SECURITY_HEADERS)

    async def stream(self, request: Request) -> Response:
        try:
            rec, _ = await self._authorized(request)
            file = await self._stored(self.backend.stream_file(rec, request.path_params["name"]), not_in_stream)
        except _Refused as refused:
            return refused.response
        return artifact_response(file, request, attachment=False, headers=STREAM_HEADERS)

    async def poster(self, request: Request) -> Response:
        return await self._jpeg(request, lambda rec: self.backend.watch_poster(rec.task_id), "poster")

    async def contact_sheet(self, request: Request) -> Response:
        return await self._jpeg(request, self.backend.contact_sheet, "contact sheet")

    async def _jpeg(
        self, request: Request, read: Callable[[TaskRecord], Awaitable[bytes | None]], name: str
    ) -> Response:
        """One of the video's stored pictures (`read` from the backend), named `name` in the 404 when there is none."""
        try:
            rec, _ = await self._authorized(request)
        except _Refused as refused:
            return refused.response
        jpeg = await read(rec)
        if jpeg is None:
            return refused_page(404, f"{name.capitalize()} not available", f"No {name} is stored for this video.")
        return Response(jpeg, media_type="image/jpeg", headers=SECURITY_HEADERS)


def media_policy(file: ArtifactFile, streamed: bool = False) -> str:
    """The pages' Content-Security-Policy with the video's sources allowed: this server, and where the bucket serves
    the video, its endpoint's origin (the presigned URL the video's 307 leads to). A streamed video's page also
    fetches the stream's files (hls.js), plays them through Media Source Extensions (`blob:` media) and shows the
    storyboard's sprite, from the same sources."""
    sources = ["'self'"]
    if (url := file.download_url(attachment=False)) is not None:
        bucket = urlsplit(url)
        sources.append(f"{bucket.scheme}://{bucket.netloc}")
    allowed = {"media-src": sources}
    if streamed:
        allowed = {
            "media-src": [*sources, "blob:"],
            "connect-src": sources,
            "img-src": sources,
            "worker-src": ["blob:"],
        }
    # A directive named twice counts only the first time: the base's own of those names are left out.
    base = [part for part in SECURITY_HEADERS[CSP].split("; ") if part.split(" ", 1)[0] not in allowed]
    return "; ".join([*base, *(f"{name} {' '.join(values)}" for name, values in allowed.items())])


def watch_routes(config: Config, backend: WatchBackend) -> list[BaseRoute]:
    """The watch routes; none without a review key (a server started without the launch step mints no links)."""
    signer = watch_signer(config)
    return WatchRoutes(config, backend, signer).routes() if signer is not None else []
