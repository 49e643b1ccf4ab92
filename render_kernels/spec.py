"""What the user asked for: output format, resolution, watermark; and the output-size rule."""

from __future__ import annotations

from dataclasses import dataclass

from .decoders import NVDEC_DECODERS
from .probe import Media

RESOLUTION_BOXES = {"720p": (1280, 720), "1080p": (1920, 1080), "4k": (3840, 2160)}
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

    def __post_init__(self) -> None:
        if self.output_format not in FORMAT_ENCODERS:
            raise ValueError(f"output_format must be one of {tuple(FORMAT_ENCODERS)}, not {self.output_format!r}")
        if self.resolution not in RESOLUTION_BOXES:
            raise ValueError(f"resolution must be one of {tuple(RESOLUTION_BOXES)}, not {self.resolution!r}")
        encoders = FORMAT_ENCODERS[self.output_format]
        if self.video_encoder is not None and self.video_encoder not in encoders:
            raise ValueError(f"{self.output_format} takes video from {encoders}, not {self.video_encoder!r}")
        if self.video_decoder is not None and self.video_decoder not in NVDEC_DECODERS.values():
            raise ValueError(
                f"video_decoder must be one of {tuple(NVDEC_DECODERS.values())}, not {self.video_decoder!r}"
            )


def even(value: float) -> int:
    """Nearest even integer, at least 2 (4:2:0 chroma needs even sizes and offsets)."""
    return max(2, round(value / 2) * 2)


def output_size(src_w: int, src_h: int, resolution: str) -> tuple[int, int]:
    """Output frame size: the source scaled to fit inside the resolution's box, aspect kept, even sides.

    Boxes: 720p = 1280x720, 1080p = 1920x1080, 4k = 3840x2160 (landscape boxes, so a portrait source
    becomes e.g. 608x1080 at 1080p). The user asked for that resolution, so smaller sources are scaled UP to
    the box as well as larger ones down.
    """
    box_w, box_h = RESOLUTION_BOXES[resolution]
    scale = min(box_w / src_w, box_h / src_h)
    return min(box_w, even(src_w * scale)), min(box_h, even(src_h * scale))
