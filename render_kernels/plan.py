"""Split a source into keyframe-aligned segments that independent encoder tasks can render."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from .probe import SourceInfo


@dataclass(frozen=True)
class Segment:
    """Frames [start_frame, start_frame + frame_count) of the source; times in seconds from its first frame."""

    index: int
    start_frame: int
    frame_count: int
    start_s: float
    end_s: float


def plan_segments(
    info: SourceInfo, workers: int, min_segment_s: float = 2.0, max_frames: int | None = None
) -> list[Segment]:
    """Cut the source at keyframes into about `workers` segments of roughly equal duration; more when one
    segment would hold more than `max_frames` frames.

    One segment per worker keeps every worker busy without paying a fresh encoder's start-up (and a
    keyframe) more often than needed. `max_frames` bounds what one segment task holds (its encoded frames),
    so a longer video is more segments, not bigger ones. Each cut is the keyframe nearest an equal-split
    point, and is skipped when it would leave a segment shorter than `min_segment_s` (which wins over
    `max_frames`); so a source shorter than that (or without inner keyframes) is one segment, and sparse
    keyframes can make a segment longer than `max_frames`. Segments cover every frame exactly once, in order.
    """
    keyframes = info.keyframes()
    times = [t for _, t in keyframes]
    wanted = max(workers, -(-info.frame_count // max_frames) if max_frames else 1)
    count = max(1, min(wanted, int(info.duration_s // min_segment_s)))
    cuts = [0]  # indices into `keyframes`
    for i in range(1, count):
        ideal = info.duration_s * i / count
        k = bisect_left(times, ideal)
        if k == len(times) or (k > 0 and ideal - times[k - 1] <= times[k] - ideal):
            k -= 1
        long_enough = times[k] - times[cuts[-1]] >= min_segment_s and info.duration_s - times[k] >= min_segment_s
        if k > cuts[-1] and long_enough:
            cuts.append(k)

    bounds = [keyframes[k] for k in cuts] + [(info.frame_count, info.duration_s)]
    return [
        Segment(index=i, start_frame=f0, frame_count=f1 - f0, start_s=t0, end_s=t1)
        for i, ((f0, t0), (f1, t1)) in enumerate(zip(bounds, bounds[1:]))
    ]
