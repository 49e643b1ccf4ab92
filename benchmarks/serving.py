"""A real `vidforge serve` for the benchmarks, the MCP calls they make on it, and what they measure about its
processes. Shared by render_throughput.py (--mcp), batch_throughput.py and control_plane.py.

The server runs as an operator runs it (`python -m serve_app.launch.cli serve`, starting its own Ray), with a
tokens file of `principals` principals. Renders are driven over the wire like an agent does: `tools/call`
with the tasks extension, a `subscriptions/listen` stream per render (so completion is seen when it happens,
not at the next poll), the watermark approved with `vidforge_approve_watermark` the moment the task asks.
Stage timings come from the supervisor itself (`RenderSupervisor.render_timings`, over a Ray connection to
the server's cluster), and per-process memory and CPU from /proc (every process of the server's session).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx

# The server's `ray.init` starts its cluster with token authentication (~/.ray/auth_token); a driver joining
# it must be in token mode from its first `import ray`, so benchmarks import this module before any other.
os.environ.setdefault("RAY_AUTH_MODE", "token")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from harness import PROTOCOL, TERMINAL, ServerProcess, Wire, upload  # noqa: E402 - the suite's server harness

from media_store.artifacts import final_key  # noqa: E402

FRAME = re.compile(r"frame (\d+)/(\d+)")
DEADLINE_S = 3600.0
TASKS_CAPS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


class BenchServer:
    """`vidforge serve` in a subprocess with its own data dir and `principals` bearer tokens; a context manager.

    The data dir starts empty: an interrupted run's unfinished renders would otherwise count against the quotas."""

    def __init__(self, workdir: str, principals: int = 1, env: dict[str, str] | None = None) -> None:
        self.tokens = {f"bench-token-{i}": f"principal-{i}" for i in range(principals)}
        data_dir = Path(workdir) / "server-data"
        shutil.rmtree(data_dir, ignore_errors=True)
        os.makedirs(workdir, exist_ok=True)
        self.proc = ServerProcess(data_dir, env=env, tokens=self.tokens, warm_pool=True)

    def __enter__(self) -> BenchServer:
        # `timeout` and `kill` send SIGTERM, which would end this process without `__exit__`, leaving the server
        # running: make it an exit that unwinds like Ctrl-C does.
        self._sigterm = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        started = time.perf_counter()
        self.proc.start()
        self.startup_s = time.perf_counter() - started
        return self

    def __exit__(self, *_) -> None:
        self.proc.stop()
        signal.signal(signal.SIGTERM, self._sigterm)

    @property
    def url(self) -> str:
        return self.proc.url

    @property
    def pid(self) -> int:
        return self.proc.proc.pid

    @property
    def ray_address(self) -> str:
        log = self.proc.log_path.read_text(errors="replace")
        return re.findall(r"vidforge: Ray cluster at (\S+)", log)[-1]

    def token(self, index: int) -> str:
        return list(self.tokens)[index % len(self.tokens)]

    def upload(self, path: str, index: int = 0) -> str:
        return upload(self.proc, path, self.token(index))

    def artifact(self, task_id: str, ext: str = "mp4") -> str:
        return str(self.proc.data_dir.resolve() / final_key(task_id, ext))  # the local store: under the data dir


def supervisor_timings(server: BenchServer, task_ids: list[str]) -> dict[str, object]:
    """Each task's RenderTimings from the server's supervisor (a second Ray driver on its cluster)."""
    import ray

    from actors.handle import SUPERVISOR_NAME

    ray.init(address=server.ray_address, namespace="vidforge", log_to_driver=False)
    try:
        supervisor = ray.get_actor(SUPERVISOR_NAME, namespace="vidforge")
        return dict(zip(task_ids, ray.get([supervisor.render_timings.remote(t) for t in task_ids])))
    finally:
        ray.shutdown()


