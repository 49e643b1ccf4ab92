"""The vidforge error catalog: every code an agent can meet, one factory each.

Errors are built here and nowhere else: `error_codes.ErrorCode` lists the codes the capability summary publishes,
whether one is `temporary` is a property of its code, each code has one factory below, and each factory's
wording is here; `envelope` gives them their one shape on the wire ([6.one-envelope]).
tests/test_error_catalog.py checks that the codes, their `temporary` flags and the published `error_catalog`
agree, and that every factory is used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp.shared.exceptions import MCPError

from mcp_protocol.catalog import CAPABILITIES_TOOL, IMPORT_TOOL, RENDER_TOOL, STATUS_TOOL, video_uri
from mcp_protocol.envelope import VidforgeError, repair
from mcp_protocol.error_codes import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, ErrorCode
from mcp_protocol.json_types import JSONObject
from mcp_protocol.text_limits import excerpt
from mcp_protocol.timefmt import duration_adjective, duration_text, iso_ms

if TYPE_CHECKING:
    from mcp_protocol.domain import RenderRequest

DISK_FULL_RETRY_AFTER_MS = 60_000  # a hint, not a limit: about the time for a cleanup or a sweep to free space
FAULT_RETRY_AFTER_MS = 2000  # a hint: an unexpected fault is usually gone on the next try
IMPORT_RETRY_AFTER_MS = 5000  # a hint: a remote that did not deliver is often back, or reachable, within seconds


def rerender_repair(request: RenderRequest, next_step: str, alternative: str) -> JSONObject:
    """[6.repair-intent]: the caller's still-valid original arguments, literally callable."""
    return repair(next_step, RENDER_TOOL, request.arguments(with_key=False), alternative)


def _status_repair(render_id: str, alternative: str | None = None) -> JSONObject:
    return repair("check_render_status", STATUS_TOOL, {"render_id": render_id}, alternative)


# -- the catalog: one factory per code -----------------------------------------------------------------------
# Render outcomes (source_not_found at render time, unsupported_codec, media_limit_exceeded, render_failed,
# render_timeout, storage_full, watermark_*) are stored as their factory's inputs (see domain.py) and built here
# again each time they are read.


def source_not_found(field: str, reason: str) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.SOURCE_NOT_FOUND,
        message="The asset URI resolves to no asset this credential can read.",
        field=field,
        reason=reason,
        repair=repair(
            "upload_asset",
            None,
            {},
            "Upload the file with POST /assets (or `vidforge assets add PATH`) and pass the returned "
            "vidforge://assets/<id> URI.",
        ),
    )


def no_asset_at(uri: object) -> str:
    """source_not_found's reason for a URI that names no asset of this credential (quoted up to the free-text
    bound: the URI is the caller's)."""
    shown = excerpt(uri) if isinstance(uri, str) else uri
    return (
        f"No asset at {shown!r} for this credential (unknown id, another credential's asset, or not a "
        "vidforge://assets/<id> URI)."
    )


def unsupported_codec(field: str, reason: str) -> VidforgeError:
    """The file is not media vidforge can read, or the wrong kind for `field`."""
    return VidforgeError(
        code=ErrorCode.UNSUPPORTED_CODEC,
        message="The asset cannot be rendered.",
        field=field,
        reason=reason,
        repair=repair(
            "upload_supported_asset",
            None,
            {},
            "Upload an H.264/HEVC/VP8/VP9/AV1/MPEG-4 video (mp4, mov, webm, mkv) as the source and a PNG or JPEG "
            "image as the watermark.",
        ),
    )


def watermark_rejected(request: RenderRequest, note: str | None) -> VidforgeError:
    quoted = f"'{excerpt(note)}'" if note else "no note given"  # bounded also for a note kept before the limit
    return VidforgeError(
        code=ErrorCode.WATERMARK_REJECTED,
        message="User declined the watermark preview; the render was not finalized.",
        field="watermark",
        reason=f"User note: {quoted}.",
        repair=rerender_repair(
            request,
            "revise_watermark_and_rerender",
            "Adjust `watermark.position` or `watermark.opacity` per the user's note before re-calling, "
            "or omit `watermark` to render without one.",
        ),
        text=f"User rejected the watermark ({quoted}). Adjust `watermark` and re-call {RENDER_TOOL}.",
    )


