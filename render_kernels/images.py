"""Still images (watermarks): sized from the header with Pillow, decoded with PyAV."""

from __future__ import annotations

import av
import numpy as np
from PIL import Image, UnidentifiedImageError

from .errors import UnsupportedMedia
from .media_io import Media, describe, is_still_image_format, open_binary, open_input

# Pillow only ever reads headers here (PyAV decodes); callers hold images to their own pixel limit from the
# header's size, so Pillow's decompression-bomb refusal would only hide that size from the error.
Image.MAX_IMAGE_PIXELS = None


def read_rgba(path: Media) -> np.ndarray:
    """Decode a still image (PNG, JPEG, ...) to an (h, w, 4) uint8 RGBA array."""
    with open_input(path) as container:
        if not is_still_image_format(container) or not container.streams.video:
            raise UnsupportedMedia(f"not a still image (found {container.format.name!r} data)")
        try:
            frame = next(container.decode(video=0), None)
        except MemoryError:  # see media_io.open_input
            raise
        except av.FFmpegError as err:
            raise UnsupportedMedia(f"cannot decode image: {describe(err)}") from err
        if frame is None:
            raise UnsupportedMedia("cannot decode image: no picture in the file")
        return frame.to_ndarray(format="rgba")


def image_size(path: Media) -> tuple[int, int] | None:
    """(width, height) from a still image's header, without decoding a pixel; None if it is no image.

    Opening with PyAV would not do: its stream probe decodes the whole picture (1 GiB for a 16k x 16k PNG
    of 1 MB), so limits on image size must be checked from the header first. Pillow reads only the header.
    """
    try:
        with open_binary(path) as file, Image.open(file) as image:
            # An animated image (GIF, APNG, animated WebP) is probed as what PyAV makes of it: a video.
            return None if getattr(image, "is_animated", False) else image.size
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def probe_image(path: Media) -> tuple[int, int]:
    """(width, height) of a still image; UnsupportedMedia if it is not a decodable still image."""
    height, width = read_rgba(path).shape[:2]
    return width, height
