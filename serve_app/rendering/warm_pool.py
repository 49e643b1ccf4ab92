"""The warm pool: the render worker processes a render runs in, started with the kernels loaded before the first
render and kept so while the server idles, so that no render pays their start-up.

A render's tasks run in Ray's pooled worker processes: a segment per CPU, and beside them on the supervisor's node the
CPU-less pictures task and the ride-along audio (the mux follows in a worker its segments freed). Ray starts those
processes on demand and ends idle ones after `RAY_idle_worker_killing_time_threshold_ms` (five minutes on a vidforge
cluster: serve_app.launch.ray_env), so the first render after a start or an idle spell started them in its own path:
~1 CPU-s each (Python, Ray's core worker, PyAV/FFmpeg and numpy), on the cores its segments encode on; a 30 s
1080p render took 1.29 x the ffmpeg CLI's wall time cold and 1.02 x warm (issue 38).

Chosen over the alternatives, measured or read in Ray 2.60:
- Ray's own worker prestart starts bare workers (no kernels imported) for the first driver only, and its idle
  killing ends them like any other.
- A longer Ray idle threshold keeps every worker a burst left (a batch starts several more), for good.
- Long-lived render actors would take the segments out of Ray's task retries and force-cancel, which the driver's
  recovery and cancel rely on.

So the supervisor runs warming rounds: one task per worker wanted on each node (`warm_counts`), each making its process
ready (render_kernels.warm_up) and then waiting at a barrier (`WarmPool.arrived`) until all of the round's tasks have
arrived, so that they run in that many distinct processes. The first round runs at the supervisor's start and
`RenderSupervisor.ready` (what `vidforge serve` waits for before it serves, and `/readyz` asks) waits for it. While no
render runs, a round again every half idle threshold keeps the same processes from ever being idle long enough to be
ended (a warm worker is reused before a new one is started), and restarts any that died; workers beyond the pool (a
burst's) still end after the threshold. The cost at rest is Ray's floor per idle worker process (its main thread
wakes 100 times a second) and its memory; docs/performance.md has the figures.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from serve_app.rendering.render_tasks import warm_worker

logger = logging.getLogger(__name__)

# Workers beside the segments on the supervisor's node, where Ray runs CPU-less tasks: a render's pictures task and
# its ride-along audio run while its segments do.
CPU_LESS_WORKERS = 2
ROUND_TIMEOUT_S = 120.0  # a worker that has not started by then (a node lost, a machine far overloaded) is left out
IDLE_THRESHOLD_ENV = "RAY_idle_worker_killing_time_threshold_ms"
RAY_DEFAULT_IDLE_THRESHOLD_MS = 1000
# Below this idle threshold a keep-warm round would have to run too often to be worth it (Ray's own default is 1 s,
# on a cluster not started with vidforge's Ray settings): the pool is then warmed at start only.
MIN_KEPT_THRESHOLD_S = 2.0

_warm_task = ray.remote(num_cpus=0, max_retries=0)(warm_worker)


def warm_counts(nodes: Iterable[dict[str, Any]], own_node: str, every_node: bool = True) -> dict[str, int]:
    """Worker processes to keep warm on each alive node of `nodes` (ray.nodes()): one per CPU, plus CPU_LESS_WORKERS
    on `own_node` (the supervisor's); with `every_node` false, on `own_node` only."""
    counts = {}
    for node in nodes:
        if node["Alive"] and (every_node or node["NodeID"] == own_node):
            wanted = int(node["Resources"].get("CPU", 0)) + (CPU_LESS_WORKERS if node["NodeID"] == own_node else 0)
            if wanted:
                counts[node["NodeID"]] = wanted
    return counts


def idle_threshold_s(environ: Mapping[str, str] = os.environ) -> float:
    """Ray's idle worker threshold on this node, in seconds (a Ray worker has its raylet's environment)."""
    return int(environ.get(IDLE_THRESHOLD_ENV, RAY_DEFAULT_IDLE_THRESHOLD_MS)) / 1000


@dataclass
class _Round:
    """One warming round: how many tasks it has, how many have arrived at the barrier, and whether all have."""

    expected: int
    arrived: int = 0
    all_in: asyncio.Event = field(default_factory=asyncio.Event)


class WarmPool:
    """The warming rounds of one supervisor. `host`: the supervisor's actor handle, which serves `warm_arrived`.
    `every_node` false (an autoscaling cluster): the supervisor's node only, so that a round never makes a worker
    node the autoscaler would remove look busy; such a node's first render starts its workers."""

    def __init__(self, host: Any, every_node: bool = True) -> None:
        self.host = host
        self.every_node = every_node
        self.warm = asyncio.Event()  # set once the first round has ended (each of its workers warm, or timed out)
        self._rounds: dict[str, _Round] = {}  # the rounds under way, by id

    async def arrived(self, round_id: str) -> None:
        """A round's task has made its worker ready: returns once all of the round's tasks have (or it timed out)."""
        round_ = self._rounds.get(round_id)
        if round_ is None:  # the round is over (timed out): nothing to wait for
            return
        round_.arrived += 1
        if round_.arrived >= round_.expected:
            round_.all_in.set()
        try:
            await asyncio.wait_for(round_.all_in.wait(), ROUND_TIMEOUT_S)
        except TimeoutError:
            pass

    async def warm_round(self) -> None:
        """Run one round on the nodes `warm_counts` names (see the module docstring)."""
        counts = warm_counts(ray.nodes(), ray.get_runtime_context().get_node_id(), self.every_node)
        round_id = uuid.uuid4().hex
        self._rounds[round_id] = _Round(sum(counts.values()))
        refs = [
            _warm_task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
                self.host, round_id
            )
            for node, count in counts.items()
            for _ in range(count)
        ]
        try:
            done = await asyncio.wait_for(asyncio.gather(*refs, return_exceptions=True), ROUND_TIMEOUT_S + 10)
        except TimeoutError:
            done = []
        finally:
            del self._rounds[round_id]
        pids = frozenset(pid for pid in done if isinstance(pid, int))
        if len(pids) < len(refs):
            failures = [err for err in done if isinstance(err, BaseException)]
            logger.warning(
                "warm pool: %d of %d render workers warm%s",
                len(pids),
                len(refs),
                f" ({failures[0]!r})" if failures else "",
                extra={"event": "warm_pool_short"},
            )

    async def keep_warm(self, busy: Callable[[], bool]) -> None:
        """Warm the pool, then keep it warm while `busy()` is false (no render runs; a running render keeps its
        own workers in use). Runs for the supervisor's life."""
        try:
            await self.warm_round()
        except Exception:  # the pool is an optimisation: renders still run, starting their workers themselves
            logger.exception("warm pool: the first round failed")
        finally:
            self.warm.set()
        threshold_s = idle_threshold_s()
        if threshold_s < MIN_KEPT_THRESHOLD_S:
            logger.warning(
                "warm pool: kept warm at start only: %s is %g ms (vidforge's clusters set 300000)",
                IDLE_THRESHOLD_ENV,
                threshold_s * 1000,
                extra={"event": "warm_pool_not_kept"},
            )
            return
        while True:
            await asyncio.sleep(threshold_s / 2)
            if not busy():
                try:
                    await self.warm_round()
                except Exception:
                    logger.exception("warm pool: a keep-warm round failed; trying again next time")
