"""Split a source into segments of equal work that independent encoder tasks can render."""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass

from .source_info import SourceInfo

# What a frame decoded only to reach a cut between keyframes costs, against a frame rendered (decoded, scaled and
# encoded): decoding a 1080p H.264 frame takes about a quarter of the time x264 takes to encode it at 720p.
LEAD_IN_COST = 0.25
# The most a plan's lead-ins may cost, as a share of the source's frames. A lead-in is CPU that no other segment
# gets, while a render cut in fewer segments gives each more encoder threads (segment_threads), which on
# a busy or small machine is as fast: a 10 s clip with only its first keyframe, cut in two on 2 CPUs (one lead-in
# of 172 frames, 14 %), took 2.6-2.7 s where one segment with two threads took 2.4 s.
MAX_LEAD_IN_SHARE = 0.10
# How much longer (in work) than the balanced plan's longest a segment may grow so that a cut lands on a source
# keyframe. Every segment starts with a keyframe of its own, which costs bytes the ffmpeg CLI's one encode does not
# pay; where the source has a keyframe too, its encoder pays for that picture anyway (a source's keyframe refreshes
# its detail and coding noise), so a cut there costs about half the bytes of one between keyframes: a 6 s
# 640x272 camera-like clip at 720p in two segments needed +1.4-1.5 % bytes at equal PSNR-Y cut at a keyframe,
# +2.2-3.2 % cut between (`benchmarks/rate_distortion.py`'s `camera`). It also saves the lead-in. Small, because
# the longest segment sets the render's wall time: a cut is moved only where a keyframe is near it.
KEYFRAME_CUT_SHARE = 0.03
# The shortest segment a plan makes (unless the source is shorter). Every seam between segments costs bytes the
# ffmpeg CLI's one encode does not pay (a keyframe of its own, and a full frame where ffmpeg's would be a B-frame),
# about the same whatever the segments' length, so a short clip cut in many pays most: camera-like 640x272 footage
# rendered to 1694x720 needed +3.1 % bytes at equal PSNR-Y as a 6 s clip in two segments, -0.2 % in one, +1.4 %
# as a 10 s clip in two (`benchmarks/rate_distortion.py`'s `camera`). At 5 s no source shorter than 10 s is cut;
# a lone segment gets the render's CPUs as threads instead (encoders.segment_threads). The server's
# VIDFORGE_MIN_SEGMENT_S (serve_app._config) defaults to it.
MIN_SEGMENT_S = 5.0


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


def keyframe_at_or_before(keyframes: list[tuple[int, float]], frame: int) -> tuple[int, float]:
    """(frame index, time) of the last of `keyframes` (SourceInfo.keyframes()) at or before `frame`: where a
    decoder reaching `frame` starts."""
    return keyframes[bisect_right(keyframes, (frame, math.inf)) - 1]


def lead_in_frames(keyframes: list[tuple[int, float]], start: int) -> int:
    """The frames a segment starting at `start` decodes before it: from the keyframe at or before it."""
    return start - keyframe_at_or_before(keyframes, start)[0]


