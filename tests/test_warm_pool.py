"""Issue 38 item 1: no cold renders. The render worker processes are started, with the kernels loaded, before the
server serves (`/readyz` waits for them) and held in a task while no render runs (cheaper at rest than idle, and
never ended by Ray), a render runs in them and starts no process of its own, and so does a render after Ray's idle
threshold has passed (made short here). The pool's parts are checked fast below."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import anyio
import httpx
import pytest

from actors.held_records import StateHealth
from render_kernels.warm_up import WARM_UP_FRAMES, warm_up
from serve_app.ingress import _readiness as readiness
from serve_app.rendering._warm_pool import CPU_LESS_WORKERS, WarmPool, _Round, warm_counts
from tests.harness import RENDER_DEADLINE_S, TERMINAL, ServerProcess, Wire, upload, wait_until
from tests.media import make_clip

TOKEN = "tok-warm"
IDLE_THRESHOLD_ENV = "RAY_idle_worker_killing_time_threshold_ms"
IDLE_THRESHOLD_MS = 3000  # Ray ends a worker idle this long (vidforge's default: five minutes)
# Between two looks at the server's processes. A worker process lives at least IDLE_THRESHOLD_MS, and a segment runs
# for seconds, so no look misses one; looking back to back took a core from the render it watched.
LOOK_S = 0.1
KERNELS_LIBRARY = "libavcodec"  # mapped into a process once it has imported PyAV


def test_the_warm_up_runs_every_codec_a_render_uses():
    assert warm_up() == WARM_UP_FRAMES


def test_a_node_keeps_one_worker_per_cpu_and_the_supervisors_node_two_more():
    nodes = [
        {"NodeID": "head", "Alive": True, "Resources": {"CPU": 2.0}},
        {"NodeID": "worker", "Alive": True, "Resources": {"CPU": 8.0, "GPU": 1.0}},
        {"NodeID": "gone", "Alive": False, "Resources": {"CPU": 4.0}},
        {"NodeID": "no-cpu", "Alive": True, "Resources": {}},
    ]
    assert warm_counts(nodes, own_node="head") == {"head": 2 + CPU_LESS_WORKERS, "worker": 8}
    assert warm_counts(nodes, own_node="no-cpu") == {"head": 2, "worker": 8, "no-cpu": CPU_LESS_WORKERS}
    # On an autoscaling cluster the supervisor's node only: a round must not keep a node the autoscaler may remove.
    assert warm_counts(nodes, own_node="head", every_node=False) == {"head": 2 + CPU_LESS_WORKERS}


@pytest.mark.anyio
async def test_a_released_round_lets_its_holders_go_before_all_have_arrived():
    """A round released (a render about to start, or a holder lost with its worker) before all of its holders have
    arrived: each holder returns at once, arrived already or not, rather than waiting up to ROUND_TIMEOUT_S for one
    that never comes, which kept its worker from the render and the round from ending and replacing the lost one.
    The round is set up in this process as `_hold_round` sets it up (its Ray tasks are the live test's below)."""
    pool = WarmPool(host=None)
    round_ = pool._holding = pool._rounds["r1"] = _Round(expected=3)
    waiting = asyncio.ensure_future(pool.arrived("r1"))  # one of three arrived: it waits for the others
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await pool.release()
    with anyio.fail_after(5):
        await waiting
        await pool.arrived("r1")  # arriving after the release: let go at once
    assert round_.released.is_set() and not round_.all_in.is_set()


class WarmingSupervisor:
    """The part of the RenderSupervisor `/readyz` asks: `ready()` returns once the warm pool's first round ended."""

    def __init__(self) -> None:
        self.warm = asyncio.Event()

    async def ready(self) -> bool:
        await self.warm.wait()
        return True


class AnsweringRegistry:
    async def state_health(self) -> StateHealth:
        return StateHealth(available=True, reason=None)


class ReachableStore:
    def size(self, key: str) -> None:
        return None


@pytest.mark.anyio
async def test_readyz_names_the_render_pool_until_it_is_warm(monkeypatch):
    monkeypatch.setattr(readiness, "READY_TIMEOUT_S", 0.2)
    supervisor = WarmingSupervisor()
    endpoint = readiness.Readiness(AnsweringRegistry(), ReachableStore(), supervisor)
    cold = await endpoint.answer()
    assert cold.status_code == 503
    assert json.loads(cold.body) == {"status": "unready", "failing": ["render_pool"], "state": "available"}
    supervisor.warm.set()
    ready = await endpoint.answer()
    assert ready.status_code == 200 and json.loads(ready.body) == {"status": "ready", "state": "available"}


def loaded_workers(server: ServerProcess, titles: tuple[str, ...] = ("ray::IDLE", "ray::warm_worker")) -> set[int]:
    """The server's pooled Ray worker processes with the kernels loaded, idle or held (`titles`: which)."""
    loaded = set()
    for pid, title in server.processes():
        try:
            if title.startswith(titles) and KERNELS_LIBRARY in Path(f"/proc/{pid}/maps").read_text():
                loaded.add(pid)
        except OSError:
            continue  # gone meanwhile
    return loaded


def held_workers(server: ServerProcess) -> set[int]:
    """The pool's workers held in their tasks (at rest)."""
    return loaded_workers(server, titles=("ray::warm_worker",))


def held_throughout(server: ServerProcess, pool_size: int, seconds: float) -> None:
    """Every look at the server's processes for `seconds` finds the pool held (not one look idle)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        held = held_workers(server)
        workers = sorted(title.strip() for _, title in server.processes() if title.startswith("ray::"))
        assert len(held) >= pool_size, f"the pool was let go at rest: {workers}"
        time.sleep(LOOK_S)


def workers_of_a_render(server: ServerProcess, wire: Wire, source: str) -> tuple[set[int], set[int]]:
    """Render `source` and return (the Ray worker processes that ran its segments, every Ray worker process seen
    while it ran), watching the server's processes as it goes."""
    task_id = wire.tool(
        "vidforge_render_video", {"source_asset_uri": source, "output_format": "mp4", "resolution": "720p"}
    )["taskId"]
    segments: set[int] = set()
    seen: set[int] = set()
    deadline = time.monotonic() + RENDER_DEADLINE_S
    while (task := wire.task("tasks/get", task_id)["result"])["status"] not in TERMINAL:
        assert time.monotonic() < deadline, "the render did not end"
        for pid, title in server.processes():
            if title.startswith("ray::"):
                seen.add(pid)
                if title.startswith("ray::encode_segment_parts"):
                    segments.add(pid)
        time.sleep(LOOK_S)
    assert task["status"] == "completed", task
    return segments, seen


@pytest.mark.ray
def test_renders_run_in_workers_warmed_before_them_even_after_the_idle_threshold(tmp_path):
    env = {IDLE_THRESHOLD_ENV: str(IDLE_THRESHOLD_MS)}
    with ServerProcess(tmp_path / "data", env=env, tokens={TOKEN: "warm"}, warm_pool=True) as server:
        # The server serves once the pool is warm: one worker per CPU and the CPU-less ones, kernels loaded.
        ready = httpx.get(f"{server.base}/readyz", timeout=30)
        assert ready.json() == {"status": "ready", "state": "available"}, ready.text
        pool_size = (os.cpu_count() or 1) + CPU_LESS_WORKERS
        assert len(loaded_workers(server)) >= pool_size, server.processes()
        # At rest the pool is held in its tasks, not idle in Ray's pool (where Ray ends it, and it costs more).
        wait_until(lambda: len(held_workers(server)) >= pool_size, timeout=60, message="the pool held")
        held_throughout(server, pool_size, IDLE_THRESHOLD_MS / 1000)
        clip = make_clip(str(tmp_path / "clip.mp4"), seconds=10.0, width=640, height=360, audio=True)
        source = upload(server, clip, TOKEN)
        wire = Wire(server.url, token=TOKEN, tasks=True)

        before, running = loaded_workers(server), {pid for pid, _ in server.processes()}
        segments, seen = workers_of_a_render(server, wire, source)
        assert segments and segments <= before, (segments, before)
        assert seen <= running, f"the first render started {seen - running}"
        wait_until(lambda: len(held_workers(server)) >= pool_size, timeout=60, message="the pool held again")

        # Idle for three of Ray's thresholds: a worker nobody used would have been ended twice over.
        idle_until = time.monotonic() + 3 * IDLE_THRESHOLD_MS / 1000
        wait_until(lambda: time.monotonic() > idle_until, timeout=60, message="the idle spell")
        before, running = loaded_workers(server), {pid for pid, _ in server.processes()}
        segments, seen = workers_of_a_render(server, wire, source)
        assert segments and segments <= before, (segments, before)
        assert seen <= running, f"the render after idling started {seen - running}"

        # A held worker that dies is replaced at rest, not in the next render's path.
        wait_until(lambda: len(held_workers(server)) >= pool_size, timeout=60, message="the pool held again")
        lost = min(held_workers(server))
        os.kill(lost, signal.SIGKILL)
        wait_until(
            lambda: len(replaced := held_workers(server)) >= pool_size and lost not in replaced,
            timeout=120,
            message="a lost worker replaced",
        )
