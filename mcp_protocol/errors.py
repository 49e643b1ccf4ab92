"""The vidforge error catalog: every code an agent can meet, one entry each, as data.

Each entry (mcp_protocol._error_table.Entry) is named after its code and says whether the code is `temporary`, the
record of inputs it takes (mcp_protocol._error_inputs), and its message, field, reason, retry hint and repair as
templates over those inputs. Calling an entry with its inputs is the one factory (`errors.render_not_found("task_x",
3600)`); `envelope` gives the error its one shape on the wire ([6.one-envelope]). The HTTP door's refusals are
entries of mcp_protocol.http_refusals; `CATALOG` holds every entry, in `ErrorCode`'s (the published) order.
tests/test_error_catalog.py checks one entry per code, that their `temporary` flags and the published
`error_catalog` agree, that every template names only its entry's inputs, and that every catalog entry is used.

Render outcomes (source_not_found at render time, unsupported_codec, media_limit_exceeded, render_failed,
render_timeout, storage_full, watermark_*) are stored as their entry's inputs (see domain.py) and built here again
each time they are read (mcp_protocol.results).
"""

from __future__ import annotations

from collections.abc import Mapping

from mcp_protocol import _error_inputs as inputs
from mcp_protocol import http_refusals
from mcp_protocol._error_table import BareEntry, CallAgain, Entry, Given, Input, Repair, check_status
from mcp_protocol.catalog import CAPABILITIES_TOOL, IMPORT_TOOL, INSPECT_TOOL, RENDER_TOOL, STATUS_TOOL
from mcp_protocol.envelope import VidforgeError
from mcp_protocol.error_codes import INTERNAL_ERROR, ErrorCode
from mcp_protocol.text_limits import excerpt

DISK_FULL_RETRY_AFTER_MS = 60_000  # a hint, not a limit: about the time for a cleanup or a sweep to free space
FAULT_RETRY_AFTER_MS = 2000  # a hint: an unexpected fault is usually gone on the next try
IMPORT_RETRY_AFTER_MS = 5000  # a hint: a remote that did not deliver is often back, or reachable, within seconds
INSPECT_RETRY_AFTER_MS = 5000  # a hint: a lost worker is replaced within seconds

# -- the tool calls and the renders they start ----------------------------------------------------------------------

source_not_found = Entry(
    ErrorCode.SOURCE_NOT_FOUND,
    inputs.FieldReason,
    temporary=False,
    message="The asset URI resolves to no asset this credential can read.",
    field=Input("field"),
    reason=Input("reason"),
    repair=Repair(
        "upload_asset",
        "Upload the file with POST /assets (or `vidforge assets add PATH`) and pass the returned "
        "vidforge://assets/<id> URI.",
    ),
)

unsupported_codec = Entry(  # the file is not media vidforge can read, or the wrong kind for `field`
    ErrorCode.UNSUPPORTED_CODEC,
    inputs.FieldReason,
    temporary=False,
    message="The asset cannot be rendered.",
    field=Input("field"),
    reason=Input("reason"),
    repair=Repair(
        "upload_supported_asset",
        "Upload an H.264/HEVC/VP8/VP9/AV1/MPEG-4 video (mp4, mov, webm, mkv) as the source and a PNG or JPEG "
        "image as the watermark.",
    ),
)

watermark_rejected = Entry(
    ErrorCode.WATERMARK_REJECTED,
    inputs.RenderNote,
    temporary=False,
    message="User declined the watermark preview; the render was not finalized.",
    field="watermark",
    reason="User note: {quoted}.",
    repair=CallAgain(
        "revise_watermark_and_rerender",
        "Adjust `watermark.position` or `watermark.opacity` per the user's note before re-calling, "
        "or omit `watermark` to render without one.",
    ),
    text="User rejected the watermark ({quoted}). Adjust `watermark` and re-call {render_tool}.",
)

watermark_approval_timeout = Entry(
    ErrorCode.WATERMARK_APPROVAL_TIMEOUT,
    inputs.RenderWait,
    temporary=False,
    message="No watermark approval arrived within {timeout_s:duration}; the render was not finalized.",
    field="watermark",
    reason="Approval window of {timeout_s:duration} elapsed without a decision.",
    repair=CallAgain("rerender_and_approve", "Re-call to start a new render, then approve the preview promptly."),
)

render_quota_exceeded = Entry(
    ErrorCode.RENDER_QUOTA_EXCEEDED,
    inputs.RenderQuota,
    temporary=True,
    message="Concurrent-render quota reached for this credential.",
    field=None,
    reason="{active} renders in progress (limit {limit}).",
    retry_after_ms=Input("retry_after_ms"),
    repair=CallAgain(
        "retry_after_delay",
        "Wait retry_after_ms, or cancel one of your renders with vidforge_cancel_render.",
        with_key=True,
    ),
)

