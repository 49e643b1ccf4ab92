"""Split a source into segments of equal work that independent encoder tasks can render."""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

from .probe import SourceInfo

# What a frame decoded only to reach a cut between keyframes costs, against a frame rendered (decoded, scaled and
# encoded): decoding a 1080p H.264 frame takes about a quarter of the time x264 takes to encode it at 720p.
LEAD_IN_COST = 0.25


@dataclass(frozen=True)
class Segment:
    """Frames [start_frame, start_frame + frame_count) of the source.

    A decoder can start only at a keyframe, so a segment is read from the keyframe at or before its first frame,
    `keyframe_s` seconds from the source's first frame: its first frame itself when it was cut at a keyframe, else
    `lead_in` frames before it, which are decoded (not scaled or encoded) and dropped.
    """

    index: int
    start_frame: int
    frame_count: int
    keyframe_s: float
    lead_in: int = 0

    @property
    def work(self) -> float:
        """What rendering it costs, in rendered frames."""
        return self.frame_count + LEAD_IN_COST * self.lead_in


def plan_segments(
    info: SourceInfo, workers: int, min_segment_s: float = 2.0, max_frames: int | None = None
) -> list[Segment]:
    """Cut the source into about `workers` segments of equal work; more when one segment would hold more than
    `max_frames` frames.

    One segment per worker keeps every worker busy without paying a fresh encoder's start-up (and a keyframe)
    more often than needed; segments of equal work end together, so the render does not wait on the longest.
    `max_frames` bounds what one segment task holds (its encoded frames), so a longer video is more segments,
    not bigger ones. Cuts fall wherever the work is equal, not only at keyframes: a segment cut between them
    also decodes its lead-in (Segment.work counts it), so a long-GOP source splits as evenly as any, its later
    segments a little shorter. No segment is shorter than `min_segment_s` (which wins over `max_frames`): fewer
    segments where they would be (a source shorter than twice that is one). Segments cover every frame exactly
    once, in order.
    """
    keyframes = info.keyframes()
    keyframe_frames = [f for f, _ in keyframes]
    min_frames = max(1, math.ceil(min_segment_s * info.fps))
    wanted = max(workers, -(-info.frame_count // max_frames) if max_frames else 1)
    count = max(1, min(wanted, info.frame_count // min_frames))
    cap = max(max_frames or info.frame_count, -(-info.frame_count // count))
    for tried in range(count, 0, -1):
        starts = _balanced_starts(keyframe_frames, info.frame_count, tried, cap)
        if min(b - a for a, b in zip(starts, [*starts[1:], info.frame_count])) >= min_frames:
            break

    segments = []
    for i, (start, end) in enumerate(zip(starts, [*starts[1:], info.frame_count])):
        keyframe_frame, keyframe_s = keyframes[bisect_right(keyframe_frames, start) - 1]
        segments.append(Segment(i, start, end - start, keyframe_s, start - keyframe_frame))
    return segments


def _balanced_starts(keyframe_frames: list[int], frame_count: int, count: int, cap: int) -> list[int]:
    """The first frames of at most `count` segments of at most `cap` frames covering every frame, whose largest
    work is the least it can be: the smallest budget with which filling each segment up to it (or to `cap`
    frames) in turn covers them all. Filling each to the budget is what makes the least: ending one earlier
    only leaves more frames (less the lead-in saved) to the next."""

    def fill(budget: int) -> list[int] | None:
        starts = [0]
        while True:
            start = starts[-1]
            lead_in = start - keyframe_frames[bisect_right(keyframe_frames, start) - 1]
            end = start + min(cap, math.floor(budget - LEAD_IN_COST * lead_in))
            if end >= frame_count:
                return starts
            if end <= start or len(starts) == count:
                return None
            starts.append(end)

    low, high = -(-frame_count // count), math.ceil(frame_count * (1 + LEAD_IN_COST))  # high always covers
    while low < high:
        middle = (low + high) // 2
        if fill(middle) is None:
            low = middle + 1
        else:
            high = middle
    starts = fill(low)
    assert starts is not None  # `high` covers: every segment then fills to `cap`, and count * cap >= frame_count
    return starts
