"""Webhook events: which changes of a render a caller is told about, and what the POST's body says.

`events_for(before, after)` is pure: the TaskRegistry calls it on every commit and writes what it returns into its
outbox in the same transaction as the record (so a crash between the two cannot lose an event), and the dispatcher
(serve_app/webhooks/) delivers each, at least once, until the receiver answers 2xx or the event is too old. An
event's id is derived from the change itself (task, record version, type), so writing the same change twice writes
one event, and receivers deduplicate by it.

The body is fixed when the event is made, but for one thing: the review link of a `render.input_required`, which the
server's review page mints (a capability, named only in the event about that approval), added at delivery from the
event's `review` round. The body never holds a credential: no bearer token, no other capability link.
"""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from mcp_protocol.domain import ApprovalTimedOut, Cancelled, PendingApproval, Succeeded, TaskRecord
from mcp_protocol.json_types import JSONObject
from mcp_protocol.timefmt import iso_ms
from mcp_protocol.usage import usage_of
from mcp_protocol.views import render_status

SIGNATURE_HEADER = "Vidforge-Signature"
EVENT_ID_HEADER = "Vidforge-Event-Id"


class EventType(StrEnum):
    INPUT_REQUIRED = "render.input_required"  # a watermark preview awaits a person's decision
    COMPLETED = "render.completed"  # the video is there
    FAILED = "render.failed"  # ended in an error (rejected watermark, unusable source, renderer failure)
    CANCELLED = "render.cancelled"
    EXPIRED = "render.expired"  # the approval window passed without a decision


class ReviewRound(BaseModel):
    """The approval round a `render.input_required` is about: what its review link is minted from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_seq: int
    pending: PendingApproval


class OutboxEvent(BaseModel):
    """One event to deliver, as the outbox stores it (a row per event)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str
    type: EventType
    task_id: str
    principal: str  # whose secrets sign it, and who may list it
    url: str  # the destination: the render's notify_url (the caller's, or the principal's default)
    created_at_ms: int
    body: str  # the JSON body, canonical (sorted keys, no spaces), but for the review link added at delivery
    review: ReviewRound | None = None  # render.input_required only

    def payload(self, review_url: str | None = None) -> bytes:
        """The raw body one attempt sends: the stored body, with the review link of a `render.input_required`."""
        if review_url is None:
            return self.body.encode("utf-8")
        body = json.loads(self.body)
        body["review_url"] = review_url
        return canonical(body)


class DeliveryState(StrEnum):
    PENDING = "pending"  # not yet acknowledged; retried from next_attempt_at_ms
    DELIVERED = "delivered"  # a 2xx answered
    GAVE_UP = "gave_up"  # refused for good (a 4xx other than 408/429, a refused address) or older than the limit


class Delivery(BaseModel):
    """An event with where its delivery stands (what `vidforge webhooks list` shows)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event: OutboxEvent
    state: DeliveryState = DeliveryState.PENDING
    attempts: int = 0
    next_attempt_at_ms: int  # when it is due (the creation time at first)
    last_error: str | None = None  # why the last attempt failed, in the dispatcher's words (never the answer's body)
    last_attempt_at_ms: int | None = None


class Attempt(BaseModel):
    """What one delivery attempt came to (`Outbox.record_attempt`): the delivery's new state, when it is next due
    (while pending), and why it failed (None once delivered)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    state: DeliveryState
    at_ms: int
    next_attempt_at_ms: int
    error: str | None = None


class Backlog(BaseModel):
    """The undelivered events (metrics: outbox depth, oldest undelivered age; the dispatcher's next pass)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    pending: int
    oldest_created_at_ms: int | None
    next_due_at_ms: int | None = None  # when the soonest pending event is due (or leased until)


def canonical(body: JSONObject) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _event_type(before: TaskRecord | None, after: TaskRecord) -> EventType | None:
    if after.pending is not None:
        # A new approval round: asked now (not a re-save of the same round).
        same_round = before is not None and before.pending is not None and before.pending.key == after.pending.key
        return None if same_round else EventType.INPUT_REQUIRED
    if after.end is None or (before is not None and before.end is not None):
        return None  # still working, or already ended before this change
    if isinstance(after.end, Succeeded):
        return EventType.COMPLETED
    if isinstance(after.end, Cancelled):
        return EventType.CANCELLED
    if isinstance(after.end, ApprovalTimedOut):
        return EventType.EXPIRED
    return EventType.FAILED


def event_id(task_id: str, version: int, event_type: EventType) -> str:
    return "evt_" + hashlib.sha256(f"{task_id}\n{version}\n{event_type.value}".encode()).hexdigest()[:32]


def events_for(before: TaskRecord | None, after: TaskRecord, *, retention_s: int) -> list[OutboxEvent]:
    """The events the change `before` -> `after` of one render causes (none for a render without a notify_url):
    `retention_s` (VIDFORGE_RESULT_RETENTION_S) dates the status fields' `expires_at` as the status tool would."""
    url = after.request.notify_url
    event_type = _event_type(before, after)
    if url is None or event_type is None:
        return []
    eid = event_id(after.task_id, after.version, event_type)
    status = render_status(after, retention_s)
    status.pop("follow_up", None)  # a tool call is the agent's next step, not a receiver's
    body: JSONObject = {
        "id": eid,
        "type": event_type.value,
        "created_at": iso_ms(after.last_updated_at_ms),
        "task_id": after.task_id,
        "state": status["state"],
        "metadata": dict(after.request.metadata or {}),
        "render": status,
    }
    if isinstance(after.end, Succeeded) and (qc := after.end.artifact.qc) is not None:
        body["qc"] = qc.to_json()  # the video's quality check: its verdict, reasons and findings (mcp_protocol.quality)
    if (usage := usage_of(after)) is not None:
        body["usage"] = usage  # what the render used (mcp_protocol.usage)
    review = ReviewRound(input_seq=after.input_seq, pending=after.pending) if after.pending is not None else None
    return [
        OutboxEvent(
            event_id=eid,
            type=event_type,
            task_id=after.task_id,
            principal=after.principal,
            url=url,
            created_at_ms=after.last_updated_at_ms,
            body=canonical(body).decode("utf-8"),
            review=review,
        )
    ]
