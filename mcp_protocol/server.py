"""The vidforge MCP server on the SDK's low-level `Server` (MCP 2026-07-28, stateless single exchange).

The SDK owns JSON-RPC framing, `_meta`/header validation, version negotiation, `resultType` and the
`serverInfo` stamp; this module supplies the contract's exact discovery surface and handlers.

The same handlers serve 2025-era clients (2025-11-25, 2025-06-18): the SDK answers `initialize` and sieves
every core result through the negotiated revision's schema, so `resultType`, `ttlMs`, `cacheScope` and the
`serverInfo` stamp never reach them. Such a request negotiates no tasks and no elicitation (`caller_of`),
so it renders through contract §4's fallback tools.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import anyio
from mcp.server.apps import client_supports_apps
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    METHOD_NOT_FOUND,
    CallToolRequestParams,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    RequestParams,
    SubscriptionsListenRequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.requests import Request

from mcp_protocol import errors, views
from mcp_protocol._elicitation import declared_modes
from mcp_protocol._render_service import RenderService
from mcp_protocol._tasks import (
    SUBSCRIPTION_ID_META_KEY,
    StreamNotification,
    TaskMethods,
    TaskParams,
    UpdateTaskParams,
    missing_tasks_capability,
)
from mcp_protocol._tools import ToolCalls
from mcp_protocol._wire_settings import WireSettings
from mcp_protocol.app_view import UI_EXTENSION, VIEW_URI, view_contents, view_resource, with_view_meta
from mcp_protocol.catalog import (
    CAPABILITIES_URI,
    VIDEO_URI,
    capability_summary,
    input_schemas,
    resource_templates,
    tool_definitions,
)
from mcp_protocol.desk_jobs import DeskTaskMethods
from mcp_protocol.domain import Succeeded, TaskRecord
from mcp_protocol.envelope import VidforgeError, as_mcp_error
from mcp_protocol.identity import PROTOCOL_VERSION, SERVER_NAME, TASKS_EXTENSION, server_version
from mcp_protocol.imports import AssetImports, is_import_task
from mcp_protocol.inspections import VideoInspections, is_inspect_task
from mcp_protocol.json_types import JSONObject
from mcp_protocol.quality import QcReport
from mcp_protocol.state_outage import StateUnavailable
from mcp_protocol.streams import STREAM_FILE_KINDS, STREAM_FILE_URI
from mcp_protocol.views import Caller

DISCOVERY_TTL_MS = 3_600_000
RESOURCE_TTL_MS = 60_000
LISTEN_WAIT_S = 10.0
# `watch` with no known versions returns every visible record at once; only unknown ids wait this long.
LOOKUP_WAIT_S = 0.05

INSTRUCTIONS = (
    "vidforge renders video assets (uploaded, or imported from a link with vidforge_import_asset) to mp4/webm/mov. "
    "Read vidforge://capabilities (or call "
    "vidforge_get_capabilities) first: it states the task semantics, fallbacks and error catalog."
)

# The SDK's per-request context on the HTTP transport (`request` is the Starlette request); vidforge uses no
# lifespan state.
RequestContext: TypeAlias = ServerRequestContext[Any, Request]

# Matched whole (`fullmatch`: a `$` would also match before a final newline), as every id a caller sends is.
_PREVIEW_URI = re.compile(r"vidforge://renders/(?P<id>[A-Za-z0-9_-]{1,128})/watermark-preview\.png")
_POSTER_URI = re.compile(r"vidforge://videos/(?P<id>[A-Za-z0-9_-]{1,128})/poster\.jpg")
_CONTACT_SHEET_URI = re.compile(r"vidforge://videos/(?P<id>[A-Za-z0-9_-]{1,128})/contact-sheet\.jpg")
_QC_URI = re.compile(r"vidforge://videos/(?P<id>[A-Za-z0-9_-]{1,128})/qc\.json")


def discover_result() -> JSONObject:
    """Contract §1: exactly these capabilities, `ttlMs` 3 600 000, private scope."""
    return {
        "resultType": "complete",
        "supportedVersions": [PROTOCOL_VERSION],
        "capabilities": {
            "tools": {"listChanged": True},
            "resources": {},
            "extensions": {TASKS_EXTENSION: {}, UI_EXTENSION: {}},
        },
        "instructions": INSTRUCTIONS,
        "ttlMs": DISCOVERY_TTL_MS,
        "cacheScope": "private",
    }


def caller_of(ctx: RequestContext) -> Caller:
    """Per-request negotiated capabilities ([1.negotiated-caps]) and the authenticated principal.

    Only a 2026-07-28 request negotiates per request. A handshake-era (2025) request resolves to no tasks
    and no elicitation whatever its `_meta` says — the contract §4 fallback path. (A 2025-11-25 `tasks`
    capability declared at `initialize` is the legacy, wire-incompatible design; it is never remembered
    here, the server being stateless.)
    """
    modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
    meta = ((ctx.params or {}).get("_meta") or {}) if modern else {}
    caps = meta.get(CLIENT_CAPABILITIES_META_KEY) or {}
    extensions = caps.get("extensions") or {}
    request = ctx.request
    # Starlette's AuthenticationMiddleware puts a `BaseUser` on scope["user"]; `identity` is the principal.
    principal = request.user.identity if request is not None else "local"
    elicitation = declared_modes(caps.get("elicitation"))
    # The render view: declared with its MIME type on a 2026-07-28 request; always on a 2025 one, whose handshake
    # this stateless server cannot remember (mcp_protocol.app_view).
    ui = client_supports_apps(ctx) if modern else True
    return Caller(principal=principal, tasks=TASKS_EXTENSION in extensions, elicitation=elicitation, ui=ui)


def require_modern(ctx: RequestContext) -> None:
    """`tasks/*` exist only on the 2026-07-28 wire (ext-tasks). On a 2025 connection they are unknown
    methods (-32601), as `subscriptions/listen` already is: the server advertised no 2025-11-25 `tasks`
    capability at `initialize`, and that revision's `tasks/get`/`tasks/cancel` are a different design."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=ctx.method)