render_failed = Entry(  # a renderer fault: safe to re-call (a new job unless the idempotency key is reused)
    ErrorCode.RENDER_FAILED,
    inputs.RenderFault,
    temporary=True,
    message="The renderer failed before the video was finished.",
    field=None,
    reason=Input("reason"),
    retry_after_ms=5000,
    repair=CallAgain("retry_render", "Re-calling starts a new render job."),
)

invalid_argument = Entry(  # [3.closed-schemas] + [6.validation-as-tool-error]: worded by mcp_protocol._arguments
    ErrorCode.INVALID_ARGUMENT,
    inputs.Refusal,
    temporary=False,
    message=Input("message"),
    field=Input("field"),
    reason=Input("reason"),
    repair=Input("fix"),
)

render_not_found = Entry(
    ErrorCode.RENDER_NOT_FOUND,
    inputs.RenderRetention,
    temporary=False,
    message="No render with this render_id is visible to this credential.",
    field="render_id",
    reason="Unknown render_id, another credential's render, or past its {retention_s:adjective} retention.",
    repair=Repair(
        "start_new_render",
        "Check the render_id you persisted; to render again, call vidforge_render_video with your original arguments.",
        RENDER_TOOL,
    ),
)

approval_not_pending = Entry(
    ErrorCode.APPROVAL_NOT_PENDING,
    inputs.RenderState,
    temporary=False,
    message="This render is not awaiting watermark approval.",
    field="render_id",
    reason="Render state is {state}.",
    repair=check_status(),
)

approval_already_recorded = Entry(
    ErrorCode.APPROVAL_ALREADY_RECORDED,
    inputs.RecordedDecision,
    temporary=False,
    message="A different watermark decision was already recorded for this render.",
    field="approved",
    reason="Recorded decision: approved={recorded:bool}; a decision cannot be changed.",
    repair=check_status(),
)

render_cancelled = Entry(  # an idempotent replay (without tasks) of a render that was cancelled
    ErrorCode.RENDER_CANCELLED,
    inputs.RenderKey,
    temporary=False,
    message="The render this idempotency_key names was cancelled.",
    field="idempotency_key",
    reason="A cancelled render is final; its key keeps naming it for {idempotency_ttl_s:duration}.",
    repair=CallAgain(
        "rerender_with_new_key", "Re-call without idempotency_key (or with a new one) to start a new render."
    ),
)

# The key already names `render_id`, created with other arguments ([3.idempotency-key]: a key means one request).
# Not temporary: repeating the call cannot succeed; the repair reads the original render.
idempotency_conflict = Entry(
    ErrorCode.IDEMPOTENCY_CONFLICT,
    inputs.RenderId,
    temporary=False,
    message="This idempotency_key already names a render that was created with different arguments.",
    field="idempotency_key",
    reason="The key names render {render_id}; a replay must repeat that call's arguments exactly.",
    repair=check_status(
        "To start a different render, re-call vidforge_render_video with a new idempotency_key (or none)."
    ),
)

unknown_tool = Entry(  # the one JSON-RPC error of `tools/call` (core `server/tools.mdx`: -32602)
    ErrorCode.UNKNOWN_TOOL,
    inputs.ToolName,
    temporary=False,
    message="Unknown tool: {name}",
    field="name",
    reason="vidforge serves vidforge_render_video, vidforge_get_render_status, vidforge_approve_watermark, "
    "vidforge_cancel_render, vidforge_get_capabilities and vidforge_import_asset.",
    repair=Repair("read_capabilities", "Call tools/list for the current catalog.", CAPABILITIES_TOOL),
)

# -- assets: uploads (`body`) and imports (`url`) -------------------------------------------------------------------

asset_too_large = Entry(  # past VIDFORGE_MAX_ASSET_BYTES
    ErrorCode.ASSET_TOO_LARGE,
    inputs.SizeLimit,
    temporary=False,
    message="The file is larger than this server accepts.",
    field=Input("field"),
    reason="Assets are limited to {limit} bytes (VIDFORGE_MAX_ASSET_BYTES).",
    repair=Repair(
        "upload_smaller_asset",
        "Trim, downscale or re-encode the file to at most {limit} bytes, then upload (POST /assets) or import "
        "({import_tool}) it again.",
    ),
)

asset_quota_exceeded = Entry(  # would pass VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL
    ErrorCode.ASSET_QUOTA_EXCEEDED,
    inputs.AssetQuota,
    temporary=False,
    message="This file would take this credential's stored assets past its storage quota.",
    field=Input("field"),
    reason="Your assets hold {used} bytes; with this file they would pass the {limit}-byte limit "
    "(VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL). Assets are deleted {retention_s} s after upload "
    "(VIDFORGE_ASSET_RETENTION_S) unless a render still uses them.",
    repair=Repair(
        "retry_after_assets_expire",
        "Add the file again once older assets have expired, or render from an asset you already have "
        "(GET /assets lists them).",
    ),
)

