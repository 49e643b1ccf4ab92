"""Pathological sources end as UnsupportedMedia with a clear reason, never an unhandled exception."""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest

from render_kernels import UnsupportedMedia, probe

MS = Fraction(1, 1000)


def write_frames_at(path: str, pts_ms: list[int]) -> str:
    """An H.264 mp4 whose frames sit at the given millisecond timestamps."""
    with av.open(path, "w") as out:
        stream = out.add_stream("libx264", rate=1)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        stream.time_base = MS
        for index, pts in enumerate(pts_ms):
            frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), index * 100, np.uint8), format="rgb24")
            frame.pts, frame.time_base = pts, MS
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def test_frames_hours_apart_are_unsupported_not_a_crash(tmp_path):
    # Two frames three hours apart: the average rate rounds to zero at any output time base.
    path = write_frames_at(str(tmp_path / "slow.mp4"), [0, 3 * 3600 * 1000])
    with pytest.raises(UnsupportedMedia, match="frame rate .* below the minimum"):
        probe(path)


def test_slow_but_representable_rate_is_probed_exactly(tmp_path):
    # One frame every 100 s (0.01 fps) is slow but representable: it is kept exact.
    path = write_frames_at(str(tmp_path / "timelapse.mp4"), [0, 100_000, 200_000])
    info = probe(path)
    assert info.frame_count == 3
    assert Fraction(info.fps).limit_denominator(1001) == Fraction(1, 100)
