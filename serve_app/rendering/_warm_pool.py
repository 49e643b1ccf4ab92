"""The warm pool: the render worker processes a render runs in, started with the kernels loaded before the first
render and held, ready, while the server idles, so that no render pays their start-up.

A render's tasks run in Ray's pooled worker processes: a segment per CPU, and beside them on the supervisor's node the
CPU-less pictures task and the ride-along audio (the mux follows in a worker its segments freed). Ray starts those
processes on demand and ends idle ones after `RAY_idle_worker_killing_time_threshold_ms` (five minutes on a vidforge
cluster: serve_app.launch._ray_env), so the first render after a start or an idle spell started them in its own path:
~1 CPU-s each (Python, Ray's core worker, PyAV/FFmpeg and numpy), on the cores its segments encode on; a 30 s
1080p render took 1.29 x the ffmpeg CLI's wall time cold and 1.02 x warm (issue 38).

Chosen over the alternatives, measured or read in Ray 2.60:
- Ray's own worker prestart starts bare workers (no kernels imported) for the first driver only, and its idle
  killing ends them like any other.
- A longer Ray idle threshold keeps every worker a burst left (a batch starts several more), for good.
- Long-lived render actors would take the segments out of Ray's task retries and force-cancel, which the driver's
  recovery and cancel rely on.

So the supervisor holds the pool in a task: one holding task per worker wanted on each node (`warm_counts`), each
making its process ready (render_kernels.warm_up) and then waiting in the supervisor (`WarmPool.arrived`): first until
all of the round's tasks have arrived, so that they run in that many distinct processes, then until a render is about
to start (`WarmPool.release`), which lets them return and waits until they have. Ray hands the render's tasks to the
workers they freed (a warm worker is reused before a new one is started), and once no render has run for
HOLD_AFTER_S a new round holds them again. A held worker is busy, so Ray never ends it, whatever its idle threshold;
and it costs less at rest than an idle one: an idle Ray worker's main thread wakes 100 times a second to check for
signals, a held one's once a second while it waits (0.006 against 0.002 CPU-s per second each, on the 2-core
machine). A worker that dies is replaced by the next round, at rest rather than in a render's path. The supervisor
waits for the first round (`RenderSupervisor.ready`, which `vidforge serve` waits for before it serves, and
`/readyz` asks). docs/performance.md has the figures.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import ray

from serve_app.rendering._render_tasks import WarmTask
from serve_app.rendering._task_calls import hold_worker

logger = logging.getLogger(__name__)

# Workers beside the segments on the supervisor's node, where Ray runs CPU-less tasks: a render's pictures task,
# ride-along audio and mux, and in a batch another render's beside them (an 8-render batch with two started two
# processes in its path).
CPU_LESS_WORKERS = 4
ROUND_TIMEOUT_S = 120.0  # a worker that has not started by then (a node lost, a machine far overloaded) is left out
# No render for this long before the pool is held again: a batch's next render usually follows within it, and
# would otherwise wait for a release.
HOLD_AFTER_S = 2.0
IDLE_POLL_S = 0.5
# How long a render waits for the held workers to be back in Ray's pool before it starts its tasks anyway (a
# holding task still starting on a far overloaded node).
RELEASE_WAIT_S = 10.0


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


@dataclass
class _Round:
    """One holding round: how many tasks it has, how many have arrived, whether all have, whether they may go,
    and (once submitted) the future of all its tasks' ends."""

    expected: int
    arrived: int = 0
    all_in: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)
    ended: asyncio.Future[list[Any]] | None = None