def plan_segments(
    info: SourceInfo,
    workers: int,
    min_segment_s: float = MIN_SEGMENT_S,
    max_frames: int | None = None,
    cut_multiple: int = 1,
) -> list[Segment]:
    """Cut the source into about `workers` segments of equal work; more when one segment would hold more than
    `max_frames` frames.

    One segment per worker keeps every worker busy without paying a fresh encoder's start-up (and a keyframe)
    more often than needed; segments of equal work end together, so the render does not wait on the longest.
    `max_frames` bounds what one segment task holds (its encoded frames), so a longer video is more segments,
    not bigger ones. Cuts fall wherever the work is equal, not only at keyframes: a segment cut between them
    also decodes its lead-in (its work is its frames plus LEAD_IN_COST per lead-in frame), so a long-GOP source
    splits as evenly as any, its later segments a little shorter. Fewer segments where they would be shorter
    than `min_segment_s` (a source shorter than twice that is one), or where their lead-ins would cost more than
    MAX_LEAD_IN_SHARE of the frames (a source with sparse keyframes is then cut at them, or not at all); neither
    makes a segment longer than `max_frames`, unless `min_segment_s` needs it. Segments cover every frame
    exactly once, in order. A cut moves to a source keyframe near it when that makes no segment's work more than
    KEYFRAME_CUT_SHARE above the balanced plan's largest.

    `cut_multiple` > 1 puts every cut on a multiple of that many frames (a streaming ladder's keyframe interval:
    ladder.LadderSpec), the nearest to where it would have been, instead of moving it to a source keyframe.
    """
    keyframes = info.keyframes()
    min_frames = max(1, math.ceil(min_segment_s * info.fps))
    needed = -(-info.frame_count // max_frames) if max_frames else 1  # what bounds a segment task's memory
    count = max(1, min(max(workers, needed), info.frame_count // min_frames))
    for tried in range(count, min(needed, count) - 1, -1):
        cap = max(max_frames or info.frame_count, -(-info.frame_count // tried))
        starts = _balanced_starts(keyframes, info.frame_count, tried, cap)
        lengths = [end - start for start, end in zip(starts, [*starts[1:], info.frame_count])]
        short = min(lengths) < min_frames
        costly = (
            LEAD_IN_COST * sum(lead_in_frames(keyframes, start) for start in starts)
            > MAX_LEAD_IN_SHARE * info.frame_count
        )
        if not (short or costly):
            break
    if cut_multiple > 1:
        snapped = {round(start / cut_multiple) * cut_multiple for start in starts}
        starts = sorted(start for start in snapped if start < info.frame_count)
    else:
        # Moved once the count is chosen: a cut at a keyframe only saves a lead-in, so it never changes the count.
        starts = _cuts_at_keyframes(starts, keyframes, info.frame_count, cap, min_frames)
    segments = []
    for i, (start, end) in enumerate(zip(starts, [*starts[1:], info.frame_count])):
        keyframe_frame, keyframe_s = keyframe_at_or_before(keyframes, start)
        segments.append(Segment(i, start, end - start, keyframe_s, start - keyframe_frame))
    return segments


def _balanced_starts(keyframes: list[tuple[int, float]], frame_count: int, count: int, cap: int) -> list[int]:
    """The first frames of at most `count` segments of at most `cap` frames covering every frame, whose largest
    work is the least it can be: the smallest budget with which filling each segment up to it (or to `cap`
    frames) in turn covers them all. Filling each to the budget is what makes the least: ending one earlier
    only leaves more frames (less the lead-in saved) to the next."""

    def fill(budget: int) -> list[int] | None:
        starts = [0]
        while True:
            start = starts[-1]
            end = start + min(cap, math.floor(budget - LEAD_IN_COST * lead_in_frames(keyframes, start)))
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


def _work(keyframes: list[tuple[int, float]], start: int, end: int) -> float:
    """What segment [start, end) costs: its frames, and its lead-in at LEAD_IN_COST a frame."""
    return end - start + LEAD_IN_COST * lead_in_frames(keyframes, start)


def _cuts_at_keyframes(
    starts: list[int], keyframes: list[tuple[int, float]], frame_count: int, cap: int, min_frames: int
) -> list[int]:
    """`starts` with each cut moved, in turn, to the nearest keyframe (at or before it, or after it) that keeps both
    segments beside it within KEYFRAME_CUT_SHARE of the plan's largest work, `cap` frames and `min_frames`."""
    ends = [*starts[1:], frame_count]
    limit = (1 + KEYFRAME_CUT_SHARE) * max(_work(keyframes, a, b) for a, b in zip(starts, ends))
    moved = starts[:1]
    for cut, end in zip(starts[1:], ends[1:]):
        before = keyframe_at_or_before(keyframes, cut)[0]
        later = bisect_right(keyframes, (cut, math.inf))
        after = keyframes[later][0] if later < len(keyframes) else frame_count
        fitting = [
            frame
            for frame in (before, after)
            if min_frames <= frame - moved[-1] <= cap
            and min_frames <= end - frame <= cap
            and max(_work(keyframes, moved[-1], frame), _work(keyframes, frame, end)) <= limit
        ]
        moved.append(min(fitting, key=lambda frame: abs(frame - cut), default=cut))
    return moved