def watermark_approval_timeout(request: RenderRequest, timeout_s: float) -> VidforgeError:
    span = duration_text(timeout_s)
    return VidforgeError(
        code=ErrorCode.WATERMARK_APPROVAL_TIMEOUT,
        message=f"No watermark approval arrived within {span}; the render was not finalized.",
        field="watermark",
        reason=f"Approval window of {span} elapsed without a decision.",
        repair=rerender_repair(
            request, "rerender_and_approve", "Re-call to start a new render, then approve the preview promptly."
        ),
    )


def render_quota_exceeded(request: RenderRequest, active: int, limit: int, retry_after_ms: int) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.RENDER_QUOTA_EXCEEDED,
        message="Concurrent-render quota reached for this credential.",
        field=None,
        reason=f"{active} renders in progress (limit {limit}).",
        retry_after_ms=retry_after_ms,
        repair=repair(
            "retry_after_delay",
            RENDER_TOOL,
            request.arguments(),
            "Wait retry_after_ms, or cancel one of your renders with vidforge_cancel_render.",
        ),
    )


def render_failed(request: RenderRequest, reason: str) -> VidforgeError:
    """A renderer fault: temporary, safe to re-call (a new job unless the idempotency key is reused)."""
    return VidforgeError(
        code=ErrorCode.RENDER_FAILED,
        message="The renderer failed before the video was finished.",
        field=None,
        reason=reason,
        retry_after_ms=5000,
        repair=rerender_repair(request, "retry_render", "Re-calling starts a new render job."),
    )


def invalid_argument(message: str, field: str | None, reason: str, fix: JSONObject) -> VidforgeError:
    """[3.closed-schemas] + [6.validation-as-tool-error]: `fix` is the repair (see mcp_protocol.arguments)."""
    return VidforgeError(code=ErrorCode.INVALID_ARGUMENT, message=message, field=field, reason=reason, repair=fix)


def render_not_found(render_id: str, retention_s: int) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.RENDER_NOT_FOUND,
        message="No render with this render_id is visible to this credential.",
        field="render_id",
        reason=f"Unknown render_id, another credential's render, or past its {duration_adjective(retention_s)} "
        "retention.",
        repair=repair(
            "start_new_render",
            RENDER_TOOL,
            {},
            "Check the render_id you persisted; to render again, call vidforge_render_video with your original "
            "arguments.",
        ),
    )


def approval_not_pending(render_id: str, state: str) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.APPROVAL_NOT_PENDING,
        message="This render is not awaiting watermark approval.",
        field="render_id",
        reason=f"Render state is {state}.",
        repair=_status_repair(render_id),
    )


def approval_already_recorded(render_id: str, recorded: bool) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.APPROVAL_ALREADY_RECORDED,
        message="A different watermark decision was already recorded for this render.",
        field="approved",
        reason=f"Recorded decision: approved={str(recorded).lower()}; a decision cannot be changed.",
        repair=_status_repair(render_id),
    )


def render_cancelled(request: RenderRequest, idempotency_ttl_s: int) -> VidforgeError:
    """An idempotent replay (without tasks) of a render that was cancelled."""
    return VidforgeError(
        code=ErrorCode.RENDER_CANCELLED,
        message="The render this idempotency_key names was cancelled.",
        field="idempotency_key",
        reason=f"A cancelled render is final; its key keeps naming it for {duration_text(idempotency_ttl_s)}.",
        repair=rerender_repair(
            request,
            "rerender_with_new_key",
            "Re-call without idempotency_key (or with a new one) to start a new render.",
        ),
    )


def idempotency_conflict(render_id: str) -> VidforgeError:
    """The key already names `render_id`, created with other arguments ([3.idempotency-key]: a key means
    one request). Not temporary: repeating the call cannot succeed; the repair reads the original render."""
    return VidforgeError(
        code=ErrorCode.IDEMPOTENCY_CONFLICT,
        message="This idempotency_key already names a render that was created with different arguments.",
        field="idempotency_key",
        reason=f"The key names render {render_id}; a replay must repeat that call's arguments exactly.",
        repair=_status_repair(
            render_id,
            "To start a different render, re-call vidforge_render_video with a new idempotency_key (or none).",
        ),
    )


