"""What the user asked for: output format, resolution, watermark; and the output-size rule."""

from __future__ import annotations

from dataclasses import dataclass

from .decoders import NVDEC_DECODERS
from .probe import Media

# Each resolution names the short side of the output picture, whatever its shape (landscape, portrait, square).
SHORT_SIDES = {"720p": 720, "1080p": 1080, "4k": 2160}
# The longest side an output may have: twice the width of the resolution's 16:9 frame (so every shape up to 32:9
# keeps the full short side) and never over 4096, the widest frame H.264 NVENC encodes (DCI 4K's width). A source
# of absurd aspect ratio is scaled down to it, so no frame grows without bound.
MAX_LONG_SIDES = {"720p": 2560, "1080p": 3840, "4k": 4096}
# Video encoders each container accepts (the first is the CPU default; see encoders.choose_video_encoder).
FORMAT_ENCODERS = {"mp4": ("libx264", "h264_nvenc"), "mov": ("libx264", "h264_nvenc"), "webm": ("libvpx-vp9",)}
POSITIONS = ("top_left", "top_right", "bottom_left", "bottom_right", "center")


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
    # Threads of each segment's video encoder; None: encoders.ENCODER_THREADS. Fixed once per render (the bytes
    # depend on it): the driver sets it from its plan (encoders.segment_encoder_threads).
    encoder_threads: int | None = None

    def __post_init__(self) -> None:
        if self.output_format not in FORMAT_ENCODERS:
            raise ValueError(f"output_format must be one of {tuple(FORMAT_ENCODERS)}, not {self.output_format!r}")
        if self.resolution not in SHORT_SIDES:
            raise ValueError(f"resolution must be one of {tuple(SHORT_SIDES)}, not {self.resolution!r}")
        encoders = FORMAT_ENCODERS[self.output_format]
        if self.video_encoder is not None and self.video_encoder not in encoders:
            raise ValueError(f"{self.output_format} takes video from {encoders}, not {self.video_encoder!r}")
        if self.encoder_threads is not None and self.encoder_threads < 1:
            raise ValueError(f"encoder_threads must be at least 1, not {self.encoder_threads!r}")
        if self.video_decoder is not None and self.video_decoder not in NVDEC_DECODERS.values():
            raise ValueError(
                f"video_decoder must be one of {tuple(NVDEC_DECODERS.values())}, not {self.video_decoder!r}"
            )


def even(value: float) -> int:
    """Nearest even integer, at least 2 (4:2:0 chroma needs even sizes and offsets)."""
    return max(2, round(value / 2) * 2)


def output_size(src_w: float, src_h: float, resolution: str) -> tuple[int, int]:
    """Output frame size for a source DISPLAYED at src_w x src_h (SourceInfo.display_size(): after the sample
    aspect ratio and the display rotation): aspect kept, square pixels, even sides.

    The resolution names the short side: 720p is 720 (1280x720 landscape, 720x1280 portrait, 720x720 square),
    1080p is 1080, 4k is 2160; the long side follows the aspect ratio, up to MAX_LONG_SIDES (2560, 3840, 4096):
    past that the whole picture is scaled down to fit it, so the short side comes out shorter. The user asked
    for that resolution, so smaller sources are scaled UP to it as well as larger ones down.
    """
    short_side, long_limit = SHORT_SIDES[resolution], MAX_LONG_SIDES[resolution]
    scale = min(short_side / min(src_w, src_h), long_limit / max(src_w, src_h))
    # Both results stay within their bounds: the nearest even number to a value at most an even bound is too.
    return even(src_w * scale), even(src_h * scale)
