"""Video encoder choice and settings.

Determinism: a retried segment must produce identical bytes, so every encoder gets a fixed thread count
(x264 and libvpx are deterministic for a given thread count, but "auto" threads differ between nodes).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from fractions import Fraction

import av

from .spec import FORMAT_ENCODERS

ENCODER_THREADS = 2  # a segment's encoder threads when its render does not say (RenderSpec.segment_threads)
X264_OPTIONS = {"preset": "veryfast", "crf": "23"}
NVENC_OPTIONS = {"preset": "p4", "tune": "hq", "rc": "vbr", "cq": "23"}
# Realtime deadline with high cpu-used: several times faster than "good" at a modest size cost.
VP9_OPTIONS = {"deadline": "realtime", "cpu-used": "8", "crf": "32", "row-mt": "1"}
ENCODER_OPTIONS = {"libx264": X264_OPTIONS, "h264_nvenc": NVENC_OPTIONS, "libvpx-vp9": VP9_OPTIONS}
# x264 frames above this many pixels (4k) are encoded with one thread and without x264's threaded lookahead: at 4k
# every frame x264 keeps in flight costs ~40 MB, and these two keep a segment worker well under 1 GiB (~200 MB
# less). The lookahead setting leaves the bytes as they are; one thread changes them a little (a render is
# still deterministic: the choice follows its output size). A task holds one CPU of the scheduler anyway;
# alone on an idle machine a 4k segment encodes ~10 % slower.
LARGE_FRAME_PIXELS = 1920 * 1080 * 2
LARGE_FRAME_X264_OPTIONS = {"x264-params": "sync-lookahead=0"}
LARGE_FRAME_THREADS = 1


def segment_threads(cpus: int, segments: int) -> int:
    """Threads for each of a render's `segments` (its decoder's, scaler's and encoder's) when `cpus` CPUs are
    there for them: the CPUs each segment has to itself, from 1 up to ENCODER_THREADS.

    Threads cost CPU to keep in step. x264's frame threads: one 720p encode through PyAV took 4.5-4.9 CPU-s with
    one thread and 5.2-5.7 with two (`benchmarks/render_throughput.py`'s clip, on a 2-core machine). The decoder's:
    two 10 s halves of a 1080p clip encoded side by side on 2 cores took 5.84 CPU-s each (median of ten) decoding
    in one thread, 5.93 in two; the scaler took 1.22 ms a 1080p frame in one thread, 1.31 in two. Where every CPU
    has a segment of its own, a second thread only adds that cost; where a render has fewer segments than CPUs (a
    short source, or sparse keyframes, cuts into few), the threads are what keeps the other CPUs working."""
    return max(1, min(ENCODER_THREADS, cpus // max(1, segments)))


def open_video_encoder(
    codec: str,
    width: int,
    height: int,
    rate: Fraction,
    threads: int = ENCODER_THREADS,
    extra_options: Mapping[str, str] | None = None,
    sample_aspect: Fraction | None = None,
) -> av.VideoCodecContext:
    """A fresh, opened yuv420p encoder whose packet timestamps count frames (time base 1/rate), encoding with
    `threads` threads (x264 frames of 4k and more: LARGE_FRAME_THREADS). `extra_options` add to (and override) the
    codec's ENCODER_OPTIONS; x264's `x264-params` lists are joined. `sample_aspect`: the pixels' aspect ratio the
    stream declares (None: square).

    Global headers: parameter sets go to `extradata` (for the mp4/mov avcC box) instead of in-band only.
    """
    encoder = av.CodecContext.create(codec, "w")
    assert isinstance(encoder, av.VideoCodecContext)  # a video codec's context
    encoder.width, encoder.height = width, height
    encoder.pix_fmt = "yuv420p"
    if sample_aspect is not None:
        encoder.sample_aspect_ratio = sample_aspect
    encoder.time_base = 1 / rate
    encoder.framerate = rate
    encoder.bit_rate = 0  # constant quality (crf/cq), not libavcodec's default 200 kb/s target
    large_x264 = codec == "libx264" and width * height > LARGE_FRAME_PIXELS
    encoder.thread_count = LARGE_FRAME_THREADS if large_x264 else threads
    # Frame threads, as the ffmpeg CLI uses: PyAV defaults to slice threads, which cut every frame into one
    # slice per thread and cost ~8 % in size at the same CRF. Still deterministic for a fixed count.
    encoder.thread_type = "FRAME"
    encoder.flags |= av.codec.context.Flags.global_header
    options = dict(ENCODER_OPTIONS[codec])
    for more in (LARGE_FRAME_X264_OPTIONS if large_x264 else {}, extra_options or {}):
        for name, value in more.items():
            joined = name == "x264-params" and name in options
            options[name] = f"{options[name]}:{value}" if joined else value
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
