"""Decoded source frame -> output picture: deinterlace, scale to the output size, turn upright, blend the watermark.

Fastest correct approach found: one cached swscale context per segment (a VideoReformatter reused for
every frame; `frame.reformat` builds a new one per frame, ~15x slower at 1080p), and the watermark blended
straight into the yuv420p planes with integer numpy maths over its rectangle only, so frames are never
converted to RGB and back. The watermark is converted to YUV, scaled and premultiplied once per segment.

Sources shown otherwise than decoded go through FFmpeg filters (av.filter.Graph), only when they need them:
an interlaced source is deinterlaced (bwdif) before scaling, at its own size, as deinterlacing needs whole
fields; a rotated or mirrored one is turned after scaling, on the smaller yuv420p picture (FFmpeg's transpose
is SIMD code: ~0.25 ms a 720p frame, a quarter of a numpy rotation). The scaler makes pixels square on the way
(the output size is the display size's shape). The watermark goes on last, onto the picture as it is shown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from av.video.reformatter import VideoReformatter

from .images import read_rgba
from .source_info import SourceInfo
from .spec import WATERMARK_ANCHORS, Anchor, WatermarkSpec, even

INTERPOLATION = "BICUBIC"  # swscale filter for the frame scaler: the ffmpeg CLI's default
# Watermark geometry, as fractions of the output frame: the image is scaled (up or down, aspect kept) to
# this height unless that would make it wider than the width cap; it sits this far from the frame edges.
WATERMARK_HEIGHT = 0.12
WATERMARK_MAX_WIDTH = 0.5
WATERMARK_MARGIN = 0.03
# FFmpeg filters that show a decoded picture upright, per (clockwise rotation, then mirrored left-right): see
# _orientation.py. transpose's "flip" variants are a quarter turn plus a mirror (cclock_flip is the plain
# transpose: a clockwise quarter turn, then mirrored).
ORIENTATION_FILTERS: dict[tuple[int, bool], tuple[tuple[str, str], ...]] = {
    (0, False): (),
    (0, True): (("hflip", ""),),
    (90, False): (("transpose", "dir=clock"),),
    (90, True): (("transpose", "dir=cclock_flip"),),
    (180, False): (("hflip", ""), ("vflip", "")),
    (180, True): (("vflip", ""),),
    (270, False): (("transpose", "dir=cclock"),),
    (270, True): (("transpose", "dir=clock_flip"),),
}
# bwdif in "send_frame" mode: one output frame per input frame, so frame counts and timing stay exact.
DEINTERLACE_OPTIONS = "mode=send_frame:deint=all:parity={parity}"


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
        # Where it lands in the frame: public for reports and comparisons.
        self.box = x, y, w, h = watermark_box(spec.position, width, height, img_w, img_h)

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


def watermark_box(position: str, width: int, height: int, img_w: int, img_h: int) -> tuple[int, int, int, int]:
    """(x, y, w, h): where an img_w x img_h watermark lands in a width x height output frame at `position`, in
    pixels (all even). The review page outlines this box on the preview (serve_app/ingress/review/view.py)."""
    wm_h = height * WATERMARK_HEIGHT
    wm_w = wm_h * img_w / img_h
    if wm_w > width * WATERMARK_MAX_WIDTH:
        wm_w = width * WATERMARK_MAX_WIDTH
        wm_h = wm_w * img_h / img_w
    w, h = even(wm_w), even(wm_h)
    x, y = _place(position, width, height, w, h)
    return x, y, w, h


def _block_sums(values: np.ndarray) -> np.ndarray:
    """Sums of 2x2 blocks: full-resolution values onto the half-resolution chroma grid."""
    rows, cols = values.shape
    sums: np.ndarray = values.reshape(rows // 2, 2, cols // 2, 2).sum(axis=(1, 3))
    return sums


def _layer(plane: int, x: int, y: int, colour: np.ndarray, alpha: np.ndarray) -> _Layer:
    # colour * alpha + 128 + plane * (256 - alpha) <= 255 * 256 + 128: fits uint16.
    return _Layer(plane, x, y, (256 - alpha).astype(np.uint16), np.rint(colour * alpha + 128).astype(np.uint16))


def _place(position: str, width: int, height: int, w: int, h: int) -> tuple[int, int]:
    """Top-left corner (even, for 4:2:0 chroma) of a w x h watermark at `position` (spec.WATERMARK_ANCHORS).

    The margin gives way when the frame is too narrow or short for it (a 2 x N source makes a 2-pixel-wide
    output): the watermark always lies inside the frame.
    """
    margin = even(height * WATERMARK_MARGIN)
    horizontal, vertical = WATERMARK_ANCHORS[position]
    return _offset(horizontal, width - w, margin), _offset(vertical, height - h, margin)


def _offset(anchor: Anchor, room: int, margin: int) -> int:
    """Where the watermark starts along one side of the frame, which has `room` pixels beside it (even: every size
    here is)."""
    if anchor == "start":
        return min(margin, max(0, room))
    if anchor == "end":
        return max(0, room - margin)
    return room // 4 * 2  # the middle, on an even pixel


class FilterChain:
    """Video frames through a chain of FFmpeg filters, whose input is set up from the first frame's size, format
    and time base. `push` gives what comes out so far; `push(None)` ends the input and gives the rest."""

    def __init__(self, filters: Sequence[tuple[str, str]]) -> None:
        self._filters = filters
        self._graph: av.filter.Graph | None = None

    def push(self, frame: av.VideoFrame | None) -> list[av.VideoFrame]:
        if self._graph is None:
            if frame is None:
                return []
            self._graph = self._build(frame)
        self._graph.vpush(frame)
        out = []
        while True:
            try:
                out.append(self._graph.vpull())
            except (BlockingIOError, EOFError):  # needs more input; or ended
                return out

    def _build(self, frame: av.VideoFrame) -> av.filter.Graph:
        graph = av.filter.Graph()
        nodes = [
            graph.add_buffer(
                width=frame.width, height=frame.height, format=frame.format, time_base=frame.time_base or Fraction(1)
            )
        ]
        nodes += [graph.add(name, options) for name, options in self._filters]
        nodes.append(graph.add("buffersink"))
        graph.link_nodes(*nodes)
        graph.configure()
        return graph


class FramePipeline:
    """Turns decoded source frames into encoder-ready yuv420p pictures at the output size, upright.

    `rotation` and `hflip` say how the source is shown (SourceInfo's): width x height is the output as shown,
    so a quarter-turned source is scaled to height x width and then turned. `field_order` other than
    "progressive" deinterlaces (with that parity); then a picture comes out only once the next frame is in, so
    frames go through `pictures`, which ends the input. `__call__` takes one progressive frame. The scaler
    works in `threads` threads (0: as many as the machine has CPUs). `before_watermark`, when given, sees each
    picture at the output size, upright, before the watermark is blended into it (quality control measures the
    picture itself: a watermark must not hide a black intro); it must not change the picture.
    """

    def __init__(
        self,
        width: int,
        height: int,
        watermark: WatermarkSpec | None,
        colorspace: int,
        rotation: int = 0,
        hflip: bool = False,
        field_order: str = "progressive",
        threads: int = 0,
        before_watermark: Callable[[av.VideoFrame], None] | None = None,
    ) -> None:
        self.width, self.height = width, height
        self.threads = threads
        self.before_watermark = before_watermark
        self.scaled_size = (height, width) if rotation in (90, 270) else (width, height)  # before turning
        self._scaler = VideoReformatter()
        turns = ORIENTATION_FILTERS[(rotation, hflip)]
        self._orienter = FilterChain(turns) if turns else None
        self.deinterlaces = field_order != "progressive"
        bwdif = ("bwdif", DEINTERLACE_OPTIONS.format(parity=field_order))
        self._deinterlacer = FilterChain([bwdif]) if self.deinterlaces else None
        self.watermark = (
            Watermark(watermark, width, height, colorspace) if watermark is not None and watermark.opacity > 0 else None
        )

    @classmethod
    def for_source(
        cls,
        info: SourceInfo,
        width: int,
        height: int,
        watermark: WatermarkSpec | None,
        colorspace: int,
        threads: int = 0,
        before_watermark: Callable[[av.VideoFrame], None] | None = None,
    ) -> FramePipeline:
        """The pipeline for `info`'s source: turned as its display matrix says, deinterlaced when interlaced."""
        return cls(
            width, height, watermark, colorspace, info.rotation, info.hflip, info.field_order, threads, before_watermark
        )

    def pictures(self, frames: Iterable[av.VideoFrame]) -> Iterator[av.VideoFrame]:
        """One output picture per frame of `frames`, in order (all of them: the input is ended after the last)."""
        if self._deinterlacer is None:
            yield from map(self, frames)
            return
        for frame in _then_end(frames):
            yield from map(self, self._deinterlacer.push(frame))

    def __call__(self, frame: av.VideoFrame) -> av.VideoFrame:
        picture = self._scaler.reformat(
            frame, *self.scaled_size, "yuv420p", interpolation=INTERPOLATION, threads=self.threads
        )
        if self._orienter is not None:
            (picture,) = self._orienter.push(picture)  # these filters give one frame per frame, at once
        if self.before_watermark is not None:
            self.before_watermark(picture)
        if self.watermark is not None:
            picture.make_writable()  # unscaled frames are the decoder's own (possibly shared) buffers
            self.watermark.apply(picture)
        picture.pict_type = av.video.frame.PictureType.NONE  # let the encoder choose frame types
        return picture


def _then_end(frames: Iterable[av.VideoFrame]) -> Iterator[av.VideoFrame | None]:
    """`frames`, then None: the end of input that makes a filter give the frames it holds."""
    yield from frames
    yield None
