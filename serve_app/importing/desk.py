"""The import desk: the desk (serve_app.desks.job_desk) that runs every import by URL and keeps it as a task.

A restarted desk forgets the imports it held (their tasks answer "not found"), and the start-up cleanup removes
their half-written files (media_store.hygiene).

An import: the bytes from the source (serve_app.importing._web_fetch, or the server's bucket) go into the asset store
exactly as an upload's do (AssetStore.add_stream: the size limit and the quota counted as they arrive, the isolated
parse, every media limit), within VIDFORGE_IMPORT_TIMEOUT_S for the transfer; the parse that follows has its own
bound. Whatever ends it — success, a refusal, a failure, a cancel — nothing of a failed import is kept, and its task
ends `completed` with the call's result (an error envelope being one) or `cancelled`. At most VIDFORGE_MAX_IMPORTS
run at once per principal.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Protocol

from actors.actor_calls import ActorCall, ActorClient
from mcp_protocol import errors
from mcp_protocol.desk_jobs import DeskJob
from mcp_protocol.domain import TaskStatus
from mcp_protocol.envelope import VidforgeError, tool_error_result
from mcp_protocol.imports import IMPORT_TASK_PREFIX, ImportedAsset, imported_result
from mcp_protocol.json_types import JSONObject
from mcp_protocol.timefmt import now_ms
from media_store.opening import is_storage_fault
from render_kernels.errors import UnsupportedMedia
from serve_app._config import Config
from serve_app.desks.job_desk import HeldJob, JobDesk, LazyDesk, new_task_id
from serve_app.importing._failures import ImportRefused, ImportUnavailable
from serve_app.importing._sources import BucketSource, ImportSource, bucket_chunks
from serve_app.importing._web_fetch import FetchLimits, WebFetch
from serve_app.media.assets import Asset, AssetQuotaExceeded, AssetStore, AssetTooLarge
from serve_app.media.disk_full import is_disk_full
from serve_app.media.media_limits import media_refusal
from serve_app.outbound.address_guard import AddressGuard

IMPORT_DESK_NAME = "vidforge-import-desk"
DESK = "import desk"  # the actor, as its errors name it
MIB = 1024 * 1024


@dataclass
class _Import(HeldJob):
    """One import while the desk holds it."""

    source: ImportSource = field(kw_only=True)
    received: int = field(default=0, init=False)
    transferred: bool = field(default=False, init=False)

    def message(self) -> str:
        if self.status is TaskStatus.CANCELLED:
            return "Import cancelled; nothing of it was kept."
        if self.status is TaskStatus.COMPLETED:
            structured = (self.result or {}).get("structuredContent") or {}
            if isinstance(structured, dict) and "asset_uri" in structured:
                return f"Imported as {structured['asset_uri']}."
            code = structured.get("code") if isinstance(structured, dict) else None
            return f"Import ended with {code}; the result holds the error."
        if self.transferred:
            return f"Checking the media ({self.received} bytes received)."
        return f"Importing from {self.source.host}: {self.received / MIB:.1f} MiB received."


class ImportDesk(JobDesk[_Import]):
    def __init__(self, config_json: str) -> None:
        config = Config.from_json(config_json)
        super().__init__(config, config.max_imports)
        self.assets = AssetStore(config)
        self.web = WebFetch(
            AddressGuard.of(config.import_allow_hosts),
            FetchLimits(config.max_asset_bytes, config.import_max_redirects),
        )

    async def start(self, principal: str, source: ImportSource) -> DeskJob:
        """Take the import on and start it; its job is held before this returns (DeskAtCapacity past the cap)."""
        now = now_ms()
        return self._take(_Import(new_task_id(IMPORT_TASK_PREFIX), principal, now, now, source=source))

    # -- the import ----------------------------------------------------------------------------------------------

    async def _result(self, held: _Import) -> JSONObject:
        """The call's result: the asset, or the error the import ended in (reported once, here)."""
        limit_s = self.config.import_timeout_s
        try:
            async with asyncio.timeout(limit_s) as transfer:
                counted = self._counted(held, self._chunks(held.source), lambda: transfer.reschedule(None))
                async with aclosing(counted) as chunks:
                    asset = await self.assets.add_stream(chunks, held.principal, held.source.label)
        except Exception as exc:  # noqa: BLE001 - every way an import fails ends as its result
            url = self._url(held.source)
            if isinstance(exc, TimeoutError) and transfer.expired():
                reason = f"the transfer took longer than {limit_s:g} s (VIDFORGE_IMPORT_TIMEOUT_S)"
                return tool_error_result(errors.import_failed(reason, url))
            error = self._failure(exc, url)
            if not isinstance(exc, ImportRefused | ImportUnavailable | AssetTooLarge | AssetQuotaExceeded):
                error.report(cause=exc)  # a media refusal or a fault: its cause goes to the log (never to the caller)
            return tool_error_result(error)
        return imported_result(self._imported(asset))

    def _chunks(self, source: ImportSource) -> AsyncGenerator[bytes, None]:
        if isinstance(source, BucketSource):
            return bucket_chunks(source, self.config.data_dir, self.config.max_asset_bytes)
        return self.web.chunks(source.url)

    @staticmethod
    async def _counted(
        held: _Import, source: AsyncGenerator[bytes, None], transferred: Callable[[], None]
    ) -> AsyncGenerator[bytes, None]:
        """The source's bytes, counted into the status message; `transferred` is called once the last has come."""
        async with aclosing(source) as chunks:  # closed at once when the store stops reading (a limit, a cancel)
            async for chunk in chunks:
                held.received += len(chunk)
                held.updated_at_ms = now_ms()
                yield chunk
        held.transferred = True
        transferred()

    def _failure(self, exc: Exception, url: str) -> VidforgeError:
        """The contract error for an import that failed with `exc`."""
        if isinstance(exc, ImportRefused):
            return errors.import_refused(exc.reason)
        if isinstance(exc, ImportUnavailable):
            return errors.import_failed(exc.reason, url)
        if isinstance(exc, AssetTooLarge):
            return errors.asset_too_large(self.config.max_asset_bytes, "url")
        if isinstance(exc, AssetQuotaExceeded):
            return errors.asset_quota_exceeded(exc.used, exc.limit, self.config.asset_retention_s, "url")
        if isinstance(exc, UnsupportedMedia):
            return media_refusal("url", exc)
        if is_disk_full(exc):
            return errors.storage_full(None)
        if is_storage_fault(exc):
            return errors.import_failed("vidforge's media storage did not answer; try again shortly", url)
        return errors.internal_error(
            "vidforge hit an unexpected fault importing this file.",
            "url",
            "Internal error; details are in the server log under this request_id.",
            2000,
        )

    def _imported(self, asset: Asset) -> ImportedAsset:
        facts = asset.facts
        assert facts is not None, "an asset just parsed has its facts"
        video = facts.video  # None: a still image
        return ImportedAsset(
            uri=asset.uri,
            kind="video" if asset.kind == "video" else "image",
            size_bytes=asset.size_bytes,
            filename=asset.filename,
            width=facts.width,
            height=facts.height,
            duration_s=video.duration_s if video else None,
            fps=video.fps if video else None,
            video_codec=video.video_codec if video else None,
            audio_codec=video.audio_codec if video else None,
            expires_at_ms=now_ms() + self.config.asset_retention_s * 1000,
        )

    @staticmethod
    def _url(source: ImportSource) -> str:
        return f"{source.host}/{source.key}" if isinstance(source, BucketSource) else source.url


