"""Ingress isolation: one hostile principal must not stall another (issue 8, item 1).

Principal A tries to open `--streams` `subscriptions/listen` streams (list-change opt-ins only, which never
fire) and `--slow-uploads` uploads that trickle a few bytes at a time, and holds whatever the server lets it
keep. Meanwhile principal B calls `tasks/get` on its own task `--gets` times in a row. Printed: what A got
(held / refused with 429 / unanswered), B's latency percentiles, and the target (B's p99 under 1 s).

    .venv/bin/python benchmarks/ingress_isolation.py                # 300 streams, 2 slow uploads, 200 gets
    .venv/bin/python benchmarks/ingress_isolation.py --streams 50 --gets 50

It starts its own `vidforge serve` (tests/harness.py ServerProcess: real Ray + Serve on loopback) with the
default caps unless the environment sets them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from serve_app._config import Config  # noqa: E402 - what the server started here will use
from tests.harness import ServerProcess, Wire, meta, upload  # noqa: E402 - the suite's server and wire client
from tests.media import make_clip  # noqa: E402

TOKENS = {"tok-a": "a", "tok-b": "b"}
TARGET_P99_S = 1.0
ANSWER_WAIT_S = 10.0  # a stream or a get with no answer by then counts as stalled
TRICKLE = b"\0" * 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def listen_body(index: int) -> dict:
    params = {"_meta": meta(), "notifications": {"toolsListChanged": True}}
    return {"jsonrpc": "2.0", "id": f"listen-{index}", "method": "subscriptions/listen", "params": params}


async def hold_stream(client: httpx.AsyncClient, url: str, index: int, outcome: dict, release: asyncio.Event):
    """Open one listen stream; record held / refused / unanswered, and keep a held one open until `release`."""
    headers = Wire(url, token="tok-a").headers("subscriptions/listen")
    try:
        async with client.stream("POST", url, json=listen_body(index), headers=headers) as response:
            if response.status_code != 200:
                outcome[index] = f"refused {response.status_code}"
                return
            lines = response.aiter_lines()
            while not (await asyncio.wait_for(anext(lines), ANSWER_WAIT_S)).startswith("data: "):
                pass
            outcome[index] = "held"
            await release.wait()
    except (TimeoutError, httpx.TimeoutException):
        outcome[index] = "unanswered"


async def slow_upload(client: httpx.AsyncClient, base: str, index: int, outcome: dict, release: asyncio.Event):
    """An upload that sends 1 KiB every half second until `release`."""

    async def trickle():
        while not release.is_set():
            yield TRICKLE
            await asyncio.sleep(0.5)

    try:
        response = await client.post(f"{base}/assets", content=trickle(), headers={"Authorization": "Bearer tok-a"})
        outcome[f"upload-{index}"] = f"ended {response.status_code}"
    except httpx.HTTPError as exc:
        outcome[f"upload-{index}"] = f"error {type(exc).__name__}"


def b_gets(url: str, task_id: str, count: int) -> tuple[list[float], int]:
    """B's `tasks/get` latencies (a stalled call counts as ANSWER_WAIT_S) and how many stalled."""
    wire = Wire(url, token="tok-b", tasks=True)
    wire.client.timeout = httpx.Timeout(ANSWER_WAIT_S)
    latencies, stalled = [], 0
    for _ in range(count):
        started = time.perf_counter()
        try:
            body = wire.task("tasks/get", task_id)
            assert "result" in body, body
            latencies.append(time.perf_counter() - started)
        except httpx.TimeoutException:
            stalled += 1
            latencies.append(ANSWER_WAIT_S)
    wire.close()
    return latencies, stalled


def b_task(server: ServerProcess, workdir: Path) -> str:
    """B's own task: a tiny render, cancelled at once so it costs no CPU during the measurement."""
    clip = make_clip(str(workdir / "b.mp4"), seconds=1.0, width=160, height=90, audio=False)
    wire = Wire(server.url, token="tok-b", tasks=True)
    args = {"source_asset_uri": upload(server, clip, "tok-b"), "output_format": "mp4", "resolution": "720p"}
    task_id = wire.tool("vidforge_render_video", args)["taskId"]
    wire.task("tasks/cancel", task_id)
    wire.close()
    return task_id


async def measure(server: ServerProcess, task_id: str, args: argparse.Namespace) -> list[tuple[str, str]]:
    """Runs the scenario, prints it, and returns its figures as (name, value) rows."""
    release = asyncio.Event()
    outcome: dict = {}
    limits = httpx.Limits(max_connections=args.streams + args.slow_uploads + 10)
    async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=30), limits=limits) as client:
        uploads = [
            asyncio.create_task(slow_upload(client, server.base, i, outcome, release)) for i in range(args.slow_uploads)
        ]
        streams = [
            asyncio.create_task(hold_stream(client, server.url, i, outcome, release)) for i in range(args.streams)
        ]
        deadline = time.monotonic() + ANSWER_WAIT_S * 3
        while len([k for k in outcome if isinstance(k, int)]) < args.streams and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        for i in range(args.streams):
            outcome.setdefault(i, "unanswered")
        started = time.perf_counter()
        latencies, stalled = await asyncio.to_thread(b_gets, server.url, task_id, args.gets)
        elapsed = time.perf_counter() - started
        upload_states = {k: v for k, v in outcome.items() if str(k).startswith("upload")}
        release.set()
        for task in streams + uploads:
            task.cancel()
        await asyncio.gather(*streams, *uploads, return_exceptions=True)

    kinds: dict[str, int] = {}
    for key, value in outcome.items():
        if isinstance(key, int):
            kinds[value] = kinds.get(value, 0) + 1
    print(f"A: {args.streams} listen streams attempted -> " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    print(f"A: {args.slow_uploads} slow uploads -> still open or refused during B's run: {upload_states or 'all open'}")
    p50, p99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
    print(
        f"B: {args.gets} tasks/get in {elapsed:.1f} s: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
        f"max {max(latencies) * 1000:.1f} ms, stalled (> {ANSWER_WAIT_S:.0f} s) {stalled}"
    )
    verdict = "PASS" if p99 < TARGET_P99_S and stalled == 0 else "FAIL"
    print(f"target: B's tasks/get p99 < {TARGET_P99_S:.0f} s while A holds its maximum -> {verdict}")
    return [
        (f"A's {args.streams} listen streams", ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))),
        (
            f"B's {args.gets} tasks/get meanwhile",
            f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, stalled {stalled} "
            f"(target p99 < {TARGET_P99_S:.0f} s: {verdict})",
        ),
    ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=300)
    parser.add_argument("--slow-uploads", type=int, default=2)
    parser.add_argument("--gets", type=int, default=200)
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="vidforge-isolation-") as tmp:
        workdir = Path(tmp)
        server = ServerProcess(workdir / "data", tokens=TOKENS, warm_pool=True)
        started = time.perf_counter()
        server.start()
        print(f"server up in {time.perf_counter() - started:.1f} s ({server.base})")
        config = Config.from_env()
        print(
            f"settings: VIDFORGE_REPLICAS={config.replicas} VIDFORGE_MAX_LISTEN_STREAMS={config.max_listen_streams} "
            f"VIDFORGE_MAX_UPLOADS={config.max_uploads} VIDFORGE_MAX_ONGOING_REQUESTS={config.max_ongoing_requests}"
        )
        try:
            return asyncio.run(measure(server, b_task(server, workdir), args))
        finally:
            server.stop()


def main() -> int:
    run(parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
