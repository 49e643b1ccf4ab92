"""A streaming ladder: the rungs a render encodes beside its progressive file, for HLS and DASH players.

Every rung is H.264 in fragmented MP4 (CMAF): the one video codec every HLS and DASH player decodes. A rung is
made from the render's own composed picture (upright, watermarked, at the requested size), scaled down: a rung is
never larger than the resolution asked for, so the source is decoded once and every rung comes from one picture.
Keyframes fall exactly every `segment_s` (closed GOPs, no scene-cut keyframes between), so a player can switch
rungs at any segment boundary; a render's chunks are cut at those keyframes (plan.plan_segments'
`cut_multiple`), and every chunk of a rung is encoded with the same settings, so one init segment serves it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

import av
from av.video.reformatter import Interpolation, VideoReformatter

from .encoders import open_video_encoder
from .source_info import SourceInfo
from .spec import RESOLUTIONS, FrameBounds

# The rungs a ladder may hold, highest first: the short side of each, and (as for the progressive file) a long side
# of at most twice its 16:9 width.
RUNGS: dict[str, FrameBounds] = {
    "4k": RESOLUTIONS["4k"],
    "1080p": RESOLUTIONS["1080p"],
    "720p": RESOLUTIONS["720p"],
    "480p": FrameBounds(480, 1708),
    "360p": FrameBounds(360, 1280),
}
# Each rung's peak video bit rate (x264's VBV: constant quality up to this rate, over a two-second buffer), so that
# a rung's BANDWIDTH tells a player what its link must carry: about what the hosted services stream at each size.
RUNG_MAX_KBPS = {"4k": 16000, "1080p": 6000, "720p": 3000, "480p": 1500, "360p": 800}
VBV_BUFFER_S = 2
# The ladder a caller gets when it asks for one without naming rungs: every one up to the requested resolution.
DEFAULT_RUNGS = ("1080p", "720p", "480p", "360p")
DEFAULT_SEGMENT_S = 4.0
SEGMENT_S_RANGE = (1.0, 10.0)  # Apple's authoring guide: 6 s; below 1 s a segment is mostly its keyframe
LADDER_ENCODER = "libx264"
# A rung is scaled from a picture at least its size: area averaging keeps fine detail from aliasing.
RUNG_INTERPOLATION = Interpolation.AREA


@dataclass(frozen=True)
class LadderSpec:
    """Which rungs a render streams (names of RUNGS, highest first, no repeats) and how long its segments are."""

    rungs: tuple[str, ...]
    segment_s: float = DEFAULT_SEGMENT_S

    def __post_init__(self) -> None:
        if not self.rungs:
            raise ValueError("a ladder needs at least one rung")
        if unknown := [rung for rung in self.rungs if rung not in RUNGS]:
            raise ValueError(f"rungs must be among {tuple(RUNGS)}, not {unknown}")
        order = list(RUNGS)
        if sorted(self.rungs, key=order.index) != list(self.rungs) or len(set(self.rungs)) != len(self.rungs):
            raise ValueError(f"rungs must be distinct and highest first, not {self.rungs}")
        low, high = SEGMENT_S_RANGE
        if not low <= self.segment_s <= high:
            raise ValueError(f"segment_s must be within {low}..{high} s, not {self.segment_s!r}")

    def keyframe_interval(self, fps: float) -> int:
        """Frames between keyframes: `segment_s` at the output's frame rate, to the nearest frame."""
        return max(1, round(self.segment_s * fps))

    def sizes(self, source: SourceInfo) -> list[tuple[int, int]]:
        """Each rung's frame size for `source`, by the progressive file's rule (RenderSpec.output_size)."""
        shown = source.display_size()
        return [RUNGS[rung].fit(*shown) for rung in self.rungs]


def sample_aspects(sizes: list[tuple[int, int]]) -> list[Fraction]:
    """Each rung's pixel aspect ratio (of `sizes`, the top first): the one that shows it at the top rung's picture
    aspect. Even sides leave a rung a little off its picture's shape (854x480 of a 16:9 one), and a DASH adaptation
    set, whose rungs a player switches between, has one picture aspect."""
    top_width, top_height = sizes[0]
    return [Fraction(top_width * height, top_height * width) for width, height in sizes]


def rung_options(rung: str, keyframe_interval: int) -> dict[str, str]:
    """x264's settings for one rung: closed GOPs of exactly `keyframe_interval` frames, its peak rate capped."""
    max_kbps = RUNG_MAX_KBPS[rung]
    return {
        "x264-params": f"keyint={keyframe_interval}:min-keyint={keyframe_interval}:scenecut=0:open-gop=0",
        "maxrate": f"{max_kbps}k",
        "bufsize": f"{max_kbps * VBV_BUFFER_S}k",
    }


class RungEncoder:
    """One rung inside a segment's loop: scales each composed picture to the rung's size and encodes it."""

    def __init__(
        self,
        rung: str,
        size: tuple[int, int],
        sample_aspect: Fraction,
        rate: Fraction,
        keyframe_interval: int,
        threads: int,
    ):
        self.width, self.height = size
        options = rung_options(rung, keyframe_interval)
        self.encoder = open_video_encoder(LADDER_ENCODER, *size, rate, threads, options, sample_aspect)
        self._scaler = VideoReformatter()

    def encode(self, picture: av.VideoFrame | None) -> Iterable[av.Packet[av.VideoStream]]:
        """The packets for `picture` (None: the encoder's end), scaled from the render's picture."""
        if picture is None:
            return self.encoder.encode(None)
        scaled = self._scaler.reformat(picture, self.width, self.height, "yuv420p", interpolation=RUNG_INTERPOLATION)
        scaled.pts, scaled.time_base = picture.pts, picture.time_base
        scaled.pict_type = av.video.frame.PictureType.NONE
        return self.encoder.encode(scaled)
