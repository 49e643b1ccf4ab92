"""Fair sharing of the cluster's CPUs between the renders one supervisor drives.

Ray starts the tasks it is given roughly in submission order. Handing it every segment of every render at once
means a render that arrives behind a long one waits for all of it, whoever sent it, and a batch submitted
together interleaves so that every render finishes at the end of the batch. So the render driver hands its
CPU-bound tasks (a render's audio and its video segments, one CPU each) to a SegmentScheduler instead, which
gives Ray only as many as the cluster has CPUs and picks the next one fairly:

- round-robin across principals, FIFO within one (its renders in arrival order, each render's tasks in
  order): another tenant's render starts at the next free CPU however long the queue ahead of it is, and a
  tenant's later render never overtakes its earlier one, so the first of a batch finishes first;
- a task holds its CPU until its first return settles (done, failed or cancelled); when it was its render's
  last task, the CPU stays the render's for up to FINAL_RESERVE_S, for the task that finishes the render (its
  mux, submitted with `final=True` and started ahead of every queue): the render completes without waiting
  for a CPU behind other renders, and without a CPU-less task that would need a Ray worker started for it. Not
  while the render awaits its watermark approval (`awaiting_input`): then the CPU goes back to the queue at once;
- `plan_width`: a render is cut into as many segments as the cluster has CPUs, busy or not. The fair queue, not
  the plan, decides whose task a freed CPU takes, so a render cut wide takes no more than its turns; but the last
  renders of a batch then spread over the CPUs the others leave, where one cut for the CPUs free when it was
  planned (one, in a busy batch) would end the batch on a single CPU. Extra segments cost an encoder start and
  a keyframe each (a 10 s clip cut in two: 1-5 % more CPU). On an autoscaling cluster (`elastic`) the CPUs counted are
  those the cluster can grow to within the demand caps, and at most the principal's own cap. `free_cpus` is
  what nobody else's work waits for: how many CPUs a render planned now has to itself (its encoder threads).

On an autoscaling cluster the scheduler also keeps Ray's autoscaler told of what its queued and running tasks need
(serve_app.rendering._autoscaling), and, while work waits, looks for new CPUs every ELASTIC_TICK_S (a node that joined
frees no task, so nothing else would start the queued ones there) and republishes the demand, to `[]` once drained.
It starts by publishing `[]`: a supervisor that died mid-batch (a crash, a redeploy) left its demand standing, and
the autoscaler keeps the nodes a standing request needs however idle they are.

Everything here runs on the driver's event loop (the supervisor actor's): no locks, and `submit`, `withdraw`
and the dispatch never await, so a withdrawn render can have no task started after `withdraw` returns.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import ray

from serve_app.observability.catalog import QUEUED_SEGMENTS
from serve_app.observability.metric import principal_label
from serve_app.rendering._autoscaling import CPU_BUNDLE, Bundle, ElasticCluster, ResourceDemand

CAPACITY_REFRESH_S = 10.0  # how long a read of the cluster's CPU count is trusted (nodes join and leave)
ELASTIC_TICK_S = 1.0  # on an autoscaling cluster, while work waits: look for new CPUs, republish the demand

logger = logging.getLogger(__name__)
# How long a render keeps the CPU its last task freed, for its final task: the driver submits that at once
# unless the render still awaits its watermark approval, when the CPU goes back to the queue after this.
FINAL_RESERVE_S = 3.0

Item = TypeVar("Item")
# What starting a task returns: references to its returns, the first of which holds its CPU until it settles.
Started = TypeVar("Started", bound=Sequence[Awaitable[object]])


class FairQueue(Generic[Item]):
    """Items queued per (principal, render): `pop` serves principals round-robin and, within one principal,
    its renders in arrival order and each render's items in order."""

    def __init__(self) -> None:
        # principal -> render -> items; the first principal is the next to be served.
        self._lanes: OrderedDict[str, OrderedDict[Hashable, deque[Item]]] = OrderedDict()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, principal: str, render: Hashable, item: Item) -> None:
        """Queue `item` last for its render; a principal new to the queue is served after those already in it."""
        self._lanes.setdefault(principal, OrderedDict()).setdefault(render, deque()).append(item)
        self._size += 1

    def pop(self) -> Item:
        """The next item (IndexError when empty); its principal then goes to the back of the rotation."""
        if not self._lanes:
            raise IndexError("pop from an empty FairQueue")
        principal, renders = next(iter(self._lanes.items()))
        render, items = next(iter(renders.items()))
        item = items.popleft()
        self._size -= 1
        if not items:
            del renders[render]
        if renders:
            self._lanes.move_to_end(principal)
        else:
            del self._lanes[principal]
        return item

    def by_principal(self) -> dict[str, int]:
        """How many items each principal has queued."""
        return {principal: sum(map(len, renders.values())) for principal, renders in self._lanes.items()}

    def remove(self, principal: str, render: Hashable) -> list[Item]:
        """Take every queued item of one render out of the queue."""
        renders = self._lanes.get(principal)
        if renders is None or render not in renders:
            return []
        items = list(renders.pop(render))
        if not renders:
            del self._lanes[principal]
        self._size -= len(items)
        return items