storage_full = Entry(  # a full disk (ENOSPC, EDQUOT) under a render, or (`request` None) an upload
    ErrorCode.STORAGE_FULL,
    inputs.MaybeRender,
    temporary=True,  # a state of the server
    message=Given(
        "request",
        "The server ran out of storage while writing the video.",
        "The server has no room for this upload right now.",
    ),
    field=Given("request", None, "body"),
    reason="The server's storage is full; nothing of this request was kept.",
    retry_after_ms=DISK_FULL_RETRY_AFTER_MS,
    repair=Given(
        "request",
        CallAgain("retry_after_delay", "Re-call after retry_after_ms: a new render starts."),
        Repair("retry_after_delay", "Upload the file again after retry_after_ms."),
    ),
)

media_limit_exceeded = Entry(  # over an operator limit on render cost; `reason` names the setting and the value
    ErrorCode.MEDIA_LIMIT_EXCEEDED,
    inputs.FieldReason,
    temporary=False,
    message="The media is over a limit this server sets on what one render may cost.",
    field=Input("field"),
    reason=Input("reason"),
    repair=Repair(
        "upload_smaller_asset",
        "Trim, downscale or re-encode the file to within the limit named in details.reason, then upload it "
        "again (POST /assets) and pass the new vidforge://assets/<id> URI.",
    ),
)

# Past the operator's wall-clock limit: the same request would take as long again, so not temporary; the way on is
# a cheaper render (shorter source, lower resolution) or a higher limit.
render_timeout = Entry(
    ErrorCode.RENDER_TIMEOUT,
    inputs.Reason,
    temporary=False,
    message="The render was stopped: it ran past this server's time limit for one render.",
    field=None,
    reason=Input("reason"),
    repair=Repair(
        "upload_smaller_asset",
        "Render a shorter source or at a lower resolution (answer a watermark approval promptly: the wait "
        "counts), or ask the operator to raise VIDFORGE_RENDER_TIMEOUT_S.",
    ),
)

# -- tasks and resources --------------------------------------------------------------------------------------------

task_expired = Entry(  # contract §3.6: after `ttlMs`, routed to the status surface, which lasts the result retention
    ErrorCode.TASK_EXPIRED,
    inputs.TaskExpiry,
    temporary=False,
    message="Task state was deleted after its TTL; render results remain reachable for {retention_s:duration}.",
    field="taskId",
    value=Input("render_id"),  # server-minted, known-safe per [6.offending-value]
    reason="ttlMs elapsed at {expired_at_ms:iso}.",
    repair=check_status("If the render completed, read {video_uri} directly."),
    jsonrpc_message="Unknown or expired task.",
)

# Unknown and foreign task ids answer identically ([7.task-handles]: a foreign id is not disclosed), with the SDK's
# own text and no envelope.
task_not_found = BareEntry(ErrorCode.TASK_NOT_FOUND, temporary=False, message="Failed to retrieve task: Task not found")

resource_not_found = Entry(  # 2026-07-28 retired -32002: -32602. With `render_id`: its video or preview
    ErrorCode.RESOURCE_NOT_FOUND,
    inputs.MaybeRenderRetention,
    temporary=False,
    message=Given(
        "render_id",
        "No finished video for this render is visible to this credential.",
        "No such resource for this credential.",
    ),
    field="uri",
    reason=Given(
        "render_id",
        "The render is unknown, not finished, another credential's, or past its {retention_s:adjective} retention.",
        "The URI names no capability document, video or preview this credential can read.",
    ),
    repair=Given(
        "render_id",
        check_status(),
        Repair("list_resources", "Use resources/list and resources/templates/list.", CAPABILITIES_TOOL),
    ),
)

resource_too_large = Entry(
    ErrorCode.RESOURCE_TOO_LARGE,
    inputs.InlineLimit,
    temporary=False,
    message="The video is too large to inline in resources/read.",
    field="uri",
    reason="{size_bytes} bytes exceeds the {limit}-byte inline limit (VIDFORGE_MAX_INLINE_RESOURCE_BYTES).",
    repair=Repair(
        "download_over_http",
        "Download it with GET {download_url} (same bearer token; Range requests supported).",
        STATUS_TOOL,
        ("render_id",),
    ),
)

# -- what one caller may hold at once --------------------------------------------------------------------------

