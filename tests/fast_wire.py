"""The fast lane's server: vidforge's `/mcp` served in-process, on the production render service.

The service is `serve_app.ingress.ray_render_service.RegistryRenderService`, the logic `RayRenderService` runs in
every replica, over the real parts that need no Ray: the TaskRegistry in this process (through the same
`actors.RegistryApi` the registry actor's client implements) on a temporary SQLite store, and the real `AssetStore`
on a local media store under the test's tmp_path, holding real uploads (a clip and a PNG made here, parsed by the
production upload path). Nothing renders: the render supervisor is the end-to-end tests' part, and a test moves a
render along with the calls the supervisor makes (`progress`, `ask_approval`, `succeed`, `end`, `apply_cancel`:
registry calls, and the files a render writes). The wire in front of it is the production one — the SDK's session
manager behind `McpEndpoint`, bearer authentication and the Origin/Host guard — reached through
`httpx.ASGITransport`, or through `stream` where a test reads a response while it is being sent.

`FastWire` runs that app on an event loop of its own thread, so synchronous tests (and hypothesis) can call it
through an ordinary `httpx.Client`.
"""

from __future__ import annotations

import asyncio
import io
import json
import queue
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import httpx
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from PIL import Image
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route

from actors.driver_writes import CANCELLED_MESSAGE
from actors.task_registry import TaskRegistry
from mcp_protocol.domain import Artifact, Cancelled, RenderEnd, Succeeded, TaskRecord
from mcp_protocol.http import McpEndpoint
from mcp_protocol.progress import RENDERING
from mcp_protocol.quality import QcReport
from mcp_protocol.server import VidforgeServer
from media_store.artifacts import contact_sheet_key, final_key, preview_key
from serve_app._config import Config
from serve_app.importing.desk import ImportDesk
from serve_app.importing.service import DeskImports
from serve_app.ingress._http_errors import EXCEPTION_HANDLERS
from serve_app.ingress._origin import OriginGuard, OriginPolicy
from serve_app.ingress.auth import authentication
from serve_app.ingress.ray_render_service import RegistryRenderService
from serve_app.ingress.review.routes import review_routes
from serve_app.ingress.watch.routes import watch_routes
from serve_app.inspecting.desk import InspectDesk
from serve_app.inspecting.service import DeskInspections
from serve_app.media.assets import AssetStore
from tests.harness import meta, request_headers
from tests.media import make_clip, make_watermark_png

T = TypeVar("T")
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
CLIP_SECONDS = 2.0  # the uploaded source: 2 s of 160x90 at 10 fps (made in milliseconds)


@dataclass(frozen=True)
class Media:
    """A principal's uploads: a source video and a watermark image (`vidforge://assets/...` URIs)."""

    video: str
    image: str


