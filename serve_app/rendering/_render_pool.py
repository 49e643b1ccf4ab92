"""What the renders driven from one process share (`RenderPool`), and one run's place in it (`RunQueue`).

A render's CPU tasks (audio, segments) are not handed to Ray at once but queued in the pool's SegmentScheduler
(serve_app.rendering._scheduling), shared by every render of a supervisor, which starts them as CPUs free up,
round-robin across principals and FIFO within one. Its live frame counts go to the pool's one FrameTally
(serve_app.rendering._tally), each run under a key of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import ray

from serve_app.rendering._autoscaling import CPU_BUNDLE, Bundle
from serve_app.rendering._scheduling import Dispatched, SegmentScheduler, Started
from serve_app.rendering._tally import ActorTally, HostedTally, PoolTally


class RenderPool:
    """What the renders driven from one process share: the scheduler of their CPU tasks, and one FrameTally for
    their live frame counts (serve_app.rendering._tally).

    `host`, when the pool lives in an actor: that actor's handle, which serves `report_frames` and `report_still`
    into this pool's tally (see RenderSupervisor.report_frames), so the tally costs no process and the driver reads
    it in place. Without one, the tally is an actor of its own, started on first use.
    """

    def __init__(self, scheduler: SegmentScheduler | None = None, host: Any = None) -> None:
        self.scheduler = scheduler or SegmentScheduler()
        self._hosted = HostedTally(host) if host is not None else None
        self.tally: PoolTally = self._hosted or ActorTally()
        self._local_cpus: float | None = None

    def audio_rides_along(self) -> bool:
        """Whether a render's audio rides along with its first segment rather than taking a CPU of its own: on an
        idle cluster where a CPU-less task may run here (one node, or a head that takes work; not a head started
        with --num-cpus=0: Ray places a CPU-less task on the submitting node). It then shares that segment's CPU
        (the OS interleaves them, as ffmpeg's threads would), so no segment waits behind it. Otherwise it takes a CPU
        of its own in the scheduler, first (it would otherwise run alone after the equally sized segments end
        together): with every CPU busy a rider gains nothing and costs Ray one more worker process. The node's CPUs
        are read once."""
        if not self.scheduler.idle():
            return False
        if self._local_cpus is None:
            node_id = ray.get_runtime_context().get_node_id()
            nodes = [node for node in ray.nodes() if node["NodeID"] == node_id]
            self._local_cpus = nodes[0]["Resources"].get("CPU", 0.0) if nodes else 0.0
        return self._local_cpus > 0

    def report_frames(self, run: str, index: int, frames_done: int) -> None:
        """A segment's or the mux's report, served by the host actor (HostedTally.report_frames)."""
        assert self._hosted is not None, "only an actor's pool is reported to"
        self._hosted.report_frames(run, index, frames_done)

    def report_still(self, run: str, name: str, png: bytes) -> None:
        """A segment task's still, served by the host actor (HostedTally.report_still)."""
        assert self._hosted is not None, "only an actor's pool is reported to"
        self._hosted.report_still(run, name, png)

    def close(self) -> None:
        """End the tally's own actor, if any (for a pool of one render; a supervisor's pool lives as long as it
        does)."""
        self.tally.shutdown()


class RunQueue:
    """One run's tasks in its pool's scheduler, under the run's key: each queued for its turn and started by the
    scheduler. Keeps the order its tasks started in (`start_order`, for comparing runs of one pool) and its wait for
    its first CPU (`stages["queue"]`)."""

    def __init__(
        self, pool: RenderPool, principal: str, run: str, stages: dict[str, float], start_order: list[int]
    ) -> None:
        self._scheduler = pool.scheduler
        self._principal = principal
        self._run = run
        self._stages = stages
        self._start_order = start_order

    def schedule(
        self, start: Callable[[], Started], final: bool = False, bundle: Bundle = CPU_BUNDLE
    ) -> asyncio.Future[Dispatched[Started]]:
        """Queue a task of this run, which the scheduler starts (`start()`) in its turn; `bundle` is what it asks Ray
        for (autoscaler demand while it waits or runs), `final` the render's last task (SegmentScheduler.submit)."""
        return self._scheduler.submit(self._principal, self._run, start, final, bundle)

    def ride_along(
        self, carrier: asyncio.Future[Dispatched[Any]], start: Callable[[], Started]
    ) -> asyncio.Future[Dispatched[Started]]:
        """Start a task (`start()`, which asks Ray for no CPU) the moment `carrier`, a scheduled task of this run,
        starts: it shares the carrier's CPU, on the driver's node (Ray places a CPU-less task locally)."""

        async def started() -> Dispatched[Started]:
            dispatched = await carrier
            return Dispatched(start(), dispatched.order, dispatched.queued_s)

        return asyncio.ensure_future(started())

    async def started(self, scheduled: asyncio.Future[Dispatched[Started]]) -> Started:
        """The references of a scheduled task, once it has started; counted in the run's start order."""
        dispatched = await scheduled
        self._start_order.append(dispatched.order)
        if dispatched.order == min(self._start_order):  # the render's first task to start
            self._stages["queue"] = dispatched.queued_s
        return dispatched.refs

    def awaiting_input(self, waiting: bool) -> None:
        """Whether the run waits on its caller's answer (SegmentScheduler.awaiting_input)."""
        self._scheduler.awaiting_input(self._principal, self._run, waiting)

    def withdraw(self) -> None:
        """Drop the run's queued tasks and any CPU reserved for it (SegmentScheduler.withdraw)."""
        self._scheduler.withdraw(self._principal, self._run)
