"""What the review page says about a render: the facts a person decides on, in words, and where the decision stands.

Read from the registry's record of the approval round the link was minted for: while that round awaits a decision
the page offers Approve and Reject; once it is decided (here, through `tasks/update`, or through
`vidforge_approve_watermark`) it shows the decision; a round that ended undecided (timed out, cancelled) shows
how it ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mcp_protocol.domain import TaskRecord
from mcp_protocol.timefmt import iso_ms
from serve_app.ingress.review.pages import ReviewedRender

POSITIONS = {
    "top_left": "top left",
    "top_right": "top right",
    "bottom_left": "bottom left",
    "bottom_right": "bottom right",
    "center": "centre",
}


class ReviewState(StrEnum):
    PENDING = "pending"  # the round awaits a decision: the page offers the buttons
    APPROVED = "approved"
    REJECTED = "rejected"
    CLOSED = "closed"  # the round ended without a decision (timed out, cancelled)


def review_state(rec: TaskRecord) -> ReviewState:
    """A rejection keeps its recorded approval on the completed record (the registry ends the task in the same
    transition), so the decision is always read from `approval`."""
    if rec.approval is not None:
        return ReviewState.APPROVED if rec.approval.approved else ReviewState.REJECTED
    return ReviewState.PENDING if rec.pending is not None else ReviewState.CLOSED


def time_left_text(seconds: float) -> str:
    """What a person reads at a glance, e.g. "29 minutes 41 seconds" (the exact time is shown beside it)."""
    seconds = max(0, int(seconds))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    parts = [(hours, "hour"), (minutes, "minute"), (secs, "second")]
    shown = [f"{n} {unit}{'' if n == 1 else 's'}" for n, unit in parts if n][:2]
    return " ".join(shown) or "0 seconds"


def duration_text(seconds: float) -> str:
    minutes, secs = divmod(seconds, 60)
    return f"{int(minutes)} min {secs:04.1f} s" if minutes else f"{secs:.1f} s"


@dataclass(frozen=True)
class ReviewView:
    """The page's facts, as the template shows them."""

    task_id: str
    state: ReviewState
    position: str
    opacity: str
    output_format: str
    resolution: str
    duration: str
    time_left: str | None  # while pending
    deadline: str | None  # while pending, RFC 3339 UTC
    note: str | None  # the decision's
    status_message: str  # how the round ended, when it closed undecided

    @classmethod
    def of(cls, render: ReviewedRender, now_ms: float) -> ReviewView:
        rec = render.record
        request = rec.request
        watermark = request.watermark
        assert watermark is not None, "only a watermarked render has a review page"
        size = render.output_size
        resolution = f"{request.resolution} ({size[0]} × {size[1]} pixels)" if size is not None else request.resolution
        pending = rec.pending if rec.approval is None else None
        state = review_state(rec)
        note = rec.approval.note if rec.approval is not None else None
        return cls(
            task_id=rec.task_id,
            state=state,
            position=POSITIONS[watermark.position],
            opacity=f"{watermark.opacity:.0%}",
            output_format=request.output_format.upper(),
            resolution=resolution,
            duration=duration_text(render.duration_s) if render.duration_s is not None else "unknown",
            time_left=time_left_text((pending.deadline_ms - now_ms) / 1000) if pending is not None else None,
            deadline=iso_ms(pending.deadline_ms) if pending is not None else None,
            note=note,
            status_message=rec.status_message,
        )
