"""The render's domain types, shared by every room: what was asked, what the registry keeps, how a render ended.

- `RenderRequest`: the render tool's arguments, parsed once, right after they pass the JSON Schema validation
  against the published inputSchema (mcp_protocol._arguments), with the schema's defaults applied.
- `TaskRecord`: what the TaskRegistry keeps per render. Dicts exist only inside its SQLite store
  (actors/store.py, which also migrates records written before these types).
- `RenderEnd`: how a finished render ended (`Outcome`), with what the wire needs to say so — never the wire's
  shapes, which mcp_protocol.results builds from it each time it is read, with the settings in force then.

Frozen pydantic models: a record handed out cannot change the registry's copy. No Ray, no I/O.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mcp_protocol.asset_uri import AssetRef
from mcp_protocol.error_codes import ErrorCode, new_request_id
from mcp_protocol.json_types import JSONObject
from mcp_protocol.quality import QcReport

OutputFormat = Literal["mp4", "webm", "mov"]
Resolution = Literal["720p", "1080p", "4k"]
Position = Literal["top_left", "top_right", "bottom_left", "bottom_right", "center"]
MIME_BY_EXT = {"mp4": "video/mp4", "webm": "video/webm", "mov": "video/quicktime"}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Watermark(_Frozen):
    image_asset_uri: str
    # The inputSchema's documented defaults ("the server applies this default"); tests check they agree.
    position: Position = "bottom_right"
    opacity: float = Field(default=1.0, ge=0.0, le=1.0)


# A stream's sizes, highest first: the picture's short side, as `Resolution` names it (render_kernels.ladder.RUNGS,
# which tests check against these).
Rung = Literal["4k", "1080p", "720p", "480p", "360p"]
RUNGS: tuple[Rung, ...] = ("4k", "1080p", "720p", "480p", "360p")
DEFAULT_LADDER: tuple[Rung, ...] = ("1080p", "720p", "480p", "360p")


class Streaming(_Frozen):
    """The render's `streaming` argument: the stream's sizes and its segments' length (the inputSchema's defaults)."""

    ladder: tuple[Rung, ...] | None = None  # None: DEFAULT_LADDER up to the requested resolution
    segment_s: float = Field(default=4.0, ge=1.0, le=10.0)

    def rungs(self, resolution: Resolution) -> tuple[Rung, ...]:
        """The ladder's rungs, highest first; those above `resolution` left out (the render tool refuses them)."""
        top = RUNGS.index(resolution)
        return tuple(rung for rung in RUNGS[top:] if rung in (self.ladder or DEFAULT_LADDER))

    def above(self, resolution: Resolution) -> tuple[Rung, ...]:
        """The rungs asked for that are larger than `resolution`."""
        return tuple(rung for rung in self.ladder or () if RUNGS.index(rung) < RUNGS.index(resolution))


class RenderRequest(_Frozen):
    """`vidforge_render_video`'s arguments, validated, defaults applied. A render is created only with its asset
    URIs in their one canonical form (`ToolCalls` refuses any other: mcp_protocol.asset_uri)."""

    source_asset_uri: str
    output_format: OutputFormat
    resolution: Resolution
    watermark: Watermark | None = None
    idempotency_key: str | None = None
    # The caller's own identifiers, handed back unchanged (mcp_protocol._caller_metadata); None: none given (an empty
    # object counts as none, so it names the same request as an omitted one). A record stored before either field
    # existed loads with both None.
    metadata: dict[str, str] | None = None
    # Where the render's webhooks go (serve_app/webhooks/): the caller's https URL, or the principal's default
    # endpoint, filled in at submit. None: no webhooks.
    notify_url: str | None = None
    # The stream to deliver beside the file (render_kernels.ladder); None: the file alone.
    streaming: Streaming | None = None

    @field_validator("metadata")
    @classmethod
    def _none_when_empty(cls, metadata: dict[str, str] | None) -> dict[str, str] | None:
        return metadata or None

    def asset_uris(self) -> dict[str, str]:
        """The asset URIs the request names, by argument (the source, and the watermark's image when there is one)."""
        uris = {"source_asset_uri": self.source_asset_uri}
        if self.watermark is not None:
            uris["watermark.image_asset_uri"] = self.watermark.image_asset_uri
        return uris

    @property
    def asset_ids(self) -> frozenset[str]:
        """The ids of the assets the request names (what the retention sweep keeps for a live render). The edge
        refuses a URI that names no asset (mcp_protocol._tools), so every URI of a created render counts here."""
        return frozenset(ref.asset_id for uri in self.asset_uris().values() if (ref := AssetRef.parse(uri)))

    def arguments(self, *, with_key: bool = True) -> JSONObject:
        """The arguments as a call would send them (what a repair echoes): absent ones left out."""
        return self.model_dump(mode="json", exclude_none=True, exclude=None if with_key else {"idempotency_key"})

    def request_form(self) -> str:
        """How "the same request" is compared for an idempotency key: the canonical JSON (sorted keys, no spaces)
        of the arguments without the key itself, nor `notify_url`: where notifications go is no part of what is
        rendered, and a replay may find the principal's default endpoint filled in (the first call's destination
        stays). The metadata counts: other identifiers under the same key name other work."""
        form = self.arguments(with_key=False)
        form.pop("notify_url", None)
        return json.dumps(form, sort_keys=True, separators=(",", ":"))


