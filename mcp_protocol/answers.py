"""What the server answers, as models a client reads it into: the error envelope on any of its carriers, a finished
render's result, the status tool's view of a render, and the plain-HTTP routes' JSON (an upload, the listings).

The server builds these answers as JSON (mcp_protocol.envelope, .results, .views; serve_app/ingress); these models are
the client's side of the same shapes (`vidforge render` and its listings read them: vidforge_client), and
tests/test_answers.py parses what the server's own builders produce with them. They read leniently: a field the
client does not know is ignored, and states, kinds and resolutions are read as text, so a client keeps reading the
answers of a newer server that adds to them.
"""

from __future__ import annotations

from typing import Generic, Literal, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


# -- the error envelope ([6.one-envelope]) -------------------------------------------------------------------------


class EnvelopeDetails(_Answer):
    field: str | None = None  # the argument or parameter at fault, if one is
    reason: str | None = None  # why, naming the limit or the fix
    value: object = None  # the offending value, where the server echoes one


class ErrorEnvelope(_Answer):
    """The contract's one error envelope (§6), read from either naming: `code` and `message` (a tool's error
    result, the file routes' `error`), or `machine_code` and `human_message` (a JSON-RPC error's `data`)."""

    code: str = Field(validation_alias=AliasChoices("code", "machine_code"))
    message: str = Field(validation_alias=AliasChoices("message", "human_message"))
    details: EnvelopeDetails = EnvelopeDetails()
    temporary: bool = False
    retry_after_ms: int | None = None
    request_id: str | None = None

    @classmethod
    def in_body(cls, body: object) -> ErrorEnvelope | None:
        """The envelope a body carries under `error` (`{"error": envelope}`, or a JSON-RPC error whose `data` is
        the envelope), if any."""
        error = body.get("error") if isinstance(body, dict) else None
        for candidate in (error, error.get("data") if isinstance(error, dict) else None):
            try:
                return cls.model_validate(candidate)
            except ValidationError:
                continue
        return None

    def text(self) -> str:
        """One line: what happened and why (the envelope's reason names the limit or the fix)."""
        reason = self.details.reason
        return f"{self.message.rstrip('.')}: {reason}" if reason else self.message


# -- renders ------------------------------------------------------------------------------------------------------


class FollowUp(_Answer):
    """[6.repair-object]'s shape as a next step: a tool and literally callable arguments."""

    next_step: str
    tool: str | None = None
    arguments: dict[str, object] = {}  # the tool's arguments: JSON, as its inputSchema says
    alternative: str | None = None


class RenderSucceeded(_Answer):
    """`vidforge_render_video`'s `structuredContent` once the render finished (mcp_protocol.results)."""

    status: Literal["completed"]
    video_uri: str  # vidforge://videos/<render_id>/final.<ext>
    duration_seconds: float
    size_bytes: int
    resolution: str
    watermark_applied: bool
    expires_at: str  # RFC 3339, UTC


class RenderStatus(_Answer):
    """`vidforge_get_render_status`'s `structuredContent` (mcp_protocol.views.render_status): the render's fallback
    state, its progress, and once it ended its video or its error."""

    render_id: str
    state: str  # queued | rendering | awaiting_watermark_approval | succeeded | failed | cancelled
    terminal: bool
    poll_after_ms: int
    progress: float | None = None  # the fraction of frames encoded, when knowable
    status_message: str
    expires_at: str
    terminal_states: list[str]
    watermark_preview_uri: str | None = None  # while it awaits approval
    video_uri: str | None = None  # this and the four below: once it succeeded
    duration_seconds: float | None = None
    size_bytes: int | None = None
    resolution: str | None = None
    watermark_applied: bool | None = None
    error: ErrorEnvelope | None = None  # once it failed
    follow_up: FollowUp | None = None  # while it is not over
    metadata: dict[str, str] | None = None  # the caller's own identifiers, as submitted


class RequestedWatermark(_Answer):
    image_asset_uri: str
    position: str | None = None
    opacity: float | None = None


class RequestedRender(_Answer):
    """What a render was asked for, as the listings echo it: the render tool's arguments without the idempotency
    key (mcp_protocol.domain.RenderRequest.arguments), read back."""

    source_asset_uri: str
    output_format: str
    resolution: str
    watermark: RequestedWatermark | None = None
    metadata: dict[str, str] | None = None
    notify_url: str | None = None


class RenderUsage(_Answer):
    """What a finished render used (mcp_protocol.usage)."""

    cpu_seconds: float
    render_seconds: float


class RenderItem(RenderStatus):
    """A render as `GET /renders` lists it and `GET /renders/{render_id}` shows it: its status, when it was created,
    what was asked, and once finished what it used."""

    created_at: str
    request: RequestedRender
    usage: RenderUsage | None = None


# -- the plain-HTTP routes ------------------------------------------------------------------------------------------


class UploadedAsset(_Answer):
    """`POST /assets`'s answer: the new asset."""

    uri: str  # vidforge://assets/<id>
    kind: str  # video | image
    size_bytes: int


class AssetItem(_Answer):
    """An asset as `GET /assets` lists it (what its upload stored: a field an older store lacks is null)."""

    uri: str
    kind: str | None
    filename: str | None
    size_bytes: int | None
    created_at: str


class DeliveryItem(_Answer):
    """A webhook delivery as `GET /webhooks` lists it: the event, and where its delivery stands."""

    event_id: str
    type: str  # render.completed, render.failed, ...
    render_id: str
    url: str
    created_at: str
    state: str  # pending | delivered | gave_up
    attempts: int
    last_attempt_at: str | None = None
    next_attempt_at: str | None = None  # while pending
    last_error: str | None = None


ItemT = TypeVar("ItemT", bound=BaseModel)


class ListingPage(_Answer, Generic[ItemT]):
    """One page of a listing, newest first; `next_cursor` asks for the next one (None: this is the last)."""

    items: list[ItemT]
    next_cursor: str | None
