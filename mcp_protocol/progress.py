"""Live render progress: the report the render driver makes, the record fields the registry keeps of it,
and the progress text both task surfaces show (`statusMessage`, `status_message`).

One model for all three, so the engine and the wire cannot disagree about what a figure means. Pure: no Ray,
no I/O, a clock only where one is passed in.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NotRequired, TypedDict

from mcp_protocol.domain import Phase, TaskRecord, TaskStatus

# The working phases a render reports; awaiting approval is a status of its own (input_required), with the
# contract's fixed message, and the registry adds "queued" before and "done" after.
PROBING, RENDERING, MUXING = Phase.PROBING, Phase.RENDERING, Phase.MUXING
LIVE_PHASES = (PROBING, RENDERING, MUXING)
# A render about to end asks for its next poll when it expects to have ended, not a whole interval later
# (pollIntervalMs MAY change between polls): the encoding left at the measured speed plus MUX_ALLOWANCE_MS for the
# mux and store after the last frame (0.3-0.5 s for a 30 s 720p render), never below END_POLL_MIN_MS (a speed
# measured too high would otherwise have every client poll in a tight loop) nor above the task's own interval.
END_POLL_MIN_MS = 500
MUX_ALLOWANCE_MS = 500
# How a placement note starts: where a render runs (the GPU choice, the nodes its segments finished on), reported by
# the driver on an autoscaling cluster or where a GPU was considered, and kept as the record's status message.
PLACEMENT_PREFIX = "Placement: "


class ProgressFields(TypedDict):
    """What a report sets of a task record, as the registry's `set_progress` takes it (`RenderProgress.fields`)."""

    phase: Phase
    frames_done: int
    frames_total: int
    fps: float | None
    source_fps: float | None
    frames_written: int
    message: NotRequired[str]  # a placement note, kept as the status message


@dataclass(frozen=True)
class RenderProgress:
    """Where a render stands. `frames_total` is 0 until the source is probed; `fps` is None until there is a
    measured encoding speed (and again while muxing, when no frames are being encoded); `frames_written` counts
    the frames the mux has written into the output file (muxing: once all are, the file is finished and stored)."""

    phase: Phase
    frames_done: int = 0
    frames_total: int = 0
    fps: float | None = None  # frames encoded per wall-clock second, all segments together
    source_fps: float | None = None  # the source's frame rate: fps / source_fps is the speed in x real time
    placement: str | None = None  # a placement note (PLACEMENT_PREFIX ...), shown after the figures; None: none
    frames_written: int = 0

    @classmethod
    def of(cls, rec: TaskRecord) -> RenderProgress:
        """The progress a task record carries (its placement note: the status message, when it is one)."""
        placement = rec.status_message if rec.status_message.startswith(PLACEMENT_PREFIX) else None
        return cls(rec.phase, rec.frames_done, rec.frames_total, rec.fps, rec.source_fps, placement, rec.frames_written)

    def fields(self) -> ProgressFields:
        """The record fields this report sets (the registry's `set_progress` keywords): a placement note is the
        record's status message, which no schema field has to carry."""
        fields = ProgressFields(
            phase=self.phase,
            frames_done=self.frames_done,
            frames_total=self.frames_total,
            fps=self.fps,
            source_fps=self.source_fps,
            frames_written=self.frames_written,
        )
        if self.placement is not None:
            fields["message"] = self.placement
        return fields

    @property
    def fraction(self) -> float | None:
        """0-1, rounded so that a poll shows a change only when a frame count does; None before probing."""
        return round(min(1.0, self.frames_done / self.frames_total), 4) if self.frames_total else None

    @property
    def percent(self) -> int | None:
        """0-100, floored, so 100 only once every frame is encoded; None before probing."""
        if not self.frames_total:
            return None
        return 100 * min(self.frames_done, self.frames_total) // self.frames_total

    @property
    def realtime(self) -> float | None:
        """Encoding speed as a multiple of playback speed (2.0: a minute of video takes 30 s)."""
        return self.fps / self.source_fps if self.fps and self.source_fps else None

    @property
    def eta_s(self) -> float | None:
        """Seconds of encoding left at the measured speed; the mux after it is short and not included."""
        return max(0, self.frames_total - self.frames_done) / self.fps if self.fps else None

    def message(self) -> str:
        """The working-status text, in the contract's shape: "Rendering: 42% (frame 3021/7200), ...", then the
        placement note when there is one. What follows the figures names the step: encoding (with the speed and
        the time left), encoding done, muxing the output file (with the frames written), storing it.

        The percentage is floored, so 100% appears only once every frame is encoded."""
        figures = self._figures()
        return f"{figures} {self.placement}" if self.placement else figures

    def _figures(self) -> str:
        if self.phase == PROBING or not self.frames_total:
            return "Rendering: probing the source."
        done, total = min(self.frames_done, self.frames_total), self.frames_total
        head = f"Rendering: {self.percent}% (frame {done}/{total})"
        if self.phase == MUXING:
            return f"{head}, {self._muxing()}."
        if done == total:
            return f"{head}, encoding done."
        eta_s = self.eta_s
        if self.fps is None or eta_s is None:
            return f"{head}, encoding; measuring speed."
        speed = f"{self.fps:.1f} fps" + (f" ({self.realtime:.2f}x real time)" if self.realtime else "")
        return f"{head}, encoding at {speed}, about {eta_text(eta_s)} left."

    def _muxing(self) -> str:
        written, total = self.frames_written, self.frames_total
        if written >= total:
            return "storing the output file"
        return f"muxing the output file, frame {written}/{total} written" if written else "muxing the output file"


