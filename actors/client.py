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
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, cast, overload

import ray

from actors.change_feed import Changes, Snapshot
from actors.handle import REGISTRY_NAME, SUPERVISOR_NAME, singleton_actor_options
from actors.held_records import StateHealth
from actors.observer import RegistryObserver
from actors.settings import RegistrySettings
from actors.task_registry import QUEUED_MESSAGE, Created, TaskRegistry
from mcp_protocol.domain import ApprovalAnswer, Artifact, Phase, RenderEnd, RenderRequest, TaskRecord
from mcp_protocol.webhook_events import Attempt, Backlog, Delivery

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


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

    async def ready(self) -> bool: ...
    async def start(self, task_id: str) -> None: ...
    async def cancel(self, task_id: str) -> None: ...


_IN_PROCESS: type[RegistryApi] = TaskRegistry  # the in-process registry is one: mypy checks every signature


class ActorUnavailable(Exception):
    """A service actor did not take or answer a call: it died for good, or Ray cannot reach it (its node lost)."""

    def __init__(self, actor: str, reason: str) -> None:
        super().__init__(actor, reason)
        self.actor = actor
        self.reason = reason

    def __str__(self) -> str:
        return f"the {self.actor} actor is unavailable: {self.reason}"


class ActorClient:
    """A service actor's handle, and the one place its answers are awaited."""

    def __init__(self, handle: Any, actor: str) -> None:
        self.handle = handle
        self.actor = actor  # its name, for the errors

    async def answer(self, ref: Any) -> Any:
        """The call's answer; Ray's failures of the actor as `ActorUnavailable`, the method's own exception as it was
        raised (Ray hands it over wrapped, its remote traceback kept as the cause)."""
        try:
            return await ref
        except ray.exceptions.RayTaskError as err:
            if isinstance(err.cause, Exception):
                raise err.cause from err
            raise
        except ray.exceptions.RayActorError as err:  # ActorDiedError, ActorUnavailableError
            raise ActorUnavailable(self.actor, f"{type(err).__name__}: {err}") from err


class _Call(Generic[P, R]):
    """A protocol method, called on the client's actor under the same name, with the protocol's signature."""

    def __init__(self, method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> None:
        self.name = method.__name__

    @overload
    def __get__(self, client: None, owner: type) -> _Call[P, R]: ...
    @overload
    def __get__(self, client: ActorClient, owner: type) -> Callable[P, Coroutine[Any, Any, R]]: ...
    def __get__(self, client: ActorClient | None, owner: type) -> _Call[P, R] | Callable[P, Coroutine[Any, Any, R]]:
        if client is None:
            return self
        method = getattr(client.handle, self.name)

        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return cast(R, await client.answer(method.remote(*args, **kwargs)))

        return call


class RegistryClient(ActorClient):
    """The cluster's TaskRegistry actor, as a `RegistryApi`."""

    start = _Call(RegistryApi.start)
    state_health = _Call(RegistryApi.state_health)
    get = _Call(RegistryApi.get)
    read = _Call(RegistryApi.read)
    changes = _Call(RegistryApi.changes)
    get_any = _Call(RegistryApi.get_any)
    get_artifact = _Call(RegistryApi.get_artifact)
    nonterminal = _Call(RegistryApi.nonterminal)
    known_task_ids = _Call(RegistryApi.known_task_ids)
    count_active = _Call(RegistryApi.count_active)
    list_owned = _Call(RegistryApi.list_owned)
    watch = _Call(RegistryApi.watch)
    create = _Call(RegistryApi.create)
    replay = _Call(RegistryApi.replay)
    answer_input = _Call(RegistryApi.answer_input)
    request_cancel = _Call(RegistryApi.request_cancel)
    set_progress = _Call(RegistryApi.set_progress)
    request_input = _Call(RegistryApi.request_input)
    finish = _Call(RegistryApi.finish)
    bump_attempt = _Call(RegistryApi.bump_attempt)
    renew_leases = _Call(RegistryApi.renew_leases)
    webhooks_due = _Call(RegistryApi.webhooks_due)
    record_webhook_attempt = _Call(RegistryApi.record_webhook_attempt)
    list_webhook_deliveries = _Call(RegistryApi.list_webhook_deliveries)
    webhook_backlog = _Call(RegistryApi.webhook_backlog)
    webhooks_added = _Call(RegistryApi.webhooks_added)


class SupervisorClient(ActorClient):
    """The cluster's render supervisor actor, as a `SupervisorApi`."""

    ready = _Call(SupervisorApi.ready)
    start = _Call(SupervisorApi.start)
    cancel = _Call(SupervisorApi.cancel)


def _tell(handle: Any, method: Callable[Concatenate[Any, P], object], *args: P.args, **kwargs: P.kwargs) -> None:
    """Call an actor method without waiting for its answer: Ray submits the call at once."""
    getattr(handle, method.__name__).remote(*args, **kwargs)


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
        _tell(self._handle, SupervisorApi.start, task_id)


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
    _tell(handle, RegistryApi.start)
    return RegistryClient(handle, "task registry")


def open_supervisor(actor_class: type[SupervisorApi], config_json: str, namespace: str) -> SupervisorClient:
    """The cluster's render supervisor (per ``namespace``), created from ``actor_class(config_json)`` unless it runs."""
    handle = ray.remote(actor_class).options(**singleton_actor_options(SUPERVISOR_NAME, namespace)).remote(config_json)
    return SupervisorClient(handle, "render supervisor")
