"""Test harness: a real `vidforge serve` subprocess (real Ray + Serve on loopback) and a raw wire client.

Every JSON body a test receives through `Wire` is validated against the official schemas in
`../shared/schemas/` before the test looks at it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from jsonschema import Draft202012Validator

from mcp_protocol.app_view import UI_EXTENSION, VIEW_MIME

REPO = Path(__file__).resolve().parents[1]
SCHEMAS = REPO.parent / "shared" / "schemas"
PROTOCOL = "2026-07-28"
TASKS_EXT = "io.modelcontextprotocol/tasks"
START_TIMEOUT_S = 240
KILL_TIMEOUT_S = 60  # a SIGKILLed server's processes are gone in well under a second; generous on a loaded machine
# How long a starting Ray node waits for its raylet to register with the GCS before it gives up with "The current node
# timed out during startup" (Ray's `raylet_start_wait_time_s`, read from the environment of `ray start` or of the
# process whose `ray.init` starts a local Ray; 30 s by default). On the loaded 2-core machine a node starting beside
# another test file's work has taken longer than that; the harness itself waits minutes for a start.
RAY_START_ENV = {"RAY_raylet_start_wait_time_s": "120"}
RENDER_DEADLINE_S = 300
TERMINAL = ("completed", "failed", "cancelled")
# The settings of the session's shared servers (tests/conftest.py).
SHARED_ENV = {"VIDFORGE_POLL_INTERVAL_MS": "500", "VIDFORGE_MAX_INLINE_RESOURCE_BYTES": str(4 * 1024 * 1024)}
SHARED_ALLOWED_ORIGIN = "https://app.example"  # the operator-listed origin of the shared tokens server
# A completed render's structuredContent (contract §3.4), in its order.
COMPLETED_FIELDS = (
    "status",
    "video_uri",
    "duration_seconds",
    "size_bytes",
    "resolution",
    "watermark_applied",
    "expires_at",
)
# The catalog every client of either era must see, in tools/list order.
TOOL_NAMES = [
    "vidforge_render_video",
    "vidforge_get_render_status",
    "vidforge_approve_watermark",
    "vidforge_cancel_render",
    "vidforge_get_capabilities",
    "vidforge_import_asset",
    "vidforge_inspect_video",
]

_CORE = json.loads((SCHEMAS / "mcp-2026-07-28.schema.json").read_text())
_TASKS = json.loads((SCHEMAS / "ext-tasks-2026-07-28.schema.json").read_text())
_validators: dict[str, Draft202012Validator] = {}

# Which `$defs` entry a successful result of each method must satisfy.
RESULT_DEFS = {
    "server/discover": ("core", "DiscoverResult"),
    "tools/list": ("core", "ListToolsResult"),
    "resources/list": ("core", "ListResourcesResult"),
    "resources/templates/list": ("core", "ListResourceTemplatesResult"),
    "resources/read": ("core", "ReadResourceResult"),
    "tasks/get": ("tasks", "GetTaskResult"),
    "tasks/update": ("tasks", "UpdateTaskResult"),
    "tasks/cancel": ("tasks", "CancelTaskResult"),
}


def validate(instance: Any, schema: str, name: str) -> None:
    """Validate against one `$defs` entry of the core or ext-tasks schema; raises on mismatch."""
    key = f"{schema}:{name}"
    if key not in _validators:
        doc = _CORE if schema == "core" else _TASKS
        _validators[key] = Draft202012Validator({"$ref": f"#/$defs/{name}", "$defs": doc["$defs"]})
    _validators[key].validate(instance)


def validate_response(method: str, body: dict[str, Any]) -> None:
    """Every response body: a JSON-RPC error, or the method's result shape."""
    if "error" in body:
        validate(body, "core", "JSONRPCErrorResponse")
        return
    validate(body, "core", "JSONRPCResultResponse")
    result = body["result"]
    assert "resultType" in result, body
    if method == "tools/call":
        if result["resultType"] == "task":
            validate(result, "tasks", "CreateTaskResult")
        else:
            validate(result, "core", "CallToolResult")
    elif method in RESULT_DEFS:
        validate(result, *RESULT_DEFS[method])


