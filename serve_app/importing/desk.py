"""The import desk: one actor for the cluster that runs every import and keeps it as a task until its TTL.

Detached and named, like the render supervisor, so an import outlives the replica that accepted it and any replica
answers `tasks/get` for it; the one place that sees all imports, so the per-principal cap (VIDFORGE_MAX_IMPORTS) holds
however many replicas there are. Its table is in memory: an import takes minutes at most, and a restarted desk
(its process lost) forgets the imports it held, whose tasks then answer "not found" (ext-tasks allows that of a
task that is gone) and whose half-written files the start-up cleanup removes (media_store.hygiene).

An import: the bytes from the source (serve_app.importing.web_fetch, or the server's bucket) go into the asset store
exactly as an upload's do (AssetStore.add_stream: the size limit and the quota counted as they arrive, the isolated
parse, every media limit), within VIDFORGE_IMPORT_TIMEOUT_S for the transfer; the parse that follows has its own
bound. Whatever ends it — success, a refusal, a failure, a cancel — nothing of a failed import is kept, and its task
ends `completed` with the call's result (an error envelope being one) or `cancelled`.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Protocol

import ray

from actors.actor_calls import ActorCall, ActorClient
from actors.handle import singleton_actor_options
from mcp_protocol import errors
from mcp_protocol.domain import TaskStatus
from mcp_protocol.envelope import VidforgeError, tool_error_result
from mcp_protocol.imports import IMPORT_TASK_PREFIX, ImportedAsset, ImportJob, imported_result
from mcp_protocol.json_types import JSONObject
from mcp_protocol.timefmt import now_ms
from media_store.opening import is_storage_fault
from render_kernels.errors import UnsupportedMedia
from serve_app.config import Config
from serve_app.importing.failures import ImportRefused, ImportUnavailable
from serve_app.importing.sources import BucketSource, ImportSource, bucket_chunks
from serve_app.importing.web_fetch import FetchLimits, WebFetch
from serve_app.media.assets import Asset, AssetQuotaExceeded, AssetStore, AssetTooLarge
from serve_app.media.disk_full import is_disk_full
from serve_app.media.media_limits import media_refusal
from serve_app.outbound.address_guard import AddressGuard

IMPORT_DESK_NAME = "vidforge-import-desk"
DESK = "import desk"  # the actor, as its errors name it
MIB = 1024 * 1024


class ImportsAtCapacity(Exception):
    """The principal already has `limit` imports in progress (VIDFORGE_MAX_IMPORTS)."""

    def __init__(self, active: int, limit: int) -> None:
        super().__init__(active, limit)  # in `args`, so it survives Ray's pickling
        self.active = active
        self.limit = limit


def new_import_id() -> str:
    """Opaque and unguessable, as a render's task id: 130 random bits."""
    return IMPORT_TASK_PREFIX + base64.b32encode(secrets.token_bytes(17)).decode().lower()[:26]


@dataclass
class _Import:
    """One import while the desk holds it; `job` is what the wire sees of it."""

    task_id: str
    principal: str
    source: ImportSource
    created_at_ms: int
    updated_at_ms: int
    status: TaskStatus = TaskStatus.WORKING
    received: int = 0
    transferred: bool = False
    result: JSONObject | None = None  # the call's result, once completed
    ended: asyncio.Event = field(default_factory=asyncio.Event)

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


