"""Pathological sources end as UnsupportedMedia with a clear reason, never an unhandled exception."""

from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import zlib
from fractions import Fraction

import av
import numpy as np
import pytest

from render_kernels.compose import FramePipeline
from render_kernels.errors import UnsupportedMedia
from render_kernels.limits import MediaLimits, OverLimit
from render_kernels.probe import probe
from render_kernels.spec import POSITIONS, RESOLUTIONS, WatermarkSpec
from serve_app._config import Config
from serve_app.media.assets import AssetStore
from serve_app.media.media_limits import check_stored_facts, media_refusal, refusal_reason
from tests.harness import REPO
from tests.media import make_clip, make_watermark_png

pytestmark = pytest.mark.slow  # real encodes of hostile media, and their parses

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
    # A 2 x 1000 source renders 6 x 2560 at 720p (its long side at the cap): the margin is wider than the frame.
    width, height = RESOLUTIONS["720p"].fit(2, 1000)
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
        "from render_kernels.errors import UnsupportedMedia\n"
        "from serve_app.media.assets import AssetStore\n"
        "from serve_app._config import Config\n"
        "from serve_app.media.media_limits import refusal_reason\n"
        f"store = AssetStore(Config(data_dir={str(tmp_path / 'data')!r}))\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)\n"
        "try:\n"
        f"    store.add_file({png!r}, 'alice')\n"
        "except UnsupportedMedia as exc:\n"
        "    print(refusal_reason(exc))\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    before_mib, reason, peak_mib = done.stdout.strip().splitlines()
    assert "16000x16000 = 256000000 pixels" in reason and "VIDFORGE_MAX_IMAGE_PIXELS" in reason, done.stderr
    assert int(peak_mib) - int(before_mib) < 200  # a decode would take 1 GiB for the picture alone
    assert not [p for p in (tmp_path / "data" / "assets").iterdir()]  # nothing stored, no staging file left


def test_image_within_the_limit_is_still_admitted(tmp_path):
    store = AssetStore(Config(data_dir=str(tmp_path / "data"), max_image_pixels=64 * 32))
    asset = store.add_file(make_watermark_png(str(tmp_path / "wm.png"), 64, 32), "alice")
    assert asset.kind == "image"
    with pytest.raises(UnsupportedMedia, match="64x33 = 2112 pixels, over the 2048-pixel limit"):
        store.add_file(make_watermark_png(str(tmp_path / "tall.png"), 64, 33), "alice")


# --- limits on render cost (MediaLimits), checked while probing -----------------------------------------


def write_tiny_packets(path: str, count: int) -> str:
    """`count` frames of 16x16 H.264 at 1000 fps: one keyframe, then the same 12-byte skip frame again and again
    (a valid stream; 1 000 000 packets make a 16 MB file in about two seconds)."""
    with av.open(path, "w") as out:
        stream = out.add_stream("libx264", rate=1000, options={"x264-params": "keyint=1000000"})
        stream.width = stream.height = 16
        stream.pix_fmt, stream.time_base = "yuv420p", MS
        encoded = []
        for index in range(2):
            frame = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), np.uint8), format="rgb24")
            frame.pts = index
            encoded += stream.encode(frame)
        key, skip = (bytes(p) for p in encoded + stream.encode(None))
        for index in range(count):
            packet = av.Packet(skip if index else key)
            packet.stream, packet.time_base, packet.pts, packet.dts = stream, MS, index, index
            packet.is_keyframe = index == 0
            out.mux(packet)
    return path


def over(limit: str, path: str, **limits) -> OverLimit:
    with pytest.raises(OverLimit) as caught:
        probe(path, MediaLimits(**limits))
    assert caught.value.limit == limit
    return caught.value


def test_millions_of_tiny_packets_stop_the_probe_at_the_frame_limit(tmp_path):
    path = write_tiny_packets(str(tmp_path / "tiny.mp4"), 1_000_000)
    # The probe stops reading at the first frame past the limit: it never counts the million.
    assert over("max_frames", path, max_frames=1000).reason == "more than 1000 frames, over the 1000-frame limit"
    assert over("max_frame_rate", path, max_frame_rate=240).reason == "frame rate 1000 fps is over the 240 fps limit"