class ClusterCpus:
    """The cluster's CPU count (at least 1), read again at most every `refresh_s`."""

    def __init__(self, refresh_s: float = CAPACITY_REFRESH_S) -> None:
        self._refresh_s = refresh_s
        self._cpus = 1
        self._read_at = -float("inf")

    def __call__(self) -> int:
        if time.monotonic() - self._read_at >= self._refresh_s:
            self._cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
            self._read_at = time.monotonic()
        return self._cpus


@dataclass(frozen=True)
class Dispatched(Generic[Started]):
    """A task the scheduler started: the references its start returned, its place in the scheduler's start order
    (0, 1, ...), and how long it waited in the queue."""

    refs: Started
    order: int
    queued_s: float


@dataclass
class _Waiting(Generic[Started]):
    start: Callable[[], Started]
    started: asyncio.Future[Dispatched[Started]]
    queued_at: float
    key: tuple[str, Hashable]  # (principal, render)
    final: bool
    bundle: Bundle  # what it asks Ray for (empty: nothing, like the mux), as autoscaler demand


class SegmentScheduler:
    """Starts queued CPU tasks as CPUs free up, fairly across principals (see the module docstring).

    `capacity` gives the number of tasks that may run at once (default: the cluster's CPUs). One scheduler is
    shared by every render of a supervisor; a render driven alone gets its own. `elastic`: the cluster's autoscaler,
    told of the demand; None on a fixed cluster.
    """

    def __init__(self, capacity: Callable[[], int] | None = None, elastic: ElasticCluster | None = None) -> None:
        self.elastic = elastic
        self._capacity = capacity or ClusterCpus(ELASTIC_TICK_S if elastic else CAPACITY_REFRESH_S)
        self._wanted: dict[str, Counter[Bundle]] = {}  # per principal: the bundles of its queued and running tasks
        self._ticking: asyncio.Task[None] | None = None
        self._queue: FairQueue[_Waiting[Any]] = FairQueue()
        self._final: deque[_Waiting[Any]] = deque()  # renders' final tasks: started before anything queued
        self._running = 0  # CPUs held: by started tasks, and reserved for a render's final task
        self._started = 0
        self._unfinished: dict[tuple[str, Hashable], int] = {}  # per render: tasks queued or running
        self._reserved: dict[tuple[str, Hashable], asyncio.TimerHandle] = {}
        self._withdrawn: set[tuple[str, Hashable]] = set()  # until their running tasks have ended
        self._awaiting: set[tuple[str, Hashable]] = set()  # renders waiting on their caller (awaiting_input)
        self._queue_labels: set[str] = set()  # the principal labels vidforge_queued_segments has been set for
        if elastic is not None:
            self._tell_the_autoscaler(ResourceDemand())  # nothing queued yet: withdraw what a predecessor left

    def plan_width(self, principal: str | None = None) -> int:
        """How many segments a render planned now should aim for: every CPU of the cluster, busy or not (see the
        module's docstring). On an autoscaling cluster, the CPUs it can grow to (within the cluster cap), and no
        more than `principal`'s own cap."""
        width = self._capacity()
        if self.elastic is not None:
            width = max(width, self.elastic.caps.cluster_cpus)
            if self.elastic.caps.principal_cpus and principal is not None:
                width = min(width, self.elastic.caps.principal_cpus)
        return max(1, width)

    def free_cpus(self) -> int:
        """The CPUs up now that no running, reserved or queued task will take (at least 1)."""
        return max(1, self._capacity() - self._running - len(self._queue) - len(self._final))

    def demand(self) -> ResourceDemand:
        """What the queued and running tasks ask the autoscaler for, within the caps (none on a fixed cluster)."""
        if self.elastic is None:
            return ResourceDemand()
        return ResourceDemand.of(self._wanted, self.elastic.caps)

    def queued(self) -> int:
        """Tasks waiting for a CPU (what an autoscaler is asked to make room for, beyond the running ones)."""
        return len(self._queue) + len(self._final)

    def idle(self) -> bool:
        """No task running, queued or reserved: a render planned now has the cluster to itself."""
        return self._running == 0 and not self._queue and not self._final

    def submit(
        self,
        principal: str,
        render: Hashable,
        start: Callable[[], Started],
        final: bool = False,
        bundle: Bundle = CPU_BUNDLE,
    ) -> asyncio.Future[Dispatched[Started]]:
        """Queue a task; `start()` submits it to Ray and returns its references. The future resolves once it has been
        started (with `start`'s exception, if it raised), and is cancelled if the render is withdrawn first.
        The task holds its CPU until its first ref settles. A `final` task (one per render, after all its other
        tasks) takes the CPU its render reserved, else the next free one before any other queued task. `bundle`:
        what the task asks Ray for, counted as autoscaler demand until it ends."""
        key = (principal, render)
        loop = asyncio.get_running_loop()
        waiting: _Waiting[Started] = _Waiting(start, loop.create_future(), time.monotonic(), key, final, bundle)
        self._unfinished[key] = self._unfinished.get(key, 0) + 1
        if bundle:
            self._wanted.setdefault(principal, Counter())[bundle] += 1
        if self.elastic is not None and self._ticking is None:
            self._ticking = asyncio.ensure_future(self._follow_the_cluster())
        if final and (reservation := self._reserved.pop(key, None)) is not None:
            reservation.cancel()
            self._start(waiting)  # on the CPU already counted as held
            return waiting.started
        if final:
            self._final.append(waiting)
        else:
            self._queue.push(principal, render, waiting)
        self._dispatch()
        return waiting.started

    def awaiting_input(self, principal: str, render: Hashable, waiting: bool) -> None:
        """Whether the render waits on its caller's answer (its watermark approval). Its final task cannot start
        before the answer, so meanwhile the CPU its last task frees goes back to the queue at once rather than being
        kept FINAL_RESERVE_S for that task (issue 38: a render awaiting approval holds no CPU it does not use)."""
        key = (principal, render)
        if not waiting:
            self._awaiting.discard(key)
            return
        self._awaiting.add(key)
        if (reservation := self._reserved.pop(key, None)) is not None:
            reservation.cancel()
            self._free()

    def withdraw(self, principal: str, render: Hashable) -> None:
        """Drop a render's queued tasks and any CPU reserved for it (its started tasks are the caller's to
        cancel; they free their CPUs as they end)."""
        key = (principal, render)
        dropped = self._queue.remove(principal, render) + [w for w in self._final if w.key == key]
        self._final = deque(w for w in self._final if w.key != key)
        for waiting in dropped:
            waiting.started.cancel()
            self._release(waiting)
        self._settle(key, len(dropped))
        if key in self._unfinished:
            self._withdrawn.add(key)
        if (reservation := self._reserved.pop(key, None)) is not None:
            reservation.cancel()
            self._free()
        self._publish_queue()

    def _dispatch(self) -> None:
        while (self._final or self._queue) and self._running < self._capacity():
            waiting = self._final.popleft() if self._final else self._queue.pop()
            if waiting.started.done():  # cancelled by its caller without a withdraw: nothing to start
                self._release(waiting)
                self._settle(waiting.key, 1)
                continue
            self._running += 1
            self._start(waiting)
        self._publish_queue()

    def _publish_queue(self) -> None:
        """Set `vidforge_queued_segments` for every principal label: what waits now, 0 where nothing does."""
        queued: Counter[str] = Counter()
        for principal, count in self._queue.by_principal().items():
            queued[principal_label(principal)] += count
        self._queue_labels |= queued.keys()
        for label in self._queue_labels:
            QUEUED_SEGMENTS.set(queued[label], principal=label)

    def _start(self, waiting: _Waiting[Any]) -> None:
        """Start a task on a CPU already counted in `_running`."""
        try:
            refs = waiting.start()
        except Exception as exc:  # noqa: BLE001 - handed to the render that asked, which fails with it
            waiting.started.set_exception(exc)
            self._release(waiting)
            self._settle(waiting.key, 1)
            self._free()
            return
        waiting.started.set_result(Dispatched(refs, self._started, time.monotonic() - waiting.queued_at))
        self._started += 1
        asyncio.ensure_future(self._hold(waiting, refs[0]))

    async def _hold(self, waiting: _Waiting[Any], first: Awaitable[object]) -> None:
        try:
            await first
        except Exception:  # noqa: BLE001 - any end (a failure, a cancel, a lost worker) frees the CPU
            pass
        finally:
            self._release(waiting)
            key = waiting.key
            withdrawn = key in self._withdrawn
            last = self._settle(key, 1) and not waiting.final and not withdrawn  # its render's last task
            if last and key not in self._awaiting:
                loop = asyncio.get_running_loop()
                self._reserved[key] = loop.call_later(FINAL_RESERVE_S, self._unreserve, key)
            else:
                self._free()

    def _settle(self, key: tuple[str, Hashable], count: int) -> bool:
        """`count` of the render's tasks are done (or dropped); True when none is left."""
        left = self._unfinished.get(key, 0) - count
        if left > 0:
            self._unfinished[key] = left
            return False
        self._unfinished.pop(key, None)
        self._withdrawn.discard(key)
        return True

    def _release(self, waiting: _Waiting[Any]) -> None:
        """`waiting` no longer asks for anything: it ended, or was dropped before it started."""
        if not waiting.bundle:
            return
        principal = waiting.key[0]
        wanted = self._wanted[principal]
        wanted[waiting.bundle] -= 1
        if wanted[waiting.bundle] <= 0:
            del wanted[waiting.bundle]
        if not wanted:
            del self._wanted[principal]

    async def _follow_the_cluster(self) -> None:
        """While any task is queued or running: every ELASTIC_TICK_S start queued tasks on CPUs that joined, and
        keep the autoscaler's standing request equal to the demand; once nothing is left, withdraw it."""
        assert self.elastic is not None
        try:
            while True:
                self._dispatch()
                demand = self.demand()
                self._tell_the_autoscaler(demand)
                if not demand.bundles and not self._wanted:
                    return
                await asyncio.sleep(ELASTIC_TICK_S)
        finally:
            self._ticking = None

    def _tell_the_autoscaler(self, demand: ResourceDemand) -> None:
        """Make `demand` Ray's standing request. A GCS out of reach a moment is logged, not raised: the next tick
        (or, at start, the first render's) publishes again, as the publisher sends whatever differs from what it
        last sent."""
        assert self.elastic is not None
        try:
            self.elastic.publisher.publish(demand)
        except Exception:  # noqa: BLE001 - a moment without the GCS must end neither the tick nor a start
            logger.exception("could not tell the autoscaler the demand; retrying")

    def _unreserve(self, key: tuple[str, Hashable]) -> None:
        if self._reserved.pop(key, None) is not None:
            self._free()

    def _free(self) -> None:
        self._running -= 1
        self._dispatch()