class TaskStatus(StrEnum):
    """The ext-tasks statuses a render goes through: working <-> input_required -> completed | cancelled.

    ext-tasks also has `failed`, for a task whose underlying request hit a JSON-RPC error; a render never does:
    every way a render ends, a semantic failure included, is `completed` with its outcome (an isError result
    among them, [7.failed-task]), or `cancelled`. So vidforge never produces `failed`.
    """

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL = frozenset({TaskStatus.COMPLETED, TaskStatus.CANCELLED})


class Phase(StrEnum):
    """Where a render stands, finer than its status: the registry's queued and done around the driver's
    probing, rendering and muxing, and awaiting_watermark_approval while the status is input_required."""

    QUEUED = "queued"
    PROBING = "probing"
    RENDERING = "rendering"
    AWAITING_WATERMARK_APPROVAL = "awaiting_watermark_approval"
    MUXING = "muxing"
    DONE = "done"


class Outcome(StrEnum):
    """How a render ended."""

    SUCCEEDED = "succeeded"  # with its artifact
    REJECTED = "rejected"  # the watermark preview, with the user's note
    APPROVAL_TIMEOUT = "approval_timeout"  # no decision within the approval window
    UNSUPPORTED = "unsupported"  # the source or watermark cannot be used (gone, unreadable, over a limit)
    FAILED = "failed"  # the renderer failed, ran past its time limit, or ran out of disk
    CANCELLED = "cancelled"


class Artifact(_Frozen):
    """A finished render's video: what it is. Where its files are (the video, and the preview of a watermarked
    render) is the media store's layout (media_store.artifacts), keyed by the render's id."""

    ext: OutputFormat
    size_bytes: int
    duration_s: float
    finished_at_ms: int
    # The frame size delivered: `resolution` names the short side only (its long side follows the source's
    # display aspect). None in a record stored before it was kept.
    width: int | None = None
    height: int | None = None
    # What the render's quality check found (mcp_protocol.quality); None with the check off, or in a record stored
    # before it was made.
    qc: QcReport | None = None
    # What the render used, metered in its own tasks: the CPU seconds of its segments, audio and mux, and the wall
    # seconds from its start to its file stored, less any wait for the watermark's approval. None in a record stored
    # before renders were metered.
    cpu_s: float | None = None
    render_s: float | None = None

    @property
    def mime(self) -> str:
        return MIME_BY_EXT[self.ext]


class Succeeded(_Frozen):
    outcome: Literal[Outcome.SUCCEEDED] = Outcome.SUCCEEDED
    artifact: Artifact


class Rejected(_Frozen):
    outcome: Literal[Outcome.REJECTED] = Outcome.REJECTED
    note: str | None
    request_id: str = Field(default_factory=new_request_id)  # the error's, stable across reads


class ApprovalTimedOut(_Frozen):
    outcome: Literal[Outcome.APPROVAL_TIMEOUT] = Outcome.APPROVAL_TIMEOUT
    timeout_s: float  # the window that applied
    request_id: str = Field(default_factory=new_request_id)


