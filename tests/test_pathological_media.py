"""Pathological sources end as UnsupportedMedia with a clear reason, never an unhandled exception."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from fractions import Fraction

import av
import numpy as np
import pytest

from render_kernels import UnsupportedMedia, WatermarkSpec, output_size, probe
from render_kernels.compose import FramePipeline
from render_kernels.spec import POSITIONS
from serve_app.assets import AssetStore
from serve_app.config import Config
from tests.harness import REPO
from tests.media import make_watermark_png

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


@pytest.mark.parametrize("position", POSITIONS)
def test_watermark_on_a_two_pixel_wide_frame_stays_inside(tmp_path, position):
    # A 2 x 1000 source renders 2 x 720 at 720p: the 3 % margin (22 px) is wider than the frame itself.
    width, height = output_size(2, 1000, "720p")
    png = make_watermark_png(str(tmp_path / "wm.png"), rgba=(255, 255, 255, 255))
    pipeline = FramePipeline(width, height, WatermarkSpec(png, position, 1.0), colorspace=1)
    x, y, w, h = pipeline.watermark.box
    assert 0 <= x and x + w <= width and 0 <= y and y + h <= height
    picture = pipeline(av.VideoFrame.from_ndarray(np.zeros((1000, 2, 3), np.uint8), format="rgb24"))
    luma = picture.to_ndarray(format="gray")
    assert luma[y : y + h, x : x + w].min() > 200  # the white watermark was blended in


def write_blank_png(path: str, width: int, height: int) -> str:
    """A real PNG of a blank RGBA picture, compressed row by row (never built in memory): 16k x 16k is ~1 MB."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    compressor = zlib.compressobj(9)
    row = b"\0" * (1 + 4 * width)  # filter byte + RGBA pixels
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    with open(path, "wb") as out:
        out.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return path


def test_huge_image_is_refused_from_its_header_without_decoding(tmp_path):
    png = write_blank_png(str(tmp_path / "bomb.png"), 16_000, 16_000)
    assert os.path.getsize(png) < 2_000_000
    # In a fresh process, so the peak memory measured is this upload's alone.
    script = (
        "import resource, sys\n"
        "from render_kernels import UnsupportedMedia\n"
        "from serve_app.assets import AssetStore\n"
        "from serve_app.config import Config\n"
        f"store = AssetStore(Config(data_dir={str(tmp_path / 'data')!r}))\n"
        "try:\n"
        f"    store.add_file({png!r}, 'alice')\n"
        "except UnsupportedMedia as exc:\n"
        "    print(exc.reason)\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    reason, peak_mib = done.stdout.strip().splitlines()
    assert "16000x16000 = 256000000 pixels" in reason and "VIDFORGE_MAX_IMAGE_PIXELS" in reason, done.stderr
    assert int(peak_mib) < 400  # a decode would take 1 GiB for the picture alone
    assert not [p for p in (tmp_path / "data" / "assets").iterdir()]  # nothing stored, no staging file left


def test_image_within_the_limit_is_still_admitted(tmp_path):
    store = AssetStore(Config(data_dir=str(tmp_path / "data"), max_image_pixels=64 * 32))
    asset = store.add_file(make_watermark_png(str(tmp_path / "wm.png"), 64, 32), "alice")
    assert asset.kind == "image"
    with pytest.raises(UnsupportedMedia, match="64x33 = 2112 pixels, over the 2048-pixel limit"):
        store.add_file(make_watermark_png(str(tmp_path / "tall.png"), 64, 33), "alice")
