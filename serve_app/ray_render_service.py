"""`RenderService` over Ray: what a Serve replica calls for every MCP and HTTP request.

Stateless: task state lives in the TaskRegistry actor, rendering in the RenderSupervisor actor, bytes in
the data dir. Any replica can answer any request.
"""

from __future__ import annotations

from typing import Any

import anyio

from actors import QuotaExceeded
from actors.task_registry import TERMINAL, IdempotencyConflict
from mcp_protocol.catalog import RENDER_TOOL, STATUS_TOOL
from mcp_protocol.errors import VidforgeError, repair
from mcp_protocol.results import watermark_rejected_result
from mcp_protocol.timefmt import duration_adjective
from mcp_protocol.tools import idempotency_conflict
from serve_app.artifacts import preview_path
from render_kernels.probe import OverLimit
from serve_app.assets import Asset, AssetStore
from serve_app.config import Config
from serve_app.handles import registry_handle
from serve_app.media_limits import check_stored_facts, media_refusal, unsupported_source
from serve_app.supervisor import supervisor_handle


class RayRenderService:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.assets = AssetStore(config)
        self.registry = registry_handle(config)
        self.supervisor = supervisor_handle(config)

    def _check_assets(self, principal: str, arguments: dict[str, Any]) -> None:
        """Refuse before a task exists: unknown/foreign assets, wrong media kinds and media over a limit (from
        the facts stored at upload: no file is read again) answer at once."""
        source = self.assets.resolve(arguments["source_asset_uri"], principal, "source_asset_uri")
        if source.kind != "video":
            raise unsupported_source("source_asset_uri", f"the source asset is a still {source.kind}, not a video")
        self._check_limits("source_asset_uri", source)
        watermark = arguments.get("watermark")
        if watermark is not None:
            image = self.assets.resolve(watermark["image_asset_uri"], principal, "watermark.image_asset_uri")
            if image.kind != "image":
                raise unsupported_source(
                    "watermark.image_asset_uri", f"the watermark asset is a {image.kind}, not a PNG/JPEG image"
                )
            self._check_limits("watermark.image_asset_uri", image)

    def _check_limits(self, field: str, asset: Asset) -> None:
        try:
            check_stored_facts(self.assets.limits, asset.facts)
        except OverLimit as exc:
            raise media_refusal(field, exc) from None

    async def create_render(self, principal: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A replayed idempotency key answers with the task it created before anything else is checked (its
        assets may be gone since); the same key with other arguments is `idempotency_conflict`, naming that
        task. Every non-terminal task answered goes to the supervisor's start, which is idempotent, so a
        replay also starts a task whose first start never ran (and the registry's sweep starts it if no
        call ever comes)."""
        key = arguments.get("idempotency_key")
        try:
            rec = await self.registry.replay.remote(principal, arguments, key) if key is not None else None
            if rec is None:
                await anyio.to_thread.run_sync(self._check_assets, principal, arguments)
                rec = (await self.registry.create.remote(principal, arguments, key))["task"]
        except IdempotencyConflict as exc:
            raise idempotency_conflict(exc.task_id) from None
        except QuotaExceeded as exc:
            raise VidforgeError(
                code="render_quota_exceeded",
                message="Concurrent-render quota reached for this credential.",
                field=None,
                reason=f"{exc.active} renders in progress (limit {exc.limit}).",
                temporary=True,
                retry_after_ms=exc.retry_after_ms,
                repair=repair(
                    "retry_after_delay",
                    RENDER_TOOL,
                    dict(arguments),
                    "Wait retry_after_ms, or cancel one of your renders with vidforge_cancel_render.",
                ),
            ) from None
        if rec["status"] not in TERMINAL:
            await self.supervisor.start.remote(rec["task_id"])
        return rec

    async def get_render(self, principal: str, render_id: str) -> dict[str, Any] | None:
        return await self.registry.get.remote(principal, render_id)

    async def answer_approval(
        self, principal: str, render_id: str, approved: bool, note: str | None, key: str | None = None
    ) -> dict[str, Any]:
        rec = await self.registry.get.remote(principal, render_id)
        if rec is None:
            return {"outcome": "not_found", "task": None}
        rejected = None if approved else watermark_rejected_result(rec["arguments"], note)
        return await self.registry.answer_input.remote(principal, render_id, approved, note, key, rejected)

    async def cancel_render(self, principal: str, render_id: str) -> dict[str, Any] | None:
        rec = await self.registry.request_cancel.remote(principal, render_id)
        if rec is not None and rec["status"] not in ("completed", "failed", "cancelled"):
            await self.supervisor.cancel.remote(render_id)
        return rec

    async def watch(
        self, principal: str, render_ids: list[str], versions: dict[str, int], timeout_s: float
    ) -> list[dict[str, Any]]:
        return await self.registry.watch.remote(principal, render_ids, versions, timeout_s)

    async def artifact(self, principal: str, render_id: str, ext: str) -> dict[str, Any]:
        artifact = await self.registry.get_artifact.remote(principal, render_id)
        if artifact is None or artifact["ext"] != ext:
            raise self.artifact_missing(render_id)
        return artifact

    def artifact_missing(self, render_id: str) -> VidforgeError:
        return VidforgeError(
            code="resource_not_found",
            message="No finished video for this render is visible to this credential.",
            field="uri",
            reason="The render is unknown, not finished, another credential's, or past its "
            f"{duration_adjective(self.config.result_retention_s)} retention.",
            repair=repair("check_render_status", STATUS_TOOL, {"render_id": render_id}),
        )

    async def read_video(self, principal: str, render_id: str, ext: str) -> tuple[dict[str, Any], bytes | None]:
        artifact = await self.artifact(principal, render_id, ext)
        if artifact["size_bytes"] > self.config.max_inline_resource_bytes:
            url = f"{self.config.public_base_url}/artifacts/{render_id}/final.{ext}"
            raise VidforgeError(
                code="resource_too_large",
                message="The video is too large to inline in resources/read.",
                field="uri",
                reason=f"{artifact['size_bytes']} bytes exceeds the {self.config.max_inline_resource_bytes}-byte "
                "inline limit (VIDFORGE_MAX_INLINE_RESOURCE_BYTES).",
                repair=repair(
                    "download_over_http",
                    STATUS_TOOL,
                    {"render_id": render_id},
                    f"Download it with GET {url} (same bearer token; Range requests supported).",
                ),
            )
        data = await anyio.Path(artifact["path"]).read_bytes()
        return artifact, data

    async def read_preview(self, principal: str, render_id: str) -> bytes:
        rec = await self.registry.get.remote(principal, render_id)
        path = preview_path(self.config.data_dir, render_id)
        if rec is None or not await anyio.Path(path).exists():
            raise self.artifact_missing(render_id)
        return await anyio.Path(path).read_bytes()
