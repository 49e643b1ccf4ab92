"""The watermark-approval preview: one representative output frame as PNG."""

from __future__ import annotations

from bisect import bisect_right
from fractions import Fraction
from itertools import islice

import av

from .compose import FramePipeline
from .errors import UnsupportedMedia
from .frames import frames_from, open_video
from .probe import Media, SourceInfo
from .spec import RenderSpec, output_size

PREVIEW_AT = 1 / 3  # fraction of the frames: past any intro, well before the credits


def render_preview(source_path: Media, info: SourceInfo, spec: RenderSpec) -> bytes:
    """PNG bytes of the frame at ~1/3 of the source, at the output size, watermark applied."""
    width, height = output_size(info.width, info.height, spec.resolution)
    target = int(info.frame_count * PREVIEW_AT)
    keyframes = info.keyframes()
    start_frame, start_s = keyframes[bisect_right([f for f, _ in keyframes], target) - 1]
    with open_video(source_path) as (container, stream):
        pipeline = FramePipeline(width, height, spec.watermark, stream.codec_context.colorspace)
        frame = next(islice(frames_from(container, stream, info, start_s), target - start_frame, None), None)
        if frame is None:
            raise UnsupportedMedia(f"cannot decode: frame {target} is missing")
        picture = pipeline(frame).reformat(format="rgb24", src_colorspace=stream.codec_context.colorspace)

    encoder = av.CodecContext.create("png", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "rgb24"
    encoder.time_base = Fraction(1, 1)
    picture.pts = None
    return b"".join(bytes(p) for p in encoder.encode(picture) + encoder.encode(None))
