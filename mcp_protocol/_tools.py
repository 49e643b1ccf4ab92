"""`tools/call` for the six vidforge tools (contract §2 and §4, and `vidforge_import_asset`: mcp_protocol.imports).

Every failure below the argument check is a tool error ([6.validation-as-tool-error]); only an unknown
tool name is a JSON-RPC error (`-32602`, core `server/tools.mdx`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import cast

import anyio
from pydantic import BaseModel, ConfigDict

from mcp_protocol import errors, views
from mcp_protocol._arguments import validate_arguments
from mcp_protocol._caller_metadata import value_too_long, with_metadata
from mcp_protocol._render_service import RenderService
from mcp_protocol._wire_settings import WireSettings
from mcp_protocol.app_view import VIEW_META_KEY, view_state
from mcp_protocol.asset_uri import AssetRef
from mcp_protocol.catalog import (
    APPROVE_TOOL,
    CANCEL_TOOL,
    CAPABILITIES_TOOL,
    IMPORT_TOOL,
    INSPECT_TOOL,
    RENDER_TOOL,
    STATUS_TOOL,
    capability_summary,
)
from mcp_protocol.desk_jobs import desk_task_created
from mcp_protocol.domain import AnswerResult, RenderRequest, Succeeded, TaskRecord, TaskStatus
from mcp_protocol.envelope import VidforgeError, repair, tool_error_result
from mcp_protocol.imports import AssetImports, ImportRequest
from mcp_protocol.inspections import InspectRequest, VideoInspections, inspection_accepted
from mcp_protocol.json_types import JSONObject, with_meta_entry
from mcp_protocol.results import end_result, with_quality
from mcp_protocol.state_outage import StateUnavailable
from mcp_protocol.streams import with_stream
from mcp_protocol.views import Caller


class RenderTarget(BaseModel):
    """The arguments of the status and cancel tools (validated against their inputSchemas first)."""

    model_config = ConfigDict(frozen=True)
    render_id: str


class ApprovalDecision(RenderTarget):
    """`vidforge_approve_watermark`'s arguments."""

    approved: bool
    note: str | None = None


def _ok(structured: JSONObject, text: str | None = None) -> JSONObject:
    return {
        "resultType": "complete",
        "isError": False,
        "content": [{"type": "text", "text": text or json.dumps(structured, separators=(",", ":"))}],
        "structuredContent": structured,
    }


def _rungs_above(args: JSONObject, above: tuple[str, ...], resolution: str) -> VidforgeError:
    """The refusal of a stream's rungs larger than the render: the repair asks again without them."""
    asked = cast(JSONObject, args["streaming"])  # an object with a ladder of strings: the schema passed it
    kept = [rung for rung in cast(list[str], asked["ladder"]) if rung not in above]
    streaming = {**asked, "ladder": kept} if kept else {key: value for key, value in asked.items() if key != "ladder"}
    return errors.invalid_argument(
        f"Invalid arguments for {RENDER_TOOL}.",
        "streaming.ladder",
        f"'streaming.ladder' names {', '.join(above)}, larger than the render's resolution {resolution}",
        repair(
            "fix_argument_value",
            RENDER_TOOL,
            {**args, "streaming": streaming},
            f"A stream's sizes are at most the render's resolution: drop {', '.join(above)} or render at a "
            f"higher resolution, and call {RENDER_TOOL} again.",
        ),
    )


def _follow_up(render_id: str) -> JSONObject:
    return {"next_step": "poll_render_status", "tool": STATUS_TOOL, "arguments": {"render_id": render_id}}


