"""How vidforge calls an actor: one typed client per actor, built from a Protocol of what callers may ask of it.

A client subclasses `ActorClient` and names each protocol method once, as an `ActorCall` (awaited: its answer, or
Ray's failure of the actor as `ActorUnavailable`, or the method's own exception as itself) or an `ActorCast` (sent,
not awaited). mypy then checks every call against the protocol's signature, so a changed argument fails the type
check at the caller, and `.remote(` is written here and where actors and tasks are defined, nowhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, cast, overload

import ray

P = ParamSpec("P")
R = TypeVar("R")


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


class ActorCall(Generic[P, R]):
    """A protocol method, called on the client's actor under the same name, with the protocol's signature."""

    def __init__(self, method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> None:
        self.name = method.__name__

    @overload
    def __get__(self, client: None, owner: type) -> ActorCall[P, R]: ...
    @overload
    def __get__(self, client: ActorClient, owner: type) -> Callable[P, Coroutine[Any, Any, R]]: ...
    def __get__(self, client: ActorClient | None, owner: type) -> ActorCall[P, R] | Callable[P, Coroutine[Any, Any, R]]:
        if client is None:
            return self
        method = getattr(client.handle, self.name)

        async def call(*args: P.args, **kwargs: P.kwargs) -> R:
            return cast(R, await client.answer(method.remote(*args, **kwargs)))

        return call


class ActorCast(Generic[P]):
    """A protocol method sent to the client's actor without waiting for its answer (a report, a nudge): Ray submits
    the call at once and the caller goes on; the actor's failure to take it is not the caller's to handle."""

    def __init__(self, method: Callable[Concatenate[Any, P], Coroutine[Any, Any, None]]) -> None:
        self.name = method.__name__

    @overload
    def __get__(self, client: None, owner: type) -> ActorCast[P]: ...
    @overload
    def __get__(self, client: ActorClient, owner: type) -> Callable[P, None]: ...
    def __get__(self, client: ActorClient | None, owner: type) -> ActorCast[P] | Callable[P, None]:
        if client is None:
            return self
        method = getattr(client.handle, self.name)

        def send(*args: P.args, **kwargs: P.kwargs) -> None:
            method.remote(*args, **kwargs)

        return send


def tell(handle: Any, method: Callable[Concatenate[Any, P], object], *args: P.args, **kwargs: P.kwargs) -> None:
    """Call an actor method without waiting for its answer: Ray submits the call at once."""
    getattr(handle, method.__name__).remote(*args, **kwargs)
