"""Control-plane speed: `tasks/get` under 16 concurrent clients, and `tools/call` -> CreateTaskResult latency.

One run, one client (httpx, asyncio, `--clients` connections each sending requests back to back for
`--seconds`), three endpoints in turn:

- vidforge `tasks/get` on a finished render (the full path: the ingress replica's HTTP front -> request slots,
  Origin, auth and admission -> the MCP SDK's stateless session -> the task record -> the response);
- vidforge `GET /healthz` (the same replica, guards and auth, without the SDK or the record: the difference
  between the two is what the MCP layer and reading the record cost);
- a bare Starlette app under uvicorn, one process, answering POST with the exact bytes vidforge answered
  `tasks/get` with (the floor: HTTP and JSON on this machine).

Then `--creates` renders are created one at a time with `tools/call` (each cancelled before the next, so the
quota and the CPUs stay free): p50/p95 of create -> CreateTaskResult, which includes the durable write of the
task (SQLite, fsynced) and the supervisor's start. Then `--uploads` uploads of the clip, one at a time: p50/p95 of
`POST /assets` (the bytes stored, their isolated parse, the asset's answer) and the machine's CPU per upload. Finally
the registry actor's own `get` is timed from a Ray driver on the server's cluster (the actor hop alone).

    .venv/bin/python benchmarks/control_plane.py
    .venv/bin/python benchmarks/control_plane.py --clients 16 --seconds 20 --creates 60
    .venv/bin/python benchmarks/control_plane.py --server-env VIDFORGE_METRICS=off  # vidforge's metrics off

The last one is the side-by-side check of what vidforge's metrics cost (docs/operating.md, "Metrics"; the figures on
docs/performance.md): run it and the default one back to back; `tasks/get` req/s and the replica's CPU per request
should agree within 5 %.

Targets: vidforge tasks/get >= 0.5 x the bare endpoint's requests per second; create p50 <= 35 ms, p95 <= 80 ms
(issue 38); upload p50 <= 250 ms, back to back. The client
shares the machine with the server: on a small machine it takes CPU from both sides alike. So it also prints
where the time goes, steadier than req/s on a shared machine: the CPU milliseconds each request cost, per
process kind (the server's processes, the bare endpoint's, and the load client's own).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serving import (  # noqa: E402 - first (Ray auth mode)
    BenchServer,
    ProcessSampler,
    RenderTrace,
    busy_cpu_seconds,
    cpu_seconds,
    drive_render,
    render_args,
)

# isort: split

import httpx  # noqa: E402
from harness import Wire, free_port, meta, wait_until  # noqa: E402 - tests/ is on the path (serving)
from media import make_clip  # noqa: E402

GET_RATIO_TARGET, CREATE_P50_TARGET_MS, CREATE_P95_TARGET_MS = 0.5, 35.0, 80.0
UPLOAD_P50_TARGET_MS = 250.0


def bare_app(body: bytes):
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def answer(request):
        await request.body()
        return Response(body, media_type="application/json")

    return Starlette(routes=[Route("/mcp", answer, methods=["POST"])])


def serve_bare(port: int, body_path: str) -> None:
    """The bare endpoint (run as `control_plane.py --bare PORT BODY_FILE` in its own process)."""
    import uvicorn

    with open(body_path, "rb") as fh:
        body = fh.read()
    uvicorn.run(bare_app(body), host="127.0.0.1", port=port, log_level="warning")


async def hammer(
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes | None,
    clients: int,
    seconds: float,
    warmup_s: float = 2.0,
) -> tuple[float, list[float], int]:
    """`clients` connections sending back to back; returns (requests per second, latencies in s) after warm-up, and
    the number of requests answered in all."""
    latencies: list[float] = []
    answered = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:
        start = time.perf_counter()
        counting_from, until = start + warmup_s, start + warmup_s + seconds

        async def client() -> None:
            nonlocal answered
            while (now := time.perf_counter()) < until:
                response = await http.request(method, url, headers=headers, content=body)
                if response.status_code != 200:
                    raise RuntimeError(f"{url}: {response.status_code} {response.text[:300]}")
                answered += 1
                if now >= counting_from:
                    latencies.append(time.perf_counter() - now)

        await asyncio.gather(*(client() for _ in range(clients)))
    return len(latencies) / seconds, latencies, answered


def measured(run, sampler: ProcessSampler | None, bare_pid: int | None = None) -> Measured:
    """`run()` -> (rps, latencies), with the CPU seconds every process spent meanwhile: the server's per process kind
    (`sampler`), the bare endpoint's process, and this client's own."""
    if sampler is not None:
        sampler.mark()
    client_before = time.process_time()
    bare_before = cpu_seconds(bare_pid) if bare_pid else 0.0
    rps, latencies, answered = run()
    cpu = dict(sampler.cpu_by_kind) if sampler is not None else {}
    if bare_pid:
        cpu["bare endpoint (uvicorn)"] = cpu_seconds(bare_pid) - bare_before
    cpu["load client (this process)"] = time.process_time() - client_before
    return Measured(rps, latencies, answered, cpu)


class Measured(NamedTuple):
    rps: float
    latencies: list[float]  # after the warm-up
    answered: int  # warm-up included
    cpu_by_kind: dict[str, float]  # CPU seconds over the whole run, warm-up included


def show_cpu(name: str, result: Measured) -> None:
    """CPU milliseconds per answered request, per process kind: what a request costs, however loaded the machine."""
    requests = result.answered or 1
    parts = sorted(result.cpu_by_kind.items(), key=lambda kv: -kv[1])
    total = sum(result.cpu_by_kind.values()) / requests * 1000
    shown = ", ".join(f"{kind} {seconds / requests * 1000:.2f}" for kind, seconds in parts if seconds >= 0.05)
    print(f"  {name:40s} {total:6.2f} ms CPU/request: {shown}")


def percentile(values: list[float], fraction: float) -> float:
    return statistics.quantiles(values, n=100)[round(fraction * 100) - 1] if len(values) > 1 else values[0]


def show(name: str, rps: float, latencies: list[float]) -> None:
    print(
        f"  {name:40s} {rps:8.0f} req/s   p50 {percentile(latencies, 0.5) * 1000:6.1f} ms   "
        f"p95 {percentile(latencies, 0.95) * 1000:6.1f} ms"
    )


def time_creates(server: BenchServer, source_uri: str, count: int) -> list[float]:
    """Create -> CreateTaskResult for `count` renders, one at a time, each cancelled (and ended) before the next."""
    wire = Wire(server.url, server.token(0), tasks=True)
    seconds = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            created = wire.tool("vidforge_render_video", render_args(source_uri, None))
            seconds.append(time.perf_counter() - started)
            task_id = created["taskId"]
            wire.task("tasks/cancel", task_id)
            wait_until(
                lambda: wire.task("tasks/get", task_id)["result"]["status"] == "cancelled",  # noqa: B023 - called at once
                120,
                0.05,
                f"{task_id} to be cancelled",
            )
    finally:
        wire.close()
    return seconds


def time_uploads(server: BenchServer, clip: str, count: int) -> tuple[list[float], float]:
    """`POST /assets` of `clip`, `count` times one at a time: each upload's seconds (the bytes in, the isolated parse
    of them, the asset's answer), and the machine's busy CPU seconds per upload meanwhile (this client included)."""
    seconds = []
    busy = busy_cpu_seconds()
    for _ in range(count):
        started = time.perf_counter()
        server.upload(clip)
        seconds.append(time.perf_counter() - started)
    return seconds, (busy_cpu_seconds() - busy) / count


def time_registry_get(server: BenchServer, task_id: str, principal: str, count: int = 500) -> list[float]:
    """The registry actor's `get` alone, awaited one at a time from a Ray driver on the server's cluster."""
    import ray

    from actors.handle import REGISTRY_NAME

    ray.init(address=server.ray_address, namespace="vidforge", log_to_driver=False)
    try:
        registry = ray.get_actor(REGISTRY_NAME, namespace="vidforge")
        seconds = []
        for _ in range(count):
            started = time.perf_counter()
            ray.get(registry.get.remote(principal, task_id))
            seconds.append(time.perf_counter() - started)
        return seconds
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per endpoint")
    parser.add_argument("--creates", type=int, default=40, help="renders created for the create latency")
    parser.add_argument("--uploads", type=int, default=20, help="uploads of the clip for the upload latency")
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the server (e.g. a Ray Serve setting to compare)",
    )
    parser.add_argument("--bare", nargs=2, metavar=("PORT", "BODY_FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        serve_bare(int(args.bare[0]), args.bare[1])
        return
    workdir = tempfile.mkdtemp(prefix="vidforge-control-")
    clip = make_clip(os.path.join(workdir, "clip.mp4"), seconds=2.0, width=320, height=180, fps=30, audio=True)
    print(f"{args.clients} clients, {args.seconds:g} s per endpoint; load average {os.getloadavg()[0]:.2f}")

    env = dict(item.split("=", 1) for item in args.server_env)
    with BenchServer(workdir, env=env) as server:
        print(f"server start-up (excluded): {server.startup_s:.1f} s")
        source_uri = server.upload(clip)
        trace = drive_render(server, RenderTrace(principal=0, watermark=False), render_args(source_uri, None))
        wire = Wire(server.url, server.token(0), tasks=True)
        get_headers = {**wire.headers("tasks/get", trace.task_id), "Content-Type": "application/json"}
        get_body = httpx.Request(
            "POST",
            server.url,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tasks/get",
                "params": {"taskId": trace.task_id, "_meta": meta(tasks=True)},
            },
        ).content
        answer = httpx.post(server.url, content=get_body, headers=get_headers).content
        body_path = os.path.join(workdir, "tasks-get-answer.json")
        with open(body_path, "wb") as fh:
            fh.write(answer)

        port = free_port()
        bare = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--bare", str(port), body_path])
        try:
            wait_until(lambda: _up(f"http://127.0.0.1:{port}/mcp"), 60, 0.2, "the bare endpoint")
            print(f"\ntasks/get answer: {len(answer)} bytes (the bare endpoint answers the same bytes)")
            auth = {"Authorization": wire.headers("tasks/get")["Authorization"]}
            session = os.getsid(server.pid)
            with ProcessSampler(session) as sampler:
                results = {
                    "vidforge tasks/get": measured(
                        lambda: asyncio.run(
                            hammer("POST", server.url, get_headers, get_body, args.clients, args.seconds)
                        ),
                        sampler,
                    ),
                    "vidforge GET /healthz (no MCP, no registry)": measured(
                        lambda: asyncio.run(
                            hammer("GET", f"{server.proc.base}/healthz", auth, None, args.clients, args.seconds)
                        ),
                        sampler,
                    ),
                    "bare Starlette + uvicorn": measured(
                        lambda: asyncio.run(
                            hammer(
                                "POST",
                                f"http://127.0.0.1:{port}/mcp",
                                {"Content-Type": "application/json"},
                                get_body,
                                args.clients,
                                args.seconds,
                            )
                        ),
                        None,
                        bare.pid,
                    ),
                }
        finally:
            bare.terminate()
            bare.wait()
        creates = time_creates(server, source_uri, args.creates)
        uploads, upload_cpu_s = time_uploads(server, clip, args.uploads)
        registry = time_registry_get(server, trace.task_id, "principal-0")
        wire.close()

    print(f"\nthroughput, {args.clients} concurrent clients:")
    for name, result in results.items():
        show(name, result.rps, result.latencies)
    vf_rps, bare_rps = results["vidforge tasks/get"].rps, results["bare Starlette + uvicorn"].rps
    print(f"  ratio vidforge tasks/get / bare: {vf_rps / bare_rps:.2f}  (target >= {GET_RATIO_TARGET})")
    print("\nwhere the time goes: CPU milliseconds per request, per process (the load client included)")
    for name, result in results.items():
        show_cpu(name, result)
    print(
        f"\ntools/call -> CreateTaskResult, {len(creates)} creates one at a time: p50 "
        f"{percentile(creates, 0.5) * 1000:.1f} ms, p95 {percentile(creates, 0.95) * 1000:.1f} ms "
        f"(targets p50 <= {CREATE_P50_TARGET_MS:g} ms, p95 <= {CREATE_P95_TARGET_MS:g} ms)"
    )
    print(
        f"POST /assets of a {os.path.getsize(clip)} B clip, {len(uploads)} one at a time: p50 "
        f"{percentile(uploads, 0.5) * 1000:.1f} ms, p95 {percentile(uploads, 0.95) * 1000:.1f} ms (target p50 <= "
        f"{UPLOAD_P50_TARGET_MS:g} ms); the machine's CPU per upload {upload_cpu_s * 1000:.0f} ms"
    )
    print(
        f"registry actor get alone (Ray driver -> actor, one at a time): p50 {percentile(registry, 0.5) * 1000:.2f}"
        f" ms, p95 {percentile(registry, 0.95) * 1000:.2f} ms"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


def _up(url: str) -> bool:
    try:
        return httpx.post(url, content=b"{}", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
