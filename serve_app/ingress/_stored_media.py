"""Answers made of the media store's objects, for the file routes (serve_app/ingress/_http_files.py) and the watch page
(serve_app/ingress/watch/): a finished video, as its bytes with Range support or, where the bucket serves it itself
(direct transfers), as a redirect to a presigned URL of the object; and the store's own failure, in the envelope.
Kept apart from the file routes and their JSON carrier (serve_app/ingress/_refusals.py), so that the watch page's
routes, which answer people in HTML, use it too.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from werkzeug.http import parse_range_header

from mcp_protocol import errors
from mcp_protocol.envelope import VidforgeError
from media_store.base import DirectTransfers, MediaStore

STORAGE_RETRY_AFTER_S = 10  # a hint: a bucket or endpoint that stopped answering is often back within seconds


def storage_unavailable() -> VidforgeError:
    """The media store did not answer (unreachable, credentials refused, bucket gone): temporary, in the envelope."""
    return errors.internal_error(
        "vidforge could not reach its media storage; try again shortly.",
        None,
        "The media store did not answer; details are in the server log under this request_id.",
        STORAGE_RETRY_AFTER_S * 1000,
    )


@dataclass(frozen=True)
class DirectDownloads:
    """Presigned downloads from the bucket (VIDFORGE_DIRECT_TRANSFERS), each URL working `lifetime_s` seconds
    (VIDFORGE_PRESIGNED_URL_TTL_S)."""

    transfers: DirectTransfers
    lifetime_s: int


@dataclass(frozen=True)
class ArtifactFile:
    """A finished video as the download streams it: where it is, and what the response says about it; `direct`
    when the bucket serves it itself."""

    media: MediaStore
    key: str
    size_bytes: int  # as stored now
    mime: str
    filename: str
    direct: DirectDownloads | None = None

    def download_url(self, attachment: bool) -> str | None:
        """A presigned URL of the object (saved as `filename` with `attachment`); None when it is served here."""
        if self.direct is None:
            return None
        saved_as = self.filename if attachment else None
        return self.direct.transfers.download_url(self.key, self.direct.lifetime_s, self.mime, saved_as)


def artifact_response(
    artifact: ArtifactFile, request: Request, attachment: bool = True, headers: dict[str, str] | None = None
) -> Response:
    """The video for `request`: a 307 to a presigned URL of it where the bucket serves it (not to be cached: the URL
    expires), else its bytes, with Range support; `attachment`: as a download under its file name (else inline,
    for a `<video>`), with `headers` besides."""
    given = {name.lower(): value for name, value in (headers or {}).items()}
    url = artifact.download_url(attachment)
    if url is not None:
        return RedirectResponse(url, status_code=307, headers={**given, "cache-control": "no-store"})
    disposition = f'attachment; filename="{artifact.filename}"' if attachment else "inline"
    return _ranged(
        artifact, request.headers.get("range"), request.method == "HEAD", {**given, "content-disposition": disposition}
    )


def _ranged(artifact: ArtifactFile, range_header: str | None, head: bool, extra: dict[str, str]) -> Response:
    size = artifact.size_bytes
    headers = {**extra, "accept-ranges": "bytes"}
    start, end, status = 0, size, 200
    requested = parse_range_header(range_header) if range_header else None
    if requested is not None and requested.units == "bytes" and len(requested.ranges) == 1:
        span = requested.range_for_length(size)
        if span is None:
            return Response(status_code=416, headers={**headers, "content-range": f"bytes */{size}"})
        (start, end), status = span, 206
        headers["content-range"] = f"bytes {start}-{end - 1}/{size}"
    headers["content-length"] = str(end - start)
    if head:
        return Response(status_code=status, headers=headers, media_type=artifact.mime)
    chunks = artifact.media.read_stream(artifact.key, start, end)
    return StreamingResponse(chunks, status_code=status, headers=headers, media_type=artifact.mime)
