"""The watermark-approval preview: one representative output frame as PNG."""

from __future__ import annotations

from fractions import Fraction
from itertools import islice

import av

from .compose import FramePipeline
from .errors import UnsupportedMedia
from .frames import frames_from, open_video
from .plan import keyframe_at_or_before
from .probe import Media, SourceInfo
from .spec import RenderSpec, output_size

PREVIEW_AT = 1 / 3  # fraction of the frames: past any intro, well before the credits


def render_preview(source_path: Media, info: SourceInfo, spec: RenderSpec, at: float = PREVIEW_AT) -> bytes:
    """PNG bytes of the frame `at` that fraction of the source (0.0: its first frame), as the render outputs it:
    at the output size, upright, deinterlaced, watermark applied (when `spec` has one)."""
    width, height = output_size(*info.display_size(), spec.resolution)
    target = min(int(info.frame_count * at), info.frame_count - 1)
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
        output = pictures[-1]
        picture = output.reformat(format="rgb24", src_colorspace=stream.codec_context.colorspace)

    encoder = av.CodecContext.create("png", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "rgb24"
    encoder.time_base = Fraction(1, 1)
    picture.pts = None
    return b"".join(bytes(p) for p in encoder.encode(picture) + encoder.encode(None))