@dataclass
class RenderTrace:
    """One render as its client saw it (time.time() seconds; the server's clock is the same machine's, and
    its lastUpdatedAt has whole seconds only, so the client's own clock is what is measured)."""

    principal: int
    watermark: bool
    sent: float = 0.0  # tools/call sent
    created: float = 0.0  # CreateTaskResult received
    first_frame: float | None = None  # the first notification with frames encoded
    asked: float | None = None  # input_required seen
    approved: float | None = None  # approval answered
    seen_done: float | None = None  # the completed notification received
    task_id: str = ""
    task: dict = field(default_factory=dict)  # the final tasks/get result

    @property
    def ok(self) -> bool:
        return self.task.get("status") == "completed" and not self.task["result"].get("isError")

    @property
    def queue_s(self) -> float:
        """From create to the first frame encoded: probe, plan and the wait for a CPU."""
        return (self.first_frame or self.seen_done) - self.sent

    @property
    def run_s(self) -> float:
        """From the first frame encoded to completed (the mux included)."""
        return self.seen_done - (self.first_frame or self.seen_done)


def render_args(source_uri: str, watermark_uri: str | None, resolution: str = "720p") -> dict:
    args = {"source_asset_uri": source_uri, "output_format": "mp4", "resolution": resolution}
    if watermark_uri:
        args["watermark"] = {"image_asset_uri": watermark_uri, "position": "bottom_right", "opacity": 0.6}
    return args


def drive_render(server: BenchServer, trace: RenderTrace, args: dict) -> RenderTrace:
    """Create the render, follow it on a listen stream, approve its watermark at once, and record the times."""
    token = server.token(trace.principal)
    wire = Wire(server.url, token, tasks=True)
    try:
        trace.sent = time.time()
        created = wire.tool("vidforge_render_video", args)
        trace.created = time.time()
        trace.task_id = created["taskId"]
        deadline = time.monotonic() + DEADLINE_S
        while trace.seen_done is None:  # a stream ends after its idle bound; listen again until the end
            if time.monotonic() > deadline:
                raise TimeoutError(f"render {trace.task_id} did not finish")
            _listen(server, wire, trace)
        answer = wire.task("tasks/get", trace.task_id)
        # An error answer (the envelope in `data`) is kept as what the client saw: the render counts as failed.
        trace.task = answer.get("result") or {"status": "error", "statusMessage": str(answer.get("error"))[:300]}
        return trace
    finally:
        wire.close()


def _listen(server: BenchServer, wire: Wire, trace: RenderTrace) -> None:
    params = {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": TASKS_CAPS,
        },
        "notifications": {"taskIds": [trace.task_id]},
    }
    body = {"jsonrpc": "2.0", "id": f"listen-{trace.task_id}", "method": "subscriptions/listen", "params": params}
    with httpx.Client(timeout=DEADLINE_S) as http:
        with http.stream("POST", server.url, json=body, headers=wire.headers("subscriptions/listen")) as response:
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                message = json.loads(line[len("data: ") :])
                if "result" in message or "error" in message:
                    return
                if message.get("method") == "notifications/subscriptions/acknowledged":
                    # A stream tells of changes from now on, and polling is authoritative: catch up once, or a
                    # render that asked for its approval before the stream opened would wait for it forever.
                    _seen(wire, trace, wire.task("tasks/get", trace.task_id)["result"])
                elif message.get("method") == "notifications/tasks":
                    _seen(wire, trace, message["params"])
                if trace.seen_done is not None:
                    return


def _seen(wire: Wire, trace: RenderTrace, task: dict) -> None:
    now = time.time()
    status, text = task["status"], task.get("statusMessage") or ""
    frame = FRAME.search(text)
    if trace.first_frame is None and frame and int(frame[1]) > 0:
        trace.first_frame = now
    if status == "input_required" and trace.approved is None:
        trace.asked = now
        answer = wire.tool("vidforge_approve_watermark", {"render_id": trace.task_id, "approved": True})
        assert answer["isError"] is False, answer
        trace.approved = time.time()
    if status in TERMINAL:
        trace.seen_done = now


# --- processes -----------------------------------------------------------------------------------------

