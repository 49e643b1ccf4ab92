"""Making a fresh worker process ready to render at full speed: what a render's first task would otherwise pay.

Importing this package loads PyAV, FFmpeg's libraries and numpy; `warm_up` then touches what stays cold until first
used: the encoder choice (whether NVENC opens, cached per process), x264's and the h264 decoder's set-up, and the
scaler, on a few frames of a tiny picture (milliseconds once imported).
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from .compose import FramePipeline
from .encoders import choose_video_encoder, open_video_encoder

WARM_UP_SIZE = (64, 48)  # the smallest size x264 and the scaler take without complaint, at no cost worth naming
WARM_UP_FRAMES = 4


def warm_up() -> int:
    """Encode, decode and scale WARM_UP_FRAMES frames of a tiny picture with the codecs a render would use here;
    returns the frames decoded back (WARM_UP_FRAMES when every codec works)."""
    width, height = WARM_UP_SIZE
    encoder_name = choose_video_encoder("mp4")
    encoder = open_video_encoder(encoder_name, width, height, Fraction(30), threads=1)
    pipeline = FramePipeline(width, height, None, colorspace=1)  # the colour space matters to watermarks only
    decoder = av.CodecContext.create("h264", "r")
    assert isinstance(decoder, av.VideoCodecContext)  # a video codec's context
    decoder.extradata = encoder.extradata  # the parameter sets (a global header, as for mp4)
    decoded = 0
    for index in range(WARM_UP_FRAMES + 1):  # then None: the encoder's end
        picture = None
        if index < WARM_UP_FRAMES:
            source = av.VideoFrame.from_ndarray(np.full((height * 2, width * 2, 3), 40 * index, np.uint8), "rgb24")
            picture = pipeline(source)
            picture.pts = index
        for packet in encoder.encode(picture):
            decoded += len(decoder.decode(packet))
    return decoded + len(decoder.decode(None))