_given_ports: set[int] = set()
# Ports for the tests' servers: between Ray's worker ports (10002-19999 by default) and the kernel's ephemeral range
# (from 32768), which Ray's own servers bind from (port 0). A port picked from the ephemeral range could be taken by
# one of them, this test's or the other xdist worker's, before the server that was given it bound it.
HARNESS_PORTS = range(20000, 32768)


def free_port() -> int:
    """A port free now from HARNESS_PORTS, of this xdist worker's share (every n-th port: two workers never pick
    the same), and never one this process handed out before (the callers that ask for several at once, a
    `ray start`'s six servers, need them distinct)."""
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    for port in HARNESS_PORTS[worker::workers]:
        if port in _given_ports:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:  # in use
                continue
        _given_ports.add(port)
        return port
    raise RuntimeError(f"no free port left in {HARNESS_PORTS} for this test worker")


def wait_until(predicate, timeout: float, interval: float = 0.25, message: str = "condition"):
    """Poll `predicate` until it returns a truthy value (returned) or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def session_processes(sid: int) -> list[tuple[int, str]]:
    """(pid, command line) of every process in session `sid`, whatever its process group. (Linux hands out no PID
    that is still some process's session id, so these are that session's processes and no others.)"""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.getsid(int(entry.name)) == sid:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                found.append((int(entry.name), cmdline.decode(errors="replace")))
        except OSError:
            continue  # gone meanwhile
    return found


def _zombie(pid: int) -> bool:
    """Dead and waiting to be reaped (its parent's business), or gone already."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def processes_with_env(entry: bytes) -> list[int]:
    """PIDs of the live processes whose environment holds `entry` (`NAME=value`), exactly."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if entry in environ.split(b"\0") and not _zombie(int(proc.name)):
            found.append(int(proc.name))
    return found


def run_vidforge(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`vidforge ARGS` run to its end (the CLI's module, from this checkout), `env` over this process's own."""
    return subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def head_env(s3_server: Any, state_url: str, review_key: str) -> dict[str, str]:
    """The settings of a head that can be lost: media in `s3_server`'s bucket (tests/s3_server.py), the registry's
    state at `state_url` (PostgreSQL) and the review-link key from the environment, so nothing it keeps is on its
    disk. Downloads go through the server (no redirect to the bucket): what a head serves is what is checked."""
    return {
        **s3_server.env,
        "VIDFORGE_STORAGE_URL": f"s3://{s3_server.bucket}/vf",
        "VIDFORGE_STATE_URL": state_url,
        "VIDFORGE_REVIEW_KEY": review_key,
        "VIDFORGE_DIRECT_TRANSFERS": "off",
        "VIDFORGE_POLL_INTERVAL_MS": "500",
    }


class LoopbackSite:
    """An HTTP server of a test's own on a loopback port, in a thread: pages on an origin other than vidforge's,
    answered by `handler` (a `BaseHTTPRequestHandler` class, or a partial of one)."""

    def __init__(self, handler: Any) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.origin = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class ServerProcess:
    """`vidforge serve` as a subprocess with its own data dir, tokens and environment.

    A server starts without the warm pool (VIDFORGE_WARM_POOL=false) unless `warm_pool=True`: the pool's first round
    is in the start path and its workers live as long as the server, ~10 CPU-s and ~5 s more per start on the 2-core
    machine, of which a module's few renders win back ~3. `shared_server` keeps the production default (on), so most
    end-to-end renders run on warm workers; tests/test_warm_pool.py checks the pool itself, and the benchmarks
    measure with it. The rest render on workers Ray starts on demand, as a server with the pool off does."""

    def __init__(
        self,
        data_dir: Path,
        env: dict[str, str] | None = None,
        tokens: dict[str, str] | None = None,
        warm_pool: bool = False,
    ):
        self.data_dir = data_dir
        self.port = free_port()
        self.env = dict(os.environ)
        self.env.update({"VIDFORGE_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1", **RAY_START_ENV})
        if not warm_pool:
            self.env["VIDFORGE_WARM_POOL"] = "false"
        self.env.pop("RAY_ADDRESS", None)
        if tokens is not None:
            tokens_file = data_dir.parent / f"{data_dir.name}-tokens.json"
            tokens_file.write_text(json.dumps(tokens))
            self.env["VIDFORGE_TOKENS_FILE"] = str(tokens_file)
        self.env.update(env or {})
        self.proc: subprocess.Popen | None = None
        self.prefix: list[str] = []  # a command the server runs under (e.g. `unshare ...`); its last word execs
        self.log_path = data_dir.parent / f"{data_dir.name}-serve.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait: bool = True) -> ServerProcess:
        """Launch `vidforge serve` and wait until it serves; with `wait=False`, return once it is launched (a server
        that waits for something before it serves: a second head waiting to own the state), and `wait_up` later."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "serve_app.launch.cli", "serve", "--port", str(self.port)],
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self.wait_up() if wait else self

    def wait_up(self, timeout: float = START_TIMEOUT_S) -> ServerProcess:
        """Wait until the launched server has printed its endpoint and answers `/healthz`."""
        assert self.proc is not None, "launched"

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"vidforge serve exited early:\n{self.log_path.read_text()[-4000:]}")
            if "vidforge MCP endpoint" not in self.log_path.read_text(errors="replace"):
                return False
            try:
                return httpx.get(f"{self.base}/healthz", timeout=5, headers=self.auth_headers()).status_code in (
                    200,
                    401,
                )
            except httpx.HTTPError:
                return False

        # Ten looks a second (a log read, then a loopback request): a run waits for some fifty starts, each then sooner.
        wait_until(ready, timeout, interval=0.1, message="vidforge serve to come up")
        return self

    def auth_headers(self) -> dict[str, str]:
        return {}

    def processes(self) -> list[tuple[int, str]]:
        """(pid, command line) of every process of this server: it runs in a session of its own, and Ray titles
        its workers `ray::<actor class or task>`."""
        assert self.proc is not None, "started"
        return session_processes(self.proc.pid)

    def stop(self) -> int | None:
        """The graceful stop: SIGTERM and wait (Serve, then Ray, shut down in turn: ~8 s); returns the exit status
        (None when it had to be killed). For the tests that check how a server stops, or whose scenario is a stop
        and a start; a fixture's server that no test stops ends with `kill()`."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
            return None

    def kill(self) -> None:
        """The hard stop: SIGKILL every process of this server's session (`vidforge serve`, the Ray it started and
        every worker of it), until none is left, then check that no process of it lives on outside the session.

        For servers nobody looks at after their tests (fixtures, a test's own server once its checks are done):
        it takes well under a second where `stop()` takes ~8 s. Not for a server joined to a cluster it did not
        start (RAY_ADDRESS): its Serve application lives on that cluster's nodes, so only `stop()` takes it down."""
        if self.proc is None:
            return
        sid = self.proc.pid

        def session_gone() -> bool:
            alive = [pid for pid, _ in session_processes(sid) if not _zombie(pid)]
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue  # gone meanwhile
            self.proc.poll()  # reap `vidforge serve` itself (the session leader is our child)
            return not alive and self.proc.returncode is not None

        wait_until(session_gone, KILL_TIMEOUT_S, interval=0.05, message="every process of the server to be gone")
        # Every process a server starts (Ray's raylet, GCS, agents, workers) inherits its environment: none of
        # them may have left the session and survived.
        marker = f"VIDFORGE_DATA_DIR={self.env['VIDFORGE_DATA_DIR']}".encode()
        deadline = time.monotonic() + KILL_TIMEOUT_S
        while survivors := processes_with_env(marker):
            assert time.monotonic() < deadline, f"processes of the server outside its session: {survivors}"
            time.sleep(0.1)

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        """A `with` block (the form fixtures use) ends in `kill()`; tests that check the graceful stop call
        `stop()` themselves."""
        self.kill()


def meta(tasks: bool = False, elicitation: bool = False, ui: bool = False) -> dict[str, Any]:
    """A 2026-07-28 request's `_meta`, declaring the tasks extension, form elicitation and the MCP Apps extension
    (with the render view's MIME type) as asked."""
    caps: dict[str, Any] = {}
    extensions: dict[str, Any] = {}
    if tasks:
        extensions[TASKS_EXT] = {}
    if ui:
        extensions[UI_EXTENSION] = {"mimeTypes": [VIEW_MIME]}
    if extensions:
        caps["extensions"] = extensions
    if elicitation:
        caps["elicitation"] = {"form": {}}
    return {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "vidforge-tests", "version": "1.0"},
    }


