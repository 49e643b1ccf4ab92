"""Plain-HTTP file routes beside `/mcp`: asset upload and artifact download (architecture: operator interface).

Both sit behind the same bearer auth as `/mcp` and answer errors with the contract's envelope under `error`.
"""

from __future__ import annotations

import os

import anyio
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.types import Receive, Scope, Send

from mcp_protocol.errors import VidforgeError, repair
from render_kernels import UnsupportedMedia
from serve_app.assets import AssetTooLarge


def error_response(status: int, error: VidforgeError) -> JSONResponse:
    return JSONResponse({"error": error.envelope()}, status_code=status)


def _too_large(limit: int) -> VidforgeError:
    return VidforgeError(
        code="asset_too_large",
        message="The upload is larger than this server accepts.",
        field="body",
        reason=f"Assets are limited to {limit} bytes (VIDFORGE_MAX_ASSET_BYTES).",
    )


class AssetUpload:
    """`POST /assets` (raw body, optional `?filename=`): streamed to disk, size-limited, probed → `{"uri"}`."""

    def __init__(self, service) -> None:
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        store = self.service.assets
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > store.max_bytes:
            await error_response(413, _too_large(store.max_bytes))(scope, receive, send)
            return
        try:
            asset = await store.add_stream(
                request.stream(), request.user.identity, request.query_params.get("filename", "upload")
            )
        except AssetTooLarge:
            response = error_response(413, _too_large(store.max_bytes))
        except UnsupportedMedia as exc:
            response = error_response(
                415,
                VidforgeError(
                    code="unsupported_codec",
                    message="The upload is not a video or image vidforge can read.",
                    field="body",
                    reason=exc.reason,
                    repair=repair("upload_asset", None, {}, "Upload an mp4/mov/webm/mkv video or a PNG/JPEG image."),
                ),
            )
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
        exists = await anyio.to_thread.run_sync(os.path.exists, artifact["path"])
        if not exists:
            await error_response(404, self.service.artifact_missing(render_id))(scope, receive, send)
            return
        await FileResponse(artifact["path"], media_type=artifact["mime"], filename=f"final.{ext}")(scope, receive, send)
