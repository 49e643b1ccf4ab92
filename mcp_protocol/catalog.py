"""The discovery surface, loaded once from the JSON files the contract prints.

The five tool definitions and the capability summary are data, kept byte-for-byte in `catalog/` so the
wire matches the contract and `tools/list` is identical across calls and restarts ([9.deterministic-order]).
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

from mcp_protocol.identity import fingerprint, server_version
from mcp_protocol.timefmt import duration_text

_CATALOG_DIR = Path(__file__).resolve().parent / "catalog"

RENDER_TOOL = "vidforge_render_video"
STATUS_TOOL = "vidforge_get_render_status"
APPROVE_TOOL = "vidforge_approve_watermark"
CANCEL_TOOL = "vidforge_cancel_render"
CAPABILITIES_TOOL = "vidforge_get_capabilities"

CAPABILITIES_URI = "vidforge://capabilities"
VIDEO_URI_TEMPLATE = "vidforge://videos/{render_id}/final.{ext}"
PREVIEW_URI_TEMPLATE = "vidforge://renders/{render_id}/watermark-preview.png"

RESOURCE_TEMPLATES = [
    {
        "uriTemplate": VIDEO_URI_TEMPLATE,
        "name": "rendered-video",
        "title": "Rendered video",
        "description": "A finished render (mp4, webm or mov), retained 7 days. resources/read inlines files up to "
        "the documented size; larger files are downloaded from GET /artifacts/{render_id}/final.{ext}.",
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
def _load(name: str) -> Any:
    return json.loads((_CATALOG_DIR / name).read_text(encoding="utf-8"))


def tool_definitions() -> list[dict[str, Any]]:
    """All five tools in their fixed order (render, status, approve, cancel, capabilities)."""
    return copy.deepcopy(_load("tools.json"))


@functools.cache
def input_schemas() -> dict[str, dict[str, Any]]:
    return {tool["name"]: tool["inputSchema"] for tool in _load("tools.json")}


def capability_summary(task_ttl_ms: int = 86_400_000, approval_timeout_s: float = 1800.0) -> dict[str, Any]:
    """The contract's §1 capability summary with this build's version and fingerprint and the operator's
    task TTL and approval window filled in, so the summary never promises what the server does not do."""
    summary = copy.deepcopy(_load("capabilities.json"))
    summary["server"]["version"] = server_version()
    summary["server"]["fingerprint"] = fingerprint()
    summary["task_semantics"]["task_ttl_ms"] = task_ttl_ms
    fallbacks = summary["negotiated_capabilities"]["fallbacks"]
    # The contract's text names the default window; state the configured one.
    fallbacks["approval_never_arrives"] = fallbacks["approval_never_arrives"].replace(
        "30 minutes", duration_text(approval_timeout_s)
    )
    return summary


def video_uri(render_id: str, ext: str) -> str:
    return VIDEO_URI_TEMPLATE.format(render_id=render_id, ext=ext)


def preview_uri(render_id: str) -> str:
    return PREVIEW_URI_TEMPLATE.format(render_id=render_id)