def request_headers(method: str, name: str | None = None, token: str | None = None) -> dict[str, str]:
    """The headers of a well-formed 2026-07-28 request: routing headers, and the bearer token when given."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


class Wire:
    """Raw JSON-RPC over httpx with correct routing headers; every response body is schema-validated."""

    def __init__(
        self, url: str, token: str | None = None, tasks: bool = False, elicitation: bool = False, ui: bool = False
    ):
        self.url = url
        self.token = token
        self.tasks = tasks
        self.elicitation = elicitation
        self.ui = ui
        self.client = httpx.Client(timeout=120)
        self._id = 0

    def headers(self, method: str, name: str | None = None) -> dict[str, str]:
        return request_headers(method, name, self.token)

    def request(self, method: str, params: dict[str, Any] | None = None, name: str | None = None) -> httpx.Response:
        self._id += 1
        params = dict(params or {})
        params.setdefault("_meta", meta(self.tasks, self.elicitation, self.ui))
        body = {"jsonrpc": "2.0", "id": self._id, "method": method, "params": params}
        return self.client.post(self.url, json=body, headers=self.headers(method, name))

    def call(self, method: str, params: dict[str, Any] | None = None, name: str | None = None) -> dict[str, Any]:
        """Send and return the validated JSON body (result or error)."""
        response = self.request(method, params, name)
        body = response.json()
        validate_response(method, body)
        return body

    def result(self, method: str, params: dict[str, Any] | None = None, name: str | None = None) -> dict[str, Any]:
        body = self.call(method, params, name)
        assert "result" in body, body
        return body["result"]

    def tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.result("tools/call", {"name": name, "arguments": arguments}, name=name)

    def task(self, method: str, task_id: str, **params: Any) -> dict[str, Any]:
        return self.call(method, {"taskId": task_id, **params}, name=task_id)

    def close(self) -> None:
        self.client.close()


def listen_messages(server: ServerProcess, wire: Wire, task_id: str, request_id: str) -> Iterator[dict[str, Any]]:
    """The messages of a `subscriptions/listen` stream for one task, as they arrive, up to its final result."""
    caps = {"extensions": {TASKS_EXT: {}}}
    params = {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": caps,
        },
        "notifications": {"taskIds": [task_id]},
    }
    body = {"jsonrpc": "2.0", "id": request_id, "method": "subscriptions/listen", "params": params}
    with httpx.Client(timeout=RENDER_DEADLINE_S) as http:
        with http.stream("POST", server.url, json=body, headers=wire.headers("subscriptions/listen")) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    message = json.loads(line[len("data: ") :])
                    yield message
                    if "result" in message or "error" in message:
                        return


def upload(server, path: str, token: str | None = None) -> str:
    """`POST /assets`; returns the asset URI."""
    with open(path, "rb") as fh:
        response = httpx.post(
            f"{server.base}/assets",
            params={"filename": os.path.basename(path)},
            content=fh.read(),
            headers={"Authorization": f"Bearer {token}"} if token else {},
            timeout=120,
        )
    assert response.status_code == 201, response.text
    return response.json()["uri"]


def poll_task(wire: Wire, task_id: str, until, timeout=RENDER_DEADLINE_S) -> dict:
    def check():
        body = wire.task("tasks/get", task_id)
        assert "result" in body, body
        return body["result"] if until(body["result"]) else None

    return wait_until(check, timeout, interval=0.3, message=f"task {task_id}")


def poll_status(wire: Wire, render_id: str, until, timeout=RENDER_DEADLINE_S) -> dict:
    def check():
        status = wire.tool("vidforge_get_render_status", {"render_id": render_id})["structuredContent"]
        return status if until(status) else None

    return wait_until(check, timeout, interval=0.3, message=f"render {render_id}")


SHEET_MAX_WIDTH = 1280  # a contact sheet's bounds, as docs/protocol.md states them
SHEET_MAX_BYTES = 150_000


def contact_sheet_of(images: list[dict[str, Any]]) -> Any:
    """The one contact sheet among a result's `image` blocks (as a client got them: mimeType and base64 data),
    decoded: a JPEG within the stated bounds. Returns the PIL image."""
    import base64
    import io

    from PIL import Image

    (block,) = images
    assert block["mimeType"] == "image/jpeg"
    data = base64.b64decode(block["data"])
    assert len(data) <= SHEET_MAX_BYTES
    sheet = Image.open(io.BytesIO(data))
    sheet.load()
    assert sheet.format == "JPEG" and 0 < sheet.width <= SHEET_MAX_WIDTH
    return sheet