def _headers(ctx: RequestContext) -> Headers | None:
    return ctx.request.headers if ctx.request is not None else None


def resource_error(error: VidforgeError, uri: str) -> MCPError:
    """A `resources/read` failure: the envelope, plus the requested `uri` in `error.data`, which the
    resources error-handling rules ask for (SEP-2164)."""
    mcp_error = as_mcp_error(error)
    mcp_error.error.data = {**mcp_error.error.data, "uri": uri}
    return mcp_error


ParamsT = TypeVar("ParamsT")


def enveloped(
    handler: Callable[[RequestContext, ParamsT], Awaitable[JSONObject]],
) -> Callable[[RequestContext, ParamsT], Awaitable[JSONObject]]:
    """Every JSON-RPC error a method answers carries the contract's envelope in `data`: the task state out of reach
    as the temporary error with its retry hint, any other fault as `internal_error` under a request_id its log line
    names (the SDK's own answer would be a bare -32603)."""

    @functools.wraps(handler)
    async def answer(ctx: RequestContext, params: ParamsT) -> JSONObject:
        try:
            return await handler(ctx, params)
        except MCPError:
            raise
        except StateUnavailable as unavailable:
            raise as_mcp_error(unavailable.error()) from None
        except VidforgeError as error:
            raise as_mcp_error(error) from None
        except Exception as exc:
            fault = errors.internal_error(
                "vidforge hit an unexpected fault handling this request.",
                None,
                "Internal error; details are in the server log under this request_id.",
                errors.FAULT_RETRY_AFTER_MS,
            )
            fault.report(cause=exc)
            raise as_mcp_error(fault) from None

    return answer