# What a process of the server's session is, from its title (Ray sets `ray::<task or actor>` as it runs).
KINDS = (
    ("ServeReplica", "ingress (Serve replica)"),
    ("ProxyActor", "Serve HTTP proxy"),
    ("RenderSupervisor", "supervisor"),
    ("encode_segment_parts", "segment worker"),
    ("mux_stored_segments", "mux"),
    ("encode_audio_parts", "audio worker"),
    ("render_pictures", "preview"),
    ("serve_app.media._parser_process", "media parser"),
    ("warm_worker", "warm pool (held)"),
    ("TaskRegistry", "registry"),
    ("FrameTally", "progress tally"),
    ("ServeController", "Serve controller"),
    ("serve_app.launch.cli", "vidforge serve (Ray driver)"),
)
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def _kind(title: str) -> str:
    for needle, kind in KINDS:
        if needle in title:
            return kind
    if title.startswith("ray::"):
        return "other Ray worker" if "IDLE" not in title else "idle Ray worker"
    return "Ray system (raylet, GCS, agents)"


def cpu_seconds(pid: int) -> float:
    """The CPU seconds (user + system) process `pid` has used so far, from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def busy_cpu_seconds() -> float:
    """The machine's CPU seconds spent not idle (all cores), from /proc/stat."""
    with open("/proc/stat") as fh:
        fields = [int(value) for value in fh.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


class ProcessSampler:
    """Samples every process of one session (the server's) every `interval_s`: the peak resident memory per
    process kind (a pooled Ray worker counts under what it is running at the moment), and CPU seconds used
    since `mark`, in all and per kind (a process that exits between two samples loses at most one interval;
    CPU used between two samples counts under the kind seen at the second)."""

    def __init__(self, session: int, interval_s: float = 0.1) -> None:
        self.session = session
        self.interval_s = interval_s
        self.peak_rss: dict[str, int] = defaultdict(int)
        self.cpu_by_kind: dict[str, float] = defaultdict(float)
        self._cpu: dict[int, tuple[float, float]] = {}  # pid -> (cpu at mark or birth, cpu last seen)
        self.started: set[int] = set()  # processes first seen since the mark (a render's worker start-ups)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProcessSampler:
        self._sample()
        self.mark()  # every process already running counts from now, not from its birth
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def mark(self) -> None:
        """Start counting CPU (and peaks) from now."""
        self.peak_rss.clear()
        self.cpu_by_kind.clear()
        self._cpu = {pid: (cpu, cpu) for pid, (_, cpu) in self._cpu.items()}
        self.started.clear()

    def cpu_s(self) -> float:
        return sum(last - first for first, last in self._cpu.values())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        for pid, title, rss, cpu in self._processes():
            kind = _kind(title)
            self.peak_rss[kind] = max(self.peak_rss[kind], rss)
            if pid not in self._cpu:
                self.started.add(pid)
            first, last = self._cpu.get(pid, (0.0, 0.0))  # born since the mark: counted from 0
            self._cpu[pid] = (first, cpu)
            self.cpu_by_kind[kind] += cpu - last

    def _processes(self):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if os.getsid(int(entry.name)) != self.session:
                    continue
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    title = fh.read().replace(b"\0", b" ").decode(errors="replace")
                with open(f"/proc/{entry.name}/statm") as fh:
                    rss = int(fh.read().split()[1]) * PAGE
                cpu = cpu_seconds(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            yield int(entry.name), title, rss, cpu


def print_cpu(title: str, cpu_by_kind: dict[str, float]) -> None:
    print(title)
    for kind, seconds in sorted(cpu_by_kind.items(), key=lambda kv: -kv[1]):
        if seconds >= 0.05:
            print(f"  {kind:34s} {seconds:8.1f} s")


def print_peaks(title: str, peaks: dict[str, int], limit_bytes: int = 1024**3) -> None:
    print(title)
    for kind, rss in sorted(peaks.items(), key=lambda kv: -kv[1]):
        flag = "  OVER 1 GiB" if rss > limit_bytes else ""
        print(f"  {kind:34s} {rss / 2**20:8.0f} MiB{flag}")