class ToolCalls:
    """Dispatches a validated `tools/call` to the service and shapes the result."""

    def __init__(
        self, service: RenderService, settings: WireSettings, imports: AssetImports, inspections: VideoInspections
    ) -> None:
        self._service = service
        self._settings = settings
        self._imports = imports
        self._inspections = inspections
        self._handlers: dict[str, Callable[[Caller, JSONObject], Awaitable[JSONObject]]] = {
            RENDER_TOOL: self._render,
            STATUS_TOOL: self._status,
            APPROVE_TOOL: self._approve,
            CANCEL_TOOL: self._cancel,
            CAPABILITIES_TOOL: self._capabilities,
            IMPORT_TOOL: self._import,
            INSPECT_TOOL: self._inspect,
        }

    def known(self, name: str) -> bool:
        return name in self._handlers

    async def call(self, caller: Caller, name: str, arguments: object) -> JSONObject:
        try:
            return await self._handlers[name](caller, validate_arguments(name, arguments))
        except VidforgeError as error:
            return tool_error_result(error)
        except StateUnavailable as unavailable:
            return tool_error_result(unavailable.error())
        except Exception as exc:
            # A fault must still reach the agent as a contract-shaped, retryable error; its traceback is logged
            # under the request_id the agent sees.
            fault = errors.internal_error(
                "vidforge hit an unexpected fault handling this call.",
                None,
                "Internal error; details are in the server log under this request_id.",
                errors.FAULT_RETRY_AFTER_MS,
                repair("retry_call", name, arguments if isinstance(arguments, dict) else {}),
            )
            fault.report(cause=exc)
            return tool_error_result(fault)

    async def _render(self, caller: Caller, args: JSONObject) -> JSONObject:
        request = RenderRequest.model_validate(args)
        if request.metadata and (refusal := value_too_long(RENDER_TOOL, args, request.metadata)) is not None:
            raise refusal
        if request.streaming is not None and (above := request.streaming.above(request.resolution)):
            raise _rungs_above(args, above, request.resolution)
        for field, uri in request.asset_uris().items():  # parsed here, once, whole: the request keeps only these
            if AssetRef.parse(uri) is None:
                raise errors.source_not_found(field, errors.no_asset_at(uri))
        rec = await self._service.create_render(caller.principal, request)
        retention_s = self._settings.result_retention_s
        if caller.tasks:
            return views.create_task_result(rec, caller)
        metadata = rec.request.metadata
        if not rec.status.terminal:
            return with_metadata(views.accepted_result(rec, retention_s), metadata)
        # An idempotent replay of a finished render, without tasks: answer what the render ended with.
        if rec.status is TaskStatus.COMPLETED:
            service = self._service
            sheet = await service.contact_sheet(rec)
            result = end_result(rec, retention_s, service.watch_url(rec), sheet, service.stream_url(rec))
            return with_metadata(result, metadata)
        raise errors.render_cancelled(request, self._settings.idempotency_ttl_s)

    async def _get(self, caller: Caller, render_id: str) -> TaskRecord:
        rec = await self._service.get_render(caller.principal, render_id)
        if rec is None:
            raise errors.render_not_found(render_id, self._settings.result_retention_s)
        return rec

    async def _status(self, caller: Caller, args: JSONObject) -> JSONObject:
        rec = await self._get(caller, RenderTarget.model_validate(args).render_id)
        service, retention_s = self._service, self._settings.result_retention_s
        status = _ok(views.render_status(rec, retention_s, service.review_url(rec), service.watch_url(rec)))
        if isinstance(rec.end, Succeeded):
            # Clients without tasks read the video from here: the quality check's report and sheet, and the stream,
            # ride along as they do on the render's result (the status's structuredContent is closed).
            checked = with_quality(status, rec.task_id, rec.end.artifact, await service.contact_sheet(rec))
            status = with_stream(checked, rec.task_id, rec.request, rec.end.artifact, service.stream_url(rec))
        if caller.ui:  # what the render view shows beside the closed structuredContent
            status = with_meta_entry(status, VIEW_META_KEY, view_state(rec, service.view_links(rec)))
        return status

    async def _approve(self, caller: Caller, args: JSONObject) -> JSONObject:
        decision = ApprovalDecision.model_validate(args)
        render_id = decision.render_id
        answer = await self._service.answer_approval(caller.principal, render_id, decision.approved, decision.note)
        rec = answer.task
        if answer.result is AnswerResult.NOT_FOUND or rec is None:
            raise errors.render_not_found(render_id, self._settings.result_retention_s)
        if answer.result is AnswerResult.CONFLICT:
            raise errors.approval_already_recorded(render_id, bool(rec.approval and rec.approval.approved))
        if answer.result not in (AnswerResult.RECORDED, AnswerResult.REPLAYED):
            raise errors.approval_not_pending(render_id, views.fallback_state(rec).value)
        structured: JSONObject = {
            "render_id": render_id,
            "approved": decision.approved,
            "state": views.fallback_state(rec).value,
            "replayed": answer.result is AnswerResult.REPLAYED,
            "follow_up": _follow_up(render_id),
        }
        return _ok(structured)

    async def _cancel(self, caller: Caller, args: JSONObject) -> JSONObject:
        render_id = RenderTarget.model_validate(args).render_id
        rec = await self._service.cancel_render(caller.principal, render_id)
        if rec is None:
            raise errors.render_not_found(render_id, self._settings.result_retention_s)
        state = views.fallback_state(rec).value if rec.status.terminal else "cancelling"
        structured: JSONObject = {
            "acknowledged": True,
            "state": state,
            "render_id": render_id,
            "follow_up": _follow_up(render_id),
        }
        return _ok(structured)

    async def _capabilities(self, caller: Caller, args: JSONObject) -> JSONObject:
        return _ok(capability_summary(self._settings))

    async def _import(self, caller: Caller, args: JSONObject) -> JSONObject:
        """A task when the request declares the extension; otherwise the bounded wait (mcp_protocol.imports)."""
        request = ImportRequest.model_validate(args)
        job = await self._imports.start(caller.principal, request.url)
        if caller.tasks:
            return desk_task_created(job)
        try:
            ended = await self._imports.wait(caller.principal, job.task_id)
        except BaseException:
            # This call is the import's only handle: if it goes away, so does the import (nobody would learn the
            # asset's URI), with nothing of it kept.
            with anyio.CancelScope(shield=True):
                await self._imports.cancel(caller.principal, job.task_id)
            raise
        if ended is None or ended.result is None:  # its keeper restarted and lost it
            raise errors.internal_error(
                "The import was interrupted before it ended; nothing of it was kept.",
                "url",
                "The import's keeper restarted during the import.",
                2000,
                repair("retry_import", IMPORT_TOOL, args),
            )
        return cast(JSONObject, ended.result)

    async def _inspect(self, caller: Caller, args: JSONObject) -> JSONObject:
        """In the call when the video is short or the caller has no tasks, within a bounded wait; else a task
        (mcp_protocol.inspections)."""
        request = InspectRequest.model_validate(args)
        started = await self._inspections.start(caller.principal, request.uri)
        job = started.job
        if caller.tasks and started.duration_s > self._settings.inspect_answer_max_s:
            return desk_task_created(job)
        ended = await self._inspections.wait(caller.principal, job.task_id, self._settings.inspect_wait_s)
        if ended is None:  # its keeper restarted and lost it: the same call starts it again
            raise errors.inspect_failed("the inspection was interrupted (its keeper restarted)", request.uri)
        if ended.status is TaskStatus.WORKING:
            return desk_task_created(ended) if caller.tasks else inspection_accepted(request.uri, ended)
        if ended.result is None:  # cancelled (tasks/cancel from another call)
            raise errors.inspect_failed("the inspection was cancelled before it ended", request.uri)
        return cast(JSONObject, ended.result)
