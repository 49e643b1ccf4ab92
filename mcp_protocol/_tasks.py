"""The `io.modelcontextprotocol/tasks` extension methods (ext-tasks 2026-07-28, contract §3).

Served as plain request handlers on the SDK's low-level server: `tasks/get`, `tasks/update`,
`tasks/cancel`, and the `taskIds` filter of `subscriptions/listen`. There is no `tasks/result` and no
`tasks/list` — those stay unregistered, so the SDK answers them `-32601`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Literal

from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import decode_header_value
from mcp_types import RequestParams
from pydantic import BaseModel, ConfigDict, Field

from mcp_protocol import errors, views
from mcp_protocol._render_service import RenderService
from mcp_protocol._wire_settings import WireSettings
from mcp_protocol.catalog import APPROVE_TOOL
from mcp_protocol.domain import TaskRecord
from mcp_protocol.envelope import VidforgeError, as_mcp_error, repair
from mcp_protocol.identity import TASKS_EXTENSION
from mcp_protocol.json_types import JSONObject
from mcp_protocol.text_limits import FREE_TEXT_MAX_CHARS, too_long
from mcp_protocol.views import Caller

HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"


class TaskParams(RequestParams):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    task_id: str = Field(alias="taskId")


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, object] = Field(alias="inputResponses")  # each checked by `approval_answer`


class StreamNotification(BaseModel):
    """A notification for a listen stream (`notifications/subscriptions/acknowledged`, `notifications/tasks`).

    The SDK's session sends any model whose dump is a method/params pair; its own types have no
    `notifications/tasks`, an extension method.
    """

    jsonrpc: Literal["2.0"] = "2.0"
    method: str
    params: dict[str, object]  # JSON built by this server (a DetailedTask, an acknowledgement)


def missing_tasks_capability() -> MCPError:
    """ext-tasks: a request that did not declare the extension cannot operate on tasks (-32021)."""
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message="Missing required client capability",
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def check_mcp_name(headers: Mapping[str, str] | None, task_id: str) -> None:
    """ext-tasks HTTP routing: a present `Mcp-Name` MUST equal `params.taskId` (the SDK checks only core methods).

    An absent one is served: the header exists so gateways can route without parsing the body, and this
    server needs no routing (any replica reads the shared TaskRegistry); fastmcp-tasks' client omits it and
    its own server accepts that too.
    """
    raw = headers.get("mcp-name") if headers is not None else None
    if raw is not None and decode_header_value(raw) != task_id:
        raise MCPError(
            code=HEADER_MISMATCH,
            message=f"Header mismatch: Mcp-Name header value {raw!r} does not match body taskId {task_id!r}",
        )


def approval_answer(response: object) -> tuple[bool, str | None] | None:
    """Read an elicitation answer: accept → the form's decision; decline → a rejection; cancel → no answer.

    A URL-mode `accept` carries no content (the person went to the review page, which is not a decision:
    mcp_protocol._elicitation), so it is no answer either; the decision arrives through the page."""
    if not isinstance(response, dict):
        return None
    action = response.get("action")
    if action == "decline":
        return False, "User declined the approval form."
    if action != "accept":
        return None
    content = response.get("content") or {}
    approved = content.get("approved") if isinstance(content, dict) else None
    if not isinstance(approved, bool):
        return None
    note = content.get("note")
    return approved, note if isinstance(note, str) else None


def note_refused(task_id: str, key: str, approved: bool, why: str) -> MCPError:
    """-32602 for a form answer whose note is past the free-text limit (mcp_protocol.text_limits), with
    `invalid_argument`'s envelope naming the field and the limit; the repair is the same decision, without it."""
    field = f"inputResponses.{key}.content.note"
    fix = repair(
        "fix_argument_value",
        APPROVE_TOOL,
        {"render_id": task_id, "approved": approved},
        f"Send the decision again with a note of at most {FREE_TEXT_MAX_CHARS} characters, or none.",
    )
    return as_mcp_error(errors.invalid_argument("The answer's note is too long.", field, f"'{field}' has {why}", fix))


class TaskMethods:
    def __init__(self, service: RenderService, settings: WireSettings) -> None:
        self._service = service
        self._settings = settings

    async def _record(
        self, caller: Caller, headers: Mapping[str, str] | None, task_id: str, fresh: bool = False
    ) -> TaskRecord:
        check_mcp_name(headers, task_id)
        if not caller.tasks:
            raise missing_tasks_capability()
        try:
            rec = await self._service.get_render(caller.principal, task_id, fresh=fresh)
        except VidforgeError as error:  # the task state out of reach: the contract's temporary error
            raise as_mcp_error(error) from None
        if rec is None:
            raise errors.task_not_found()
        expired_at_ms = rec.created_at_ms + rec.ttl_ms
        if time.time() * 1000 > expired_at_ms:
            retention_s = self._settings.result_retention_s
            raise as_mcp_error(errors.task_expired(task_id, rec.request.output_format, expired_at_ms, retention_s))
        return rec

    async def get(self, caller: Caller, headers: Mapping[str, str] | None, params: TaskParams) -> JSONObject:
        """`tasks/get` → the DetailedTask with `resultType: "complete"`, terminal payloads inline."""
        rec = await self._record(caller, headers, params.task_id)
        service, retention_s = self._service, self._settings.result_retention_s
        sheet = await service.contact_sheet(rec)
        return views.detailed_task(
            rec, caller, retention_s, service.review_url(rec), service.watch_url(rec), sheet, service.stream_url(rec)
        )

    async def update(self, caller: Caller, headers: Mapping[str, str] | None, params: UpdateTaskParams) -> JSONObject:
        """`tasks/update` → empty ack; responses to unknown, answered or superseded keys are ignored. The keys are
        checked against the registry's own record: a replica's mirror may not have the round just opened yet. An
        answer whose note is past the free-text limit refuses the whole update before anything is recorded."""
        rec = await self._record(caller, headers, params.task_id, fresh=True)
        answers = {key: approval_answer(response) for key, response in params.input_responses.items()}
        for key, answer in answers.items():
            if answer is not None and answer[1] is not None and (why := too_long(answer[1])) is not None:
                raise note_refused(rec.task_id, key, answer[0], why)
        for key, answer in answers.items():
            if rec.pending is None or key != rec.pending.key or answer is None:
                continue
            approved, note = answer
            await self._service.answer_approval(caller.principal, rec.task_id, approved, note, key=key)
        return {"resultType": "complete"}

    async def cancel(self, caller: Caller, headers: Mapping[str, str] | None, params: TaskParams) -> JSONObject:
        """`tasks/cancel` → empty ack, cooperative, idempotent on terminal tasks."""
        rec = await self._record(caller, headers, params.task_id)
        await self._service.cancel_render(caller.principal, rec.task_id)
        return {"resultType": "complete"}
