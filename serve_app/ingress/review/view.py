"""What the review page says about a render: the facts a person decides on, in words, and where the decision stands.

Read from the registry's record of the approval round the link was minted for: while that round awaits a decision
the page offers Approve and Reject; once it is decided (here, through `tasks/update`, or through
`vidforge_approve_watermark`) it shows the decision, and once the approved render has finished, that its video is
there; a round that ended undecided (timed out, cancelled) shows how it ended. Times are `Moment`s, which the page
shows in the viewer's own time zone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mcp_protocol.domain import ApprovalTimedOut, Cancelled, Succeeded, TaskRecord
from render_kernels.compose import watermark_box
from serve_app.ingress.review.pages import Moment, ReviewedRender

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


def ended_undecided_text(rec: TaskRecord) -> str:
    """How a round that nobody decided ended, as the person reads it."""
    if isinstance(rec.end, ApprovalTimedOut):
        return "Nobody decided in time, so the video was not finished."
    if isinstance(rec.end, Cancelled) or rec.cancel_requested:
        return "The render was cancelled before anyone decided."
    if rec.end is not None:
        return "The render stopped before anyone decided."
    return "The render no longer waits for this decision."


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
class Outline:
    """Where the watermark lands on the preview, in percent of the frame's width (`left`, `width`) and height
    (`top`, `height`): the page draws it over the preview image at whatever size that is shown."""

    left: float
    top: float
    width: float
    height: float

    @classmethod
    def of(cls, position: str, frame: tuple[int, int], image: tuple[int, int]) -> Outline:
        """The box the renderer blends the watermark into (render_kernels.compose.watermark_box)."""
        frame_w, frame_h = frame
        x, y, w, h = watermark_box(position, frame_w, frame_h, *image)
        return cls(100 * x / frame_w, 100 * y / frame_h, 100 * w / frame_w, 100 * h / frame_h)


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
    outline: Outline | None  # None when the output size or the watermark's size is not known any more
    time_left: str | None  # while pending
    deadline: Moment | None  # while pending
    decided: Moment | None  # once decided
    note: str | None  # the decision's
    ended_undecided: str  # how the round ended, when it closed undecided
    finished: bool  # the render ended with its video

    @classmethod
    def of(cls, render: ReviewedRender, now_ms: float) -> ReviewView:
        rec = render.record
        request = rec.request
        watermark = request.watermark
        assert watermark is not None, "only a watermarked render has a review page"
        size = render.output_size
        resolution = f"{request.resolution} ({size[0]} × {size[1]} pixels)" if size is not None else request.resolution
        outline = None
        if size is not None and render.watermark_size is not None:
            outline = Outline.of(watermark.position, size, render.watermark_size)
        pending = rec.pending if rec.approval is None else None
        approval = rec.approval
        return cls(
            task_id=rec.task_id,
            state=review_state(rec),
            position=POSITIONS[watermark.position],
            opacity=f"{watermark.opacity:.0%}",
            output_format=request.output_format.upper(),
            resolution=resolution,
            duration=duration_text(render.duration_s) if render.duration_s is not None else "unknown",
            outline=outline,
            time_left=time_left_text((pending.deadline_ms - now_ms) / 1000) if pending is not None else None,
            deadline=Moment.of_ms(pending.deadline_ms) if pending is not None else None,
            decided=Moment.of_ms(approval.at_ms) if approval is not None else None,
            note=approval.note if approval is not None else None,
            ended_undecided=ended_undecided_text(rec),
            finished=isinstance(rec.end, Succeeded),
        )
