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
  for a CPU behind other renders, and without a CPU-less task that would need a Ray worker started for it;
- `plan_width`: a render being planned is cut into as many segments as there are CPUs nobody else's work is
  waiting for. On an idle cluster it spreads over every CPU; on a busy one it is a single segment (as long as
  the planner's memory cap allows), because extra segments would only take CPUs from the renders queued ahead
  of it, and each costs an encoder start and a keyframe.

Everything here runs on the driver's event loop (the supervisor actor's): no locks, and `submit`, `withdraw`
and the dispatch never await, so a withdrawn render can have no task started after `withdraw` returns.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import ray

CAPACITY_REFRESH_S = 10.0  # how long a read of the cluster's CPU count is trusted (nodes join and leave)
# How long a render keeps the CPU its last task freed, for its final task: the driver submits that at once
# unless the render still awaits its watermark approval, when the CPU goes back to the queue after this.
FINAL_RESERVE_S = 3.0

Item = TypeVar("Item")


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
    """The cluster's CPU count (at least 1), read again at most every CAPACITY_REFRESH_S."""

    def __init__(self) -> None:
        self._cpus = 1
        self._read_at = -float("inf")

    def __call__(self) -> int:
        if time.monotonic() - self._read_at >= CAPACITY_REFRESH_S:
            self._cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
            self._read_at = time.monotonic()
        return self._cpus


@dataclass(frozen=True)
class Dispatched:
    """A task the scheduler started: its Ray refs, its place in the scheduler's start order (0, 1, ...), and
    how long it waited in the queue."""

    refs: Sequence[ray.ObjectRef]
    order: int
    queued_s: float


@dataclass
class _Waiting:
    start: Callable[[], Sequence[ray.ObjectRef]]
    started: asyncio.Future[Dispatched]
    queued_at: float
    key: tuple[str, Hashable]  # (principal, render)
    final: bool


class SegmentScheduler:
    """Starts queued CPU tasks as CPUs free up, fairly across principals (see the module docstring).

    `capacity` gives the number of tasks that may run at once (default: the cluster's CPUs). One scheduler is
    shared by every render of a supervisor; a render driven alone gets its own.
    """

    def __init__(self, capacity: Callable[[], int] | None = None) -> None:
        self._capacity = capacity or ClusterCpus()
        self._queue: FairQueue[_Waiting] = FairQueue()
        self._final: deque[_Waiting] = deque()  # renders' final tasks: started before anything queued
        self._running = 0  # CPUs held: by started tasks, and reserved for a render's final task
        self._started = 0
        self._unfinished: dict[tuple[str, Hashable], int] = {}  # per render: tasks queued or running
        self._reserved: dict[tuple[str, Hashable], asyncio.TimerHandle] = {}
        self._withdrawn: set[tuple[str, Hashable]] = set()  # until their running tasks have ended

    def plan_width(self) -> int:
        """How many segments a render planned now should aim for: the CPUs that no running or queued task will
        take (at least 1)."""
        return max(1, self._capacity() - self._running - len(self._queue) - len(self._final))

    def idle(self) -> bool:
        """No task running, queued or reserved: a render planned now has the cluster to itself."""
        return self._running == 0 and not self._queue and not self._final

    def submit(
        self, principal: str, render: Hashable, start: Callable[[], Sequence[ray.ObjectRef]], final: bool = False
    ) -> asyncio.Future[Dispatched]:
        """Queue a task; `start()` submits it to Ray and returns its refs. The future resolves once it has been
        started (with `start`'s exception, if it raised), and is cancelled if the render is withdrawn first.
        The task holds its CPU until its first ref settles. A `final` task (one per render, after all its other
        tasks) takes the CPU its render reserved, else the next free one before any other queued task."""
        key = (principal, render)
        waiting = _Waiting(start, asyncio.get_running_loop().create_future(), time.monotonic(), key, final)
        self._unfinished[key] = self._unfinished.get(key, 0) + 1
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

    def withdraw(self, principal: str, render: Hashable) -> None:
        """Drop a render's queued tasks and any CPU reserved for it (its started tasks are the caller's to
        cancel; they free their CPUs as they end)."""
        key = (principal, render)
        dropped = self._queue.remove(principal, render) + [w for w in self._final if w.key == key]
        self._final = deque(w for w in self._final if w.key != key)
        for waiting in dropped:
            waiting.started.cancel()
        self._settle(key, len(dropped))
        if key in self._unfinished:
            self._withdrawn.add(key)
        if (reservation := self._reserved.pop(key, None)) is not None:
            reservation.cancel()
            self._free()

    def _dispatch(self) -> None:
        while (self._final or self._queue) and self._running < self._capacity():
            waiting = self._final.popleft() if self._final else self._queue.pop()
            if waiting.started.done():  # cancelled by its caller without a withdraw: nothing to start
                self._settle(waiting.key, 1)
                continue
            self._running += 1
            self._start(waiting)

    def _start(self, waiting: _Waiting) -> None:
        """Start a task on a CPU already counted in `_running`."""
        try:
            refs = waiting.start()
        except Exception as exc:  # noqa: BLE001 - handed to the render that asked, which fails with it
            waiting.started.set_exception(exc)
            self._settle(waiting.key, 1)
            self._free()
            return
        waiting.started.set_result(Dispatched(refs, self._started, time.monotonic() - waiting.queued_at))
        self._started += 1
        asyncio.ensure_future(self._hold(waiting, refs[0]))

    async def _hold(self, waiting: _Waiting, first: Awaitable) -> None:
        try:
            await first
        except Exception:  # noqa: BLE001 - any end (a failure, a cancel, a lost worker) frees the CPU
            pass
        finally:
            key = waiting.key
            withdrawn = key in self._withdrawn
            if self._settle(key, 1) and not waiting.final and not withdrawn:  # its render's last task
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

    def _unreserve(self, key: tuple[str, Hashable]) -> None:
        if self._reserved.pop(key, None) is not None:
            self._free()

    def _free(self) -> None:
        self._running -= 1
        self._dispatch()