def test_each_limit_names_the_value(tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=2, width=320, height=180, fps=30, audio=False)
    assert probe(clip, MediaLimits(2.0, 320 * 180, 30, 60)).frame_count == 60  # exactly at every limit
    assert over("max_frame_pixels", clip, max_frame_pixels=320 * 180 - 1).reason == (
        "frames are 320x180 = 57600 pixels, over the 57599-pixel limit"
    )
    assert over("max_frame_rate", clip, max_frame_rate=25).reason == "frame rate 30 fps is over the 25 fps limit"
    assert over("max_frames", clip, max_frames=59).reason == "more than 59 frames, over the 59-frame limit"
    assert over("max_duration_s", clip, max_duration_s=1.5).reason.startswith("duration ")
    timelapse = write_frames_at(str(tmp_path / "timelapse.mp4"), [0, 100_000, 200_000])  # 300 s of 3 frames
    assert over("max_duration_s", timelapse, max_duration_s=150).reason == (
        "duration is at least 200 s, over the 150 s limit"
    )  # stopped while reading, at the frame 200 s in
    assert over("max_duration_s", timelapse, max_duration_s=250).reason == "duration 300 s is over the 250 s limit"


def test_refusals_name_the_setting_and_are_not_temporary(tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=1, audio=False)
    exc = over("max_frame_rate", clip, max_frame_rate=24)
    assert refusal_reason(exc) == "frame rate 30 fps is over the 24 fps limit (VIDFORGE_MAX_FRAME_RATE)"
    envelope = media_refusal("source_asset_uri", exc).envelope()
    assert envelope["code"] == "media_limit_exceeded" and envelope["temporary"] is False
    assert envelope["details"] == {"field": "source_asset_uri", "reason": refusal_reason(exc)}
    unreadable = media_refusal("body", UnsupportedMedia("no video stream")).envelope()
    assert unreadable["code"] == "unsupported_codec" and unreadable["temporary"] is False


def test_limits_lowered_after_upload_apply_to_the_stored_facts(tmp_path):
    store = AssetStore(Config(data_dir=str(tmp_path / "data")))
    video = store.add_file(make_clip(str(tmp_path / "clip.mp4"), seconds=2, fps=30, audio=False), "alice")
    image = store.add_file(make_watermark_png(str(tmp_path / "wm.png"), 64, 32), "alice")
    assert store.source_info(video) == probe(store.media_of(video))  # all of it, for planning without a probe
    assert store.source_info(image) is None
    facts = video.facts
    assert facts is not None and facts.video is not None and (facts.width, facts.height) == (320, 180)
    assert facts.video.model_dump(exclude={"plan"}) == {
        "fps": 30.0,
        "frame_count": 60,
        "duration_s": 2.0,
        "video_codec": "h264",
        "audio_codec": None,
    }
    assert store.resolve(video.uri, "alice", "source_asset_uri").facts == video.facts  # kept in meta.json
    check_stored_facts(MediaLimits(2.0, 320 * 180, 30, 60, 64 * 32), video.facts)
    check_stored_facts(MediaLimits(2.0, 320 * 180, 30, 60, 64 * 32), image.facts)
    with pytest.raises(OverLimit, match="60 frames, over the 59-frame limit"):
        check_stored_facts(MediaLimits(max_frames=59), video.facts)
    with pytest.raises(OverLimit, match="64x32 = 2048 pixels, over the 2047-pixel limit"):
        check_stored_facts(MediaLimits(max_image_pixels=2047), image.facts)


def write_header_only(path: str) -> str:
    """An mp4 with a video stream declared and not one frame in it: zero duration."""
    with av.open(path, "w") as out:
        stream = out.add_stream("libx264", rate=30)
        stream.width = stream.height = 16
        stream.pix_fmt = "yuv420p"
        out.start_encoding()
    return path


def write_audio_only(path: str) -> str:
    """An m4a of a fraction of a second of silence: a real media file with no video stream."""
    with av.open(path, "w", format="mp4") as out:
        stream = out.add_stream("aac", rate=48000)
        stream.layout = "stereo"
        for _ in range(10):
            frame = av.AudioFrame.from_ndarray(np.zeros((2, 1024), np.float32), format="fltp", layout="stereo")
            frame.sample_rate = 48000
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def test_zero_duration_and_audio_only_sources_are_unsupported(tmp_path):
    with pytest.raises(UnsupportedMedia, match="no video"):
        probe(write_header_only(str(tmp_path / "empty.mp4")))
    with pytest.raises(UnsupportedMedia, match="no video stream"):
        probe(write_audio_only(str(tmp_path / "audio.m4a")))


def test_over_limit_crosses_process_boundaries():
    exc = pickle.loads(pickle.dumps(OverLimit("max_frames", "more than 5 frames")))
    assert (type(exc), exc.limit, exc.reason) == (OverLimit, "max_frames", "more than 5 frames")
