"""The discovery surface, loaded once from the JSON files the contract prints.

The tool definitions and the capability summary are data, kept in `catalog/` as the contract prints them,
so the wire matches the contract and `tools/list` is identical across calls and restarts
([9.deterministic-order]). Where the contract's text names a configurable duration (the approval window,
result retention, the task TTL, the idempotency window, the import's time limit, an inspection's bounds), the file holds a `${name}`
placeholder, filled from the operator's settings: with the defaults the text is the contract's, and it never
promises what the server does not do.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, cast

from mcp_protocol.identity import fingerprint, server_version
from mcp_protocol.json_types import JSONObject, JSONValue
from mcp_protocol.timefmt import duration_adjective, duration_short, duration_text

if TYPE_CHECKING:
    from mcp_protocol._wire_settings import WireSettings

_CATALOG_DIR = Path(__file__).resolve().parent / "catalog"

RENDER_TOOL = "vidforge_render_video"
STATUS_TOOL = "vidforge_get_render_status"
APPROVE_TOOL = "vidforge_approve_watermark"
CANCEL_TOOL = "vidforge_cancel_render"
CAPABILITIES_TOOL = "vidforge_get_capabilities"
IMPORT_TOOL = "vidforge_import_asset"
INSPECT_TOOL = "vidforge_inspect_video"

CAPABILITIES_URI = "vidforge://capabilities"
VIDEO_URI_TEMPLATE = "vidforge://videos/{render_id}/final.{ext}"
PREVIEW_URI_TEMPLATE = "vidforge://renders/{render_id}/watermark-preview.png"

_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def durations(settings: WireSettings) -> dict[str, str]:
    """The configured durations, in the forms the catalog's texts use them."""
    return {
        "approval_window": duration_text(settings.approval_timeout_s),
        "retention": duration_text(settings.result_retention_s),
        "retention_adjective": duration_adjective(settings.result_retention_s),
        "task_ttl_short": duration_short(settings.task_ttl_ms / 1000),
        "idempotency_window": duration_text(settings.idempotency_ttl_s),
        "idempotency_window_short": duration_short(settings.idempotency_ttl_s),
        "import_window": duration_text(settings.import_timeout_s),
        "inspect_answer_max": duration_text(settings.inspect_answer_max_s),
        "inspect_wait": duration_text(settings.inspect_wait_s),
        "inspect_window": duration_text(settings.inspect_timeout_s),
    }


def _filled(node: JSONValue, values: dict[str, str]) -> JSONValue:
    """`node` with every `${name}` in its strings replaced by `values[name]` (a copy; unknown names raise)."""
    if isinstance(node, str):
        return _PLACEHOLDER.sub(lambda match: values[match[1]], node)
    if isinstance(node, list):
        return [_filled(item, values) for item in node]
    if isinstance(node, dict):
        return {key: _filled(value, values) for key, value in node.items()}
    return node


def resource_templates(settings: WireSettings) -> list[JSONObject]:
    return [
        {
            "uriTemplate": VIDEO_URI_TEMPLATE,
            "name": "rendered-video",
            "title": "Rendered video",
            "description": f"A finished render (mp4, webm or mov), retained {duration_text(settings.result_retention_s)}."
            " resources/read inlines files up to the documented size; larger files are downloaded from "
            "GET /artifacts/{render_id}/final.{ext}.",
            "mimeType": "video/mp4",
        },
        {
            "uriTemplate": PREVIEW_URI_TEMPLATE,
            "name": "watermark-preview",
            "title": "Watermark preview",
            "description": "A PNG frame of the render at its output size with the requested watermark applied, "
            "published while the render awaits approval.",
            "mimeType": "image/png",
        },
    ]


@functools.cache
def _load(name: str) -> JSONValue:
    loaded: JSONValue = json.loads((_CATALOG_DIR / name).read_text(encoding="utf-8"))
    return loaded


def _tools() -> list[JSONObject]:
    return cast(list[JSONObject], _load("tools.json"))  # a list of tool objects: the file is ours


def tool_definitions(settings: WireSettings) -> list[JSONObject]:
    """All seven tools in their fixed order (render, status, approve, cancel, capabilities, import, inspect)."""
    return cast(list[JSONObject], _filled(_tools(), durations(settings)))


@functools.cache
def input_schemas() -> dict[str, JSONObject]:
    return {str(tool["name"]): cast(JSONObject, tool["inputSchema"]) for tool in _tools()}


def capability_summary(settings: WireSettings) -> JSONObject:
    """The contract's §1 capability summary with this build's version and fingerprint and the operator's
    durations filled in."""
    summary = cast(JSONObject, _filled(_load("capabilities.json"), durations(settings)))
    server = cast(JSONObject, summary["server"])
    summary["server"] = {**server, "version": server_version(), "fingerprint": fingerprint()}
    semantics = cast(JSONObject, summary["task_semantics"])
    summary["task_semantics"] = {**semantics, "task_ttl_ms": settings.task_ttl_ms}
    return summary


def video_uri(render_id: str, ext: str) -> str:
    return VIDEO_URI_TEMPLATE.format(render_id=render_id, ext=ext)


# Matched whole (`fullmatch`: a `$` would also match before a final newline), as every id a caller sends is.
VIDEO_URI = re.compile(r"vidforge://videos/(?P<id>[A-Za-z0-9_-]{1,128})/final\.(?P<ext>mp4|webm|mov)")


def preview_uri(render_id: str) -> str:
    return PREVIEW_URI_TEMPLATE.format(render_id=render_id)
