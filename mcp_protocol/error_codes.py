"""Every error `code` vidforge answers with, and the JSON-RPC codes they ride on.

The bottom of the error rooms: the domain records (which store a render's end as its code) and the envelope
import it; it imports nothing of vidforge's. What each code says, and whether it is `temporary`, is its entry in
the catalog (mcp_protocol.errors). The published `error_catalog` (catalog/capabilities.json) lists the same codes
in the same order, with the same `temporary` flags: tests/test_error_catalog.py checks that they agree.
"""

from __future__ import annotations

import secrets
from enum import StrEnum

INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class ErrorCode(StrEnum):
    """Every `code` vidforge answers with, in the published `error_catalog`'s order."""

    SOURCE_NOT_FOUND = "source_not_found"
    UNSUPPORTED_CODEC = "unsupported_codec"
    WATERMARK_REJECTED = "watermark_rejected"
    WATERMARK_APPROVAL_TIMEOUT = "watermark_approval_timeout"
    RENDER_QUOTA_EXCEEDED = "render_quota_exceeded"
    RENDER_FAILED = "render_failed"
    INVALID_ARGUMENT = "invalid_argument"
    RENDER_NOT_FOUND = "render_not_found"
    APPROVAL_NOT_PENDING = "approval_not_pending"
    APPROVAL_ALREADY_RECORDED = "approval_already_recorded"
    RENDER_CANCELLED = "render_cancelled"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    UNKNOWN_TOOL = "unknown_tool"
    ASSET_TOO_LARGE = "asset_too_large"
    ASSET_QUOTA_EXCEEDED = "asset_quota_exceeded"
    STORAGE_FULL = "storage_full"
    MEDIA_LIMIT_EXCEEDED = "media_limit_exceeded"
    RENDER_TIMEOUT = "render_timeout"
    TASK_EXPIRED = "task_expired"
    TASK_NOT_FOUND = "task_not_found"
    RESOURCE_NOT_FOUND = "resource_not_found"
    RESOURCE_TOO_LARGE = "resource_too_large"
    UNAUTHORIZED = "unauthorized"
    ROUTE_NOT_FOUND = "route_not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    INSUFFICIENT_SCOPE = "insufficient_scope"
    ORIGIN_NOT_ALLOWED = "origin_not_allowed"
    HOST_NOT_ALLOWED = "host_not_allowed"
    CONCURRENCY_LIMIT_EXCEEDED = "concurrency_limit_exceeded"
    TOO_MANY_TASK_IDS = "too_many_task_ids"
    IMPORT_REFUSED = "import_refused"
    IMPORT_FAILED = "import_failed"
    INSPECT_FAILED = "inspect_failed"
    INTERNAL_ERROR = "internal_error"


def new_request_id() -> str:
    return "req_" + secrets.token_hex(8)
