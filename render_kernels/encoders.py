"""Video encoder choice and settings.

Determinism: a retried segment must produce identical bytes, so every encoder gets a fixed thread count
(x264 and libvpx are deterministic for a given thread count, but "auto" threads differ between nodes).
"""

from __future__ import annotations

import functools
from fractions import Fraction

import av

from .spec import FORMAT_ENCODERS

ENCODER_THREADS = 2
X264_OPTIONS = {"preset": "veryfast", "crf": "23"}
NVENC_OPTIONS = {"preset": "p4", "tune": "hq", "rc": "vbr", "cq": "23"}
# Realtime deadline with high cpu-used: several times faster than "good" at a modest size cost.
VP9_OPTIONS = {"deadline": "realtime", "cpu-used": "8", "crf": "32", "row-mt": "1"}
ENCODER_OPTIONS = {"libx264": X264_OPTIONS, "h264_nvenc": NVENC_OPTIONS, "libvpx-vp9": VP9_OPTIONS}
# Frames above this many pixels (4k) are encoded without x264's threaded lookahead: its buffer of frames costs
# ~100 MB at 4k (a segment worker would pass 1 GiB), the bytes are identical, and the encode is ~15 % slower
# alone on an idle 2-core machine (less when the segments of a render share the CPUs).
LARGE_FRAME_PIXELS = 1920 * 1080 * 2
LARGE_FRAME_X264_OPTIONS = {"x264-params": "sync-lookahead=0"}


def open_video_encoder(codec: str, width: int, height: int, rate: Fraction) -> av.VideoCodecContext:
    """A fresh, opened yuv420p encoder whose packet timestamps count frames (time base 1/rate).

    Global headers: parameter sets go to `extradata` (for the mp4/mov avcC box) instead of in-band only.
    """
    encoder = av.CodecContext.create(codec, "w")
    assert isinstance(encoder, av.VideoCodecContext)  # a video codec's context
    encoder.width, encoder.height = width, height
    encoder.pix_fmt = "yuv420p"
    encoder.time_base = 1 / rate
    encoder.framerate = rate
    encoder.bit_rate = 0  # constant quality (crf/cq), not libavcodec's default 200 kb/s target
    encoder.thread_count = ENCODER_THREADS
    # Frame threads, as the ffmpeg CLI uses: PyAV defaults to slice threads, which cut every frame into
    # ENCODER_THREADS slices and cost ~8 % in size at the same CRF. Still deterministic for a fixed count.
    encoder.thread_type = "FRAME"
    encoder.flags |= av.codec.context.Flags.global_header
    options = dict(ENCODER_OPTIONS[codec])
    if codec == "libx264" and width * height > LARGE_FRAME_PIXELS:
        options.update(LARGE_FRAME_X264_OPTIONS)
    encoder.options = options
    encoder.open()
    return encoder


@functools.cache
def nvenc_available() -> bool:
    """Whether h264_nvenc opens on this node (needs an NVENC-capable GPU; H100/H200 have none). Cached."""
    try:
        open_video_encoder("h264_nvenc", 256, 144, Fraction(30))
    except (av.FFmpegError, ValueError, OSError):
        return False
    return True


def choose_video_encoder(output_format: str) -> str:
    """h264_nvenc for mp4/mov when it opens on this node, else libx264; libvpx-vp9 for webm."""
    if output_format not in FORMAT_ENCODERS:
        raise ValueError(f"unknown output format {output_format!r}")
    if output_format == "webm":
        return "libvpx-vp9"
    return "h264_nvenc" if nvenc_available() else "libx264"
