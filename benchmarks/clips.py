"""The benchmarks' media: the 1080p 30 fps clip with audio every render benchmark starts from, the watermark
logo, and the outputs' Y planes for PSNR. Generated with the test suite's clip maker (tests/media.py: PyAV and numpy only, so this runs
on a bare GPU machine too), once per work dir: a clip already there is reused.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import av
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from media import make_clip, make_watermark_png  # noqa: E402 - the suite's clip generators (tests/)

FFMPEG = ("ffmpeg", "-hide_banner", "-loglevel", "error")  # the ffmpeg CLI, quiet but for its errors


def benchmark_clip(workdir: str, seconds: float) -> str:
    """A `seconds`-long 1920x1080 30 fps h264 clip with AAC audio, a keyframe every second, in `workdir`."""
    source = os.path.join(workdir, f"source-1080p-{seconds:g}s.mp4")
    if not os.path.exists(source):
        started = time.perf_counter()
        partial = f"{source}.partial"  # an interrupted run leaves no half clip to be reused
        make_clip(partial, seconds=seconds, width=1920, height=1080, fps=30, audio=True, gop=30)
        os.replace(partial, source)
        print(f"generated {source} in {time.perf_counter() - started:.1f} s")
    return source


def benchmark_logo(workdir: str) -> str:
    """The watermark image: a 256x96 translucent white PNG in `workdir`."""
    return make_watermark_png(os.path.join(workdir, "logo.png"), w=256, h=96, rgba=(255, 255, 255, 220))


def luma_planes(path: str) -> Iterator[np.ndarray]:
    """Y planes of every frame, one at a time (a whole 720p minute would not fit in memory at once)."""
    with av.open(path) as container:
        for frame in container.decode(video=0):
            yield frame.reformat(format="yuv420p").to_ndarray()[: frame.height]