class ImportDeskApi(Protocol):
    """What a replica asks of the desk: the in-process `ImportDesk` is one, and so is `DeskClient`, the cluster's."""

    async def start(self, principal: str, source: ImportSource) -> DeskJob: ...
    async def get(self, principal: str, task_id: str) -> DeskJob | None: ...
    async def wait(self, principal: str, task_id: str, timeout_s: float | None = None) -> DeskJob | None: ...
    async def cancel(self, principal: str, task_id: str) -> DeskJob | None: ...


_IN_PROCESS: type[ImportDeskApi] = ImportDesk  # mypy checks the desk's signatures against the protocol


class DeskActor(ActorClient):
    """The cluster's import desk actor, as an `ImportDeskApi` (`ActorClient.answer`: DeskAtCapacity arrives as
    itself, the actor out of reach as `ActorUnavailable`)."""

    start = ActorCall(ImportDeskApi.start)
    get = ActorCall(ImportDeskApi.get)
    wait = ActorCall(ImportDeskApi.wait)
    cancel = ActorCall(ImportDeskApi.cancel)


class DeskClient(LazyDesk[DeskActor]):
    """The cluster's import desk, as an `ImportDeskApi`: started with the cluster's first import."""

    def __init__(self, config: Config) -> None:
        super().__init__(config, ImportDesk, IMPORT_DESK_NAME, DeskActor, DESK)

    async def start(self, principal: str, source: ImportSource) -> DeskJob:
        return await self.started().start(principal, source)


_CLUSTER: type[ImportDeskApi] = DeskClient  # and the cluster's client