def poll_interval_ms(rec: TaskRecord, now_ms: int) -> int:
    """The pollIntervalMs a task asks for at `now_ms`: its own, or less while it renders and expects to end sooner
    (see END_POLL_MIN_MS): the encoding time left as of its last report, less the time since, plus the mux."""
    interval = rec.poll_interval_ms
    if rec.status is not TaskStatus.WORKING or rec.phase not in (RENDERING, MUXING) or not rec.frames_total:
        return interval
    progress = RenderProgress.of(rec)
    if rec.phase == MUXING or rec.frames_done >= rec.frames_total:
        left_ms = float(MUX_ALLOWANCE_MS)
    elif (eta_s := progress.eta_s) is not None:
        left_ms = eta_s * 1000 - max(0, now_ms - rec.last_updated_at_ms) + MUX_ALLOWANCE_MS
    else:  # no speed measured yet
        return interval
    return min(interval, max(END_POLL_MIN_MS, math.ceil(left_ms)))


def eta_text(seconds: float) -> str:
    """A remaining time as people read it: "8 s", "1 min 12 s", "2 h 05 min" (rounded up: never 0 s early)."""
    s = math.ceil(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class SpeedMeter:
    """Encoding speed over the last `window_s` seconds of (time, frames done) samples.

    A sliding window rather than the average since the start: worker start-up, a retried segment or the
    pause for watermark approval would otherwise drag the figure (and the ETA) for the rest of the render.
    None until the samples span `min_span_s`, so the first figure is not two samples a few ms apart.
    """

    def __init__(
        self, window_s: float = 5.0, min_span_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self.min_span_s = min_span_s
        self.clock = clock
        self.samples: deque[tuple[float, int]] = deque()

    def add(self, frames_done: int) -> float | None:
        """Record a sample now; return the frames per second over the window, or None if not yet known."""
        now = self.clock()
        self.samples.append((now, frames_done))
        while len(self.samples) > 2 and self.samples[1][0] <= now - self.window_s:
            self.samples.popleft()  # keep one sample at or before the window's start, so it spans the window
        (t0, f0), (t1, f1) = self.samples[0], self.samples[-1]
        return (f1 - f0) / (t1 - t0) if t1 - t0 >= self.min_span_s else None