def mcp_app(service: RegistryRenderService, config: Config) -> tuple[Starlette, StreamableHTTPSessionManager]:
    """`/mcp` as `serve_app.ingress.app.build_app` mounts it, and the review and watch pages' routes its links open
    (minus the Ray-held admission caps and the file routes)."""
    # The import desk in this process: an import runs up to its media parse, which needs Ray (the end-to-end tests').
    # The inspection desk too: an inspection's own work is a Ray task (the end-to-end tests'); the checks before it
    # are not.
    imports = DeskImports(config, ImportDesk(config.to_json()))
    inspections = DeskInspections(config, InspectDesk(config.to_json()), service.registry, service.assets)
    server = VidforgeServer(service, config, imports, inspections)
    manager = StreamableHTTPSessionManager(app=server.server, json_response=True, stateless=True)
    authenticated = Mount(
        "",
        routes=[Route("/mcp", McpEndpoint(manager, config.max_mcp_body_bytes))],
        middleware=[authentication(config, TOKENS)],
    )
    app = Starlette(
        routes=[*review_routes(config, service), *watch_routes(config, service), authenticated],
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


class ResponseStream:
    """One POST to the app whose response is read as the app sends it: its server-sent events, one at a time."""

    def __init__(self) -> None:
        self.status: int | None = None
        self._chunks: queue.Queue[bytes | None] = queue.Queue()  # None: the response ended
        self._buffer = b""
        self._ended = False

    def _sent(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self._chunks.put(message.get("body", b""))
            if not message.get("more_body", False):
                self._chunks.put(None)

    def next_event(self, timeout_s: float = 60) -> dict[str, Any] | None:
        """The next event's JSON data as soon as the app has sent it; None once the response has ended."""
        while b"\n\n" not in self._buffer:
            if self._ended:
                return None
            chunk = self._chunks.get(timeout=timeout_s)
            if chunk is None:
                self._ended = True
            else:
                self._buffer += chunk.replace(b"\r\n", b"\n")
        event, self._buffer = self._buffer.split(b"\n\n", 1)
        data = [line[len(b"data:") :].strip() for line in event.split(b"\n") if line.startswith(b"data:")]
        return json.loads(b"\n".join(data)) if data else self.next_event(timeout_s)

    def rest(self, timeout_s: float = 60) -> list[dict[str, Any]]:
        """Every event still to come, once the response has ended."""
        events = []
        while (event := self.next_event(timeout_s)) is not None:
            events.append(event)
        return events


class FastWire:
    """The in-process server and a raw JSON-RPC client for it (the shape of tests.harness.Wire)."""

    def __init__(self, tmp_path: Path, clock: Callable[[], float] = time.time, **settings: Any) -> None:
        """`clock` is the registry's (epoch seconds): a test that moves it on sweeps past a retention at once."""
        # The record mirror is off: a test reads what it just wrote without waiting for the feed to deliver it (the
        # mirror's own tests are tests/test_record_mirror.py).
        self.config = Config(
            data_dir=str(tmp_path / "data"),
            sweep_interval_s=3600,
            listen_idle_s=0.5,
            poll_interval_ms=500,
            record_mirror_size=0,
            **settings,
        )
        self._files = tmp_path / "media"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.registry = TaskRegistry(self.config.registry_settings(), clock)  # binds to the loop on first use
        self.service = RegistryRenderService(self.config, self.registry, AssetStore(self.config))
        self._app, manager = mcp_app(self.service, self.config)
        self._lifespan = self.run(self._start(manager))
        self.http = httpx.Client(transport=_LoopTransport(self, self._app), base_url="http://127.0.0.1:8000")
        self._id = 0

    async def _start(self, manager: StreamableHTTPSessionManager) -> tuple[asyncio.Task[None], asyncio.Event]:
        """The app's lifespan (the session manager and the record mirror running) in one task of its own: anyio's
        scopes end in the task they began in."""
        running, stop = asyncio.Event(), asyncio.Event()

        async def lifespan() -> None:
            async with manager.run(), self.service.records.following():
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
        self.run(_cancel_the_rest())  # the registry's sweep loop
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    # -- uploads, through the production upload parse -----------------------------------------------------------

    def upload_media(self, principal: str = "alice") -> Media:
        """A clip and a PNG made here, stored as the principal's assets (`AssetStore.add_file`: copied, parsed)."""
        self._files.mkdir(parents=True, exist_ok=True)
        clip = make_clip(str(self._files / "clip.mp4"), CLIP_SECONDS, 160, 90, fps=10, audio=False, gop=10)
        logo = make_watermark_png(str(self._files / "logo.png"))
        assets = self.service.assets
        return Media(assets.add_file(clip, principal).uri, assets.add_file(logo, principal).uri)

    @cached_property
    def media(self) -> Media:
        """alice's uploads, made on first use."""
        return self.upload_media("alice")

    # -- what the render supervisor does (serve_app.rendering.supervisor), by hand: nothing renders here --------

    def progress(
        self, task_id: str, frames_done: int, frames_total: int, fps: float | None = None
    ) -> TaskRecord | None:
        report = self.registry.set_progress(
            task_id, frames_done, frames_total, phase=RENDERING, fps=fps, source_fps=30.0
        )
        return self.run(report)

    def ask_approval(self, task_id: str) -> TaskRecord | None:
        """The watermark preview stored, then the approval asked (`RegistryHooks.preview_ready`)."""
        self.service.assets.media.put_bytes(preview_key(task_id), _png())
        return self.run(self.registry.request_input(task_id, self.config.approval_timeout_s))

    def succeed(
        self,
        task_id: str,
        data: bytes = b"\x00" * 64,
        duration_s: float = 2.0,
        qc: QcReport | None = None,
        contact_sheet: bytes | None = None,
        used: tuple[float, float] | None = None,
    ) -> TaskRecord | None:
        """The finished file stored (with `contact_sheet`, its quality check's sheet, as the mux writes it), then
        published with the completion (`RenderSupervisor._complete`), `qc` its quality report, `used` the CPU and
        wall seconds it was metered at."""
        rec = self.run(self.registry.get_any(task_id))
        assert rec is not None
        self.service.assets.media.put_bytes(final_key(task_id, rec.request.output_format), data)
        if contact_sheet is not None:
            self.service.assets.media.put_bytes(contact_sheet_key(task_id), contact_sheet)
        artifact = Artifact(
            ext=rec.request.output_format,
            size_bytes=len(data),
            duration_s=duration_s,
            finished_at_ms=rec.created_at_ms + 60_000,
            qc=qc,
            cpu_s=used[0] if used else None,
            render_s=used[1] if used else None,
        )
        return self.run(self.registry.finish(task_id, Succeeded(artifact=artifact), message="Render complete."))

    def end(self, task_id: str, end: RenderEnd) -> TaskRecord | None:
        return self.run(self.registry.finish(task_id, end))

    def apply_cancel(self, task_id: str) -> TaskRecord | None:
        """The supervisor's `cancel`: a requested cancel ends the task, also when no driver holds it."""
        return self.run(self.registry.finish(task_id, Cancelled(), message=CANCELLED_MESSAGE))

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

    @contextmanager
    def stream(self, body: dict[str, Any], headers: dict[str, str]) -> Iterator[ResponseStream]:
        """POST `body` to `/mcp` and read the response as it is sent (an SSE stream: `subscriptions/listen`)."""
        response = ResponseStream()
        content = json.dumps(body).encode()
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "query_string": b"",
            "root_path": "",
            "headers": [(name.lower().encode(), value.encode()) for name, value in headers.items()],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        done = asyncio.Event()
        requests = [{"type": "http.request", "body": content, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if requests:
                return requests.pop()
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            response._sent(message)

        async def exchange() -> None:
            try:
                await self._app(scope, receive, send)
            finally:
                done.set()

        running = asyncio.run_coroutine_threadsafe(exchange(), self._loop)
        try:
            yield response
            running.result(timeout=60)
        finally:
            running.cancel()

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


async def _cancel_the_rest() -> None:
    """Cancel every other task on the running loop, and wait for them to end."""
    rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


def _png() -> bytes:
    """A small real PNG: what a render stores as its watermark preview."""
    out = io.BytesIO()
    Image.new("RGB", (160, 90), (20, 40, 60)).save(out, format="PNG")
    return out.getvalue()


@contextmanager
def fast_wire(tmp_path: Path, **settings: Any) -> Iterator[FastWire]:
    wire = FastWire(tmp_path, **settings)
    try:
        yield wire
    finally:
        wire.close()
