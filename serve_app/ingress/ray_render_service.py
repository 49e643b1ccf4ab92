"""`RenderService` over Ray: what a Serve replica calls for every MCP and HTTP request (the review page's included).

Stateless: task state lives in the TaskRegistry actor, rendering in the RenderSupervisor actor, bytes in
the media store (the data dir, or a bucket). Any replica can answer any request. Record reads go through the
replica's `RecordMirror` (serve_app.ingress.record_mirror), which follows the registry's change feed; long polls
(`watch`) and writes go to the registry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from actors import QuotaExceeded
from actors.task_registry import IdempotencyConflict
from mcp_protocol import errors
from mcp_protocol.domain import ApprovalAnswer, Artifact, RenderRequest, TaskRecord
from mcp_protocol.envelope import VidforgeError
from media_store import is_storage_fault
from media_store.artifacts import final_key, preview_key, source_frame_key
from render_kernels import SourceInfo, output_size
from render_kernels.probe import OverLimit
from serve_app.config import Config
from serve_app.handles import registry_handle
from serve_app.ingress.http_files import ArtifactFile, UploadLimits, storage_unavailable
from serve_app.ingress.record_mirror import RayRegistryFeed, RecordMirror
from serve_app.ingress.review.links import ReviewLinks
from serve_app.ingress.review.pages import ReviewedRender
from serve_app.ingress.review.routes import ReviewImage
from serve_app.media.assets import Asset, AssetStore
from serve_app.media.media_limits import check_stored_facts, media_refusal
from serve_app.observability.catalog import REFUSALS
from serve_app.rendering.supervisor import supervisor_handle


class RayRenderService:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.assets = AssetStore(config)
        self.upload_limits = UploadLimits(config.max_asset_bytes, config.asset_retention_s)
        self.registry = registry_handle(config)
        self.records = RecordMirror(RayRegistryFeed(self.registry), config.record_mirror_size)
        self.supervisor = supervisor_handle(config)
        self.review_links = ReviewLinks(config)

    def _check_assets(self, principal: str, request: RenderRequest) -> None:
        """Refuse before a task exists: unknown/foreign assets, wrong media kinds and media over a limit (from
        the facts stored at upload: no file is read again) answer at once."""
        source = self.assets.resolve(request.source_asset_uri, principal, "source_asset_uri")
        if source.kind != "video":
            raise errors.unsupported_codec(
                "source_asset_uri", f"the source asset is a still {source.kind}, not a video"
            )
        self._check_limits("source_asset_uri", source)
        if request.watermark is not None:
            image = self.assets.resolve(request.watermark.image_asset_uri, principal, "watermark.image_asset_uri")
            if image.kind != "image":
                raise errors.unsupported_codec(
                    "watermark.image_asset_uri", f"the watermark asset is a {image.kind}, not a PNG/JPEG image"
                )
            self._check_limits("watermark.image_asset_uri", image)

    def _check_limits(self, field: str, asset: Asset) -> None:
        try:
            check_stored_facts(self.assets.limits, asset.facts)
        except OverLimit as exc:
            raise media_refusal(field, exc) from None

    async def create_render(self, principal: str, request: RenderRequest) -> TaskRecord:
        """A replayed idempotency key answers with the task it created before anything else is checked (its
        assets may be gone since); the same key with other arguments is `idempotency_conflict`, naming that
        task. Every non-terminal task answered goes to the supervisor's start, which is idempotent, so a
        replay also starts a task whose first start never ran (and the registry's sweep starts it if no
        call ever comes)."""
        try:
            rec = await self.registry.replay.remote(principal, request) if request.idempotency_key is not None else None
            if rec is None:
                await anyio.to_thread.run_sync(self._check_assets, principal, request)
                rec = (await self.registry.create.remote(principal, request)).task
        except IdempotencyConflict as exc:
            raise errors.idempotency_conflict(exc.task_id) from None
        except QuotaExceeded as exc:
            REFUSALS.inc(limit="quota")
            raise errors.render_quota_exceeded(request, exc.active, exc.limit, exc.retry_after_ms) from None
        self.records.forget(rec.task_id)
        if not rec.status.terminal:
            await self.supervisor.start.remote(rec.task_id)
        return rec

    async def get_render(self, principal: str, render_id: str, *, fresh: bool = False) -> TaskRecord | None:
        if fresh:
            return await self.registry.get.remote(principal, render_id)
        return await self.records.get(principal, render_id)

    async def answer_approval(
        self, principal: str, render_id: str, approved: bool, note: str | None, key: str | None = None
    ) -> ApprovalAnswer:
        answer = await self.registry.answer_input.remote(principal, render_id, approved, note, key)
        self.records.forget(render_id)
        return answer

    async def cancel_render(self, principal: str, render_id: str) -> TaskRecord | None:
        rec = await self.registry.request_cancel.remote(principal, render_id)
        self.records.forget(render_id)
        if rec is not None and not rec.status.terminal:
            await self.supervisor.cancel.remote(render_id)
        return rec

    async def watch(
        self, principal: str, render_ids: list[str], versions: dict[str, int], timeout_s: float
    ) -> list[TaskRecord]:
        return await self.registry.watch.remote(principal, render_ids, versions, timeout_s)

    async def artifact(self, principal: str, render_id: str, ext: str) -> Artifact:
        artifact = await self.registry.get_artifact.remote(principal, render_id)
        if artifact is None or artifact.ext != ext:
            raise self.artifact_missing(render_id)
        return artifact

    def artifact_missing(self, render_id: str) -> VidforgeError:
        return errors.resource_not_found(render_id, self.config.result_retention_s)

    async def read_video(self, principal: str, render_id: str, ext: str) -> tuple[Artifact, bytes]:
        artifact = await self.artifact(principal, render_id, ext)
        limit = self.config.max_inline_resource_bytes
        if artifact.size_bytes > limit:
            url = f"{self.config.public_base_url}/artifacts/{render_id}/final.{ext}"
            raise errors.resource_too_large(render_id, artifact.size_bytes, limit, url)
        return artifact, await self._read(final_key(render_id, ext), render_id)

    def review_url(self, rec: TaskRecord) -> str | None:
        return self.review_links.url(rec)

    async def read_preview(self, principal: str, render_id: str) -> bytes:
        if await self.records.get(principal, render_id) is None:
            raise self.artifact_missing(render_id)
        return await self._read(preview_key(render_id), render_id)

    async def _read(self, key: str, render_id: str) -> bytes:
        """The object's bytes; resource_not_found when there is none, and a store that does not answer as the
        contract's temporary error (MCP answers it in the envelope, never as a bare fault)."""
        try:
            return await anyio.to_thread.run_sync(self.assets.media.get_bytes, key)
        except FileNotFoundError:
            raise self.artifact_missing(render_id) from None
        except Exception as exc:
            if not is_storage_fault(exc):
                raise
            error = storage_unavailable()
            error.report(cause=exc)  # the one line of its request_id, with the store's own exception
            raise error from exc

    # -- serve_app.ingress.review.routes.ReviewBackend ----------------------------------------------------------

    async def review_render(self, task_id: str) -> ReviewedRender | None:
        rec = await self.registry.get_any.remote(task_id)
        if rec is None:
            return None
        facts = await anyio.to_thread.run_sync(self._source_facts, rec)
        if facts is None:
            return ReviewedRender(rec, None, None)
        return ReviewedRender(rec, facts.duration_s, output_size(*facts.display_size(), rec.request.resolution))

    def _source_facts(self, rec: TaskRecord) -> SourceInfo | None:
        """What the source's upload parse found (None once the asset is gone, or for one stored without its facts)."""
        try:
            source = self.assets.resolve(rec.request.source_asset_uri, rec.principal, "source_asset_uri")
        except VidforgeError:
            return None
        return self.assets.source_info(source)

    async def review_decide(self, rec: TaskRecord, approved: bool, note: str | None) -> ApprovalAnswer:
        return await self.answer_approval(rec.principal, rec.task_id, approved, note)

    async def review_image(self, task_id: str, which: ReviewImage) -> bytes | None:
        key = preview_key(task_id) if which is ReviewImage.PREVIEW else source_frame_key(task_id)
        try:
            return await anyio.to_thread.run_sync(self.assets.media.get_bytes, key)
        except FileNotFoundError:
            return None

    # -- serve_app.ingress.http_files.FileService ---------------------------------------------------------------

    async def add_asset(self, chunks: AsyncIterator[bytes], principal: str, filename: str) -> Asset:
        return await self.assets.add_stream(chunks, principal, filename)

    async def artifact_file(self, principal: str, render_id: str, ext: str) -> ArtifactFile:
        artifact = await self.artifact(principal, render_id, ext)
        key = final_key(render_id, ext)
        size = await anyio.to_thread.run_sync(self.assets.media.size, key)
        if size is None:
            raise self.artifact_missing(render_id)
        return ArtifactFile(self.assets.media, key, size, artifact.mime, f"final.{ext}")
