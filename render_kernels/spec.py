"""What the user asked for: output format, resolution, watermark; and the output-size rule (RenderSpec.output_size)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .decoders import NVDEC_DECODERS
from .media_io import Media
from .source_info import SourceInfo


@dataclass(frozen=True)
class FrameBounds:
    """The output frame a resolution names: its short side, whatever the picture's shape (landscape, portrait,
    square), and the longest side it may have."""

    short_side: int
    max_long_side: int

    def fit(self, shown_w: float, shown_h: float) -> tuple[int, int]:
        """The output frame size for a picture shown at shown_w x shown_h: aspect kept, square pixels, even sides.

        The short side comes out at `short_side` (1280x720 landscape, 720x1280 portrait, 720x720 square at 720p);
        the long side follows the aspect ratio, up to `max_long_side`: past that the whole picture is scaled down
        to fit it, so the short side comes out shorter. Smaller pictures are scaled UP as well as larger ones
        down: the user asked for that resolution.
        """
        scale = min(self.short_side / min(shown_w, shown_h), self.max_long_side / max(shown_w, shown_h))
        # Both results stay within their bounds: the nearest even number to a value at most an even bound is too.
        return even(shown_w * scale), even(shown_h * scale)


# The resolutions a render may ask for. The longest side is twice the width of the resolution's 16:9 frame (so
# every shape up to 32:9 keeps the full short side) and never over 4096, the widest frame H.264 NVENC encodes (DCI
# 4K's width): a source of absurd aspect ratio is scaled down to it, so no frame grows without bound.
RESOLUTIONS = {"720p": FrameBounds(720, 2560), "1080p": FrameBounds(1080, 3840), "4k": FrameBounds(2160, 4096)}
# Video encoders each container accepts (the first is the CPU default; see encoders.choose_video_encoder).
FORMAT_ENCODERS = {"mp4": ("libx264", "h264_nvenc"), "mov": ("libx264", "h264_nvenc"), "webm": ("libvpx-vp9",)}
# Where a watermark sits along one side of the frame: at its start (left, top) or end, each inside the margin,
# or in the middle (compose.watermark_box).
Anchor = Literal["start", "middle", "end"]
# The watermark positions, each as its (horizontal, vertical) anchors: a position is accepted exactly when it is
# placed.
WATERMARK_ANCHORS: dict[str, tuple[Anchor, Anchor]] = {
    "top_left": ("start", "start"),
    "top_right": ("end", "start"),
    "bottom_left": ("start", "end"),
    "bottom_right": ("end", "end"),
    "center": ("middle", "middle"),
}
POSITIONS = tuple(WATERMARK_ANCHORS)


@dataclass(frozen=True)
class WatermarkSpec:
    image: Media
    position: str = "bottom_right"
    opacity: float = 1.0

    def __post_init__(self) -> None:
        if self.position not in POSITIONS:
            raise ValueError(f"watermark position must be one of {POSITIONS}, not {self.position!r}")
        if not 0.0 <= self.opacity <= 1.0:
            raise ValueError(f"watermark opacity must be within 0..1, not {self.opacity!r}")


@dataclass(frozen=True)
class RenderSpec:
    output_format: str
    resolution: str
    watermark: WatermarkSpec | None = None
    video_encoder: str | None = None  # None: choose_video_encoder(output_format)
    video_decoder: str | None = None  # None: software; else an NVDEC decoder (decoders.choose_video_decoder)
    # The CPUs each segment has to itself: the threads of its video decoder, scaler and encoder; None: each one's
    # default. Fixed once per render (the bytes depend on the encoder's): the driver sets it from its plan
    # (encoders.segment_threads).
    segment_threads: int | None = None

    def __post_init__(self) -> None:
        if self.output_format not in FORMAT_ENCODERS:
            raise ValueError(f"output_format must be one of {tuple(FORMAT_ENCODERS)}, not {self.output_format!r}")
        if self.resolution not in RESOLUTIONS:
            raise ValueError(f"resolution must be one of {tuple(RESOLUTIONS)}, not {self.resolution!r}")
        encoders = FORMAT_ENCODERS[self.output_format]
        if self.video_encoder is not None and self.video_encoder not in encoders:
            raise ValueError(f"{self.output_format} takes video from {encoders}, not {self.video_encoder!r}")
        if self.segment_threads is not None and self.segment_threads < 1:
            raise ValueError(f"segment_threads must be at least 1, not {self.segment_threads!r}")
        if self.video_decoder is not None and self.video_decoder not in NVDEC_DECODERS.values():
            raise ValueError(
                f"video_decoder must be one of {tuple(NVDEC_DECODERS.values())}, not {self.video_decoder!r}"
            )

    def output_size(self, source: SourceInfo) -> tuple[int, int]:
        """The output frame size for `source`: the picture as players show it (SourceInfo.display_size: after the
        sample aspect ratio and the display rotation) fitted to the resolution (FrameBounds.fit). The one rule
        every frame of a render, its preview and its review page follow."""
        return RESOLUTIONS[self.resolution].fit(*source.display_size())


def even(value: float) -> int:
    """Nearest even integer, at least 2 (4:2:0 chroma needs even sizes and offsets)."""
    return max(2, round(value / 2) * 2)
