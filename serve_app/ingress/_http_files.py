"""Plain-HTTP file routes beside `/mcp`: asset upload and artifact download (architecture: operator interface).

All sit behind the same bearer auth as `/mcp` and answer errors with the contract's envelope under `error`.
They see the service only through `FileService`; the bytes stream from and to the media store (a local
directory or a bucket), never whole in memory.

With the media in a bucket and VIDFORGE_DIRECT_TRANSFERS on (the default there), the bucket moves the bytes itself:
a download is answered `307` to a presigned URL of the object that works for VIDFORGE_PRESIGNED_URL_TTL_S (Range
requests go to it as they are), and a large upload can go to the bucket in parts (`POST /assets/uploads`, then
`…/complete`: serve_app/ingress/_direct_uploads.py), vetted as any upload. A local directory is served by the
replica, as are both with direct transfers off.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from mcp_protocol import errors
from mcp_protocol.envelope import VidforgeError, repair
from media_store.base import InvalidUpload
from media_store.opening import is_storage_fault
from render_kernels.errors import UnsupportedMedia
from render_kernels.limits import OverLimit
from serve_app.ingress._direct_uploads import DirectUploads, DirectUploadsOff, UnknownUpload
from serve_app.ingress._refusals import error_response
from serve_app.ingress._stored_media import STORAGE_RETRY_AFTER_S, ArtifactFile, artifact_response, storage_unavailable
from serve_app.media.assets import Asset, AssetQuotaExceeded, AssetTooLarge
from serve_app.media.content_sniff import MULTIPART
from serve_app.media.disk_full import is_disk_full
from serve_app.media.media_limits import media_refusal
from serve_app.observability.catalog import REFUSALS


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


class FileService(Protocol):
    """What the file routes need of the service (serve_app.ingress.ray_render_service.RayRenderService implements
    it)."""

    upload_limits: UploadLimits
    direct_uploads: DirectUploads

    async def add_asset(self, chunks: AsyncIterator[bytes], principal: str, filename: str) -> Asset:
        """Store and parse an upload (AssetStore.add_stream: its exceptions are the refusals)."""

    async def artifact_file(self, principal: str, render_id: str, ext: str) -> ArtifactFile:
        """The principal's finished video; VidforgeError (resource_not_found) when there is none, gone included."""


class AssetUpload:
    """`POST /assets` (raw body, optional `?filename=`): streamed into the store, size-limited, probed → `{"uri"}`.
    A multipart form (`curl -F`) is refused before its body is read, saying to send the file's raw bytes instead."""

    def __init__(self, files: FileService) -> None:
        self.files = files

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        limits = self.files.upload_limits
        if request.headers.get("content-type", "").lower().startswith("multipart/form-data"):  # `curl -F`
            await error_response(415, errors.unsupported_codec("body", MULTIPART.refusal()))(scope, receive, send)
            return
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.max_bytes:
            REFUSALS.inc(limit="body_size")
            await error_response(413, errors.asset_too_large(limits.max_bytes))(scope, receive, send)
            return
        try:
            asset = await self.files.add_asset(
                request.stream(), request.user.identity, request.query_params.get("filename", "upload")
            )
        except Exception as exc:  # noqa: BLE001 - every refusal answered; any other fault re-raised
            response = upload_refusal(exc, limits)
        else:
            response = asset_created(asset)
        await response(scope, receive, send)


def asset_created(asset: Asset) -> JSONResponse:
    return JSONResponse({"uri": asset.uri, "kind": asset.kind, "size_bytes": asset.size_bytes}, 201)


def upload_refusal(exc: Exception, limits: UploadLimits) -> JSONResponse:
    """How an upload that ended in `exc` is refused (AssetStore's exceptions, and the store's faults); anything else
    is raised again."""
    if isinstance(exc, AssetTooLarge):
        REFUSALS.inc(limit="body_size")
        return error_response(413, errors.asset_too_large(limits.max_bytes))
    if isinstance(exc, AssetQuotaExceeded):
        REFUSALS.inc(limit="quota")
        return error_response(413, errors.asset_quota_exceeded(exc.used, exc.limit, limits.retention_s))
    if isinstance(exc, UnsupportedMedia):  # 415 unreadable; 422 readable but past a limit (media_limit_exceeded)
        refused = media_refusal("body", exc)
        refused.report(cause=exc)
        return error_response(422 if isinstance(exc, OverLimit) else 415, refused)
    return storage_refusal(exc)


def direct_uploads_off() -> VidforgeError:
    return errors.invalid_argument(
        "This server takes no direct uploads.",
        "path",
        "Direct uploads need the media in a bucket (VIDFORGE_STORAGE_URL) and VIDFORGE_DIRECT_TRANSFERS on.",
        repair("upload_asset", None, {}, "Send the file's raw bytes to POST /assets instead."),
    )


class DirectUploadOpen:
    """`POST /assets/uploads?size_bytes=N[&filename=NAME]`: a multipart upload straight to the bucket → 201 with its
    id and part URLs (serve_app/ingress/_direct_uploads.py)."""

    def __init__(self, files: FileService) -> None:
        self.files = files

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        declared = request.query_params.get("size_bytes", "")
        try:
            if not declared.isdigit() or int(declared) < 1:
                raise errors.invalid_argument(
                    "The upload's size is missing or not valid.",
                    "size_bytes",
                    "size_bytes must be the file's size in bytes, a whole number of at least 1.",
                    repair("open_upload", None, {"size_bytes": 1}, "Pass ?size_bytes=<the file's size in bytes>."),
                )
            filename = request.query_params.get("filename", "upload")
            opened = await self.files.direct_uploads.open(request.user.identity, filename, int(declared))
        except VidforgeError as error:
            response: Response = error_response(400, error)
        except DirectUploadsOff:
            response = error_response(404, direct_uploads_off())
        except Exception as exc:  # noqa: BLE001 - every refusal answered; any other fault re-raised
            response = upload_refusal(exc, self.files.upload_limits)
        else:
            response = JSONResponse(opened.body(), 201)
        await response(scope, receive, send)


class DirectUploadComplete:
    """`POST /assets/uploads/{upload_id}/complete`: the parts become the file, vetted as any upload → 201
    `{"uri", "kind", "size_bytes"}`; a refused file is deleted."""

    def __init__(self, files: FileService) -> None:
        self.files = files

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            asset = await self.files.direct_uploads.complete(request.user.identity, request.path_params["upload_id"])
        except DirectUploadsOff:
            response = error_response(404, direct_uploads_off())
        except UnknownUpload as exc:
            response = error_response(410 if exc.expired else 404, errors.source_not_found("upload_id", exc.reason))
        except InvalidUpload as exc:
            error = errors.invalid_argument(
                "The upload's parts do not make a file.",
                "upload_id",
                f"The bucket could not assemble them: {exc}. The upload was aborted.",
                repair("open_upload", None, {}, "Open a new upload and send every part (all but the last part_bytes)."),
            )
            response = error_response(400, error)
        except Exception as exc:  # noqa: BLE001 - every refusal answered; any other fault re-raised
            response = upload_refusal(exc, self.files.upload_limits)
        else:
            response = asset_created(asset)
        await response(scope, receive, send)


class ArtifactDownload:
    """`GET /artifacts/{render_id}/final.{ext}`: the finished render, streamed from the store with Range support
    (one `bytes` range → 206; a range past the end → 416; several ranges, or one not understood → the whole
    file, as RFC 9110 §14.2 allows); where the bucket serves it, a 307 to its presigned URL, which takes the
    same Range requests."""

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
        await artifact_response(artifact, request)(scope, receive, send)
