"""The `io.modelcontextprotocol/tasks` extension for the official `mcp` SDK client (2.3), through its public
extension hooks only.

The SDK knows nothing of tasks but takes `ClientExtension`s: `TasksExtension` declares the extension on every request
and claims the `resultType: "task"` answer of `tools/call`. Its resolver follows the task to its end: it polls
`tasks/get` at the `pollIntervalMs` each answer gives (the server may change it between polls), hands every state to a
`TaskFollower` (a progress display, whoever answers the task's input requests), sends the follower's answers with
`tasks/update`, and returns the task's `CallToolResult` as soon as a poll finds it completed, so `call_tool` reads as
an ordinary call. Setting the `cancel` event sends `tasks/cancel` and ends the call with `TaskCancelled`.

    follower = MyFollower()
    tasks = TasksExtension(follower)
    async with Client(streamable_http_client(url, http_client=http), extensions=[tasks],
                      elicitation_callback=tasks.elicitation_callback) as client:
        result = await client.call_tool("vidforge_render_video", arguments)  # follows the task to its end
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, TypeVar

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types import (
    CallToolResult,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    EmptyResult,
    ErrorData,
    Request,
    RequestParams,
    Result,
)
from pydantic import BaseModel, field_validator

from vidforge_client.failures import ClientFailure, ExitCode, TaskOutcome

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
DEFAULT_POLL_INTERVAL_MS = 1000  # for a task answer that gives none (ext-tasks makes pollIntervalMs optional)

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
ElicitParams = ElicitRequestFormParams | ElicitRequestURLParams
ResultT = TypeVar("ResultT", bound=Result)


class CreatedTask(Result):
    """What `tools/call` answers when the server runs the call as a task (ext-tasks CreateTaskResult)."""

    result_type: Literal["task"]
    task_id: str
    poll_interval_ms: int | None = None


class InputRequest(BaseModel):
    """One entry of a task's `inputRequests`: a server-to-client request the task waits on (an
    `elicitation/create`: the watermark approval is one)."""

    method: str
    params: ElicitParams  # in the mode the server chose: `url`, else a form

    @field_validator("params", mode="before")
    @classmethod
    def _in_its_mode(cls, params: object) -> object:
        if isinstance(params, dict):
            mode = ElicitRequestURLParams if params.get("mode") == "url" else ElicitRequestFormParams
            return mode.model_validate(params)
        return params

    def elicitation(self) -> ElicitParams:
        """The `elicitation/create` params."""
        return self.params


class TaskState(Result):
    """What `tasks/get` answers (ext-tasks DetailedTask)."""

    task_id: str
    status: TaskStatus
    status_message: str | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, InputRequest] | None = None
    result: CallToolResult | None = None  # when completed: the tool's result
    error: ErrorData | None = None  # when failed: the JSON-RPC error


class TaskParams(RequestParams):
    task_id: str
    input_responses: dict[str, ElicitResult] | None = None  # tasks/update: the answers, by input request


class TaskRequest(Request[TaskParams, str]):  # tasks/get, tasks/update, tasks/cancel
    name_param = "taskId"  # sent as the Mcp-Name header, as the tasks extension requires


class TaskEnded(TaskOutcome):
    """The task ended without a result: `failed` (a JSON-RPC error) or `cancelled` (not by this client)."""

    def __init__(self, state: TaskState) -> None:
        why = state.error.message if state.error is not None else state.status_message
        super().__init__(f"task {state.task_id} {state.status}: {why}")
        self.state = state

    def failure(self) -> ClientFailure:
        return ClientFailure(ExitCode.FAILED, f"{self.state.task_id} was {self.state.status} on the server")


class TaskCancelled(TaskOutcome):
    """This client asked the server to cancel the task (the `cancel` event), and the server took the request."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id} cancelled on request")
        self.task_id = task_id

    def failure(self) -> ClientFailure:
        return ClientFailure(ExitCode.INTERRUPTED, f"interrupted: {self.task_id} was cancelled on the server")


class TaskFollower(Protocol):
    """Whoever watches the task: told when it starts and of every state polled, and asked each input request once."""

    def started(self, task_id: str) -> None: ...

    def polled(self, state: TaskState) -> None: ...

    async def answer(self, state: TaskState, request: ElicitParams, session: ClientSession) -> ElicitResult | None:
        """The answer to send through `tasks/update`, or None when the decision is taken elsewhere (a review page
        the person opens, a tool the follower called through `session`): the next polls show it."""
        ...


class TasksExtension(ClientExtension):
    identifier = TASKS_EXTENSION

    def __init__(self, follower: TaskFollower, cancel: anyio.Event | None = None) -> None:
        self.follower = follower
        self.cancel = cancel or anyio.Event()

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.follow)]

    async def follow(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        """Poll the task until it ends; answer its input requests on the way."""
        task_id = created.task_id
        self.follower.started(task_id)
        interval_ms = created.poll_interval_ms or DEFAULT_POLL_INTERVAL_MS
        asked: set[str] = set()
        while True:
            if self.cancel.is_set():
                await _send(ctx.session, "tasks/cancel", TaskParams(task_id=task_id), EmptyResult)
                raise TaskCancelled(task_id)
            state = await _send(ctx.session, "tasks/get", TaskParams(task_id=task_id), TaskState)
            self.follower.polled(state)
            if state.status == "completed":
                if state.result is None:
                    raise ValueError(f"task {task_id} completed without its result")
                return state.result
            if state.status in ("failed", "cancelled"):
                raise TaskEnded(state)
            interval_ms = state.poll_interval_ms or interval_ms
            new = {key: request for key, request in (state.input_requests or {}).items() if key not in asked}
            if new:
                asked.update(new)
                await self._answer(ctx.session, state, new)
                continue  # look again at once: the answer may have moved the task on
            with anyio.move_on_after(interval_ms / 1000):
                await self.cancel.wait()

    async def _answer(self, session: ClientSession, state: TaskState, requests: dict[str, InputRequest]) -> None:
        answers: dict[str, ElicitResult] = {}
        for key, request in requests.items():
            answer = await self.follower.answer(state, request.elicitation(), session)
            if answer is not None:
                answers[key] = answer  # sent as the SDK sends every request: by alias, without nulls
        if answers:
            update = TaskParams(task_id=state.task_id, input_responses=answers)
            await _send(session, "tasks/update", update, EmptyResult)

    async def elicitation_callback(self, context: Any, params: ElicitParams) -> ElicitResult:
        """Given to the SDK's `Client` so that it declares the elicitation capability (both modes), which a task's
        input requests need. A task asks through `inputRequests`, which `follow` answers; an elicitation sent to
        the client directly belongs to no task this client follows, and is declined."""
        return ElicitResult(action="decline")


async def _send(session: ClientSession, method: str, params: TaskParams, result_type: type[ResultT]) -> ResultT:
    return await session.send_request(TaskRequest(method=method, params=params), result_type)
