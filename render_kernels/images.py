"""Still images (watermarks), decoded with PyAV."""

from __future__ import annotations

import av
import numpy as np

from .errors import UnsupportedMedia
from .probe import describe, is_still_image_format, open_input


def read_rgba(path: str) -> np.ndarray:
    """Decode a still image (PNG, JPEG, ...) to an (h, w, 4) uint8 RGBA array."""
    with open_input(path) as container:
        if not is_still_image_format(container) or not container.streams.video:
            raise UnsupportedMedia(f"not a still image (found {container.format.name!r} data)")
        try:
            frame = next(container.decode(video=0), None)
        except av.FFmpegError as err:
            raise UnsupportedMedia(f"cannot decode image: {describe(err)}") from err
        if frame is None:
            raise UnsupportedMedia("cannot decode image: no picture in the file")
        return frame.to_ndarray(format="rgba")


def probe_image(path: str) -> tuple[int, int]:
    """(width, height) of a still image; UnsupportedMedia if it is not a decodable still image."""
    height, width = read_rgba(path).shape[:2]
    return width, height
