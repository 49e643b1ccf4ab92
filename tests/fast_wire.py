"""The fast lane's server: vidforge's `/mcp` served in-process, on an in-memory `RenderService`.

`MemoryRenderService` implements the render-service protocol (mcp_protocol/render_service.py) the way
`serve_app.ingress.ray_render_service.RayRenderService` does, minus Ray: the TaskRegistry is the real class, in this
process, on a temporary SQLite store; assets are a table of known URIs; and nothing renders: a test moves a render
along (approval asked, progress, success, failure) with the calls the render supervisor would make. The wire
in front of it is the production one — the SDK's session manager behind `McpEndpoint`, bearer authentication and
the Origin/Host guard — reached through `httpx.ASGITransport`. The real Ray path keeps its end-to-end tests.

`FastWire` runs that app on an event loop of its own thread, so synchronous tests (and hypothesis) can call it
through an ordinary `httpx.Client`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route

from actors import QuotaExceeded, TaskRegistry
from actors.task_registry import IdempotencyConflict
from mcp_protocol import errors
from mcp_protocol.domain import (
    ApprovalAnswer,
    Artifact,
    Cancelled,
    RenderEnd,
    RenderRequest,
    Succeeded,
    TaskRecord,
)
from mcp_protocol.http import McpEndpoint
from mcp_protocol.progress import RENDERING
from mcp_protocol.server import VidforgeServer
from serve_app.config import Config
from serve_app.ingress.auth import authentication
from serve_app.ingress.http_errors import EXCEPTION_HANDLERS
from serve_app.ingress.origin import OriginGuard, OriginPolicy
from serve_app.ingress.review.links import ReviewLinks
from tests.harness import meta, request_headers

T = TypeVar("T")
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}


class MemoryRenderService:
    """`RenderService` without Ray: the real TaskRegistry in-process, assets as a table, no rendering."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.registry = TaskRegistry(config.registry_settings())
        self.assets: dict[str, tuple[str, str]] = {}  # uri -> (owner, kind)
        self.videos: dict[str, bytes] = {}  # render id -> the finished file's bytes
        self.listening = threading.Event()  # set when a listen stream waits for a change (see `watch`)
        self.review_links = ReviewLinks(config)  # links only when the config has a review key, as in production

    def add_asset(self, uri: str, owner: str, kind: str) -> str:
        self.assets[uri] = (owner, kind)
        return uri

    def _check(self, principal: str, field: str, uri: str, kind: str) -> None:
        owner, found = self.assets.get(uri, (None, None))
        if owner != principal:
            raise errors.source_not_found(field, errors.no_asset_at(uri))
        if found != kind:
            raise errors.unsupported_codec(field, f"the asset is a {found}, not a {kind}")

    async def create_render(self, principal: str, request: RenderRequest) -> TaskRecord:
        try:
            rec = await self.registry.replay(principal, request)
            if rec is None:
                self._check(principal, "source_asset_uri", request.source_asset_uri, "video")
                if request.watermark is not None:
                    self._check(principal, "watermark.image_asset_uri", request.watermark.image_asset_uri, "image")
                rec = (await self.registry.create(principal, request)).task
        except IdempotencyConflict as exc:
            raise errors.idempotency_conflict(exc.task_id) from None
        except QuotaExceeded as exc:
            raise errors.render_quota_exceeded(request, exc.active, exc.limit, exc.retry_after_ms) from None
        return rec

    async def get_render(self, principal: str, render_id: str, *, fresh: bool = False) -> TaskRecord | None:
        return await self.registry.get(principal, render_id)  # in-process: every read is fresh

    async def answer_approval(
        self, principal: str, render_id: str, approved: bool, note: str | None, key: str | None = None
    ) -> ApprovalAnswer:
        return await self.registry.answer_input(principal, render_id, approved, note, key)

    async def cancel_render(self, principal: str, render_id: str) -> TaskRecord | None:
        rec = await self.registry.request_cancel(principal, render_id)
        if rec is not None and not rec.status.terminal:  # the supervisor's cancel: nothing runs here to stop
            await self.registry.finish(render_id, Cancelled(), message="Render cancelled.")
        return rec

    async def watch(
        self, principal: str, render_ids: list[str], versions: dict[str, int], timeout_s: float
    ) -> list[TaskRecord]:
        if versions:  # a listen stream past its first look-up, now waiting for changes
            self.listening.set()
        return await self.registry.watch(principal, render_ids, versions, timeout_s)

    async def read_video(self, principal: str, render_id: str, ext: str) -> tuple[Artifact, bytes]:
        artifact = await self.registry.get_artifact(principal, render_id)
        if artifact is None or artifact.ext != ext:
            raise errors.resource_not_found(render_id, self.config.result_retention_s)
        data = self.videos[render_id]
        if len(data) > self.config.max_inline_resource_bytes:
            url = f"{self.config.public_base_url}/artifacts/{render_id}/final.{ext}"
            raise errors.resource_too_large(render_id, len(data), self.config.max_inline_resource_bytes, url)
        return artifact, data

    def review_url(self, rec: TaskRecord) -> str | None:
        return self.review_links.url(rec)

    async def read_preview(self, principal: str, render_id: str) -> bytes:
        rec = await self.registry.get(principal, render_id)
        if rec is None or rec.request.watermark is None or rec.input_seq == 0:
            raise errors.resource_not_found(render_id, self.config.result_retention_s)
        return b"\x89PNG preview of " + render_id.encode()

    # -- what the render supervisor would do -------------------------------------------------------------------

    async def progress(self, task_id: str, frames_done: int, frames_total: int, fps: float | None = None) -> None:
        await self.registry.set_progress(task_id, frames_done, frames_total, phase=RENDERING, fps=fps, source_fps=30.0)

    async def ask_approval(self, task_id: str) -> TaskRecord | None:
        return await self.registry.request_input(task_id, self.config.approval_timeout_s)

    async def succeed(self, task_id: str, data: bytes = b"\x00" * 64, duration_s: float = 2.0) -> TaskRecord | None:
        rec = await self.registry.get_any(task_id)
        assert rec is not None
        self.videos[task_id] = data
        artifact = Artifact(
            ext=rec.request.output_format,
            size_bytes=len(data),
            duration_s=duration_s,
            finished_at_ms=rec.created_at_ms + 60_000,
        )
        return await self.registry.finish(task_id, Succeeded(artifact=artifact), message="Render complete.")

    async def end(self, task_id: str, end: RenderEnd) -> TaskRecord | None:
        return await self.registry.finish(task_id, end)


