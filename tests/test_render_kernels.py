"""render_kernels on small generated clips: probe, plan, encode, watermark, preview, mux, failures."""

from __future__ import annotations

import dataclasses
import glob
import os
import pickle
import weakref
from fractions import Fraction
from itertools import islice

import av
import numpy as np
import pytest
from media import decode_all, decode_frame, make_clip, make_watermark_png, psnr_y

from render_kernels._frames import frames_from, open_video
from render_kernels.audio import encode_audio
from render_kernels.compose import WATERMARK_HEIGHT, WATERMARK_MARGIN, FramePipeline
from render_kernels.encoders import choose_video_encoder, nvenc_available, segment_threads
from render_kernels.errors import UnsupportedMedia
from render_kernels.images import probe_image
from render_kernels.limits import MediaLimits
from render_kernels.mux import mux_segments
from render_kernels.plan import KEYFRAME_CUT_SHARE, LEAD_IN_COST, MAX_LEAD_IN_SHARE, Segment, plan_segments
from render_kernels.preview import PREVIEW, PREVIEW_AT, SOURCE_FRAME, STILL_WITHIN_S, Still, plan_stills, render_preview
from render_kernels.probe import probe
from render_kernels.reading import read_source
from render_kernels.source_info import SourceInfo
from render_kernels.spec import RenderSpec, WatermarkSpec
from render_kernels.video import encode_segment

pytestmark = pytest.mark.slow  # real encodes: the module fixtures make clips, most tests render them

FPS = 10  # few frames per second keeps 720p encodes cheap; a keyframe every second (gop=FPS)
OUT_W, OUT_H = 1280, 720


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("media")


@pytest.fixture(scope="module")
def clip(media_dir):
    """4 s, 320x180, audio, keyframes at 0, 1, 2, 3 s."""
    return make_clip(str(media_dir / "clip.mp4"), seconds=4.0, fps=FPS, gop=FPS)


@pytest.fixture(scope="module")
def odd_clip(media_dir):
    """Odd dimensions (yuv444p source), no audio."""
    return make_clip(str(media_dir / "odd.mp4"), seconds=2.0, width=321, height=181, fps=FPS, gop=FPS, audio=False)


@pytest.fixture(scope="module")
def vfr_clip(media_dir):
    return make_clip(str(media_dir / "vfr.mp4"), seconds=3.0, width=160, height=90, fps=FPS, gop=FPS, vfr=True)


@pytest.fixture(scope="module")
def webm_clip(media_dir):
    """VP9 + Opus in WebM, keyframes every half second."""
    return make_clip(
        str(media_dir / "src.webm"),
        seconds=2.0,
        width=160,
        height=90,
        fps=FPS,
        gop=5,
        codec="libvpx-vp9",
        container="webm",
    )


@pytest.fixture(scope="module")
def red_png(media_dir):
    return make_watermark_png(str(media_dir / "red.png"), w=64, h=32, rgba=(255, 0, 0, 255))


def render(source: str, spec: RenderSpec, out_path: str, workers: int = 3, min_segment_s: float = 1.0):
    """The whole pipeline as the Ray driver runs it, serially."""
    info = probe(source)
    segments = [encode_segment(source, s, spec, info) for s in plan_segments(info, workers, min_segment_s)]
    return mux_segments(segments, encode_audio(source, spec.output_format), spec.output_format, out_path, info.fps)


def seams(source: str, workers: int = 3, min_segment_s: float = 1.0) -> tuple[int, ...]:
    """The first frames of the segments `render` cuts `source` into: each is a keyframe of its output."""
    return tuple(s.start_frame for s in plan_segments(probe(source), workers, min_segment_s))


@pytest.fixture(scope="module")
def mp4_renders(clip, media_dir):
    """The same job rendered as three segments and as one."""
    spec = RenderSpec("mp4", "720p")
    multi = render(clip, spec, str(media_dir / "multi.mp4"), workers=3)
    single = render(clip, spec, str(media_dir / "single.mp4"), workers=1)
    return multi, single


# --- probe ---------------------------------------------------------------------------------------------


def test_probe_reports_exact_facts(clip):
    info = probe(clip)
    assert (info.width, info.height, info.video_codec) == (320, 180, "h264")
    assert info.frame_count == 40 == decode_all(clip, keep="none").frame_count
    assert info.fps == FPS and info.duration_s == pytest.approx(4.0)
    assert info.keyframe_times == (0.0, 1.0, 2.0, 3.0)
    assert info.keyframe_frames == (0, 10, 20, 30)
    assert info.audio is not None
    assert (info.audio.codec, info.audio.sample_rate, info.audio.channels) == ("aac", 48000, 2)
    assert info.audio.duration_s == pytest.approx(4.0, abs=0.05)


def test_probe_odd_dimensions_without_audio(odd_clip):
    info = probe(odd_clip)
    assert (info.width, info.height, info.frame_count, info.audio) == (321, 181, 20, None)