class WarmPool:
    """The holding rounds of one supervisor. `host`: the supervisor's actor handle, which serves `warm_arrived`
    (_render_tasks.TaskHost). `every_node` false (an autoscaling cluster): the supervisor's node only, so that a round
    never makes a worker node the autoscaler would remove look busy; such a node's first render starts its workers."""

    def __init__(self, host: Any, every_node: bool = True) -> None:
        self.host = host
        self.every_node = every_node
        self.warm = asyncio.Event()  # set once the first round's workers are warm (or it timed out)
        self._rounds: dict[str, _Round] = {}  # the rounds whose tasks may still arrive, by id
        self._holding: _Round | None = None  # the round holding the pool now

    async def arrived(self, round_id: str) -> None:
        """A round's task has made its worker ready: returns once the round is released, and not before all of the
        round's tasks have arrived (or it timed out) unless it was released first. A holder that arrives after the
        release (a render about to start, or a holder lost) must not wait for the others: one that never comes
        would keep its worker from the render, and the round from ending and replacing the lost one, for
        ROUND_TIMEOUT_S."""
        round_ = self._rounds.get(round_id)
        if round_ is None:  # the round is over: nothing to wait for
            return
        round_.arrived += 1
        if round_.arrived >= round_.expected:
            round_.all_in.set()
        waits = [asyncio.ensure_future(round_.all_in.wait()), asyncio.ensure_future(round_.released.wait())]
        try:
            await asyncio.wait(waits, timeout=ROUND_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        await round_.released.wait()

    async def release(self) -> None:
        """Let the held workers go, and return once they are back in Ray's pool (at most RELEASE_WAIT_S): a render
        is about to start its tasks, which Ray then hands to them."""
        round_ = self._holding
        if round_ is None:
            return
        round_.released.set()
        if round_.ended is not None:
            await asyncio.wait({round_.ended}, timeout=RELEASE_WAIT_S)

    async def keep_warm(self, busy: Callable[[], bool]) -> None:
        """Hold the pool, and hold it again whenever no render has run for HOLD_AFTER_S (`busy()`: a render runs).
        Runs for the supervisor's life."""
        first = True
        while True:
            if not first:
                await self._until_idle(busy)
            try:
                await self._hold_round(first)
            except Exception:  # the pool is an optimisation: renders still run, starting their workers themselves
                logger.exception("warm pool: a round failed; trying again when the server is next idle")
                await asyncio.sleep(HOLD_AFTER_S)
            finally:
                self.warm.set()
            first = False

    async def _until_idle(self, busy: Callable[[], bool]) -> None:
        """Return once `busy()` has been false for HOLD_AFTER_S, with no await after the last check."""
        loop = asyncio.get_running_loop()
        idle_since = None
        while True:
            now = loop.time()
            if busy():
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= HOLD_AFTER_S:
                return
            await asyncio.sleep(IDLE_POLL_S)

    async def _hold_round(self, first: bool) -> None:
        """Submit one round (see the module docstring) and return once its tasks have ended: released for a render,
        or one failed (its worker died), which releases the others for a new round. The first round sets `warm` once
        its workers are ready."""
        counts = warm_counts(ray.nodes(), ray.get_runtime_context().get_node_id(), self.every_node)
        round_id = uuid.uuid4().hex
        round_ = self._holding = self._rounds[round_id] = _Round(sum(counts.values()))
        try:
            tasks = [
                asyncio.ensure_future(hold_worker(WarmTask(self.host, round_id), node))
                for node, count in counts.items()
                for _ in range(count)
            ]
            round_.ended = asyncio.gather(*tasks, return_exceptions=True)
            if first:
                all_in: asyncio.Future[Any] = asyncio.ensure_future(round_.all_in.wait())
                await asyncio.wait([round_.ended, all_in], timeout=ROUND_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
                all_in.cancel()
                self.warm.set()
            if tasks:  # none: no node alive to hold workers on (the next round looks again)
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            round_.released.set()  # a holder lost: let the others go too, so that the next round replaces it
            outcomes = await round_.ended
        finally:
            del self._rounds[round_id]
            if self._holding is round_:
                self._holding = None
        held = {pid for pid in outcomes if isinstance(pid, int)}
        if len(held) < len(tasks):
            failures = [err for err in outcomes if isinstance(err, BaseException)]
            logger.warning(
                "warm pool: %d of %d render workers held%s",
                len(held),
                len(tasks),
                f" ({failures[0]!r})" if failures else "",
                extra={"event": "warm_pool_short"},
            )
