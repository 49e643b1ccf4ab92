"""What one source (or watermark image) may cost to render, and the refusal of media past it."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UnsupportedMedia


class OverLimit(UnsupportedMedia):
    """Media past one of the caller's limits. `limit` names the MediaLimits field (or the caller's own limit),
    so the caller can name the setting behind it; `reason` states the value and the limit."""

    def __init__(self, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.limit = limit

    # It crosses process boundaries (a parse runs in a worker of its own).
    def __reduce__(self) -> tuple[type[OverLimit], tuple[str, str]]:
        return OverLimit, (self.limit, self.reason)


@dataclass(frozen=True)
class MediaLimits:
    """What one source (or watermark image) may cost to render; None is unbounded.

    Checked from headers and the demux pass, before the decoding they would make expensive: the probe stops
    reading as soon as a source is known to be past one, so a file of millions of tiny packets costs at most
    `max_frames` packet reads, not a pass over all of them.
    """

    max_duration_s: float | None = None
    max_frame_pixels: int | None = None
    max_frame_rate: float | None = None
    max_frames: int | None = None  # output frames; the output keeps the source's frame count
    max_image_pixels: int | None = None

    def check_frame_size(self, width: int, height: int) -> None:
        if self.max_frame_pixels is not None and width * height > self.max_frame_pixels:
            raise OverLimit(
                "max_frame_pixels",
                f"frames are {width}x{height} = {width * height} pixels, over the {self.max_frame_pixels}-pixel limit",
            )

    def check_image_size(self, width: int, height: int) -> None:
        if self.max_image_pixels is not None and width * height > self.max_image_pixels:
            raise OverLimit(
                "max_image_pixels",
                f"image is {width}x{height} = {width * height} pixels, over the {self.max_image_pixels}-pixel limit",
            )

    def check_video(self, width: int, height: int, fps: float, frame_count: int, duration_s: float) -> None:
        """Every video limit, on a probed source's facts (also stored ones: limits may have been lowered)."""
        self.check_frame_size(width, height)
        if self.max_frame_rate is not None and fps > self.max_frame_rate:
            raise OverLimit("max_frame_rate", f"frame rate {fps:.6g} fps is over the {self.max_frame_rate:g} fps limit")
        if self.max_frames is not None and frame_count > self.max_frames:
            raise OverLimit("max_frames", f"{frame_count} frames, over the {self.max_frames}-frame limit")
        if self.max_duration_s is not None and duration_s > self.max_duration_s:
            raise OverLimit(
                "max_duration_s", f"duration {duration_s:.6g} s is over the {self.max_duration_s:g} s limit"
            )


NO_LIMITS = MediaLimits()
