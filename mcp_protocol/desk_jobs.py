"""Tool calls kept as tasks outside the TaskRegistry, which keeps renders only: imports (mcp_protocol.imports) and
inspections (mcp_protocol.inspections), each kind by a desk of its own in serve_app.

`DeskJob` is what a desk hands the wire, the way `TaskRecord` is the registry's: an ext-tasks task (working →
completed | cancelled) whose `result` is the `CallToolResult` the call answers with, an error envelope included
([7.failed-task]: completed is delivery). Each kind's task ids carry its prefix, so `tasks/*` find the right keeper
from the id alone; like a render's, an id is unguessable and answered only to the principal that started the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, cast

from pydantic import BaseModel, ConfigDict

from mcp_protocol import errors
from mcp_protocol._tasks import TaskParams, UpdateTaskParams, check_mcp_name, missing_tasks_capability
from mcp_protocol.domain import TaskStatus
from mcp_protocol.json_types import JSONObject
from mcp_protocol.timefmt import iso_ms
from mcp_protocol.views import Caller


class DeskJob(BaseModel):
    """One job as its desk holds it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str
    principal: str
    status: TaskStatus
    status_message: str
    created_at_ms: int
    last_updated_at_ms: int
    ttl_ms: int
    poll_interval_ms: int
    result: object = None  # the call's CallToolResult (JSON), exactly when completed


class JobKeeper(Protocol):
    """What `tasks/*` need of a desk: a principal's job by id, and its cancel."""

    async def get(self, principal: str, task_id: str) -> DeskJob | None:
        """The job, or None when unknown, expired or another principal's (answered identically)."""
        ...

    async def cancel(self, principal: str, task_id: str) -> DeskJob | None:
        """Stop the job (nothing of it is kept); the job as it is now, or None as for `get`."""
        ...


def _task_fields(job: DeskJob) -> JSONObject:
    return {
        "taskId": job.task_id,
        "status": job.status.value,
        "statusMessage": job.status_message,
        "createdAt": iso_ms(job.created_at_ms),
        "lastUpdatedAt": iso_ms(job.last_updated_at_ms),
        "ttlMs": job.ttl_ms,
        "pollIntervalMs": job.poll_interval_ms,
    }


def desk_task_created(job: DeskJob) -> JSONObject:
    """ext-tasks CreateTaskResult for a desk job (its keeper already holds it: `tasks/get` resolves)."""
    return {"resultType": "task", **_task_fields(job)}


def desk_detailed_task(job: DeskJob) -> JSONObject:
    """ext-tasks DetailedTask for a desk job: the result inline once completed. A desk job never asks for input."""
    body: JSONObject = {"resultType": "complete", **_task_fields(job)}
    if job.status is TaskStatus.COMPLETED and job.result is not None:
        body["result"] = cast(JSONObject, job.result)  # built by the desk: the call's result or `tool_error_result`
    return body


class DeskTaskMethods:
    """`tasks/get`, `tasks/update` and `tasks/cancel` for a desk job's task id, under the rules renders' follow
    (mcp_protocol._tasks): `Mcp-Name` must match, the request must declare the extension, and an unknown, expired or
    foreign id is one answer."""

    def __init__(self, keeper: JobKeeper) -> None:
        self._keeper = keeper

    async def _job(self, caller: Caller, headers: Mapping[str, str] | None, task_id: str) -> DeskJob:
        check_mcp_name(headers, task_id)
        if not caller.tasks:
            raise missing_tasks_capability()
        job = await self._keeper.get(caller.principal, task_id)
        if job is None:
            raise errors.task_not_found()
        return job

    async def get(self, caller: Caller, headers: Mapping[str, str] | None, params: TaskParams) -> JSONObject:
        return desk_detailed_task(await self._job(caller, headers, params.task_id))

    async def update(self, caller: Caller, headers: Mapping[str, str] | None, params: UpdateTaskParams) -> JSONObject:
        """A desk job asks for no input, so every response is one to an unknown key: ignored (ext-tasks SHOULD)."""
        await self._job(caller, headers, params.task_id)
        return {"resultType": "complete"}

    async def cancel(self, caller: Caller, headers: Mapping[str, str] | None, params: TaskParams) -> JSONObject:
        """Cooperative, like a render's: the ack says the request was taken; `tasks/get` shows the end."""
        job = await self._job(caller, headers, params.task_id)
        await self._keeper.cancel(caller.principal, job.task_id)
        return {"resultType": "complete"}
