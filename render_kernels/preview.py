"""The watermark-approval preview: one representative output frame as PNG; and the stills a segment makes of its
own frames, so that a short render's preview costs no decode of its own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import islice

import av

from ._frames import frames_from, open_video
from .compose import FramePipeline
from .errors import UnsupportedMedia
from .media_io import Media
from .plan import Segment, keyframe_at_or_before
from .source_info import SourceInfo
from .spec import RenderSpec

# zlib's fastest level for the preview PNGs: a 1280x720 picture in 0.02 CPU-s, where FFmpeg's default took 0.10
# for 27 % fewer bytes (605 against 443 KB); it is made beside segments that want the CPU, and read once or twice.
PNG_COMPRESSION_LEVEL = 1
PREVIEW_AT = 1 / 3  # fraction of the frames: past any intro, well before the credits
# A segment makes the preview when the preview's frame is at most this far (source seconds) into the frames it
# encodes: it is then ready within seconds of the segment's start, as a picture task's would be.
STILL_WITHIN_S = 8.0
PREVIEW = "preview"  # the watermarked frame at PREVIEW_AT
SOURCE_FRAME = "source_frame"  # the first frame as the render shows it before the watermark (the review page's)


@dataclass(frozen=True)
class Still:
    """A PNG a segment makes as it passes its output frame `offset` (0: its first): with the watermark (`marked`),
    as render_preview makes it with the render's spec, or without, as render_preview makes it without one."""

    name: str
    offset: int
    marked: bool


def preview_frame(info: SourceInfo, at: float = PREVIEW_AT) -> int:
    """The frame the preview shows: `at` that fraction of the source (0.0: its first frame)."""
    return min(int(info.frame_count * at), info.frame_count - 1)


def plan_stills(
    segments: Sequence[Segment], info: SourceInfo, preview: bool, source_frame: bool
) -> dict[int, tuple[Still, ...]] | None:
    """Which segment makes which of the wanted pictures (by segment index), or None when the preview's frame is
    over STILL_WITHIN_S into its segment's frames (a long segment would make it late): a picture task makes them.

    Why segments: a picture task decodes from the keyframe before the preview's frame again, beside segments that
    decode it anyway, and needs a worker process of its own while they hold every other: for a 10 s clip about
    half a CPU-second, 5-10 % of the render."""
    stills: dict[int, tuple[Still, ...]] = {}
    if source_frame:
        stills[0] = (Still(SOURCE_FRAME, 0, marked=False),)
    if preview:
        target = preview_frame(info)
        (carrier,) = [s for s in segments if s.start_frame <= target < s.start_frame + s.frame_count]
        offset = target - carrier.start_frame
        if offset > STILL_WITHIN_S * info.fps:
            return None
        stills[carrier.index] = (*stills.get(carrier.index, ()), Still(PREVIEW, offset, marked=True))
    return stills


def png_of(picture: av.VideoFrame, colorspace: int) -> bytes:
    """`picture` (a pipeline's output, in the source's `colorspace`) as PNG bytes."""
    rgb = picture.reformat(format="rgb24", src_colorspace=colorspace)
    encoder = av.CodecContext.create("png", "w")
    encoder.width, encoder.height, encoder.pix_fmt = rgb.width, rgb.height, "rgb24"
    encoder.time_base = Fraction(1, 1)
    encoder.options = {"compression_level": str(PNG_COMPRESSION_LEVEL)}
    rgb.pts = None
    return b"".join(bytes(p) for p in encoder.encode(rgb) + encoder.encode(None))


def render_preview(source_path: Media, info: SourceInfo, spec: RenderSpec, at: float = PREVIEW_AT) -> bytes:
    """PNG bytes of the frame `at` that fraction of the source (0.0: its first frame), as the render outputs it:
    at the output size, upright, deinterlaced, watermark applied (when `spec` has one)."""
    width, height = spec.output_size(info)
    target = preview_frame(info, at)
    start_frame, start_s = keyframe_at_or_before(info.keyframes(), target)
    # The frames from the keyframe on are decoded, but only the target (and the frame before it, which a
    # deinterlacer needs) go through the pipeline: scaling and composing a long GOP's every frame cost more than
    # decoding it, beside segments that want the CPU.
    composed = min(2, target - start_frame + 1)
    with open_video(source_path) as (container, stream):
        pipeline = FramePipeline.for_source(info, width, height, spec.watermark, stream.codec_context.colorspace)
        frames = islice(frames_from(container, stream, info, start_s), target - start_frame + 1 - composed, None)
        pictures = list(pipeline.pictures(islice(frames, composed)))  # ended after the target: it comes out last
        if len(pictures) < composed:
            raise UnsupportedMedia(f"cannot decode: frame {target} is missing")
        return png_of(pictures[-1], stream.codec_context.colorspace)
