"""How a client command ends: its exit code (the CLI reference documents them) and one line that names the cause
and the fix. Failures of the transport, wherever httpx2 or the SDK raised them (inside the exception groups of the
SDK's task groups too), are translated here, so no traceback reaches the person."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from enum import IntEnum
from typing import TypeVar

import httpx2
from pydantic import BaseModel, ValidationError

from vidforge_client.address import TOKEN_VARIABLE, ServerAddress

AnswerT = TypeVar("AnswerT", bound=BaseModel)


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1  # the render ended without a video: it failed, the watermark was rejected or never approved, or
    # it was cancelled elsewhere
    USAGE = 2  # bad flags or input: a source or watermark that is missing or that the server refused, an output
    # that cannot be written, an unknown render id
    SERVER = 3  # the server cannot be reached, refused the credential, or failed
    INTERRUPTED = 130  # Ctrl-C: a render in progress was cancelled on the server


class ClientFailure(Exception):
    def __init__(self, exit_code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message


class TaskOutcome(Exception):
    """How a task this client followed ended, when that ends the command (vidforge_client.tasks raises them)."""

    def failure(self) -> ClientFailure:
        raise NotImplementedError


def unreachable(address: ServerAddress) -> ClientFailure:
    return ClientFailure(
        ExitCode.SERVER,
        f"cannot reach {address.mcp_url}: is `vidforge serve` running? (start it with `make serve`, or pass --server)",
    )


def credential_refused(address: ServerAddress, status: int) -> ClientFailure:
    if address.token is None:
        fix = f"pass --token or set {TOKEN_VARIABLE} to a token from the server's tokens file"
        return ClientFailure(ExitCode.SERVER, f"{address.base_url} wants a bearer token ({status}): {fix}")
    fix = f"check --token / {TOKEN_VARIABLE} against the server's tokens file"
    return ClientFailure(ExitCode.SERVER, f"{address.base_url} refused the bearer token ({status}): {fix}")


def failure_of(exc: BaseException, address: ServerAddress) -> ClientFailure | None:
    """The failure `exc` stands for (a ClientFailure raised anywhere under it, a task that ended without a result, or a
    transport failure); None for anything else."""
    leaves = list(_leaves(exc))
    for leaf in leaves:
        if isinstance(leaf, ClientFailure):
            return leaf
        if isinstance(leaf, TaskOutcome):
            return leaf.failure()
    # Only a command that loaded the MCP SDK can have raised its error: the others never import it (most of their
    # start-up time).
    sdk_errors = sys.modules.get("mcp.shared.exceptions")
    for leaf in leaves:
        if isinstance(leaf, httpx2.ConnectError | httpx2.ConnectTimeout):
            return unreachable(address)
        if isinstance(leaf, httpx2.TimeoutException):
            return ClientFailure(ExitCode.SERVER, f"{address.mcp_url} stopped answering (timed out); try again")
        if isinstance(leaf, httpx2.TransportError):
            return ClientFailure(ExitCode.SERVER, f"lost the connection to {address.mcp_url} ({leaf}); try again")
        if sdk_errors is not None and isinstance(leaf, sdk_errors.MCPError):
            return ClientFailure(ExitCode.SERVER, f"{address.mcp_url} refused the request: {leaf.message}")
    return None


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def read_as(model: type[AnswerT], body: object, what: str) -> AnswerT:
    """The server's answer to `what` read into its model (mcp_protocol.answers); a ClientFailure of one line, naming
    the first field that does not fit, when it is not that shape."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        why = f"{where}: {first['msg']}".replace("\n", " ")
        raise ClientFailure(
            ExitCode.SERVER, f"the server's answer to {what} is not one this client reads ({why})"
        ) from None