def test_probe_variable_frame_rate(vfr_clip):
    info = probe(vfr_clip)
    decoded = decode_all(vfr_clip, keep="none")
    assert info.frame_count == decoded.frame_count == 30
    assert len(set(np.round(np.diff(decoded.times), 4))) == 3  # really variable
    assert info.fps == pytest.approx(FPS, rel=0.05)
    assert info.keyframe_frames == (0, 10, 20)


def test_probe_webm_counts_frames_without_metadata(webm_clip):
    # Matroska stores no frame count: it must come from the packets.
    info = probe(webm_clip)
    assert (info.video_codec, info.frame_count, info.fps) == ("vp9", 20, FPS)
    assert info.keyframe_frames == (0, 5, 10, 15) and info.audio.codec == "opus"


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        (
            "random.mp4",
            np.random.default_rng(7).integers(0, 256, 20000, dtype=np.uint8).tobytes(),
            "file is truncated or corrupt (cannot open",
        ),
        ("empty.mp4", b"", "file is empty"),
    ],
)
def test_probe_rejects_garbage(media_dir, name, content, reason):
    path = media_dir / name
    path.write_bytes(content)
    with pytest.raises(UnsupportedMedia) as caught:
        probe(str(path))
    assert caught.value.reason.startswith(reason)