class ImportDesk:
    def __init__(self, config_json: str) -> None:
        self.config = config = Config.from_json(config_json)
        self.assets = AssetStore(config)
        self.web = WebFetch(
            AddressGuard.of(config.import_allow_hosts),
            FetchLimits(config.max_asset_bytes, config.import_max_redirects),
        )
        self.imports: dict[str, _Import] = {}
        self.runs: dict[str, asyncio.Task[None]] = {}

    # -- what the replicas call (serve_app.importing.service) ---------------------------------------------------

    async def start(self, principal: str, source: ImportSource) -> ImportJob:
        """Take the import on and start it; its job is held before this returns."""
        self._forget_expired()
        active = sum(1 for held in self.imports.values() if held.principal == principal and not held.status.terminal)
        if active >= self.config.max_imports:
            raise ImportsAtCapacity(active, self.config.max_imports)
        now = now_ms()
        held = _Import(new_import_id(), principal, source, now, now)
        self.imports[held.task_id] = held
        run = asyncio.get_running_loop().create_task(self._run(held))
        run.add_done_callback(lambda _: self._settle(held))
        self.runs[held.task_id] = run
        return self._job(held)

    async def get(self, principal: str, task_id: str) -> ImportJob | None:
        self._forget_expired()
        held = self._owned(principal, task_id)
        return self._job(held) if held is not None else None

    async def wait(self, principal: str, task_id: str) -> ImportJob | None:
        held = self._owned(principal, task_id)
        if held is None:
            return None
        await held.ended.wait()
        return self._job(held)

    async def cancel(self, principal: str, task_id: str) -> ImportJob | None:
        held = self._owned(principal, task_id)
        if held is None:
            return None
        if (run := self.runs.get(task_id)) is not None:
            run.cancel()
        return self._job(held)

    # -- the import ----------------------------------------------------------------------------------------------

    async def _run(self, held: _Import) -> None:
        self._end(held, TaskStatus.COMPLETED, await self._result(held))

    def _settle(self, held: _Import) -> None:
        """Its run is over: an import that did not complete was cancelled (maybe before its first step)."""
        self.runs.pop(held.task_id, None)
        if not held.status.terminal:
            self._end(held, TaskStatus.CANCELLED, None)

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

    # -- the table -----------------------------------------------------------------------------------------------

    def _end(self, held: _Import, status: TaskStatus, result: JSONObject | None) -> None:
        held.status, held.result, held.updated_at_ms = status, result, now_ms()
        held.ended.set()

    def _job(self, held: _Import) -> ImportJob:
        return ImportJob(
            task_id=held.task_id,
            principal=held.principal,
            status=held.status,
            status_message=held.message(),
            created_at_ms=held.created_at_ms,
            last_updated_at_ms=held.updated_at_ms,
            ttl_ms=self.config.task_ttl_ms,
            poll_interval_ms=self.config.poll_interval_ms,
            result=held.result,
        )

    def _owned(self, principal: str, task_id: str) -> _Import | None:
        held = self.imports.get(task_id)
        return held if held is not None and held.principal == principal else None

    def _forget_expired(self) -> None:
        """Ended imports past the task TTL go: `tasks/get` answers them as unknown, as ext-tasks allows."""
        cutoff = now_ms() - self.config.task_ttl_ms
        for task_id in [k for k, held in self.imports.items() if held.status.terminal and held.created_at_ms < cutoff]:
            del self.imports[task_id]


class ImportDeskApi(Protocol):
    """What a replica asks of the desk: the in-process `ImportDesk` is one, and so is `DeskClient`, the cluster's."""

    async def start(self, principal: str, source: ImportSource) -> ImportJob: ...
    async def get(self, principal: str, task_id: str) -> ImportJob | None: ...
    async def wait(self, principal: str, task_id: str) -> ImportJob | None: ...
    async def cancel(self, principal: str, task_id: str) -> ImportJob | None: ...


_IN_PROCESS: type[ImportDeskApi] = ImportDesk  # mypy checks the desk's signatures against the protocol


class DeskActor(ActorClient):
    """The cluster's import desk actor, as an `ImportDeskApi` (`ActorClient.answer`: ImportsAtCapacity arrives as
    itself, the actor out of reach as `ActorUnavailable`)."""

    start = ActorCall(ImportDeskApi.start)
    get = ActorCall(ImportDeskApi.get)
    wait = ActorCall(ImportDeskApi.wait)
    cancel = ActorCall(ImportDeskApi.cancel)


class DeskClient:
    """The cluster's import desk, as an `ImportDeskApi`, through its actor's client (`DeskActor`).

    The desk starts with the cluster's first import, not with the server: a server that imports nothing runs no
    process for it (every Python process of Ray's wakes 100 times a second, ~0.006 CPU-s per second at rest, CPU
    that renders then do not get). Once started it stays, found by name. Until then nothing is held, so a question
    about an import answers None without starting it."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._desk: DeskActor | None = None

    async def start(self, principal: str, source: ImportSource) -> ImportJob:
        if self._desk is None:  # created, or found when another replica has created it
            options = singleton_actor_options(IMPORT_DESK_NAME, self._config.namespace)
            self._desk = DeskActor(ray.remote(ImportDesk).options(**options).remote(self._config.to_json()), DESK)
        return await self._desk.start(principal, source)

    async def get(self, principal: str, task_id: str) -> ImportJob | None:
        desk = self._found()
        return None if desk is None else await desk.get(principal, task_id)

    async def wait(self, principal: str, task_id: str) -> ImportJob | None:
        desk = self._found()
        return None if desk is None else await desk.wait(principal, task_id)

    async def cancel(self, principal: str, task_id: str) -> ImportJob | None:
        desk = self._found()
        return None if desk is None else await desk.cancel(principal, task_id)

    def _found(self) -> DeskActor | None:
        """The desk's client once it runs (has been started by any replica); None before."""
        if self._desk is None:
            try:
                self._desk = DeskActor(ray.get_actor(IMPORT_DESK_NAME, namespace=self._config.namespace), DESK)
            except ValueError:  # no actor of that name: no import has been started
                return None
        return self._desk


_CLUSTER: type[ImportDeskApi] = DeskClient  # and the cluster's client