concurrency_limit_exceeded = Entry(
    ErrorCode.CONCURRENCY_LIMIT_EXCEEDED,
    inputs.HeldLimit,
    temporary=True,
    message="Too many {what} for this credential.",
    field=None,
    reason="This credential already holds {limit} {what} (limit {limit}, {setting}).",
    retry_after_ms=Input("retry_after_ms"),
    repair=Repair("retry_after_delay", "{advice}"),
    jsonrpc_code=INTERNAL_ERROR,
)

too_many_task_ids = Entry(
    ErrorCode.TOO_MANY_TASK_IDS,
    inputs.TaskIdCount,
    temporary=False,
    message="Too many taskIds for one subscriptions/listen stream.",
    field="notifications.taskIds",
    reason="{count} taskIds; one stream listens to at most {limit} (VIDFORGE_MAX_LISTEN_TASK_IDS).",
    repair=Repair("split_subscription", "Listen to at most {limit} tasks a stream, or poll tasks/get."),
)

# -- imports by URL (`vidforge_import_asset`) -----------------------------------------------------------------------

# vidforge will not fetch this URL (its scheme, where its address leads, the redirects it takes), or the remote
# refused it (HTTP 4xx). The same URL fails the same way, so not temporary; `reason` names the rule and its setting,
# and never quotes the remote's answer.
import_refused = Entry(
    ErrorCode.IMPORT_REFUSED,
    inputs.Reason,
    temporary=False,
    message="vidforge will not import the file at this URL.",
    field="url",
    reason=Input("reason"),
    repair=Repair(
        "import_from_another_url",
        "Call {import_tool} with an https:// URL of a publicly reachable host that serves the file itself, or "
        "upload the file with POST /assets; an operator can allow a private host with VIDFORGE_IMPORT_ALLOW_HOSTS.",
    ),
)

# The remote did not deliver the file (no connection, a TLS failure, a server error, a transfer cut off or past
# VIDFORGE_IMPORT_TIMEOUT_S). Temporary: the same call may succeed later, so the repair is that call (the caller's
# own URL, [6.repair-intent]).
import_failed = Entry(
    ErrorCode.IMPORT_FAILED,
    inputs.ImportFault,
    temporary=True,
    message="The file could not be fetched from this URL.",
    field="url",
    reason=Input("reason"),
    retry_after_ms=IMPORT_RETRY_AFTER_MS,
    repair=Repair(
        "retry_import",
        "Retry after retry_after_ms; if it keeps failing, check that the link works in a browser, or upload the "
        "file with POST /assets.",
        IMPORT_TOOL,
        ("url",),
    ),
)

# An inspection that could not finish: past VIDFORGE_INSPECT_TIMEOUT_S, or its worker lost. Temporary: the same call
# starts it again.
inspect_failed = Entry(
    ErrorCode.INSPECT_FAILED,
    inputs.InspectFault,
    temporary=True,
    message="The inspection of this video could not finish.",
    field="uri",
    reason=Input("reason"),
    retry_after_ms=INSPECT_RETRY_AFTER_MS,
    repair=Repair("retry_inspect", "Call again after retry_after_ms.", INSPECT_TOOL, ("uri",)),
)

internal_error = Entry(  # an unexpected fault (a tool handler's, or the issuer's keys out of reach): safe to retry
    ErrorCode.INTERNAL_ERROR,
    inputs.Fault,
    temporary=True,
    message=Input("message"),
    field=Input("field"),
    reason=Input("reason"),
    retry_after_ms=Input("retry_after_ms"),
    repair=Input("fix"),
    jsonrpc_code=INTERNAL_ERROR,
)

# Each entry is named after its code: the catalog, in ErrorCode's (the published) order.
_NAMED = {**vars(http_refusals), **globals()}
CATALOG: Mapping[ErrorCode, Entry[...] | BareEntry] = {code: _NAMED[code.value] for code in ErrorCode}


# -- the words some inputs are made of ------------------------------------------------------------------------------


def no_asset_at(uri: object) -> str:
    """source_not_found's reason for a URI that names no asset of this credential (quoted up to the free-text
    bound: the URI is the caller's)."""
    shown = excerpt(uri) if isinstance(uri, str) else uri
    return (
        f"No asset at {shown!r} for this credential (unknown id, another credential's asset, or not a "
        "vidforge://assets/<id> URI)."
    )


def over_time_limit(limit_s: float) -> str:
    """render_timeout's reason."""
    return f"the render took longer than the {limit_s:g} s limit (VIDFORGE_RENDER_TIMEOUT_S)"


def state_unavailable(reason: str, retry_after_ms: int) -> VidforgeError:
    """The task state out of reach for now (mcp_protocol.state_outage): an `internal_error`, temporary, the request
    unchanged succeeds once it answers again."""
    return internal_error(
        "vidforge cannot reach its task state right now; try again shortly.",
        None,
        f"The task state is unavailable: {reason}.",
        retry_after_ms,
    )
