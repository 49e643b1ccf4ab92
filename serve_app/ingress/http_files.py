"""Plain-HTTP file routes beside `/mcp`: asset upload and artifact download (architecture: operator interface).

Both sit behind the same bearer auth as `/mcp` and answer errors with the contract's envelope under `error`.
They see the service only through `FileService`; the bytes stream from and to the media store (a local
directory or a bucket), never whole in memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send
from werkzeug.http import parse_range_header

from mcp_protocol import errors
from mcp_protocol.envelope import VidforgeError
from media_store import MediaStore, is_storage_fault
from render_kernels import UnsupportedMedia
from render_kernels.probe import OverLimit
from serve_app.ingress.refusals import error_response
from serve_app.media.assets import Asset, AssetQuotaExceeded, AssetTooLarge
from serve_app.media.disk_full import is_disk_full
from serve_app.media.media_limits import media_refusal
from serve_app.observability.catalog import REFUSALS

STORAGE_RETRY_AFTER_S = 10  # a hint: a bucket or endpoint that stopped answering is often back within seconds


def storage_unavailable() -> VidforgeError:
    """The media store did not answer (unreachable, credentials refused, bucket gone): temporary, in the envelope."""
    return errors.internal_error(
        "vidforge could not reach its media storage; try again shortly.",
        None,
        "The media store did not answer; details are in the server log under this request_id.",
        STORAGE_RETRY_AFTER_S * 1000,
    )


def storage_refusal(exc: Exception) -> JSONResponse:
    """A failing store as the file routes answer it: 507 for a full disk, 503 otherwise (`temporary`, with
    Retry-After). Anything that is not the store's fault is raised again."""
    if is_disk_full(exc):
        error = errors.storage_full(None)
        error.report(cause=exc)
        return error_response(507, error, {"Retry-After": str(errors.DISK_FULL_RETRY_AFTER_MS // 1000)})
    if not is_storage_fault(exc):
        raise exc
    error = storage_unavailable()
    error.report(cause=exc)
    return error_response(503, error, {"Retry-After": str(STORAGE_RETRY_AFTER_S)})


@dataclass(frozen=True)
class UploadLimits:
    max_bytes: int  # VIDFORGE_MAX_ASSET_BYTES
    retention_s: int  # VIDFORGE_ASSET_RETENTION_S, which the quota refusal states


@dataclass(frozen=True)
class ArtifactFile:
    """A finished video as the download streams it: where it is, and what the response says about it."""

    media: MediaStore
    key: str
    size_bytes: int  # as stored now
    mime: str
    filename: str


class FileService(Protocol):
    """What the file routes need of the service (serve_app.ingress.ray_render_service.RayRenderService implements
    it)."""

    upload_limits: UploadLimits

    async def add_asset(self, chunks: AsyncIterator[bytes], principal: str, filename: str) -> Asset:
        """Store and parse an upload (AssetStore.add_stream: its exceptions are the refusals)."""

    async def artifact_file(self, principal: str, render_id: str, ext: str) -> ArtifactFile:
        """The principal's finished video; VidforgeError (resource_not_found) when there is none, gone included."""


class AssetUpload:
    """`POST /assets` (raw body, optional `?filename=`): streamed into the store, size-limited, probed → `{"uri"}`."""

    def __init__(self, files: FileService) -> None:
        self.files = files

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        limits = self.files.upload_limits
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.max_bytes:
            REFUSALS.inc(limit="body_size")
            await error_response(413, errors.asset_too_large(limits.max_bytes))(scope, receive, send)
            return
        try:
            asset = await self.files.add_asset(
                request.stream(), request.user.identity, request.query_params.get("filename", "upload")
            )
        except AssetTooLarge:
            REFUSALS.inc(limit="body_size")
            response = error_response(413, errors.asset_too_large(limits.max_bytes))
        except AssetQuotaExceeded as exc:
            REFUSALS.inc(limit="quota")
            response = error_response(413, errors.asset_quota_exceeded(exc.used, exc.limit, limits.retention_s))
        except UnsupportedMedia as exc:  # 415 unreadable; 422 readable but past a limit (media_limit_exceeded)
            refused = media_refusal("body", exc)
            refused.report(cause=exc)
            response = error_response(422 if isinstance(exc, OverLimit) else 415, refused)
        except Exception as exc:  # noqa: BLE001 - a full or unreachable store is refused; any other fault re-raised
            response = storage_refusal(exc)
        else:
            response = JSONResponse({"uri": asset.uri, "kind": asset.kind, "size_bytes": asset.size_bytes}, 201)
        await response(scope, receive, send)


class ArtifactDownload:
    """`GET /artifacts/{render_id}/final.{ext}`: the finished render, streamed from the store with Range support
    (one `bytes` range → 206; a range past the end → 416; several ranges, or one not understood → the whole
    file, as RFC 9110 §14.2 allows)."""

    def __init__(self, files: FileService) -> None:
        self.files = files

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        render_id, ext = request.path_params["render_id"], request.path_params["ext"]
        try:
            artifact = await self.files.artifact_file(request.user.identity, render_id, ext)
        except VidforgeError as error:
            await error_response(404, error)(scope, receive, send)
            return
        except Exception as exc:  # noqa: BLE001 - an unreachable store is refused; any other fault re-raised
            await storage_refusal(exc)(scope, receive, send)
            return
        await _ranged(artifact, request.headers.get("range"), request.method == "HEAD")(scope, receive, send)


def _ranged(artifact: ArtifactFile, range_header: str | None, head: bool) -> Response:
    size = artifact.size_bytes
    headers = {
        "accept-ranges": "bytes",
        "content-disposition": f'attachment; filename="{artifact.filename}"',
    }
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