class VidforgeServer:
    """Builds the SDK server wired to a `RenderService`."""

    def __init__(
        self, service: RenderService, settings: WireSettings, imports: AssetImports, inspections: VideoInspections
    ) -> None:
        self.service = service
        self.settings = settings
        self.tools = ToolCalls(service, settings, imports, inspections)
        self.tasks = TaskMethods(service, settings)
        # The tasks of `vidforge_import_asset` and `vidforge_inspect_video`, told apart by their ids.
        self.import_tasks = DeskTaskMethods(imports)
        self.inspect_tasks = DeskTaskMethods(inspections)
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version=server_version(),
            instructions=INSTRUCTIONS,
            get_tool_input_schema=lambda name: input_schemas().get(name),
        )
        self.server.extensions[TASKS_EXTENSION] = {}
        self.server.extensions[UI_EXTENSION] = {}

        # Registered as plain request handlers (the constructor's `on_*` hooks do the same, but are typed for the
        # SDK's result models): the contract's shapes are built here, as JSON.
        def handle(
            method: str, params_type: Any, handler: Callable[[RequestContext, Any], Awaitable[JSONObject]]
        ) -> None:
            self.server.add_request_handler(method, params_type, enveloped(handler))

        handle("server/discover", RequestParams, self._discover)
        handle("tools/list", PaginatedRequestParams, self._list_tools)
        handle("tools/call", CallToolRequestParams, self._call_tool)
        handle("resources/list", PaginatedRequestParams, self._list_resources)
        handle("resources/templates/list", PaginatedRequestParams, self._list_templates)
        handle("resources/read", ReadResourceRequestParams, self._read_resource)
        handle("subscriptions/listen", SubscriptionsListenRequestParams, self._listen)
        handle("tasks/get", TaskParams, self._tasks_get)
        handle("tasks/update", UpdateTaskParams, self._tasks_update)
        handle("tasks/cancel", TaskParams, self._tasks_cancel)

    async def _discover(self, ctx: RequestContext, params: RequestParams) -> JSONObject:
        return discover_result()

    async def _list_tools(self, ctx: RequestContext, params: PaginatedRequestParams | None) -> JSONObject:
        tools = tool_definitions(self.settings)
        return {
            "resultType": "complete",
            "tools": with_view_meta(tools) if caller_of(ctx).ui else tools,
            "ttlMs": DISCOVERY_TTL_MS,
            "cacheScope": "private",
        }

    async def _call_tool(self, ctx: RequestContext, params: CallToolRequestParams) -> JSONObject:
        if not self.tools.known(params.name):
            raise as_mcp_error(errors.unknown_tool(params.name))
        return await self.tools.call(caller_of(ctx), params.name, params.arguments)

    async def _list_resources(self, ctx: RequestContext, params: PaginatedRequestParams | None) -> JSONObject:
        resources: list[JSONObject] = [
            {
                "uri": CAPABILITIES_URI,
                "name": "capabilities",
                "title": "vidforge capability summary",
                "description": "What vidforge does and does not do, task semantics, fallbacks, error catalog.",
                "mimeType": "application/json",
            }
        ]
        if caller_of(ctx).ui:
            resources.append(view_resource())
        return {
            "resultType": "complete",
            "resources": resources,
            "ttlMs": DISCOVERY_TTL_MS,
            "cacheScope": "private",
        }

    async def _list_templates(self, ctx: RequestContext, params: PaginatedRequestParams | None) -> JSONObject:
        return {
            "resultType": "complete",
            "resourceTemplates": resource_templates(self.settings),
            "ttlMs": DISCOVERY_TTL_MS,
            "cacheScope": "private",
        }

    async def _read_resource(self, ctx: RequestContext, params: ReadResourceRequestParams) -> JSONObject:
        uri = str(params.uri)
        principal = caller_of(ctx).principal
        if uri in (CAPABILITIES_URI, VIEW_URI):
            if uri == VIEW_URI:
                contents = view_contents(self.settings.public_base_url)
            else:
                summary = capability_summary(self.settings)
                contents = {"uri": uri, "mimeType": "application/json", "text": json.dumps(summary, indent=2)}
            return {
                "resultType": "complete",
                "contents": [contents],
                "ttlMs": DISCOVERY_TTL_MS,
                "cacheScope": "private",
            }
        try:
            if match := VIDEO_URI.fullmatch(uri):
                artifact, data = await self.service.read_video(principal, match["id"], match["ext"])
                mime = artifact.mime
            elif match := _PREVIEW_URI.fullmatch(uri):
                data, mime = await self.service.read_preview(principal, match["id"]), "image/png"
            elif match := _POSTER_URI.fullmatch(uri):
                data, mime = await self.service.read_poster(principal, match["id"]), "image/jpeg"
            elif match := _CONTACT_SHEET_URI.fullmatch(uri):
                rec, _ = await self._quality_checked(principal, match["id"])
                if (sheet := await self.service.contact_sheet(rec)) is None:
                    raise errors.resource_not_found(None, self.settings.result_retention_s)
                data, mime = sheet, "image/jpeg"
            elif match := STREAM_FILE_URI.fullmatch(uri):
                data = await self.service.read_stream_file(principal, match["id"], match["name"])
                kind = STREAM_FILE_KINDS[match["ext"]]
                mime = kind.mime
                if kind.text:
                    text = {"uri": uri, "mimeType": mime, "text": data.decode("utf-8")}
                    return {
                        "resultType": "complete",
                        "contents": [text],
                        "ttlMs": RESOURCE_TTL_MS,
                        "cacheScope": "private",
                    }
            elif match := _QC_URI.fullmatch(uri):
                _, qc = await self._quality_checked(principal, match["id"])
                report = {"uri": uri, "mimeType": "application/json", "text": json.dumps(qc.to_json(), indent=2)}
                return {
                    "resultType": "complete",
                    "contents": [report],
                    "ttlMs": RESOURCE_TTL_MS,
                    "cacheScope": "private",
                }
            else:
                raise errors.resource_not_found(None, self.settings.result_retention_s)
        except VidforgeError as error:
            raise resource_error(error, uri) from None
        except StateUnavailable as unavailable:
            raise resource_error(unavailable.error(), uri) from None
        contents = {"uri": uri, "mimeType": mime, "blob": base64.b64encode(data).decode("ascii")}
        return {"resultType": "complete", "contents": [contents], "ttlMs": RESOURCE_TTL_MS, "cacheScope": "private"}

    async def _quality_checked(self, principal: str, render_id: str) -> tuple[TaskRecord, QcReport]:
        """`principal`'s finished render and its quality report; resource_not_found for any other (unknown, another
        principal's, not finished, or finished without the check)."""
        rec = await self.service.get_render(principal, render_id)
        if rec is None or not isinstance(rec.end, Succeeded) or rec.end.artifact.qc is None:
            raise errors.resource_not_found(None, self.settings.result_retention_s)
        return rec, rec.end.artifact.qc

    def _task_methods(self, params: TaskParams) -> TaskMethods | DeskTaskMethods:
        if is_import_task(params.task_id):
            return self.import_tasks
        return self.inspect_tasks if is_inspect_task(params.task_id) else self.tasks

    async def _tasks_get(self, ctx: RequestContext, params: TaskParams) -> JSONObject:
        require_modern(ctx)
        return await self._task_methods(params).get(caller_of(ctx), _headers(ctx), params)

    async def _tasks_update(self, ctx: RequestContext, params: UpdateTaskParams) -> JSONObject:
        require_modern(ctx)
        return await self._task_methods(params).update(caller_of(ctx), _headers(ctx), params)

    async def _tasks_cancel(self, ctx: RequestContext, params: TaskParams) -> JSONObject:
        require_modern(ctx)
        return await self._task_methods(params).cancel(caller_of(ctx), _headers(ctx), params)

    async def _listen(self, ctx: RequestContext, params: SubscriptionsListenRequestParams) -> JSONObject:
        """`subscriptions/listen`: ack first, then `notifications/tasks` (a full DetailedTask) whenever the
        status or `statusMessage` of a requested task changes: live progress is a poll-sooner signal too, and
        its rate is bounded where it is produced (the render driver reports at most four times a second). A task
        already ended when looked up gets its terminal notification right after the ack; each task gets its
        terminal notification exactly once, and is not watched after it. Tools and resources never change at
        runtime, so those opt-ins are honoured and simply never fire.

        Bounded, since a stream holds an ingress slot (and one of the principal's listen leases, see
        serve_app/ingress/admission.py): at most `max_task_ids` taskIds (-32602 beyond), looked up in one registry
        call; the stream ends gracefully once every task is terminal, at once when it watches nothing that
        can fire (only unknown or foreign ids), and after `idle_s` without a notification (clients re-listen;
        polling stays authoritative).
        """
        caller = caller_of(ctx)
        limits = self.settings
        subscription_id = ctx.request_id
        meta = {SUBSCRIPTION_ID_META_KEY: subscription_id}
        requested = params.notifications.model_dump(by_alias=True, exclude_none=True)
        task_ids = requested.pop("taskIds", None)
        honored = {k: v for k, v in requested.items() if k in ("toolsListChanged", "resourcesListChanged") and v}
        list_changes = bool(honored)
        records: dict[str, TaskRecord] = {}
        if task_ids is not None:
            if not caller.tasks:
                raise missing_tasks_capability()
            if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
                raise MCPError(code=-32602, message="notifications.taskIds must be an array of strings")
            if len(task_ids) > limits.max_listen_task_ids:
                raise as_mcp_error(errors.too_many_task_ids(len(task_ids), limits.max_listen_task_ids))
            wanted = list(dict.fromkeys(task_ids))
            visible = await self.service.watch(caller.principal, wanted, {}, LOOKUP_WAIT_S)
            found = {rec.task_id: rec for rec in visible}
            records = {task_id: found[task_id] for task_id in wanted if task_id in found}
            honored["taskIds"] = list(records)

        async def send(method: str, body: JSONObject) -> None:
            # The stream's `_meta` beside the task's own (the caller's metadata: mcp_protocol._caller_metadata).
            own = body.get("_meta")
            params = {**body, "_meta": {**(own if isinstance(own, dict) else {}), **meta}}
            await ctx.session.send_notification(
                # Its types list no extension notification, but the session sends any method/params model.
                StreamNotification(method=method, params=params),  # type: ignore[arg-type]
                related_request_id=subscription_id,
            )

        await send("notifications/subscriptions/acknowledged", {"notifications": honored})
        review_url = self.service.review_url

        async def detailed(rec: TaskRecord) -> JSONObject:
            watch_url, sheet = self.service.watch_url(rec), await self.service.contact_sheet(rec)
            retention_s = self.settings.result_retention_s
            stream_url = self.service.stream_url(rec)
            return views.detailed_task(rec, caller, retention_s, review_url(rec), watch_url, sheet, stream_url)

        ended: set[str] = set()  # the tasks whose terminal notification has been sent
        for task_id, rec in records.items():
            if rec.status.terminal:  # ended before the stream opened: the loop would never see it change
                ended.add(task_id)
                task = await detailed(rec)
                task.pop("resultType")
                await send("notifications/tasks", task)
        last_sent = {
            task_id: (rec.status.value, views.status_message(rec, caller, review_url(rec)))
            for task_id, rec in records.items()
        }
        versions = {task_id: rec.version for task_id, rec in records.items()}
        idle_deadline = anyio.current_time() + limits.listen_idle_s
        while records and not all(r.status.terminal for r in records.values()):
            remaining = idle_deadline - anyio.current_time()
            if remaining <= 0:
                break
            wait_s = min(LISTEN_WAIT_S, remaining)
            live = [task_id for task_id in records if task_id not in ended]
            for rec in await self.service.watch(caller.principal, live, versions, wait_s):
                if rec.task_id in ended:
                    continue
                records[rec.task_id] = rec
                versions[rec.task_id] = rec.version
                task = await detailed(rec)
                shown = (rec.status.value, str(task["statusMessage"]))
                if shown != last_sent[rec.task_id]:
                    last_sent[rec.task_id] = shown
                    if rec.status.terminal:
                        ended.add(rec.task_id)
                    task.pop("resultType")
                    await send("notifications/tasks", task)
                    idle_deadline = anyio.current_time() + limits.listen_idle_s
        if not records and list_changes:
            # Only never-firing list-change opt-ins: hold the stream, but not forever.
            await anyio.sleep(limits.listen_idle_s)
        return {"resultType": "complete", "_meta": meta}
