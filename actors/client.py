"""The typed clients of vidforge's two service actors: the one place where their callers meet Ray.

`RegistryApi` and `SupervisorApi` are what a caller may ask of the TaskRegistry and of the render supervisor, with
the real signatures. The in-process `TaskRegistry` is a `RegistryApi` itself (checked below, by mypy); the supervisor
actor's class lives in a higher room (serve_app.rendering.supervisor) and is checked where it is handed to
`open_supervisor`. On a cluster, `RegistryClient` and `SupervisorClient` stand for the actors: each call goes to the
actor's handle under the protocol method's own name and signature, and its `ObjectRef` is awaited in
`ActorClient.answer`, which turns Ray's failures into the project's errors: the actor gone or unreachable is
`ActorUnavailable`; an exception the method raised (QuotaExceeded, IdempotencyConflict, ...) arrives as itself.
Nothing is bounded here: the registry and the supervisor are restarted forever with their calls retried (see
`singleton_actor_options`), so a caller that must answer in time bounds its own wait.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import ray

from actors._observer import RegistryObserver
from actors.actor_calls import ActorCall, ActorClient, ActorUnavailable, tell
from actors.change_feed import Changes, Snapshot
from actors.handle import REGISTRY_NAME, SUPERVISOR_NAME, singleton_actor_options
from actors.held_records import StateHealth
from actors.settings import RegistrySettings
from actors.task_registry import QUEUED_MESSAGE, Created, TaskRegistry
from mcp_protocol.domain import ApprovalAnswer, Artifact, Phase, RenderEnd, RenderRequest, TaskRecord
from mcp_protocol.webhook_events import Attempt, Backlog, Delivery

log = logging.getLogger(__name__)

__all__ = ["ActorUnavailable", "RegistryApi", "RegistryClient", "SupervisorApi", "SupervisorClient"]


class RegistryApi(Protocol):
    """What callers ask of the TaskRegistry (its own docstrings say what each call does)."""

    async def start(self) -> None: ...
    async def state_health(self) -> StateHealth: ...

    # reads
    async def get(self, principal: str, task_id: str) -> TaskRecord | None: ...
    async def read(self, principal: str, task_id: str) -> Snapshot: ...
    async def changes(self, epoch: str | None, since: int, timeout_s: float) -> Changes: ...
    async def get_any(self, task_id: str) -> TaskRecord | None: ...
    async def get_artifact(self, principal: str, task_id: str) -> Artifact | None: ...
    async def nonterminal(self) -> list[TaskRecord]: ...
    async def known_task_ids(self, task_ids: list[str]) -> set[str]: ...
    async def count_active(self, principal: str) -> int: ...
    async def list_owned(
        self, principal: str, limit: int, before: tuple[int, str] | None = None
    ) -> list[TaskRecord]: ...
    async def watch(
        self, principal: str, task_ids: list[str], versions: dict[str, int], timeout_s: float
    ) -> list[TaskRecord]: ...

    # a principal's actions
    async def create(
        self, principal: str, request: RenderRequest, initial_message: str = QUEUED_MESSAGE
    ) -> Created: ...
    async def replay(self, principal: str, request: RenderRequest) -> TaskRecord | None: ...
    async def answer_input(
        self, principal: str, task_id: str, approved: bool, note: str | None = None, key: str | None = None
    ) -> ApprovalAnswer: ...
    async def request_cancel(self, principal: str, task_id: str) -> TaskRecord | None: ...

    # the render supervisor's reports
    async def set_progress(
        self,
        task_id: str,
        frames_done: int,
        frames_total: int,
        phase: Phase | None = None,
        message: str | None = None,
        fps: float | None = None,
        source_fps: float | None = None,
        frames_written: int = 0,
    ) -> TaskRecord | None: ...
    async def request_input(self, task_id: str, timeout_s: float, message: str | None = None) -> TaskRecord | None: ...
    async def finish(self, task_id: str, end: RenderEnd, message: str | None = None) -> TaskRecord | None: ...
    async def bump_attempt(self, task_id: str) -> TaskRecord | None: ...
    async def renew_leases(self, task_ids: list[str]) -> None: ...

    # the webhook outbox: its dispatcher, and `GET /webhooks`
    async def webhooks_due(self, now_ms: int, limit: int, lease_until_ms: int) -> list[Delivery]: ...
    async def record_webhook_attempt(self, event_id: str, attempt: Attempt) -> None: ...
    async def list_webhook_deliveries(
        self, principal: str, limit: int, before: tuple[int, str] | None = None
    ) -> list[Delivery]: ...
    async def webhook_backlog(self) -> Backlog: ...
    async def webhooks_added(self, seen: str | None, timeout_s: float) -> str: ...


class SupervisorApi(Protocol):
    """What callers ask of the render supervisor (serve_app.rendering.supervisor.RenderSupervisor)."""

    async def resumed(self) -> bool: ...
    async def ready(self) -> bool: ...
    async def start(self, task_id: str) -> None: ...
    async def cancel(self, task_id: str) -> None: ...


_IN_PROCESS: type[RegistryApi] = TaskRegistry  # the in-process registry is one: mypy checks every signature


class RegistryClient(ActorClient):
    """The cluster's TaskRegistry actor, as a `RegistryApi`."""

    start = ActorCall(RegistryApi.start)
    state_health = ActorCall(RegistryApi.state_health)
    get = ActorCall(RegistryApi.get)
    read = ActorCall(RegistryApi.read)
    changes = ActorCall(RegistryApi.changes)
    get_any = ActorCall(RegistryApi.get_any)
    get_artifact = ActorCall(RegistryApi.get_artifact)
    nonterminal = ActorCall(RegistryApi.nonterminal)
    known_task_ids = ActorCall(RegistryApi.known_task_ids)
    count_active = ActorCall(RegistryApi.count_active)
    list_owned = ActorCall(RegistryApi.list_owned)
    watch = ActorCall(RegistryApi.watch)
    create = ActorCall(RegistryApi.create)
    replay = ActorCall(RegistryApi.replay)
    answer_input = ActorCall(RegistryApi.answer_input)
    request_cancel = ActorCall(RegistryApi.request_cancel)
    set_progress = ActorCall(RegistryApi.set_progress)
    request_input = ActorCall(RegistryApi.request_input)
    finish = ActorCall(RegistryApi.finish)
    bump_attempt = ActorCall(RegistryApi.bump_attempt)
    renew_leases = ActorCall(RegistryApi.renew_leases)
    webhooks_due = ActorCall(RegistryApi.webhooks_due)
    record_webhook_attempt = ActorCall(RegistryApi.record_webhook_attempt)
    list_webhook_deliveries = ActorCall(RegistryApi.list_webhook_deliveries)
    webhook_backlog = ActorCall(RegistryApi.webhook_backlog)
    webhooks_added = ActorCall(RegistryApi.webhooks_added)