class Unsupported(_Frozen):
    outcome: Literal[Outcome.UNSUPPORTED] = Outcome.UNSUPPORTED
    code: Literal[ErrorCode.SOURCE_NOT_FOUND, ErrorCode.UNSUPPORTED_CODEC, ErrorCode.MEDIA_LIMIT_EXCEEDED]
    field: str
    reason: str
    request_id: str = Field(default_factory=new_request_id)


class Failed(_Frozen):
    outcome: Literal[Outcome.FAILED] = Outcome.FAILED
    code: Literal[ErrorCode.RENDER_FAILED, ErrorCode.RENDER_TIMEOUT, ErrorCode.STORAGE_FULL]
    reason: str
    request_id: str = Field(default_factory=new_request_id)


class Cancelled(_Frozen):
    outcome: Literal[Outcome.CANCELLED] = Outcome.CANCELLED


RenderEnd = Annotated[
    Succeeded | Rejected | ApprovalTimedOut | Unsupported | Failed | Cancelled, Field(discriminator="outcome")
]
ErrorEnd = Rejected | ApprovalTimedOut | Unsupported | Failed  # the ends that answer with an error envelope


class PendingApproval(_Frozen):
    """The outstanding watermark decision of an input_required task (ext-tasks: keys are never reused)."""

    key: str
    deadline_ms: int
    timeout_s: float


class Approval(_Frozen):
    """A decision recorded for the round `key`."""

    key: str
    approved: bool
    note: str | None
    at_ms: int


class TaskRecord(_Frozen):
    """One render as the TaskRegistry keeps it. The registry alone changes it, through its state machine."""

    task_id: str
    principal: str
    request: RenderRequest
    status: TaskStatus = TaskStatus.WORKING
    phase: Phase = Phase.QUEUED
    status_message: str
    # Live progress (see mcp_protocol.progress): frames encoded so far, of the total, the measured speed, and the
    # frames the mux has written into the output file.
    frames_done: int = 0
    frames_total: int = 0
    fps: float | None = None
    source_fps: float | None = None
    frames_written: int = 0
    created_at_ms: int
    last_updated_at_ms: int
    ttl_ms: int  # the task's ttlMs, as announced when it was created
    poll_interval_ms: int
    input_seq: int = 0  # watermark approval rounds so far
    pending: PendingApproval | None = None
    approval: Approval | None = None
    cancel_requested: bool = False
    end: RenderEnd | None = None
    version: int = 1
    attempt: int = 0  # (re)starts of the render driver

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """What every status implies: an end exactly when terminal (cancelled exactly when the end is), phase done
        exactly when terminal, and an outstanding approval exactly when input_required."""
        if self.status.terminal != (self.end is not None):
            raise ValueError(f"a {self.status} task {'needs' if self.end is None else 'takes no'} end")
        if (self.status is TaskStatus.CANCELLED) != isinstance(self.end, Cancelled):
            raise ValueError(f"a {self.status} task cannot end {self.end.outcome if self.end else None}")
        if (self.phase is Phase.DONE) != self.status.terminal:
            raise ValueError(f"invalid phase {self.phase} for a {self.status} task")
        if (self.status is TaskStatus.INPUT_REQUIRED) != (self.pending is not None):
            raise ValueError(f"a {self.status} task {'needs' if self.pending is None else 'takes no'} pending approval")
        return self

    @property
    def artifact(self) -> Artifact | None:
        return self.end.artifact if isinstance(self.end, Succeeded) else None

    def expires_ms(self, retention_s: int) -> int:
        """Until when the render stays reachable (status tool, video): the retention from creation, and for a
        finished video the retention from its completion."""
        since = self.artifact.finished_at_ms if self.artifact is not None else self.created_at_ms
        return max(self.created_at_ms, since) + retention_s * 1000


class AnswerResult(StrEnum):
    """What became of a watermark decision (TaskRegistry.answer_input)."""

    RECORDED = "recorded"  # approval resumed the render; rejection ended it
    REPLAYED = "replayed"  # the same decision was already recorded for this round: a no-op
    CONFLICT = "conflict"  # a different decision was already recorded for this round
    NOT_PENDING = "not_pending"  # nothing awaits a decision
    IGNORED = "ignored"  # an answer to a key that is not the outstanding one (ext-tasks: SHOULD be ignored)
    NOT_FOUND = "not_found"  # unknown, or another principal's


class ApprovalAnswer(_Frozen):
    result: AnswerResult
    task: TaskRecord | None  # None only when not_found
