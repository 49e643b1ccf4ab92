"""What each entry of the error catalog (mcp_protocol.errors) is built from: one frozen record per shape of inputs.

A record's fields are the entry's typed inputs — calling the entry takes them, positionally or by name, and mypy
checks them — and the names its templates say; a property is a value an entry says that two inputs make, or that
needs a word of its own. Several entries share a shape (`FieldReason`: a refusal of the media in one field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mcp_protocol.catalog import video_uri
from mcp_protocol.text_limits import excerpt

if TYPE_CHECKING:
    from mcp_protocol.domain import RenderRequest
    from mcp_protocol.json_types import JSONObject


@dataclass(frozen=True)
class NoInputs:
    pass


@dataclass(frozen=True)
class Reason:
    reason: str


@dataclass(frozen=True)
class FieldReason:
    field: str
    reason: str


@dataclass(frozen=True)
class Refusal:
    """A refusal whose every part the caller words (invalid_argument: mcp_protocol._arguments)."""

    message: str
    field: str | None
    reason: str
    fix: JSONObject


@dataclass(frozen=True)
class Fault:
    """An unexpected fault, worded where it happened."""

    message: str
    field: str | None
    reason: str
    retry_after_ms: int
    fix: JSONObject | None = None


# -- a render's: `request` is what its repair calls again ----------------------------------------------------------


@dataclass(frozen=True)
class RenderNote:
    request: RenderRequest
    note: str | None

    @property
    def quoted(self) -> str:
        """The user's note, bounded (also a note kept before the limit)."""
        return f"'{excerpt(self.note)}'" if self.note else "no note given"


@dataclass(frozen=True)
class RenderWait:
    request: RenderRequest
    timeout_s: float


@dataclass(frozen=True)
class RenderQuota:
    request: RenderRequest
    active: int
    limit: int
    retry_after_ms: int


@dataclass(frozen=True)
class RenderFault:
    request: RenderRequest
    reason: str


@dataclass(frozen=True)
class RenderKey:
    request: RenderRequest
    idempotency_ttl_s: int


@dataclass(frozen=True)
class MaybeRender:
    """None: an upload."""

    request: RenderRequest | None


# -- a render named by its id ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderId:
    render_id: str


@dataclass(frozen=True)
class RenderRetention:
    render_id: str
    retention_s: int


@dataclass(frozen=True)
class MaybeRenderRetention:
    """`render_id` None: a resource that names no render."""

    render_id: str | None
    retention_s: int


@dataclass(frozen=True)
class RenderState:
    render_id: str
    state: str


@dataclass(frozen=True)
class RecordedDecision:
    render_id: str
    recorded: bool


@dataclass(frozen=True)
class TaskExpiry:
    render_id: str
    output_format: str
    expired_at_ms: int
    retention_s: int

    @property
    def video_uri(self) -> str:
        return video_uri(self.render_id, self.output_format)


@dataclass(frozen=True)
class InlineLimit:
    render_id: str
    size_bytes: int
    limit: int
    download_url: str


# -- assets, imports, requests ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SizeLimit:
    limit: int
    field: str = "body"  # an upload; `url` for an import


@dataclass(frozen=True)
class AssetQuota:
    used: int
    limit: int
    retention_s: int
    field: str = "body"  # an upload; `url` for an import


@dataclass(frozen=True)
class ImportFault:
    reason: str
    url: str


@dataclass(frozen=True)
class InspectFault:
    reason: str
    uri: str


@dataclass(frozen=True)
class ToolName:
    name: str


@dataclass(frozen=True)
class Routes:
    routes: str


@dataclass(frozen=True)
class MethodRoutes:
    method: str
    path: str
    routes: str


@dataclass(frozen=True)
class HeldLimit:
    """`limit` of `what` held at once, set by `setting`."""

    limit: int
    what: str
    setting: str
    advice: str
    retry_after_s: int

    @property
    def retry_after_ms(self) -> int:
        return self.retry_after_s * 1000


@dataclass(frozen=True)
class TaskIdCount:
    count: int
    limit: int