def test_probe_rejects_truncated_files(clip, mp4_renders, media_dir):
    # moov at the end, cut off: the container cannot be opened; moov first (faststart), media data cut off:
    # the index promises frames the file no longer holds. Both are called what they are.
    cases = (
        (clip, "cut.mp4", "file is truncated or corrupt (cannot open"),
        (mp4_renders[0].path, "cut_faststart.mp4", "file is truncated or corrupt ("),
    )
    for source, name, reason in cases:
        data = open(source, "rb").read()
        (media_dir / name).write_bytes(data[: len(data) // 2])
        with pytest.raises(UnsupportedMedia) as caught:
            probe(str(media_dir / name))
        assert caught.value.reason.startswith(reason), (name, caught.value.reason)
    assert caught.value.reason.endswith("of 40 video frames present)"), caught.value.reason


def test_probe_rejects_images_and_missing_files(red_png, media_dir):
    with pytest.raises(UnsupportedMedia, match="still image"):
        probe(red_png)
    with pytest.raises(FileNotFoundError):
        probe(str(media_dir / "missing.mp4"))


def test_probe_image(red_png, clip, media_dir):
    assert probe_image(red_png) == (64, 32)
    text = media_dir / "notes.png"
    text.write_text("definitely not a picture\n")
    with pytest.raises(UnsupportedMedia, match="cannot"):
        probe_image(str(text))
    with pytest.raises(UnsupportedMedia, match="not a still image"):
        probe_image(clip)


# --- planning and sizing -----------------------------------------------------------------------------


def hand_info(duration_s: float, fps: float, keyframe_times: tuple[float, ...]) -> SourceInfo:
    return SourceInfo(
        path="x.mp4",
        duration_s=duration_s,
        fps=fps,
        frame_count=round(duration_s * fps),
        width=1920,
        height=1080,
        video_codec="h264",
        keyframe_times=keyframe_times,
        audio=None,
    )


def work(segment: Segment) -> float:
    """What the planner counts a segment as: its frames, and its lead-in at LEAD_IN_COST a frame."""
    return segment.frame_count + LEAD_IN_COST * segment.lead_in


def check_plan(info: SourceInfo, segments: list[Segment], min_segment_s: float) -> None:
    """Segments cover every frame once, in order, each read from a keyframe (and its lead-in) and long enough."""
    keyframes = dict(info.keyframes())
    assert [s.index for s in segments] == list(range(len(segments)))
    assert segments[0].start_frame == 0 and sum(s.frame_count for s in segments) == info.frame_count
    for a, b in zip(segments, segments[1:]):
        assert a.start_frame + a.frame_count == b.start_frame
    for s in segments:
        assert keyframes[s.start_frame - s.lead_in] == s.keyframe_s  # decoding starts at a keyframe
        later = [f for f in keyframes if s.start_frame - s.lead_in < f <= s.start_frame]
        assert later == [], "the lead-in starts at the last keyframe before the segment"
        assert s.frame_count >= min_segment_s * info.fps or len(segments) == 1
    assert pickle.loads(pickle.dumps(segments)) == segments


@pytest.mark.parametrize("workers", [1, 2, 3, 5, 8, 64])
@pytest.mark.parametrize("min_segment_s", [0.5, 2.0, 7.0])
def test_plan_segments_cover_every_frame_in_equal_work(workers, min_segment_s):
    info = hand_info(60.0, 30.0, tuple(float(t) for t in range(0, 60, 2)))
    segments = plan_segments(info, workers, min_segment_s)
    check_plan(info, segments, min_segment_s)
    assert len(segments) <= min(workers, int(60.0 // min_segment_s))
    if workers <= 8:
        assert len(segments) == min(workers, int(60.0 // min_segment_s))  # every worker gets one, down to the minimum
    works = [work(s) for s in segments]
    # Balanced to within one keyframe interval's lead-in, then a cut moved to a keyframe adds at most
    # KEYFRAME_CUT_SHARE to the largest.
    balanced = info.frame_count / len(segments) + LEAD_IN_COST * 60 + 1
    assert max(works) <= (1 + KEYFRAME_CUT_SHARE) * balanced


@pytest.mark.parametrize("workers", [2, 3, 8])
def test_a_long_gop_source_is_cut_between_keyframes_where_the_lead_in_is_cheap(workers):
    """Keyframes every 10 s of 30: cuts fall between them where that keeps the segments equal, each reading its
    lead-in from the keyframe before it, as long as the lead-ins cost at most MAX_LEAD_IN_SHARE of the frames."""
    info = hand_info(30.0, 30.0, (0.0, 10.0, 20.0))
    segments = plan_segments(info, workers)
    check_plan(info, segments, 2.0)
    works = [work(s) for s in segments]
    assert max(works) - min(works) <= 3  # the last takes what is left
    assert LEAD_IN_COST * sum(s.lead_in for s in segments) <= MAX_LEAD_IN_SHARE * info.frame_count
    assert max(works) < 0.6 * info.frame_count  # a third of the keyframe cuts' 10 + 20 s
    if workers == 2:
        assert [s.keyframe_s for s in segments] == [0.0, 10.0] and segments[1].lead_in > 0


def test_a_lead_in_too_costly_leaves_fewer_segments():
    """Only the first keyframe: the second of two segments would decode 43 % of the video to reach its start, where
    one segment (with both CPUs as encoder threads) is as fast; a keyframe every 10 s of 60: cut at them."""
    assert len(plan_segments(hand_info(10.0, 30.0, (0.0,)), 2)) == 1
    assert len(plan_segments(hand_info(30.0, 25.0, (0.0,)), 8)) == 1
    segments = plan_segments(hand_info(60.0, 30.0, tuple(float(t) for t in range(0, 60, 10))), 8)
    assert [(s.start_frame, s.lead_in) for s in segments] == [(i * 300, 0) for i in range(6)]


def test_a_cut_at_a_keyframe_needs_no_lead_in():
    segments = plan_segments(hand_info(10.0, 30.0, tuple(float(t) for t in range(10))), 2)
    assert segments == [Segment(0, 0, 150, 0.0, 0), Segment(1, 150, 150, 5.0, 0)]


def test_a_cut_near_a_keyframe_moves_to_it():
    """10 s at 30 fps with a keyframe at frame 147: the balanced cut (frame 150, a lead-in of 3) moves to it, 2 %
    more work in the longer segment, fewer bytes at equal quality and no lead-in (KEYFRAME_CUT_SHARE). Keyframes
    every 2 s: the nearest (30 frames from the cut) would cost 16 % more work; the cut stays between them."""
    near = hand_info(10.0, 30.0, (0.0, 147 / 30))
    assert plan_segments(near, 2, 2.0) == [Segment(0, 0, 147, 0.0, 0), Segment(1, 147, 153, 147 / 30, 0)]
    segments = plan_segments(hand_info(10.0, 30.0, (0.0, 2.0, 4.0, 6.0, 8.0)), 2, 2.0)
    assert [(s.start_frame, s.lead_in) for s in segments] == [(0, 0), (155, 35)]


def test_by_default_a_source_is_cut_only_into_segments_of_five_seconds_or_more():
    """Every seam costs bytes at equal quality whatever the segments' length (a 6 s camera clip in two: +3.1 %), so
    by default (MIN_SEGMENT_S) a source under 10 s is one segment on any number of CPUs, and longer ones are cut
    into segments of 5 s or more."""
    assert len(plan_segments(hand_info(6.0, 24.0, tuple(float(t) for t in range(6))), 2)) == 1
    assert len(plan_segments(hand_info(9.9, 30.0, tuple(float(t) for t in range(10))), 16)) == 1
    assert len(plan_segments(hand_info(10.0, 30.0, tuple(float(t) for t in range(10))), 2)) == 2
    assert len(plan_segments(hand_info(30.0, 30.0, tuple(float(t) for t in range(30))), 16)) == 6


def test_plan_segments_short_source_is_one_segment():
    assert plan_segments(hand_info(1.5, 25.0, (0.0, 0.5, 1.0)), 8) == [Segment(0, 0, 38, 0.0, 0)]
    assert len(plan_segments(hand_info(3.9, 25.0, tuple(t / 5 for t in range(20))), 8, 2.0)) == 1  # two: under 2 s


def test_plan_segments_on_probed_clip(clip):
    """40 frames, keyframes every 10: three segments of equal work (frames + LEAD_IN_COST x lead-in)."""
    segments = plan_segments(probe(clip), workers=3, min_segment_s=1.0)
    assert [(s.start_frame, s.frame_count, s.lead_in) for s in segments] == [(0, 15, 0), (15, 13, 5), (28, 12, 8)]


@pytest.mark.parametrize(
    ("src", "resolution", "expected"),
    [
        ((1920, 1080), "720p", (1280, 720)),
        ((640, 360), "1080p", (1920, 1080)),  # scaled up to the requested box
        ((1080, 1920), "1080p", (1080, 1920)),  # the resolution names the short side, portrait too
        ((321, 181), "720p", (1276, 720)),
        ((4096, 2160), "4k", (4096, 2160)),  # DCI 4K: its long side is at the 4096 bound
        ((1440, 1080), "4k", (2880, 2160)),
    ],
)
def test_output_size(src, resolution, expected):
    source = dataclasses.replace(hand_info(1.0, 25.0, ()), width=src[0], height=src[1])
    w, h = RenderSpec("mp4", resolution).output_size(source)
    assert (w, h) == expected and w % 2 == 0 and h % 2 == 0


def test_output_size_follows_the_picture_as_shown():
    """The sample aspect stretches the width, then a quarter turn swaps the sides (SourceInfo.display_size)."""
    anamorphic = dataclasses.replace(hand_info(1.0, 25.0, ()), width=720, height=480, sample_aspect=(32, 27))
    assert RenderSpec("mp4", "720p").output_size(anamorphic) == (1280, 720)
    assert RenderSpec("mp4", "720p").output_size(dataclasses.replace(anamorphic, rotation=90)) == (720, 1280)


def test_spec_validation(red_png):
    with pytest.raises(ValueError):
        RenderSpec("avi", "720p")
    with pytest.raises(ValueError):
        RenderSpec("mp4", "8k")
    with pytest.raises(ValueError):
        WatermarkSpec(red_png, position="middle")
    with pytest.raises(ValueError):
        WatermarkSpec(red_png, opacity=1.5)
    with pytest.raises(ValueError):
        RenderSpec("webm", "720p", video_encoder="libx264")
    with pytest.raises(ValueError):
        RenderSpec("mp4", "720p", segment_threads=0)


@pytest.mark.parametrize(
    ("cpus", "segments", "threads"), [(2, 2, 1), (2, 1, 2), (16, 16, 1), (16, 2, 2), (1, 3, 1), (3, 2, 1)]
)
def test_each_segment_encodes_with_the_cpus_it_has_to_itself(cpus, segments, threads):
    assert segment_threads(cpus, segments) == threads


def test_the_encoder_thread_count_is_the_specs(clip):
    """The same segment with one and with two threads: both whole and alike, and the bytes follow the count (so
    the driver fixes it once per render)."""
    info = probe(clip)
    segment = plan_segments(info, 1)[0]
    one, two = (encode_segment(clip, segment, RenderSpec("mp4", "720p", segment_threads=n), info) for n in (1, 2))
    assert one.frame_count == two.frame_count == info.frame_count
    assert one.packets != two.packets
    assert encode_segment(clip, segment, RenderSpec("mp4", "720p", segment_threads=1), info).packets == one.packets


def native_threads() -> int:
    """This process's threads as the kernel counts them (FFmpeg's and x264's included, which Python's are not)."""
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="no /proc here (not Linux): the native threads are counted there"
)
def test_a_segment_given_one_cpu_decodes_and_encodes_in_its_own_thread(clip):
    """Where every CPU has a segment, a decoder thread more only costs CPU: with one thread in its spec, a segment
    starts none beside the one it runs in; with two, its decoder and encoder start theirs."""
    info = probe(clip)
    segment = plan_segments(info, 1)[0]
    for threads, more in ((1, False), (2, True)):
        before, seen = native_threads(), []
        spec = RenderSpec("mp4", "720p", segment_threads=threads)
        encode_segment(clip, segment, spec, info, on_frame=lambda _, seen=seen: seen.append(native_threads()))
        assert (max(seen) > before) is more, (threads, before, max(seen))


def nvenc_opens_here() -> bool:
    """Independent of the helper under test: no NVIDIA device node means no NVENC; with one, try the
    encoder with libavcodec's own defaults (an H100/H200 has a device but no NVENC)."""
    if not glob.glob("/dev/nvidia[0-9]*"):
        return False
    encoder = av.CodecContext.create("h264_nvenc", "w")
    encoder.width, encoder.height, encoder.pix_fmt, encoder.time_base = 256, 144, "yuv420p", Fraction(1, 30)
    try:
        encoder.open()
    except (av.FFmpegError, ValueError, OSError):
        return False
    return True


def test_choose_video_encoder_uses_nvenc_only_where_it_opens():
    # On a node without NVENC (this CI machine, or an H100/H200) h264_nvenc fails to open: libx264 it is.
    expected = "h264_nvenc" if nvenc_opens_here() else "libx264"
    assert nvenc_available() is (expected == "h264_nvenc")
    assert choose_video_encoder("mp4") == choose_video_encoder("mov") == expected
    assert choose_video_encoder("webm") == "libvpx-vp9"


# --- segment encoding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("output_format", ["mp4", "webm"])
def test_encode_segment_starts_with_keyframe_and_is_deterministic(clip, output_format):
    info = probe(clip)
    segment = plan_segments(info, 3, 1.0)[1]
    spec = RenderSpec(output_format, "720p")
    first = encode_segment(clip, segment, spec, info)
    again = pickle.loads(pickle.dumps(encode_segment(clip, segment, spec, info)))
    assert first.packets == again.packets and first.pts == again.pts and first.dts == again.dts
    assert segment.lead_in > 0, "a segment cut between keyframes, read through its lead-in"
    assert first.frame_count == len(first.packets) == segment.frame_count
    assert first.keyframes[0] and sorted(first.pts) == list(range(segment.frame_count))
    assert first.time_base == (1, FPS) and (first.width, first.height) == (OUT_W, OUT_H)
    assert first.codec == {"mp4": "libx264", "webm": "libvpx-vp9"}[output_format]
    assert first.stats.wall_s >= first.stats.encode_s > 0 and first.stats.decode_s > 0
    assert first.stats.cpu_s > 0  # metered: what a render's usage adds up


def test_encode_segment_reports_every_frame_from_inside_the_loop(clip):
    info = probe(clip)
    segment = plan_segments(info, 3, 1.0)[1]
    spec = RenderSpec("mp4", "720p")
    seen: list[int] = []
    reported = encode_segment(clip, segment, spec, info, on_frame=seen.append)
    assert seen == list(range(1, segment.frame_count + 1))
    assert reported.packets == encode_segment(clip, segment, spec, info).packets  # watching changes nothing

    class Stop(Exception):
        pass

    def stop_at_five(frames: int) -> None:
        seen.append(frames)
        if frames == 5:
            raise Stop

    seen.clear()
    with pytest.raises(Stop):  # raised mid-loop: the callback runs while frames are still being encoded
        encode_segment(clip, segment, spec, info, on_frame=stop_at_five)
    assert seen == [1, 2, 3, 4, 5]


# --- full renders --------------------------------------------------------------------------------------


def check_output(
    path: str,
    codec: str,
    audio_codec: str | None,
    frames: int,
    fps: float,
    keyframes_at=(),
    duration_s: float | None = None,
):
    """Decode `path` fully and check codecs, size, frame count, constant-rate timestamps and duration."""
    decoded = decode_all(path)
    assert (decoded.video_codec, decoded.audio_codec) == (codec, audio_codec)
    assert (decoded.width, decoded.height, decoded.frame_count) == (OUT_W, OUT_H, frames)
    steps = np.diff(decoded.times)  # continuous, constant frame rate across segment joins
    assert np.allclose(steps, 1 / fps, atol=0.0015)
    assert all(decoded.keyframes[i] for i in keyframes_at)
    # The container lasts as long as its longer stream (the audio, when the video was retimed).
    assert decoded.duration_s == pytest.approx(duration_s or frames / fps, abs=0.03)
    return decoded


@pytest.mark.parametrize(
    ("output_format", "codec", "audio_codec", "container"),
    [
        ("mp4", "h264", "aac", "mov,mp4,m4a,3gp,3g2,mj2"),
        ("mov", "h264", "aac", "mov,mp4,m4a,3gp,3g2,mj2"),
        ("webm", "vp9", "opus", "matroska,webm"),
    ],
)
def test_render_each_container(clip, media_dir, mp4_renders, output_format, codec, audio_codec, container):
    if output_format == "mp4":
        stats = mp4_renders[0]
    else:
        stats = render(clip, RenderSpec(output_format, "720p"), str(media_dir / f"out.{output_format}"))
    assert stats.frame_count == 40 and (stats.width, stats.height) == (OUT_W, OUT_H)
    assert stats.size_bytes == os.path.getsize(stats.path) and stats.duration_s == pytest.approx(4.0, abs=0.03)
    decoded = check_output(stats.path, codec, audio_codec, 40, FPS, keyframes_at=seams(clip))
    assert decoded.format_name == container
    assert decoded.audio_samples == pytest.approx(4.0 * 48000, rel=0.02)
    assert [f for f in os.listdir(media_dir) if f.startswith(".mux-")] == []


def test_render_without_audio_has_no_audio_stream(odd_clip, media_dir):
    stats = render(odd_clip, RenderSpec("mp4", "720p"), str(media_dir / "odd_out.mp4"), workers=2)
    assert encode_audio(odd_clip, "mp4") is None
    with av.open(stats.path) as container:
        assert len(container.streams.audio) == 0
    assert stats.width == 1276  # 321x181 with its short side at 720
    decoded = decode_all(stats.path, keep="none")
    assert decoded.frame_count == 20 and decoded.keyframes[10]


def test_multi_segment_render_matches_single_segment(mp4_renders):
    multi, single = (decode_all(r.path) for r in mp4_renders)
    assert multi.frame_count == single.frame_count == 40
    assert min(psnr_y(a, b) for a, b in zip(multi.frames, single.frames)) >= 40.0


def test_webm_source_segments_seek_exactly(webm_clip, media_dir):
    spec = RenderSpec("mov", "720p")
    multi = render(webm_clip, spec, str(media_dir / "from_webm_multi.mov"), workers=4, min_segment_s=0.5)
    single = render(webm_clip, spec, str(media_dir / "from_webm_single.mov"), workers=1)
    a, b = check_output(multi.path, "h264", "aac", 20, FPS, keyframes_at=(0, 5, 10, 15)), decode_all(single.path)
    assert min(psnr_y(x, y) for x, y in zip(a.frames, b.frames)) >= 40.0


def test_variable_frame_rate_source_renders_constant_rate(vfr_clip, media_dir):
    info = probe(vfr_clip)
    stats = render(vfr_clip, RenderSpec("mp4", "720p"), str(media_dir / "vfr_out.mp4"), workers=2)
    assert stats.frame_count == info.frame_count == 30
    check_output(
        stats.path, "h264", "aac", 30, info.fps, keyframes_at=seams(vfr_clip, 2), duration_s=info.audio.duration_s
    )


def test_mux_reads_one_segment_at_a_time_and_writes_the_same_bytes(clip, media_dir):
    """Given a generator, the mux drops each segment before it asks for the next (as the driver's mux task fetches
    them from the object store), and the file is byte for byte the one a list of the same segments makes."""
    info = probe(clip)
    spec = RenderSpec("mp4", "720p")
    listed = [encode_segment(clip, s, spec, info) for s in plan_segments(info, 3, 1.0)]
    audio = encode_audio(clip, "mp4")
    mux_segments(listed, audio, "mp4", str(media_dir / "listed.mp4"), info.fps)
    stored = [pickle.dumps(s) for s in listed]
    del listed
    fetched: list[weakref.ref] = []

    def one_at_a_time():
        for blob in stored:
            assert all(ref() is None for ref in fetched), "the mux still holds an earlier segment"
            box = [pickle.loads(blob)]
            fetched.append(weakref.ref(box[0]))
            yield box.pop()  # the generator keeps no reference of its own

    stats = mux_segments(one_at_a_time(), audio, "mp4", str(media_dir / "streamed.mp4"), info.fps)
    assert len(fetched) == 3 and stats.frame_count == 40
    assert stats.cpu_s > 0 and audio is not None and audio.stats.cpu_s > 0  # metered, as the segments are
    assert (media_dir / "streamed.mp4").read_bytes() == (media_dir / "listed.mp4").read_bytes()


def test_mux_refuses_segments_out_of_order(clip, media_dir):
    info = probe(clip)
    spec = RenderSpec("mp4", "720p")
    segments = [encode_segment(clip, s, spec, info) for s in plan_segments(info, 2, 1.0)]
    with pytest.raises(ValueError, match="segment 1 came where segment 0 belongs"):
        mux_segments(segments[::-1], None, "mp4", str(media_dir / "reversed.mp4"), info.fps)
    assert not (media_dir / "reversed.mp4").exists()
    assert [f for f in os.listdir(media_dir) if f.startswith(".mux-")] == []


def test_mux_failure_leaves_no_artifact(clip, media_dir):
    info = probe(clip)
    segment = encode_segment(clip, plan_segments(info, 1)[0], RenderSpec("mp4", "720p"), info)
    target = media_dir / "failed.webm"
    with pytest.raises(ValueError):  # H.264 cannot go into webm
        mux_segments([segment], None, "webm", str(target), info.fps)
    assert not target.exists() and [f for f in os.listdir(media_dir) if f.startswith(".mux-")] == []


def test_mux_refuses_a_track_whose_codec_is_of_another_kind(clip, media_dir):
    info = probe(clip)
    segment = encode_segment(clip, plan_segments(info, 1)[0], RenderSpec("mp4", "720p"), info)
    audio = encode_audio(clip, "mp4")
    target = media_dir / "swapped.mp4"
    with pytest.raises(ValueError, match="'aac' encodes audio, not video"):
        mux_segments([dataclasses.replace(segment, codec="aac")], None, "mp4", str(target), info.fps)
    with pytest.raises(ValueError, match="'libx264' encodes video, not audio"):
        mux_segments([segment], dataclasses.replace(audio, codec="libx264"), "mp4", str(target), info.fps)
    assert not target.exists() and [f for f in os.listdir(media_dir) if f.startswith(".mux-")] == []


def test_encode_audio_codecs(clip):
    aac, opus = encode_audio(clip, "mov"), encode_audio(clip, "webm")
    assert (aac.codec, aac.sample_rate, aac.channels, aac.time_base) == ("aac", 48000, 2, (1, 48000))
    assert (opus.codec, opus.sample_rate) == ("libopus", 48000) and opus.extradata.startswith(b"OpusHead")
    assert aac.packets and aac.dts == sorted(aac.dts)


# --- watermark and preview -----------------------------------------------------------------------------


def watermark_box(position: str) -> tuple[int, int, int, int]:
    """Expected (x, y, w, h) of the 64x32 watermark in a 1280x720 frame, from the documented rule."""
    h = round(OUT_H * WATERMARK_HEIGHT / 2) * 2
    w = round(h * 2 / 2) * 2
    m = round(OUT_H * WATERMARK_MARGIN / 2) * 2
    x = {
        "top_left": m,
        "bottom_left": m,
        "top_right": OUT_W - w - m,
        "bottom_right": OUT_W - w - m,
        "center": (OUT_W - w) // 4 * 2,
    }[position]  # offsets are even (4:2:0 chroma)
    y = {
        "top_left": m,
        "top_right": m,
        "bottom_left": OUT_H - h - m,
        "bottom_right": OUT_H - h - m,
        "center": (OUT_H - h) // 4 * 2,
    }[position]
    return x, y, w, h


def png_pixels(data: bytes, media_dir, name: str) -> np.ndarray:
    path = media_dir / name
    path.write_bytes(data)
    with av.open(str(path)) as container:
        return next(container.decode(video=0)).to_ndarray(format="rgb24").astype(np.float64)


@pytest.mark.parametrize("gop", [FPS, 40])
def test_the_preview_composes_only_its_frame_and_shows_what_the_whole_pipeline_would(media_dir, gop):
    """A keyframe a second, or only the first: the preview decodes its way to its frame, and the picture is the one
    sending every frame from the keyframe through the pipeline gives."""
    clip = make_clip(str(media_dir / f"gop{gop}.mp4"), seconds=4.0, fps=FPS, gop=gop, audio=False)
    info = probe(clip)
    target = int(info.frame_count * PREVIEW_AT)
    start_frame, start_s = [k for k in info.keyframes() if k[0] <= target][-1]
    with open_video(clip) as (container, stream):
        pipeline = FramePipeline.for_source(info, OUT_W, OUT_H, None, stream.codec_context.colorspace)
        frames = islice(frames_from(container, stream, info, start_s), target - start_frame + 1)
        picture = list(pipeline.pictures(frames))[-1]
        expected = picture.reformat(format="rgb24", src_colorspace=stream.codec_context.colorspace).to_ndarray()
    preview = png_pixels(render_preview(clip, info, RenderSpec("mp4", "720p")), media_dir, f"gop{gop}.png")
    assert np.array_equal(preview, expected)


def test_the_preview_png_is_compressed_at_zlibs_fastest_level(clip):
    """The picture is made beside segments that want the CPU: zlib's fastest level, not FFmpeg's default (five
    times the CPU for a quarter fewer bytes). A zlib stream's second byte names its level (FLEVEL, bits 6-7: 0 is
    the fastest); the PNG's first image data chunk (IDAT) starts that stream."""
    png = render_preview(clip, probe(clip), RenderSpec("mp4", "720p"))
    assert png.startswith(b"\x89PNG")
    idat = png.index(b"IDAT") + 4
    assert png[idat] & 0x0F == 8  # deflate
    assert png[idat + 1] >> 6 == 0


def test_a_segment_makes_the_stills_a_picture_task_would(clip, red_png):
    """The preview and the source's first frame, made by the segments as they pass those frames: the same PNGs
    render_preview makes (frame for frame, byte for byte), from the segment that holds each frame."""
    info = probe(clip)
    spec = RenderSpec("mp4", "720p", WatermarkSpec(red_png, position="top_left", opacity=0.5))
    segments = plan_segments(info, 2, min_segment_s=1.0)
    assert len(segments) == 2
    stills = plan_stills(segments, info, preview=True, source_frame=True)
    target = int(info.frame_count * PREVIEW_AT)
    assert stills == {0: (Still(SOURCE_FRAME, 0, marked=False), Still(PREVIEW, target, marked=True))}
    made: dict[str, bytes] = {}
    for segment in segments:
        encoded = encode_segment(
            clip, segment, spec, info, stills=stills.get(segment.index, ()), on_still=made.__setitem__
        )
        assert encoded.frame_count == segment.frame_count
    assert made == {
        PREVIEW: render_preview(clip, info, spec),
        SOURCE_FRAME: render_preview(clip, info, dataclasses.replace(spec, watermark=None), at=0.0),
    }


def test_stills_are_left_to_a_task_when_the_preview_is_deep_in_a_long_segment(clip):
    info = probe(clip)
    (whole,) = plan_segments(info, 1)
    assert plan_stills([whole], info, preview=False, source_frame=True) == {0: (Still(SOURCE_FRAME, 0, False),)}
    n = int(3 * STILL_WITHIN_S * info.fps) + 3  # the preview's frame a frame past the limit into a lone segment
    long = dataclasses.replace(info, frame_count=n)
    assert plan_stills([Segment(0, 0, n, 0.0)], long, preview=True, source_frame=True) is None
    quarter = [Segment(0, 0, n // 4, 0.0), Segment(1, n // 4, n - n // 4, 0.0, lead_in=n // 4)]
    assert plan_stills(quarter, long, preview=True, source_frame=False) == {1: (Still(PREVIEW, n // 3 - n // 4, True),)}


def inside_and_outside(box, inset: int = 4, outset: int = 4):
    x, y, w, h = box
    inside = np.zeros((OUT_H, OUT_W), bool)
    inside[y + inset : y + h - inset, x + inset : x + w - inset] = True
    outside = np.ones((OUT_H, OUT_W), bool)
    outside[max(0, y - outset) : y + h + outset, max(0, x - outset) : x + w + outset] = False
    return inside, outside


@pytest.mark.parametrize("position", ["top_left", "top_right", "bottom_left", "bottom_right", "center"])
def test_preview_places_watermark_with_opacity(clip, red_png, media_dir, position):
    info = probe(clip)
    plain = png_pixels(render_preview(clip, info, RenderSpec("mp4", "720p")), media_dir, "plain.png")
    spec = RenderSpec("mp4", "720p", WatermarkSpec(red_png, position=position, opacity=0.5))
    marked = png_pixels(render_preview(clip, info, spec), media_dir, f"{position}.png")
    assert marked.shape == (OUT_H, OUT_W, 3)
    rows, cols = np.nonzero(np.any(marked != plain, axis=2))  # the preview is exact: no codec noise
    x, y, w, h = watermark_box(position)
    assert (cols.min(), rows.min(), cols.max() + 1, rows.max() + 1) == (x, y, x + w, y + h)
    inside, _ = inside_and_outside((x, y, w, h), inset=1)
    expected = 0.5 * np.array([255.0, 0, 0]) + 0.5 * plain[inside]
    assert np.abs(marked[inside] - expected).mean(axis=0) == pytest.approx([0, 0, 0], abs=3)


def test_zero_opacity_watermark_changes_nothing(clip, red_png):
    info = probe(clip)
    plain = render_preview(clip, info, RenderSpec("webm", "720p"))
    assert render_preview(clip, info, RenderSpec("webm", "720p", WatermarkSpec(red_png, opacity=0.0))) == plain


def test_rendered_video_carries_watermark(clip, red_png, media_dir, mp4_renders):
    spec = RenderSpec("mp4", "720p", WatermarkSpec(red_png, position="bottom_right", opacity=0.7))
    stats = render(clip, spec, str(media_dir / "marked.mp4"), workers=1)
    inside, outside = inside_and_outside(watermark_box("bottom_right"), outset=8)
    for index in (0, 25):
        plain = decode_frame(mp4_renders[1].path, index).astype(np.float64)
        marked = decode_frame(stats.path, index).astype(np.float64)
        expected = 0.7 * np.array([255.0, 0, 0]) + 0.3 * plain[inside]
        assert np.abs(marked[inside] - expected).mean(axis=0) == pytest.approx([0, 0, 0], abs=4)
        assert np.abs(marked[outside] - plain[outside]).mean() < 2.0


def test_read_source_is_the_probe_and_the_preview_in_one_call(clip, red_png):
    plain = read_source(clip, spec=RenderSpec("mp4", "720p"))
    assert plain.info == probe(clip) and plain.preview_png is None and plain.probe_s > 0
    spec = RenderSpec("mp4", "720p", WatermarkSpec(red_png, position="top_left", opacity=0.5))
    marked = read_source(clip, spec=spec)
    assert marked.info == plain.info and marked.preview_png == render_preview(clip, marked.info, spec)
    with pytest.raises(UnsupportedMedia, match="max_frames|frames"):
        read_source(clip, MediaLimits(max_frames=10), spec)


def test_watermark_must_be_an_image(clip, media_dir):
    info = probe(clip)
    text = media_dir / "logo.png"
    text.write_text("not an image")
    spec = RenderSpec("mp4", "720p", WatermarkSpec(str(text)))
    with pytest.raises(UnsupportedMedia, match="cannot"):
        encode_segment(clip, plan_segments(info, 1)[0], spec, info)
    with pytest.raises(UnsupportedMedia, match="not a still image"):
        render_preview(clip, info, RenderSpec("mp4", "720p", WatermarkSpec(clip)))


def test_mux_refuses_segments_from_different_encoders(clip, media_dir):
    info = probe(clip)
    a = encode_segment(clip, plan_segments(info, 1)[0], RenderSpec("mp4", "720p"), info)
    b = dataclasses.replace(a, index=1, extradata=b"\0\0\0\1" + a.extradata)  # e.g. another node's encoder
    with pytest.raises(ValueError, match="different"):
        mux_segments([a, b], None, "mp4", str(media_dir / "mixed.mp4"), info.fps)
    assert not (media_dir / "mixed.mp4").exists()
