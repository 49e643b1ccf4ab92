"""The `RenderService` a Serve replica calls for every MCP and HTTP request (the review page's included).

Stateless: task state lives in the TaskRegistry, rendering in the render supervisor, bytes in the media store (the
data dir, or a bucket). Any replica can answer any request. Record reads go through the replica's `RecordMirror`
(serve_app.ingress._record_mirror), which follows the registry's change feed; long polls (`watch`) and writes go to
the registry.

Two classes, one logic: `RegistryRenderService` is the whole service over a `RegistryApi` and an `AssetStore` (the
checks before a task exists, the records, approvals, cancel intents, artifacts, the review page's backend), and
`RayRenderService` adds the render supervisor, which a created task is handed to and a cancel is applied by, with
both actors reached through their typed clients (actors.client). The fast lane (tests/fast_wire.py) serves the first
on the in-process TaskRegistry and a local media store; the supervisor's part is the end-to-end tests'.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable

import anyio

from actors.client import RegistryApi, SupervisorApi
from actors.errors import QuotaExceeded
from actors.task_registry import IdempotencyConflict
from mcp_protocol import errors
from mcp_protocol.app_view import ViewLinks
from mcp_protocol.domain import ApprovalAnswer, Artifact, RenderRequest, Succeeded, TaskRecord
from mcp_protocol.envelope import VidforgeError
from mcp_protocol.streams import stream_file_kind
from media_store.artifacts import (
    contact_sheet_key,
    final_key,
    poster_key,
    preview_key,
    source_frame_key,
    stream_key,
)
from media_store.opening import is_storage_fault
from render_kernels.limits import OverLimit
from render_kernels.source_info import SourceInfo
from render_kernels.spec import RenderSpec
from serve_app._config import Config
from serve_app._handles import registry_client
from serve_app.ingress._direct_uploads import DirectUploads
from serve_app.ingress._http_files import UploadLimits
from serve_app.ingress._ray_node import raylet_gone
from serve_app.ingress._record_mirror import RecordMirror
from serve_app.ingress._stored_media import ArtifactFile, DirectDownloads, storage_unavailable
from serve_app.ingress.review.links import ReviewImage, ReviewLinks
from serve_app.ingress.review.pages import ReviewedRender
from serve_app.ingress.watch.links import WatchLinks
from serve_app.media.assets import Asset, AssetStore
from serve_app.media.media_limits import check_stored_facts, media_refusal
from serve_app.observability.catalog import REFUSALS
from serve_app.rendering.supervisor import supervisor_client
from serve_app.webhooks.host import DeliveryStart
from serve_app.webhooks.submission import NotifyTargets

REGISTRY_RETRY_AFTER_S = 5  # a hint: a restarted registry answers within seconds
# Contact sheets a replica keeps in memory (each at most ~150 KB): a finished render's result, which carries its
# sheet, is read again by every tasks/get and status poll of it, and a sheet never changes.
CONTACT_SHEETS_KEPT = 32

logger = logging.getLogger(__name__)


def registry_unavailable(timeout_s: float) -> VidforgeError:
    """The TaskRegistry did not answer in time: temporary, in the envelope, naming the setting."""
    return errors.internal_error(
        "vidforge's task registry did not answer in time; try again shortly.",
        None,
        f"The TaskRegistry did not answer within {timeout_s:g} s (VIDFORGE_REGISTRY_TIMEOUT_S).",
        REGISTRY_RETRY_AFTER_S * 1000,
    )


def ray_node_lost() -> VidforgeError:
    """The raylet under this replica has exited: the server is stopping, to be started again (temporary)."""
    return errors.internal_error(
        "vidforge lost its Ray runtime and is stopping to be restarted; try again shortly.",
        None,
        "The Ray node (raylet) under this server has exited; vidforge serve exits with status 3 for its supervisor "
        "to start it again.",
        REGISTRY_RETRY_AFTER_S * 1000,
    )


class RegistryRenderService:
    """The render service over the task registry and the media store; no render is started here (that is
    `RayRenderService`'s supervisor: a task created here waits, non-terminal, for a renderer)."""

    def __init__(
        self,
        config: Config,
        registry: RegistryApi,
        assets: AssetStore,
        on_destination: Callable[[], None] | None = None,
    ) -> None:
        """`on_destination`: called before a render with a webhook destination is created (NotifyTargets)."""
        self.config = config
        self.assets = assets
        self.upload_limits = UploadLimits(config.max_asset_bytes, config.asset_retention_s)
        self.registry = registry
        self.records = RecordMirror(registry, config.record_mirror_size)
        self.review_links = ReviewLinks(config)
        self.watch_links = WatchLinks(config)
        self.notify_targets = NotifyTargets(config, on_destination=on_destination)
        self._contact_sheets: OrderedDict[str, bytes] = OrderedDict()  # the last CONTACT_SHEETS_KEPT read
        transfers = self.assets.media.direct_transfers
        self.direct_uploads = DirectUploads(config, self.assets, transfers)
        # Downloads straight from the bucket (VIDFORGE_DIRECT_TRANSFERS); None: the replica serves the bytes.
        self.direct_downloads = (
            DirectDownloads(transfers, config.presigned_url_ttl_s) if transfers and config.direct_transfers else None
        )

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
        task."""
        try:
            rec = await self.registry.replay(principal, request) if request.idempotency_key is not None else None
            if rec is None:
                # asyncio's thread pool, not anyio's: in a Serve replica anyio finds no root task, so each of its
                # calls scans every task of the loop and starts (then ends) a thread of its own (issue 38).
                await asyncio.to_thread(self._check_assets, principal, request)
                request = await self.notify_targets.settled(principal, request)
                rec = (await self.registry.create(principal, request)).task
        except IdempotencyConflict as exc:
            raise errors.idempotency_conflict(exc.task_id) from None
        except QuotaExceeded as exc:
            REFUSALS.inc(limit="quota")
            raise errors.render_quota_exceeded(request, exc.active, exc.limit, exc.retry_after_ms) from None
        self.records.forget(rec.task_id)
        return rec

    async def get_render(self, principal: str, render_id: str, *, fresh: bool = False) -> TaskRecord | None:
        """Bounded: a registry that does not answer within VIDFORGE_REGISTRY_TIMEOUT_S (hung, its node or Ray lost,
        where Ray itself would wait for good) is the contract's temporary error, answered then; at once when the
        Ray node under this replica is gone."""
        if raylet_gone():
            raise ray_node_lost()
        with anyio.move_on_after(self.config.registry_timeout_s):
            if fresh:
                return await self.registry.get(principal, render_id)
            return await self.records.get(principal, render_id)
        raise registry_unavailable(self.config.registry_timeout_s)

    async def answer_approval(
        self, principal: str, render_id: str, approved: bool, note: str | None, key: str | None = None
    ) -> ApprovalAnswer:
        answer = await self.registry.answer_input(principal, render_id, approved, note, key)
        self.records.forget(render_id)
        return answer

    async def cancel_render(self, principal: str, render_id: str) -> TaskRecord | None:
        """Record the cancel intent; the renderer applies it (it checks the intent at each of its checkpoints)."""
        rec = await self.registry.request_cancel(principal, render_id)
        self.records.forget(render_id)
        return rec

    async def watch(
        self, principal: str, render_ids: list[str], versions: dict[str, int], timeout_s: float
    ) -> list[TaskRecord]:
        found = await self.registry.watch(principal, render_ids, versions, timeout_s)
        self.records.saw(found)
        return found

    async def artifact(self, principal: str, render_id: str, ext: str) -> Artifact:
        artifact = await self.registry.get_artifact(principal, render_id)
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

    def watch_url(self, rec: TaskRecord) -> str | None:
        return self.watch_links.url(rec)

    def stream_url(self, rec: TaskRecord) -> str | None:
        return self.watch_links.stream_url(rec)

    def view_links(self, rec: TaskRecord) -> ViewLinks:
        if rec.pending is not None:
            return self.review_links.image_links(rec)
        return self.watch_links.file_links(rec)

    async def read_poster(self, principal: str, render_id: str) -> bytes:
        if await self.registry.get_artifact(principal, render_id) is None:
            raise self.artifact_missing(render_id)
        return await self._read(poster_key(render_id), render_id)

    async def read_stream_file(self, principal: str, render_id: str, name: str) -> bytes:
        rec = await self.get_render(principal, render_id)
        if rec is None or not isinstance(rec.end, Succeeded) or rec.request.streaming is None:
            raise self.artifact_missing(render_id)
        return await self._read(stream_key(render_id, name), render_id)

    async def stream_file(self, rec: TaskRecord, name: str) -> ArtifactFile:
        """File `name` of `rec`'s stream as a player fetches it: the playlists, the manifest and the storyboard from
        here (a player resolves the relative URIs inside against the URL it fetched, which a redirect would change),
        the segments and pictures from the bucket where it serves them itself. resource_not_found when there is none."""
        kind = stream_file_kind(name)
        if kind is None or not isinstance(rec.end, Succeeded) or rec.request.streaming is None:
            raise self.artifact_missing(rec.task_id)
        direct = None if kind.text else self.direct_downloads
        return await self._stored_file(rec.task_id, stream_key(rec.task_id, name), kind.mime, name, direct)

    async def contact_sheet(self, rec: TaskRecord) -> bytes | None:
        if not isinstance(rec.end, Succeeded) or rec.end.artifact.qc is None:
            return None
        if (sheet := self._contact_sheets.get(rec.task_id)) is not None:
            self._contact_sheets.move_to_end(rec.task_id)
            return sheet
        try:
            sheet = await self._read(contact_sheet_key(rec.task_id), rec.task_id)
        except VidforgeError:  # gone, or the store out of reach (logged): the result goes out with its link only
            return None
        self._contact_sheets[rec.task_id] = sheet
        if len(self._contact_sheets) > CONTACT_SHEETS_KEPT:
            self._contact_sheets.popitem(last=False)
        return sheet

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
        rec = await self.registry.get_any(task_id)
        if rec is None:
            return None
        facts = await anyio.to_thread.run_sync(self._source_facts, rec)
        if facts is None:
            return ReviewedRender(rec, None, None)
        size = RenderSpec(rec.request.output_format, rec.request.resolution).output_size(facts)
        watermark_size = await anyio.to_thread.run_sync(self._watermark_size, rec)
        return ReviewedRender(rec, facts.duration_s, size, watermark_size)

    def _source_facts(self, rec: TaskRecord) -> SourceInfo | None:
        """What the source's upload parse found (None once the asset is gone, or for one stored without its facts)."""
        try:
            source = self.assets.resolve(rec.request.source_asset_uri, rec.principal, "source_asset_uri")
        except VidforgeError:
            return None
        return self.assets.source_info(source)

    def _watermark_size(self, rec: TaskRecord) -> tuple[int, int] | None:
        """The watermark image's (width, height) as its upload's parse found it (None once the asset is gone)."""
        if rec.request.watermark is None:
            return None
        try:
            image = self.assets.resolve(
                rec.request.watermark.image_asset_uri, rec.principal, "watermark.image_asset_uri"
            )
        except VidforgeError:
            return None
        return (image.facts.width, image.facts.height) if image.facts else None

    async def review_decide(self, rec: TaskRecord, approved: bool, note: str | None) -> ApprovalAnswer:
        return await self.answer_approval(rec.principal, rec.task_id, approved, note)

    async def review_image(self, task_id: str, which: ReviewImage) -> bytes | None:
        key = preview_key(task_id) if which is ReviewImage.PREVIEW else source_frame_key(task_id)
        try:
            return await anyio.to_thread.run_sync(self.assets.media.get_bytes, key)
        except FileNotFoundError:
            return None

    # -- serve_app.ingress.watch.routes.WatchBackend (and artifact_file below) -----------------------------------

    async def watch_render(self, task_id: str) -> TaskRecord | None:
        return await self.registry.get_any(task_id)

    async def watch_poster(self, task_id: str) -> bytes | None:
        try:
            return await anyio.to_thread.run_sync(self.assets.media.get_bytes, poster_key(task_id))
        except FileNotFoundError:
            return None

    # -- serve_app.ingress._http_files.FileService ---------------------------------------------------------------

    async def add_asset(self, chunks: AsyncIterator[bytes], principal: str, filename: str) -> Asset:
        return await self.assets.add_stream(chunks, principal, filename)

    async def artifact_file(self, principal: str, render_id: str, ext: str) -> ArtifactFile:
        artifact = await self.artifact(principal, render_id, ext)
        key = final_key(render_id, ext)
        return await self._stored_file(render_id, key, artifact.mime, f"final.{ext}", self.direct_downloads)

    async def _stored_file(
        self, render_id: str, key: str, mime: str, filename: str, direct: DirectDownloads | None
    ) -> ArtifactFile:
        """The stored object `key` of a render as a response serves it; resource_not_found when it is not there."""
        size = await anyio.to_thread.run_sync(self.assets.media.size, key)
        if size is None:
            raise self.artifact_missing(render_id)
        return ArtifactFile(self.assets.media, key, size, mime, filename, direct)


class RayRenderService(RegistryRenderService):
    """The service on the cluster: the TaskRegistry and the render supervisor actors, through their typed clients.
    Every non-terminal task a create answers goes to the supervisor's start, which is idempotent, so a replay also
    starts a task whose first start never ran (and the registry's sweep starts it if no call ever comes); a cancel
    of a task still running is applied by the supervisor at once, also when no driver holds the task."""

    def __init__(self, config: Config) -> None:
        # A render with a destination starts the cluster's webhook dispatcher (serve_app.webhooks.host).
        super().__init__(config, registry_client(config), AssetStore(config), DeliveryStart(config, ReviewLinks))
        self.supervisor: SupervisorApi = supervisor_client(config)
        self._starting: set[asyncio.Future[None]] = set()  # supervisor starts sent and not yet answered

    async def create_render(self, principal: str, request: RenderRequest) -> TaskRecord:
        """The task is durable when this returns; the supervisor's start is sent, not awaited: its round trip (the
        supervisor reads the record from the registry) was a third of a create's time (issue 38). A start that
        fails or never arrives is the registry sweep's to make good, as for a replica lost mid-create."""
        rec = await super().create_render(principal, request)
        if not rec.status.terminal:
            starting = asyncio.ensure_future(self._start(rec.task_id))
            self._starting.add(starting)  # a strong reference until it is done (the loop keeps only weak ones)
            starting.add_done_callback(self._starting.discard)
        return rec

    async def _start(self, task_id: str) -> None:
        try:
            await self.supervisor.start(task_id)
        except Exception:  # the sweep starts it: logged, not raised (the create has been answered)
            logger.warning(
                "render %s: the supervisor's start failed; the registry's sweep will start it",
                task_id,
                exc_info=True,
                extra={"event": "start_deferred", "task_id": task_id},
            )

    async def cancel_render(self, principal: str, render_id: str) -> TaskRecord | None:
        rec = await super().cancel_render(principal, render_id)
        if rec is not None and not rec.status.terminal:
            await self.supervisor.cancel(render_id)
        return rec