def mcp_app(service: MemoryRenderService, config: Config) -> tuple[Starlette, StreamableHTTPSessionManager]:
    """`/mcp` as `serve_app.ingress.app.build_app` mounts it (minus the Ray-held admission caps and the file routes)."""
    server = VidforgeServer(service, config)
    manager = StreamableHTTPSessionManager(app=server.server, json_response=True, stateless=True)
    authenticated = Mount(
        "",
        routes=[Route("/mcp", McpEndpoint(manager, config.max_mcp_body_bytes))],
        middleware=[authentication(config, TOKENS)],
    )
    app = Starlette(
        routes=[authenticated],
        middleware=[Middleware(OriginGuard, policy=OriginPolicy.from_config(config))],
        exception_handlers=EXCEPTION_HANDLERS,
    )
    return app, manager


class _LoopTransport(httpx.BaseTransport):
    """A synchronous httpx transport that runs each exchange on the app's event loop (`ASGITransport` is async)."""

    def __init__(self, wire: FastWire, app: Starlette) -> None:
        self.wire = wire
        self.inner = httpx.ASGITransport(app=app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def exchange() -> httpx.Response:
            response = await self.inner.handle_async_request(request)
            body = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=body, request=request)

        return self.wire.run(exchange())


class FastWire:
    """The in-process server and a raw JSON-RPC client for it (the shape of tests.harness.Wire)."""

    def __init__(self, tmp_path: Path, **settings: Any) -> None:
        self.config = Config(
            data_dir=str(tmp_path / "data"), sweep_interval_s=3600, listen_idle_s=0.5, poll_interval_ms=500, **settings
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.service = MemoryRenderService(self.config)  # its registry binds to the loop on first use
        self._app, manager = mcp_app(self.service, self.config)
        self._lifespan = self.run(self._start(manager))
        self.http = httpx.Client(transport=_LoopTransport(self, self._app), base_url="http://127.0.0.1:8000")
        self._id = 0

    async def _start(self, manager: StreamableHTTPSessionManager) -> tuple[asyncio.Task[None], asyncio.Event]:
        """The app's lifespan (the session manager running) in one task of its own: anyio's scopes end in the task
        they began in."""
        running, stop = asyncio.Event(), asyncio.Event()

        async def lifespan() -> None:
            async with manager.run():
                running.set()
                await stop.wait()

        task = asyncio.ensure_future(lifespan())
        await running.wait()
        return task, stop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the app's loop (the registry, the service) and return its value."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=60)

    def close(self) -> None:
        self.http.close()
        task, stop = self._lifespan
        self._loop.call_soon_threadsafe(stop.set)
        self.run(asyncio.wait_for(task, 30))
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    # -- a client, as tests.harness.Wire ----------------------------------------------------------------------

    def headers(self, method: str, name: str | None = None, token: str | None = "tok-alice") -> dict[str, str]:
        return request_headers(method, name, token)

    def post(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        name: str | None = None,
        *,
        tasks: bool = False,
        elicitation: bool = False,
        token: str | None = "tok-alice",
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        self._id += 1
        params = dict(params or {})
        params.setdefault("_meta", meta(tasks, elicitation))
        body = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": params}
        return self.http.post("/mcp", json=body, headers={**self.headers(method, name, token), **(headers or {})})

    def call(
        self, method: str, params: dict[str, Any] | None = None, name: str | None = None, **options: Any
    ) -> dict[str, Any]:
        """The JSON body, validated against the 2026-07-28 schemas."""
        from tests.harness import validate_response

        body = self.post(method, params, name, **options).json()
        validate_response(method, body)
        return body

    def result(
        self, method: str, params: dict[str, Any] | None = None, name: str | None = None, **options: Any
    ) -> dict[str, Any]:
        body = self.call(method, params, name, **options)
        assert "result" in body, body
        return body["result"]

    def tool(self, name: str, arguments: Any, **options: Any) -> dict[str, Any]:
        return self.result("tools/call", {"name": name, "arguments": arguments}, name, **options)

    def task(self, method: str, task_id: str, **options: Any) -> dict[str, Any]:
        extra = options.pop("params", {})
        return self.call(method, {"taskId": task_id, **extra}, task_id, tasks=True, **options)


@contextmanager
def fast_wire(tmp_path: Path, **settings: Any) -> Iterator[FastWire]:
    wire = FastWire(tmp_path, **settings)
    try:
        yield wire
    finally:
        wire.close()
