"""Split a source into segments of equal work that independent encoder tasks can render."""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate

from .probe import BYTES_BIN_FRAMES, SourceInfo

# What a frame decoded only to reach a cut between keyframes costs, against a frame rendered (decoded, scaled and
# encoded): decoding a 1080p H.264 frame takes about a quarter of the time x264 takes to encode it at 720p.
# Both scale with how hard the frame's picture is, which its bytes tell (SourceInfo.video_bytes).
LEAD_IN_COST = 0.25
# The share of a rendered frame's work that grows with its bytes (its decode, and the encoder's work on a busier
# picture); the rest is the same for every frame. Measured on a grainy Mandelbrot zoom whose second half holds
# 1.44 x the bytes of its first, cut in two on CPU-seconds, second segment over first: every frame alike 1.33;
# with this share at 0.25: 1.16 (1.13 at 30 s); 0.5: 0.99 (1.01); 0.75: 0.90.
BYTES_SHARE = 0.5
# The most a plan's lead-ins may cost, as a share of the source's frames. A lead-in is CPU that no other segment
# gets, while a render cut in fewer segments gives each more encoder threads (segment_encoder_threads), which on
# a busy or small machine is as fast: a 10 s clip with only its first keyframe, cut in two on 2 CPUs (one lead-in
# of 172 frames, 14 %), took 2.6-2.7 s where one segment with two threads took 2.4 s.
MAX_LEAD_IN_SHARE = 0.10


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


def plan_segments(
    info: SourceInfo, workers: int, min_segment_s: float = 2.0, max_frames: int | None = None
) -> list[Segment]:
    """Cut the source into about `workers` segments of equal work; more when one segment would hold more than
    `max_frames` frames.

    One segment per worker keeps every worker busy without paying a fresh encoder's start-up (and a keyframe)
    more often than needed; segments of equal work end together, so the render does not wait on the longest.
    `max_frames` bounds what one segment task holds (its encoded frames), so a longer video is more segments,
    not bigger ones. Cuts fall wherever the work is equal, not only at keyframes: a segment cut between them
    also decodes its lead-in (its work is its frames plus LEAD_IN_COST per lead-in frame), so a long-GOP source
    splits as evenly as any, its later segments a little shorter. A frame weighs more the more bytes it takes
    (`_cumulative_work`), so a source harder in one part gives that part's segments fewer frames. Fewer
    segments where they would be shorter than `min_segment_s` (a source shorter than twice that is one), or
    where their lead-ins would cost more than MAX_LEAD_IN_SHARE of the frames (a source with sparse keyframes
    is then cut at them, or not at all); neither makes a segment longer than `max_frames`, unless
    `min_segment_s` needs it. Segments cover every frame exactly once, in order.
    """
    keyframes, work = info.keyframes(), _cumulative_work(info)
    min_frames = max(1, math.ceil(min_segment_s * info.fps))
    needed = -(-info.frame_count // max_frames) if max_frames else 1  # what bounds a segment task's memory
    count = max(1, min(max(workers, needed), info.frame_count // min_frames))
    for tried in range(count, min(needed, count) - 1, -1):
        cap = max(max_frames or info.frame_count, -(-info.frame_count // tried))
        starts = _balanced_starts(keyframes, work, tried, cap, min_frames)
        segments = []
        for i, (start, end) in enumerate(zip(starts, [*starts[1:], info.frame_count])):
            keyframe_frame, keyframe_s = keyframe_at_or_before(keyframes, start)
            segments.append(Segment(i, start, end - start, keyframe_s, start - keyframe_frame))
        short = min(s.frame_count for s in segments) < min_frames
        costly = LEAD_IN_COST * sum(s.lead_in for s in segments) > MAX_LEAD_IN_SHARE * info.frame_count
        if not (short or costly):
            break
    return segments


@dataclass(frozen=True)
class _Work:
    """Cumulative work of the first n frames, in frames of average difficulty: `rendered[n]` to render them,
    `decoded[n]` to decode them only (a lead-in's). Both have frame_count + 1 entries, from 0."""

    rendered: list[float]
    decoded: list[float]


def _cumulative_work(info: SourceInfo) -> _Work:
    """A frame's weight is its bytes over the average frame's (its run's bytes spread over the run's frames:
    SourceInfo.video_bytes). Rendering it costs 1 - BYTES_SHARE + BYTES_SHARE x its weight, decoding it alone
    LEAD_IN_COST x its weight. Without byte counts (or with counts that do not cover the frames) every frame
    weighs the same: one frame rendered, LEAD_IN_COST decoded."""
    count = info.frame_count
    frames = [min(BYTES_BIN_FRAMES, count - start) for start in range(0, count, BYTES_BIN_FRAMES)]
    runs, total = info.video_bytes, sum(info.video_bytes)
    if len(runs) != len(frames) or total <= 0:
        runs, total = tuple(frames), count  # a byte a frame: every frame alike
    weights: list[float] = []  # each frame's bytes over the average frame's
    for run, run_frames in zip(runs, frames):
        weights += [run * count / (run_frames * total)] * run_frames
    rendered = accumulate((1 - BYTES_SHARE + BYTES_SHARE * w for w in weights), initial=0.0)
    decoded = accumulate((LEAD_IN_COST * w for w in weights), initial=0.0)
    return _Work(list(rendered), list(decoded))


def _balanced_starts(
    keyframes: list[tuple[int, float]], work: _Work, count: int, cap: int, min_frames: int
) -> list[int]:
    """The first frames of at most `count` segments of at most `cap` frames covering every frame, whose largest
    work is the least it can be, to a frame's work: the smallest budget with which filling each segment up to
    it (or to `cap` frames) in turn covers them all. Filling each to the budget is what makes the least: ending
    one earlier only leaves more frames (less the lead-in saved) to the next. Then, within that budget, a cut
    moves back to the keyframe before it wherever the rest still fits and the segment keeps `min_frames`: a
    lead-in the balance does not need is CPU spent for nothing (a byte-weighted half that falls one frame past
    a keyframe would otherwise decode that keyframe twice)."""
    frame_count = len(work.rendered) - 1

    def fill(budget: int, first: int = 0, segments: int = count) -> list[int] | None:
        """The starts of at most `segments` segments from frame `first` to the end, each filled to `budget`."""
        starts = [first]
        while True:
            start = starts[-1]
            lead_in = work.decoded[start] - work.decoded[keyframe_at_or_before(keyframes, start)[0]]  # its work
            end = min(start + cap, bisect_right(work.rendered, work.rendered[start] + budget - lead_in) - 1)
            if end >= frame_count:
                return starts
            if end <= start or len(starts) == segments:
                return None
            starts.append(end)

    # `high` always covers: every frame rendered and decoded once more in a lead-in
    low, high = math.ceil(work.rendered[-1] / count), math.ceil(work.rendered[-1] + work.decoded[-1])
    while low < high:
        middle = (low + high) // 2
        if fill(middle) is None:
            low = middle + 1
        else:
            high = middle
    starts = [0]
    while True:
        rest = fill(low, starts[-1], count + 1 - len(starts))
        assert rest is not None  # `high` covers: every segment fills to `cap`, and count * cap >= frame_count
        if len(rest) == 1:
            return starts
        cut, keyframe = rest[1], keyframe_at_or_before(keyframes, rest[1])[0]
        if starts[-1] + min_frames <= keyframe < cut and fill(low, keyframe, count - len(starts)) is not None:
            cut = keyframe
        starts.append(cut)
