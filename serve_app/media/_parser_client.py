"""The typed client of a media parser actor (serve_app.media.media_probe.MediaParser): what a parse asks of it.

A module of its own because a parser worker imports media_probe and must start light: this one imports the actors
package (its typed calls), which the processes that start a parse have loaded anyway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from actors.actor_calls import ActorCall, ActorClient
from render_kernels.media_io import Media

PARSER = "media parser"  # the actor, as its errors name it


class ParserApi(Protocol):
    """What a parse asks of its MediaParser (whose methods are plain functions run in its worker process)."""

    async def ready(self) -> bool: ...
    async def run(self, fn: Callable[..., Any], path: Media, *args: Any) -> Any: ...


class ParserClient(ActorClient):
    """One parse's MediaParser actor: `ready` answers once its process has started and capped its memory, `run`
    with the parse's value or the kernel's own exception; the process dying is `ActorUnavailable`."""

    ready = ActorCall(ParserApi.ready)
    run = ActorCall(ParserApi.run)
