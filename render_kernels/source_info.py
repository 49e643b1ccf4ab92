"""What the probe finds in a source video (`SourceInfo`), kept with an upload as part of its facts."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from .media_io import Media

# Output frame rates are kept to denominators <= 1001 so that the float `fps` in SourceInfo converts back to
# the exact same rational everywhere (encoder time base, mux stream rate): see `frame_rate`.
MAX_RATE_DENOMINATOR = 1001


@dataclass(frozen=True)
class AudioInfo:
    codec: str
    sample_rate: int
    channels: int
    duration_s: float


@dataclass(frozen=True)
class SourceInfo:
    """Facts about a source video. Times are seconds from the first video frame (which is at 0.0).

    `duration_s` is `frame_count / fps` (the duration of the constant-frame-rate output); `fps` is the
    average frame rate. The fields after `audio` are extras with defaults, so a hand-built SourceInfo
    with only the contract fields still works (keyframe frame indices are then derived from times and fps).
    """

    path: Media
    duration_s: float
    fps: float
    frame_count: int
    width: int
    height: int
    video_codec: str
    keyframe_times: tuple[float, ...]
    audio: AudioInfo | None
    start_time_s: float = 0.0  # stream timestamp of the first frame, for seeking
    keyframe_frames: tuple[int, ...] = ()  # presentation index of each keyframe, parallel to keyframe_times
    pixel_format: str = ""  # the decoder's, e.g. "yuv420p" (for the decoder choice: decoders.nvdec_refusal)
    # How the decoded width x height picture is shown (see _orientation.py); the render outputs what is shown.
    rotation: int = 0  # clockwise degrees (0, 90, 180, 270) that turn a decoded picture upright (display matrix)
    hflip: bool = False  # then mirrored left-right (a vertical mirror is recorded as rotation 180 + hflip)
    sample_aspect: tuple[int, int] = (1, 1)  # width : height of one decoded pixel on screen (anamorphic video)
    field_order: str = "progressive"  # interlaced: "tff", "bff" or "auto" (per frame); renders deinterlace it

    def display_size(self) -> tuple[float, float]:
        """(width, height) of the picture as players show it, in square pixels: the sample aspect ratio
        stretches the width (as players do), then a quarter turn swaps the sides. Not rounded, so sizes
        derived from it (RenderSpec.output_size) keep the exact display aspect ratio."""
        width = self.width * self.sample_aspect[0] / self.sample_aspect[1]
        return (self.height, width) if self.rotation in (90, 270) else (width, self.height)

    def keyframes(self) -> list[tuple[int, float]]:
        """(frame index, time) of each keyframe, always starting with frame 0 at 0.0."""
        frames = self.keyframe_frames or tuple(round(t * self.fps) for t in self.keyframe_times)
        starts = [(0, 0.0)]
        starts += [(f, t) for f, t in zip(frames, self.keyframe_times) if 0 < f < self.frame_count]
        return starts


def frame_rate(fps: float) -> Fraction:
    """The exact output frame rate for a SourceInfo.fps value."""
    return Fraction(fps).limit_denominator(MAX_RATE_DENOMINATOR)