class SupervisorClient(ActorClient):
    """The cluster's render supervisor actor, as a `SupervisorApi`."""

    resumed = ActorCall(SupervisorApi.resumed)
    ready = ActorCall(SupervisorApi.ready)
    start = ActorCall(SupervisorApi.start)
    cancel = ActorCall(SupervisorApi.cancel)


class NamedSupervisor:
    """The registry's ``Driver`` in a cluster: asks the render supervisor actor, found by name, to start a
    task. Fire-and-forget: the supervisor's start is idempotent, and the registry's sweep asks again when no
    lease renewal follows (the supervisor restarting, or not created yet while the server starts)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._handle: Any = None  # looked up on first use, in the registry's process; a handle outlives restarts

    def drive(self, task_id: str) -> None:
        if self._handle is None:
            try:
                self._handle = ray.get_actor(SUPERVISOR_NAME, namespace=self.namespace)
            except ValueError:
                log.warning("no render supervisor yet to drive %s; the next sweep asks again", task_id)
                return
        tell(self._handle, SupervisorApi.start, task_id)


def open_registry(config: RegistrySettings, observer: RegistryObserver | None = None) -> RegistryClient:
    """One registry per cluster (per ``config.namespace``), recovering from the store under ``config.state_dir``
    (on the head node, where it is pinned) whenever it is restarted; its sweep deletes expired files from the
    media store and re-drives unleased tasks through the namespace's render supervisor. ``observer`` (pickled into
    the actor) is told of its records when the actor is created; a registry already running keeps its own."""
    handle = (
        ray.remote(TaskRegistry)
        .options(**singleton_actor_options(REGISTRY_NAME, config.namespace))
        .remote(config, driver=NamedSupervisor(config.namespace), observer=observer)
    )
    # Housekeeping otherwise starts with the first call; start it now (idempotent, fire-and-forget).
    tell(handle, RegistryApi.start)
    return RegistryClient(handle, "task registry")


def open_supervisor(actor_class: type[SupervisorApi], config_json: str, namespace: str) -> SupervisorClient:
    """The cluster's render supervisor (per ``namespace``), created from ``actor_class(config_json)`` unless it runs."""
    handle = ray.remote(actor_class).options(**singleton_actor_options(SUPERVISOR_NAME, namespace)).remote(config_json)
    return SupervisorClient(handle, "render supervisor")