def unknown_tool(name: str) -> VidforgeError:
    """The one JSON-RPC error of `tools/call` (core `server/tools.mdx`: -32602)."""
    return VidforgeError(
        code=ErrorCode.UNKNOWN_TOOL,
        message=f"Unknown tool: {name}",
        field="name",
        reason="vidforge serves vidforge_render_video, vidforge_get_render_status, vidforge_approve_watermark, "
        "vidforge_cancel_render, vidforge_get_capabilities and vidforge_import_asset.",
        repair=repair("read_capabilities", CAPABILITIES_TOOL, {}, "Call tools/list for the current catalog."),
    )


def asset_too_large(limit: int, field: str = "body") -> VidforgeError:
    """An upload (`body`) or an import (`url`) past VIDFORGE_MAX_ASSET_BYTES."""
    return VidforgeError(
        code=ErrorCode.ASSET_TOO_LARGE,
        message="The file is larger than this server accepts.",
        field=field,
        reason=f"Assets are limited to {limit} bytes (VIDFORGE_MAX_ASSET_BYTES).",
        repair=repair(
            "upload_smaller_asset",
            None,
            {},
            f"Trim, downscale or re-encode the file to at most {limit} bytes, then upload (POST /assets) or import "
            f"({IMPORT_TOOL}) it again.",
        ),
    )


def asset_quota_exceeded(used: int, limit: int, retention_s: int, field: str = "body") -> VidforgeError:
    """An upload (`body`) or an import (`url`) that would pass VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL."""
    return VidforgeError(
        code=ErrorCode.ASSET_QUOTA_EXCEEDED,
        message="This file would take this credential's stored assets past its storage quota.",
        field=field,
        reason=f"Your assets hold {used} bytes; with this file they would pass the {limit}-byte limit "
        f"(VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL). Assets are deleted {retention_s} s after upload "
        "(VIDFORGE_ASSET_RETENTION_S) unless a render still uses them.",
        repair=repair(
            "retry_after_assets_expire",
            None,
            {},
            "Add the file again once older assets have expired, or render from an asset you already have "
            "(GET /assets lists them).",
        ),
    )


def storage_full(request: RenderRequest | None) -> VidforgeError:
    """A full disk (ENOSPC, EDQUOT): a state of the server, so temporary, with a retry hint. `request`: the
    render that ran out of space; None for an upload."""
    if request is None:
        message, fix = (
            "The server has no room for this upload right now.",
            repair("retry_after_delay", None, {}, "Upload the file again after retry_after_ms."),
        )
    else:
        message, fix = (
            "The server ran out of storage while writing the video.",
            rerender_repair(request, "retry_after_delay", "Re-call after retry_after_ms: a new render starts."),
        )
    return VidforgeError(
        code=ErrorCode.STORAGE_FULL,
        message=message,
        field="body" if request is None else None,
        reason="The server's storage is full; nothing of this request was kept.",
        retry_after_ms=DISK_FULL_RETRY_AFTER_MS,
        repair=fix,
    )


def media_limit_exceeded(field: str, reason: str) -> VidforgeError:
    """The media is over an operator limit on render cost; `reason` names the setting and the value."""
    return VidforgeError(
        code=ErrorCode.MEDIA_LIMIT_EXCEEDED,
        message="The media is over a limit this server sets on what one render may cost.",
        field=field,
        reason=reason,
        repair=repair(
            "upload_smaller_asset",
            None,
            {},
            "Trim, downscale or re-encode the file to within the limit named in details.reason, then upload it "
            "again (POST /assets) and pass the new vidforge://assets/<id> URI.",
        ),
    )


def render_timeout(reason: str) -> VidforgeError:
    """A render past the operator's wall-clock limit: the same request would take as long again, so it is not
    temporary; the way on is a cheaper render (shorter source, lower resolution) or a higher limit."""
    return VidforgeError(
        code=ErrorCode.RENDER_TIMEOUT,
        message="The render was stopped: it ran past this server's time limit for one render.",
        field=None,
        reason=reason,
        repair=repair(
            "upload_smaller_asset",
            None,
            {},
            "Render a shorter source or at a lower resolution (answer a watermark approval promptly: the wait "
            "counts), or ask the operator to raise VIDFORGE_RENDER_TIMEOUT_S.",
        ),
    )


