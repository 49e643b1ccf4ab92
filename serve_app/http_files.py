"""Plain-HTTP file routes beside `/mcp`: asset upload and artifact download (architecture: operator interface).

Both sit behind the same bearer auth as `/mcp` and answer errors with the contract's envelope under `error`.
"""

from __future__ import annotations

import logging
import os

import anyio
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.types import Receive, Scope, Send

from mcp_protocol import errors
from mcp_protocol.errors import VidforgeError
from render_kernels import UnsupportedMedia
from render_kernels.probe import OverLimit
from serve_app.assets import AssetQuotaExceeded, AssetTooLarge
from serve_app.disk_full import is_disk_full
from serve_app.media_limits import media_refusal
from serve_app.refusals import error_response

logger = logging.getLogger(__name__)


class AssetUpload:
    """`POST /assets` (raw body, optional `?filename=`): streamed to disk, size-limited, probed → `{"uri"}`."""

    def __init__(self, service) -> None:
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        store = self.service.assets
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > store.max_bytes:
            await error_response(413, errors.asset_too_large(store.max_bytes))(scope, receive, send)
            return
        try:
            asset = await store.add_stream(
                request.stream(), request.user.identity, request.query_params.get("filename", "upload")
            )
        except AssetTooLarge:
            response = error_response(413, errors.asset_too_large(store.max_bytes))
        except AssetQuotaExceeded as exc:
            response = error_response(413, errors.asset_quota_exceeded(exc.used, exc.limit, store.retention_s))
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            logger.error("upload refused: storage full", exc_info=exc)
            error = errors.storage_full(None)
            response = error_response(507, error, {"Retry-After": str(errors.DISK_FULL_RETRY_AFTER_MS // 1000)})
        except UnsupportedMedia as exc:  # 415 unreadable; 422 readable but past a limit (media_limit_exceeded)
            response = error_response(422 if isinstance(exc, OverLimit) else 415, media_refusal("body", exc))
        else:
            response = JSONResponse({"uri": asset.uri, "kind": asset.kind, "size_bytes": asset.size_bytes}, 201)
        await response(scope, receive, send)


class ArtifactDownload:
    """`GET /artifacts/{render_id}/final.{ext}`: the finished render, with Range support (Starlette FileResponse)."""

    def __init__(self, service) -> None:
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        render_id, ext = request.path_params["render_id"], request.path_params["ext"]
        try:
            artifact = await self.service.artifact(request.user.identity, render_id, ext)
        except VidforgeError as error:
            await error_response(404, error)(scope, receive, send)
            return
        exists = await anyio.to_thread.run_sync(os.path.exists, artifact.path)
        if not exists:
            await error_response(404, self.service.artifact_missing(render_id))(scope, receive, send)
            return
        await FileResponse(artifact.path, media_type=artifact.mime, filename=f"final.{ext}")(scope, receive, send)
