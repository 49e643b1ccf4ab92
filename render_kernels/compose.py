"""Decoded source frame -> output picture: scale to the output size, then blend the watermark.

Fastest correct approach found: one cached swscale context per segment (a VideoReformatter reused for
every frame; `frame.reformat` builds a new one per frame, ~15x slower at 1080p), and the watermark blended
straight into the yuv420p planes with integer numpy maths over its rectangle only, so frames are never
converted to RGB and back. The watermark is converted to YUV, scaled and premultiplied once per segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from .images import read_rgba
from .spec import WatermarkSpec, even

INTERPOLATION = "BICUBIC"  # swscale filter for the frame scaler: the ffmpeg CLI's default
# Watermark geometry, as fractions of the output frame: the image is scaled (up or down, aspect kept) to
# this height unless that would make it wider than the width cap; it sits this far from the frame edges.
WATERMARK_HEIGHT = 0.12
WATERMARK_MAX_WIDTH = 0.5
WATERMARK_MARGIN = 0.03


def plane_array(frame: av.VideoFrame, index: int) -> np.ndarray:
    """A writable (rows, columns) uint8 view of one plane of a frame, without the line padding."""
    plane = frame.planes[index]
    rows: np.ndarray = np.frombuffer(memoryview(plane), np.uint8).reshape(plane.height, plane.line_size)
    return rows[:, : plane.width]


@dataclass(frozen=True)
class _Layer:
    """Blend for one plane: out = (plane * keep + premultiplied) >> 8 over rows y.., columns x.."""

    plane: int
    x: int
    y: int
    keep: np.ndarray  # 256 - alpha, uint16
    premultiplied: np.ndarray  # colour * alpha + 128 (rounding), uint16


class Watermark:
    """A watermark image prepared for one output size; `apply` blends it into a yuv420p frame in place.

    Alpha is the image's alpha times `opacity`, in 1/256 steps; chroma uses the alpha-weighted average of
    each 2x2 block so edges do not pick up the colour of fully transparent pixels. `colorspace` is the
    source's YUV matrix (an AVColorSpace value), so the watermark's colours match how the video is shown.
    """

    def __init__(self, spec: WatermarkSpec, width: int, height: int, colorspace: int) -> None:
        rgba = read_rgba(spec.image)
        img_h, img_w = rgba.shape[:2]
        wm_h = height * WATERMARK_HEIGHT
        wm_w = wm_h * img_w / img_h
        if wm_w > width * WATERMARK_MAX_WIDTH:
            wm_w = width * WATERMARK_MAX_WIDTH
            wm_h = wm_w * img_h / img_w
        w, h = even(wm_w), even(wm_h)
        x, y = _place(spec.position, width, height, w, h)
        self.box = (x, y, w, h)  # where it lands in the frame: public for reports and comparisons

        yuva = av.VideoFrame.from_ndarray(rgba, format="rgba").reformat(
            w, h, format="yuva444p", dst_colorspace=colorspace, interpolation="BICUBIC"
        )
        luma, u, v, a = (plane_array(yuva, i).astype(np.float64) for i in range(4))
        alpha = np.rint(a * (spec.opacity * 256 / 255))
        alpha_sum = _block_sums(alpha)
        alpha_c = np.rint(alpha_sum / 4)
        self._layers = [_layer(0, x, y, luma, alpha)] + [
            _layer(i, x // 2, y // 2, _block_sums(c * alpha) / np.maximum(alpha_sum, 1), alpha_c)
            for i, c in ((1, u), (2, v))
        ]

    def apply(self, frame: av.VideoFrame) -> None:
        for layer in self._layers:
            rows, cols = layer.keep.shape
            region = plane_array(frame, layer.plane)[layer.y : layer.y + rows, layer.x : layer.x + cols]
            mixed = region * layer.keep
            mixed += layer.premultiplied
            mixed >>= 8
            region[...] = mixed


def _block_sums(values: np.ndarray) -> np.ndarray:
    """Sums of 2x2 blocks: full-resolution values onto the half-resolution chroma grid."""
    rows, cols = values.shape
    sums: np.ndarray = values.reshape(rows // 2, 2, cols // 2, 2).sum(axis=(1, 3))
    return sums


def _layer(plane: int, x: int, y: int, colour: np.ndarray, alpha: np.ndarray) -> _Layer:
    # colour * alpha + 128 + plane * (256 - alpha) <= 255 * 256 + 128: fits uint16.
    return _Layer(plane, x, y, (256 - alpha).astype(np.uint16), np.rint(colour * alpha + 128).astype(np.uint16))


def _place(position: str, width: int, height: int, w: int, h: int) -> tuple[int, int]:
    """Top-left corner (even, for 4:2:0 chroma) of a w x h watermark at `position`.

    The margin gives way when the frame is too narrow or short for it (a 2 x N source makes a 2-pixel-wide
    output): the watermark always lies inside the frame.
    """
    margin = even(height * WATERMARK_MARGIN)
    x_max, y_max = max(0, width - w), max(0, height - h)  # both even: every size here is
    left, right = min(margin, x_max), max(0, width - w - margin)
    top, bottom = min(margin, y_max), max(0, height - h - margin)
    return {
        "top_left": (left, top),
        "top_right": (right, top),
        "bottom_left": (left, bottom),
        "bottom_right": (right, bottom),
        "center": ((width - w) // 4 * 2, (height - h) // 4 * 2),
    }[position]


class FramePipeline:
    """Turns decoded source frames into encoder-ready yuv420p pictures at the output size."""

    def __init__(self, width: int, height: int, watermark: WatermarkSpec | None, colorspace: int) -> None:
        self.width, self.height = width, height
        self._scaler = VideoReformatter()
        self.watermark = (
            Watermark(watermark, width, height, colorspace) if watermark is not None and watermark.opacity > 0 else None
        )

    def __call__(self, frame: av.VideoFrame) -> av.VideoFrame:
        picture = self._scaler.reformat(frame, self.width, self.height, "yuv420p", interpolation=INTERPOLATION)
        if self.watermark is not None:
            picture.make_writable()  # unscaled frames are the decoder's own (possibly shared) buffers
            self.watermark.apply(picture)
        picture.pict_type = av.video.frame.PictureType.NONE  # let the encoder choose frame types
        return picture