def over_time_limit(limit_s: float) -> str:
    """render_timeout's reason."""
    return f"the render took longer than the {limit_s:g} s limit (VIDFORGE_RENDER_TIMEOUT_S)"


def task_expired(render_id: str, output_format: str, expired_at_ms: int, retention_s: int) -> VidforgeError:
    """Contract §3.6: after `ttlMs`, -32602 with the envelope routing to the status surface, which lasts the
    result retention."""
    return VidforgeError(
        code=ErrorCode.TASK_EXPIRED,
        message=f"Task state was deleted after its TTL; render results remain reachable for {duration_text(retention_s)}.",
        field="taskId",
        value=render_id,  # server-minted, known-safe per [6.offending-value]
        reason=f"ttlMs elapsed at {iso_ms(expired_at_ms)}.",
        repair=_status_repair(
            render_id, f"If the render completed, read {video_uri(render_id, output_format)} directly."
        ),
        jsonrpc_message="Unknown or expired task.",
    )


def task_not_found() -> MCPError:
    """Unknown and foreign task ids answer identically ([7.task-handles]: a foreign id is not disclosed), with the
    SDK's own text and no envelope."""
    return MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")


def resource_not_found(render_id: str | None, retention_s: int) -> VidforgeError:
    """2026-07-28 retired -32002: resource not found is -32602. With `render_id`: its video or preview."""
    if render_id is None:
        return VidforgeError(
            code=ErrorCode.RESOURCE_NOT_FOUND,
            message="No such resource for this credential.",
            field="uri",
            reason="The URI names no capability document, video or preview this credential can read.",
            repair=repair("list_resources", CAPABILITIES_TOOL, {}, "Use resources/list and resources/templates/list."),
        )
    return VidforgeError(
        code=ErrorCode.RESOURCE_NOT_FOUND,
        message="No finished video for this render is visible to this credential.",
        field="uri",
        reason="The render is unknown, not finished, another credential's, or past its "
        f"{duration_adjective(retention_s)} retention.",
        repair=_status_repair(render_id),
    )


def resource_too_large(render_id: str, size_bytes: int, limit: int, download_url: str) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.RESOURCE_TOO_LARGE,
        message="The video is too large to inline in resources/read.",
        field="uri",
        reason=f"{size_bytes} bytes exceeds the {limit}-byte inline limit (VIDFORGE_MAX_INLINE_RESOURCE_BYTES).",
        repair=repair(
            "download_over_http",
            STATUS_TOOL,
            {"render_id": render_id},
            f"Download it with GET {download_url} (same bearer token; Range requests supported).",
        ),
    )


def unauthorized(reason: str) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.UNAUTHORIZED,
        message="Unauthorized: missing or invalid bearer token.",
        field="Authorization",
        reason=reason,
        jsonrpc_code=INVALID_REQUEST,
    )


def route_not_found(routes: str) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.ROUTE_NOT_FOUND,
        message="No such route.",
        field="path",
        reason=f"vidforge serves {routes} (and GET /healthz).",
        repair=repair("read_capabilities", CAPABILITIES_TOOL, {}, "MCP clients connect to POST /mcp."),
    )


def method_not_allowed(method: str, path: str, routes: str) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.METHOD_NOT_ALLOWED,
        message=f"{method} is not allowed on {path}.",
        field="path",
        reason=f"vidforge serves {routes} (and GET /healthz).",
        repair=repair("read_capabilities", CAPABILITIES_TOOL, {}, "MCP clients connect to POST /mcp."),
    )


def insufficient_scope(reason: str) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.INSUFFICIENT_SCOPE,
        message="Forbidden: the access token lacks a required scope.",
        field="Authorization",
        reason=reason,
        jsonrpc_code=INVALID_REQUEST,
    )


def origin_not_allowed() -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.ORIGIN_NOT_ALLOWED,
        message="Forbidden: this server does not answer requests with this Origin header.",
        field="Origin",
        reason="Browser pages from other origins may not call this server (cross-site request and DNS-rebinding "
        "protection). The operator can allow an origin with VIDFORGE_ALLOWED_ORIGINS.",
        jsonrpc_code=INVALID_REQUEST,
    )


