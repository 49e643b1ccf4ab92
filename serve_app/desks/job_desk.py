"""A desk: one actor for the cluster that runs one kind of tool call as jobs and keeps each as a task until its TTL.

Detached and named, like the render supervisor, so a job outlives the replica that accepted it and any replica
answers `tasks/get` for it; the one place that sees all of its kind, so a per-principal cap holds however many
replicas there are. Its table is in memory: a job takes minutes at most, and a restarted desk (its process lost)
forgets the jobs it held, whose tasks then answer "not found" (ext-tasks allows that of a task that is gone).

`JobDesk` is the table — taking a job on within the principal's cap, `get`, `wait`, `cancel`, the end of every run
(completed with the call's result, an error envelope being one, or cancelled) and the TTL; a kind of desk
(serve_app.importing.desk, serve_app.inspecting.desk) says what its jobs do (`_result`) and how they read while
they run (`HeldJob.message`). `LazyDesk` is how a replica reaches a kind's actor: started with the cluster's first
job of that kind, found by name after.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import ray

from actors.handle import singleton_actor_options
from mcp_protocol.desk_jobs import DeskJob
from mcp_protocol.domain import TaskStatus
from mcp_protocol.json_types import JSONObject
from mcp_protocol.timefmt import now_ms
from serve_app._config import Config


class DeskAtCapacity(Exception):
    """The principal already has `limit` jobs of this kind in progress (the desk's cap setting)."""

    def __init__(self, active: int, limit: int) -> None:
        super().__init__(active, limit)  # in `args`, so it survives Ray's pickling
        self.active = active
        self.limit = limit


def new_task_id(prefix: str) -> str:
    """Opaque and unguessable, as a render's task id: 130 random bits after the kind's prefix."""
    return prefix + base64.b32encode(secrets.token_bytes(17)).decode().lower()[:26]


@dataclass
class HeldJob:
    """One job while its desk holds it; a kind of desk adds what its runs need and say."""

    task_id: str
    principal: str
    created_at_ms: int
    updated_at_ms: int
    status: TaskStatus = field(default=TaskStatus.WORKING, init=False)
    result: JSONObject | None = field(default=None, init=False)  # the call's result, once completed
    ended: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def message(self) -> str:
        """The task's statusMessage."""
        raise NotImplementedError


H = TypeVar("H", bound=HeldJob)


class JobDesk(Generic[H]):
    """The table of one kind's jobs (see the module), each job's run in its own asyncio task."""

    def __init__(self, config: Config, max_active: int) -> None:
        self.config = config
        self.max_active = max_active  # jobs in progress per principal
        self.jobs: dict[str, H] = {}
        self.runs: dict[str, asyncio.Task[None]] = {}

    async def get(self, principal: str, task_id: str) -> DeskJob | None:
        self._forget_expired()
        held = self._owned(principal, task_id)
        return self._job(held) if held is not None else None

    async def wait(self, principal: str, task_id: str, timeout_s: float | None = None) -> DeskJob | None:
        """The job once it has ended, or as it is after `timeout_s` (None: no bound) if that comes first; None when
        not this principal's."""
        held = self._owned(principal, task_id)
        if held is None:
            return None
        try:
            await asyncio.wait_for(held.ended.wait(), timeout_s)
        except TimeoutError:
            pass
        return self._job(held)

    async def cancel(self, principal: str, task_id: str) -> DeskJob | None:
        held = self._owned(principal, task_id)
        if held is None:
            return None
        if (run := self.runs.get(task_id)) is not None:
            run.cancel()
        return self._job(held)

    async def _result(self, held: H) -> JSONObject:
        """The call's result for `held` (an error envelope when it failed); a cancel raises CancelledError here."""
        raise NotImplementedError

    def _take(self, held: H) -> DeskJob:
        """Hold `held` and start its run, unless its principal is at the cap (DeskAtCapacity)."""
        self._forget_expired()
        active = sum(1 for job in self.jobs.values() if job.principal == held.principal and not job.status.terminal)
        if active >= self.max_active:
            raise DeskAtCapacity(active, self.max_active)
        self.jobs[held.task_id] = held
        run = asyncio.get_running_loop().create_task(self._run(held))
        run.add_done_callback(lambda _: self._settle(held))
        self.runs[held.task_id] = run
        return self._job(held)

    async def _run(self, held: H) -> None:
        self._end(held, TaskStatus.COMPLETED, await self._result(held))

    def _settle(self, held: H) -> None:
        """Its run is over: a job that did not complete was cancelled (maybe before its first step)."""
        self.runs.pop(held.task_id, None)
        if not held.status.terminal:
            self._end(held, TaskStatus.CANCELLED, None)

    def _end(self, held: H, status: TaskStatus, result: JSONObject | None) -> None:
        held.status, held.result, held.updated_at_ms = status, result, now_ms()
        held.ended.set()

    def _job(self, held: H) -> DeskJob:
        return DeskJob(
            task_id=held.task_id,
            principal=held.principal,
            status=held.status,
            status_message=held.message(),
            created_at_ms=held.created_at_ms,
            last_updated_at_ms=held.updated_at_ms,
            ttl_ms=self.config.task_ttl_ms,
            poll_interval_ms=self.config.poll_interval_ms,
            result=held.result,
        )

    def _owned(self, principal: str, task_id: str) -> H | None:
        held = self.jobs.get(task_id)
        return held if held is not None and held.principal == principal else None

    def _forget_expired(self) -> None:
        """Ended jobs past the task TTL go: `tasks/get` answers them as unknown, as ext-tasks allows."""
        cutoff = now_ms() - self.config.task_ttl_ms
        for task_id in [k for k, held in self.jobs.items() if held.status.terminal and held.created_at_ms < cutoff]:
            del self.jobs[task_id]


class JobCalls(Protocol):
    """What every desk's typed client answers besides its kind's own start."""

    async def get(self, principal: str, task_id: str) -> DeskJob | None: ...
    async def wait(self, principal: str, task_id: str, timeout_s: float | None = None) -> DeskJob | None: ...
    async def cancel(self, principal: str, task_id: str) -> DeskJob | None: ...


C = TypeVar("C", bound=JobCalls)


class LazyDesk(Generic[C]):
    """A kind's desk actor as a replica reaches it, through its typed client `C`; a kind's client subclasses it
    with its own start (`started()` creates the desk; `get`, `wait` and `cancel` here ask after a job, `found()`).

    The desk starts with the cluster's first job of its kind, not with the server: a server that never runs one runs
    no process for it (every Python process of Ray's wakes 100 times a second, ~0.006 CPU-s per second at rest, CPU
    that renders then do not get). Once started it stays, found by name. Until then nothing is held, so a question
    about a job answers None without starting it."""

    def __init__(
        self, config: Config, desk_class: type, name: str, client: Callable[[Any, str], C], described: str
    ) -> None:
        self._config, self._desk_class, self._name = config, desk_class, name
        self._client, self._described = client, described
        self._desk: C | None = None

    def started(self) -> C:
        """The desk's client, the actor created unless it runs (or another replica has created it)."""
        if self._desk is None:
            options = singleton_actor_options(self._name, self._config.namespace)
            handle = ray.remote(self._desk_class).options(**options).remote(self._config.to_json())
            self._desk = self._client(handle, self._described)
        return self._desk

    def found(self) -> C | None:
        """The desk's client once it runs (has been started by any replica); None before."""
        if self._desk is None:
            try:
                handle = ray.get_actor(self._name, namespace=self._config.namespace)
            except ValueError:  # no actor of that name: no job of this kind has been started
                return None
            self._desk = self._client(handle, self._described)
        return self._desk

    async def get(self, principal: str, task_id: str) -> DeskJob | None:
        desk = self.found()
        return None if desk is None else await desk.get(principal, task_id)

    async def wait(self, principal: str, task_id: str, timeout_s: float | None = None) -> DeskJob | None:
        desk = self.found()
        return None if desk is None else await desk.wait(principal, task_id, timeout_s)

    async def cancel(self, principal: str, task_id: str) -> DeskJob | None:
        desk = self.found()
        return None if desk is None else await desk.cancel(principal, task_id)