def host_not_allowed() -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.HOST_NOT_ALLOWED,
        message="Forbidden: this server does not answer requests with this Host header.",
        field="Host",
        reason="The Host header names a server other than this one (DNS-rebinding protection). The operator can "
        "allow a host name with VIDFORGE_ALLOWED_HOSTS or VIDFORGE_PUBLIC_URL.",
        jsonrpc_code=INVALID_REQUEST,
    )


def concurrency_limit_exceeded(limit: int, what: str, setting: str, advice: str, retry_after_s: int) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.CONCURRENCY_LIMIT_EXCEEDED,
        message=f"Too many {what} for this credential.",
        field=None,
        reason=f"This credential already holds {limit} {what} (limit {limit}, {setting}).",
        retry_after_ms=retry_after_s * 1000,
        repair=repair("retry_after_delay", None, {}, advice),
        jsonrpc_code=INTERNAL_ERROR,
    )


def too_many_task_ids(count: int, limit: int) -> VidforgeError:
    return VidforgeError(
        code=ErrorCode.TOO_MANY_TASK_IDS,
        message="Too many taskIds for one subscriptions/listen stream.",
        field="notifications.taskIds",
        reason=f"{count} taskIds; one stream listens to at most {limit} (VIDFORGE_MAX_LISTEN_TASK_IDS).",
        repair=repair("split_subscription", None, {}, f"Listen to at most {limit} tasks a stream, or poll tasks/get."),
    )


def import_refused(reason: str) -> VidforgeError:
    """`vidforge_import_asset`: vidforge will not fetch this URL (its scheme, where its address leads, the redirects
    it takes), or the remote refused it (HTTP 4xx). The same URL fails the same way, so it is not temporary; `reason`
    names the rule and its setting, and never quotes the remote's answer."""
    return VidforgeError(
        code=ErrorCode.IMPORT_REFUSED,
        message="vidforge will not import the file at this URL.",
        field="url",
        reason=reason,
        repair=repair(
            "import_from_another_url",
            None,
            {},
            f"Call {IMPORT_TOOL} with an https:// URL of a publicly reachable host that serves the file itself, or "
            "upload the file with POST /assets; an operator can allow a private host with VIDFORGE_IMPORT_ALLOW_HOSTS.",
        ),
    )


def import_failed(reason: str, url: str) -> VidforgeError:
    """`vidforge_import_asset`: the remote did not deliver the file (no connection, a TLS failure, a server error, a
    transfer cut off or past VIDFORGE_IMPORT_TIMEOUT_S). Temporary: the same call may succeed later, so the repair is
    that call (the caller's own URL, [6.repair-intent])."""
    return VidforgeError(
        code=ErrorCode.IMPORT_FAILED,
        message="The file could not be fetched from this URL.",
        field="url",
        reason=reason,
        retry_after_ms=IMPORT_RETRY_AFTER_MS,
        repair=repair(
            "retry_import",
            IMPORT_TOOL,
            {"url": url},
            "Retry after retry_after_ms; if it keeps failing, check that the link works in a browser, or upload the "
            "file with POST /assets.",
        ),
    )


def state_unavailable(reason: str, retry_after_ms: int) -> VidforgeError:
    """The task state out of reach for now (mcp_protocol.state_outage): temporary, the request unchanged succeeds
    once it answers again."""
    return internal_error(
        "vidforge cannot reach its task state right now; try again shortly.",
        None,
        f"The task state is unavailable: {reason}.",
        retry_after_ms,
    )


def internal_error(
    message: str, field: str | None, reason: str, retry_after_ms: int, fix: JSONObject | None = None
) -> VidforgeError:
    """An unexpected fault (a tool handler's, or the issuer's keys out of reach): -32603, safe to retry."""
    return VidforgeError(
        code=ErrorCode.INTERNAL_ERROR,
        message=message,
        field=field,
        reason=reason,
        retry_after_ms=retry_after_ms,
        repair=fix,
        jsonrpc_code=INTERNAL_ERROR,
    )
