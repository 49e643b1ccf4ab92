"""Real-world media through the kernels, end to end and in-process: phone video stored sideways (display matrix),
mirrored video, anamorphic (non-square pixel) video, vertical and square pictures, interlaced, 10-bit and 4:2:2
video, 5.1 and multi-track audio, truncated and empty files.

Every corpus source shows a red marker top-left (tests/media.py); a render must show it top-left too, at the
size the short-side rule gives the picture as shown, with square pixels and no display matrix left over.
"""

from __future__ import annotations

import struct
from fractions import Fraction

import av
import numpy as np
import pytest
from media import (
    REAL_WORLD_CORPUS,
    SHOWN_720P,
    coded_picture,
    decode_audio,
    dominant_hz,
    make_clip,
    make_corpus_source,
    make_empty,
    make_truncated,
    make_watermark_png,
    marker_corner,
    shown_picture,
)

from render_kernels._orientation import orientation_from_matrix
from render_kernels.audio import encode_audio
from render_kernels.compose import ORIENTATION_FILTERS, FramePipeline
from render_kernels.errors import UnsupportedMedia
from render_kernels.mux import mux_segments
from render_kernels.plan import plan_segments
from render_kernels.preview import render_preview
from render_kernels.probe import probe
from render_kernels.spec import RESOLUTIONS, RenderSpec, WatermarkSpec
from render_kernels.video import encode_segment

FPS, SECONDS, FRAMES = 10, 2.0, 20  # the corpus' sources (keyframes every second: two segments each)
ONE = 1 << 16  # 1.0 in the display matrix's 16.16 fixed point
W = 1 << 30  # its last element: 1.0 in 2.30
# What a phone held upright stores (iPhone, Android): ffprobe reports "rotation of -90.00 degrees", and the
# ffmpeg CLI shows it turned a quarter clockwise (transpose=clock).
PHONE_PORTRAIT_MATRIX = (0, ONE, 0, -ONE, 0, 0, 0, 0, W)


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("real-world")


@pytest.fixture(scope="module")
def corpus(media_dir) -> dict[str, str]:
    return {name: make_corpus_source(media_dir, name) for name in REAL_WORLD_CORPUS}


def render(source: str, spec: RenderSpec, out_path: str) -> str:
    """The whole pipeline as the driver runs it, serially, in two segments (so the seam is rendered too)."""
    info = probe(source)
    segments = plan_segments(info, workers=2, min_segment_s=0.5)  # a keyframe a second (0.95 s into the VFR one)
    assert len(segments) == 2
    encoded = [encode_segment(source, segment, spec, info) for segment in segments]
    return mux_segments(encoded, encode_audio(source, spec.output_format), spec.output_format, out_path, info.fps).path


@pytest.fixture(scope="module")
def rendered(corpus, media_dir):
    """name -> the corpus source rendered as 720p mp4 (each rendered once, when first asked for)."""
    done: dict[str, str] = {}

    def get(name: str) -> str:
        if name not in done:
            done[name] = render(corpus[name], RenderSpec("mp4", "720p"), str(media_dir / f"{name}.720p.mp4"))
        return done[name]

    return get


def check_shown_output(path: str, size: tuple[int, int], seconds: float = SECONDS) -> None:
    """`path` shows `size` square pixels, upright (marker top-left in every frame), FRAMES frames, `seconds` long,
    with no display matrix in the stream or on any frame."""
    with av.open(path) as container:
        video = container.streams.video[0]
        assert (video.codec_context.width, video.codec_context.height) == size
        assert video.sample_aspect_ratio in (None, 0, 1)
        assert float(video.duration * video.time_base) == pytest.approx(seconds, abs=0.03)  # the video's own
        frames = 0
        for frame in container.decode(video):
            assert frame.rotation == 0 and "DISPLAYMATRIX" not in frame.side_data
            assert marker_corner(frame.to_ndarray(format="rgb24")) == "top_left", f"frame {frames}"
            frames += 1
        assert frames == FRAMES


# --- the three defects of the issue: each failed before ----------------------------------------------------


@pytest.mark.slow
def test_sideways_phone_video_renders_upright(rendered):
    # Before: 1280x720 with the marker bottom-left (the stored picture, unturned).
    check_shown_output(rendered("phone_portrait_90"), (720, 1280))


@pytest.mark.slow
def test_anamorphic_video_is_not_squashed(rendered):
    # Before: 1080x720 (the stored 3:2 shape), where players show 16:9.
    check_shown_output(rendered("ntsc_dvd_32_27"), (1280, 720))


@pytest.mark.slow
def test_small_vertical_video_renders_at_720_short_side(rendered):
    # Before: 404x720 (fitted into a landscape box).
    check_shown_output(rendered("vertical_9_16"), (720, 1280))


# --- the whole corpus --------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SHOWN_720P))
def test_every_source_renders_as_shown(corpus, rendered, name):
    # Constant frame rate at the source's average: a variable-rate source lasts its frames at that rate.
    check_shown_output(rendered(name), SHOWN_720P[name], probe(corpus[name]).duration_s)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "facts"),
    [
        ("phone_portrait_90", {"rotation": 90, "hflip": False, "width": 320, "height": 180}),
        ("upside_down_180", {"rotation": 180, "hflip": False}),
        ("portrait_270", {"rotation": 270, "hflip": False}),
        ("mirrored_selfie", {"rotation": 0, "hflip": True}),
        ("mirrored_portrait_90", {"rotation": 90, "hflip": True}),
        ("ntsc_dvd_32_27", {"sample_aspect": (32, 27)}),
        ("pal_dv_16_15", {"sample_aspect": (16, 15)}),
        ("hdv_4_3", {"sample_aspect": (4, 3)}),
        ("vertical_9_16", {"rotation": 0, "sample_aspect": (1, 1), "width": 180, "height": 320}),
        ("interlaced_tff", {"field_order": "tff"}),
        ("ten_bit", {"pixel_format": "yuv420p10le", "field_order": "progressive"}),
        ("chroma_422", {"pixel_format": "yuv422p"}),
    ],
)
def test_probe_reports_how_the_source_is_shown(corpus, name, facts):
    info = probe(corpus[name])
    assert {key: getattr(info, key) for key in facts} == facts
    assert info.frame_count == FRAMES and info.fps == FPS


@pytest.mark.slow
def test_the_corpus_phone_video_stores_what_phones_store(corpus):
    # Ties the corpus (and so every orientation test) to real phones' display matrix, not to this code's reading.
    with av.open(corpus["phone_portrait_90"]) as container:
        frame = next(container.decode(video=0))
        matrix = bytes(frame.side_data["DISPLAYMATRIX"])
    assert struct.unpack("=9i", matrix) == PHONE_PORTRAIT_MATRIX
    assert orientation_from_matrix(PHONE_PORTRAIT_MATRIX) == (90, False)


@pytest.mark.parametrize(
    ("matrix", "orientation"),
    [
        ((ONE, 0, 0, 0, ONE, 0, 0, 0, W), (0, False)),
        (PHONE_PORTRAIT_MATRIX, (90, False)),
        ((-ONE, 0, 0, 0, -ONE, 0, 0, 0, W), (180, False)),
        ((0, -ONE, 0, ONE, 0, 0, 0, 0, W), (270, False)),
        ((-ONE, 0, 0, 0, ONE, 0, 0, 0, W), (0, True)),  # mirrored left-right
        ((ONE, 0, 0, 0, -ONE, 0, 0, 0, W), (180, True)),  # mirrored top-bottom: a half turn, then left-right
        ((0, 0, 0, 0, 0, 0, 0, 0, 0), (0, False)),  # degenerate: ignored
        ((46341, 46341, 0, -46341, 46341, 0, 0, 0, W), (0, False)),  # 45 degrees: the nearest quarter turn
    ],
)
def test_orientation_from_matrix(matrix, orientation):
    assert orientation_from_matrix(matrix) == orientation


@pytest.mark.parametrize(("rotation", "hflip"), sorted(ORIENTATION_FILTERS))
def test_frame_pipeline_turns_every_orientation_upright(rotation, hflip):
    shown = shown_picture(3, 64, 48)
    coded_w = 48 if rotation in (90, 270) else 64
    frame = av.VideoFrame.from_ndarray(coded_picture(shown, rotation, hflip, coded_w), format="rgb24")
    frame.pts, frame.time_base = 0, Fraction(1, FPS)
    pipeline = FramePipeline(64, 48, None, colorspace=1, rotation=rotation, hflip=hflip)
    out = pipeline(frame).to_ndarray(format="rgb24").astype(np.int16)
    assert out.shape == shown.shape and np.abs(out - shown).mean() < 8
    assert marker_corner(out.astype(np.uint8)) == "top_left"


def test_interlaced_frames_are_deinterlaced_one_for_one():
    # Moving interlaced video: each frame's two fields differ (even rows white, odd rows black), and the next
    # frame's the other way round. Deinterlaced, a frame keeps one field and fills in the other: no combing.
    pipeline = FramePipeline(64, 48, None, colorspace=1, field_order="tff")
    frames = []
    for index in range(5):
        combed = np.zeros((48, 64, 3), np.uint8)
        combed[index % 2 :: 2] = 255
        frame = av.VideoFrame.from_ndarray(combed, format="rgb24")
        frame.pts, frame.time_base = index, Fraction(1, 25)
        frames.append(frame)
    pictures = [p.to_ndarray(format="gray").astype(np.int16) for p in pipeline.pictures(frames)]
    assert len(pictures) == 5
    for luma in pictures:
        assert np.abs(np.diff(luma[4:-4], axis=0)).mean() < 40  # no combing left (it was ~220 between rows)


# --- sizes and stored facts ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("shown", "resolution", "expected"),
    [
        ((1920, 1080), "720p", (1280, 720)),
        ((360, 640), "720p", (720, 1280)),  # portrait: 720 is the short side
        ((1080, 1920), "1080p", (1080, 1920)),
        ((500, 500), "720p", (720, 720)),
        ((853.3333, 480), "720p", (1280, 720)),  # 720x480 at 32:27
        ((720, 1280), "4k", (2160, 3840)),
        ((4096, 2160), "4k", (4096, 2160)),  # DCI 4K: at the 4096 bound
        ((6000, 2000), "4k", (4096, 1366)),  # 3:1 at 4k: the long side bound scales it all down
        ((2, 1000), "720p", (6, 2560)),  # absurd: bounded, sides even and at least 2
        ((100000, 10), "1080p", (3840, 2)),
    ],
)
def test_output_size_names_the_short_side_and_bounds_the_long_one(shown, resolution, expected):
    width, height = RESOLUTIONS[resolution].fit(*shown)
    assert (width, height) == expected and width % 2 == 0 and height % 2 == 0


@pytest.mark.slow
def test_display_size_applies_sample_aspect_then_rotation(corpus):
    info = probe(corpus["anamorphic_portrait_90"])  # 240x160 stored, 32:27 pixels, turned a quarter
    width, height = info.display_size()
    assert width == 160 and height == pytest.approx(240 * 32 / 27)
    assert RenderSpec("mp4", "720p").output_size(info) == (720, 1280)


# --- audio ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_surround_is_downmixed_to_stereo_without_clipping(corpus, rendered):
    info = probe(corpus["surround_5_1"])
    assert info.audio is not None and info.audio.channels == 6
    rate, samples = decode_audio(rendered("surround_5_1"))
    assert samples.shape[0] == 2 and samples.shape[1] == pytest.approx(SECONDS * rate, rel=0.03)
    # The loud mix (0.45 a channel) sums past full scale in swresample's plain matrix, and clipped at 1.0 before;
    # scaled to fit, it peaks at about 0.45.
    assert np.abs(samples).max() < 0.6
    # Front left (300 Hz) leads the left channel, front right (375 Hz) the right: the layout was understood.
    middle = samples[:, rate // 2 : rate * 3 // 2]
    assert dominant_hz(middle[0], rate) == pytest.approx(300, abs=3)
    assert dominant_hz(middle[1], rate) == pytest.approx(375, abs=3)


@pytest.mark.slow
def test_the_default_audio_track_is_the_one_rendered(corpus, rendered):
    info = probe(corpus["second_track_default"])  # track 1: mono 44.1 kHz 300 Hz; track 2 (default): 1 kHz stereo
    assert info.audio is not None and (info.audio.channels, info.audio.sample_rate) == (2, 48000)
    rate, samples = decode_audio(rendered("second_track_default"))
    assert (rate, samples.shape[0]) == (48000, 2)
    assert dominant_hz(samples[0, rate // 2 : rate * 3 // 2], rate) == pytest.approx(1000, abs=3)


# --- watermark and preview on a turned source ----------------------------------------------------------------


def blue_box(picture: np.ndarray) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) around the blue pixels of an RGB picture."""
    rows, cols = np.nonzero((picture[..., 2] > 180) & (picture[..., 0] < 90))
    return int(cols.min()), int(rows.min()), int(cols.max()) + 1, int(rows.max()) + 1


# The 64x32 watermark at bottom_right of a 720x1280 picture, by compose's rule: 12 % of the height (154 px)
# tall, its aspect kept (308 wide), 3 % of the height (38 px) from the right and bottom edges.
PORTRAIT_BOTTOM_RIGHT = (720 - 308 - 38, 1280 - 154 - 38, 720 - 38, 1280 - 38)


@pytest.mark.slow
def test_watermark_lands_bottom_right_of_the_shown_picture(corpus, media_dir):
    png = make_watermark_png(str(media_dir / "blue.png"), 64, 32, (0, 0, 255, 255))
    spec = RenderSpec("mp4", "720p", WatermarkSpec(png, position="bottom_right"))
    path = render(corpus["phone_portrait_90"], spec, str(media_dir / "marked_portrait.mp4"))
    check_shown_output(path, (720, 1280))
    with av.open(path) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index in (0, 10, 19):  # both segments
                box = blue_box(frame.to_ndarray(format="rgb24"))
                assert np.abs(np.subtract(box, PORTRAIT_BOTTOM_RIGHT)).max() <= 3, (index, box)


@pytest.mark.slow
def test_preview_of_a_turned_source_is_upright_with_the_watermark_bottom_right(corpus, media_dir):
    png = make_watermark_png(str(media_dir / "blue.png"), 64, 32, (0, 0, 255, 255))
    source = corpus["phone_portrait_90"]
    spec = RenderSpec("mp4", "720p", WatermarkSpec(png, position="bottom_right"))
    path = media_dir / "preview.png"
    path.write_bytes(render_preview(source, probe(source), spec))
    with av.open(str(path)) as container:
        picture = next(container.decode(video=0)).to_ndarray(format="rgb24")
    assert picture.shape == (1280, 720, 3)
    assert marker_corner(picture) == "top_left"
    assert blue_box(picture) == PORTRAIT_BOTTOM_RIGHT  # the preview is exact: no codec noise


@pytest.mark.slow
def test_the_review_pages_first_frame_is_frame_0_upright_without_the_watermark(corpus, media_dir):
    source = corpus["phone_portrait_90"]
    path = media_dir / "first.png"
    path.write_bytes(render_preview(source, probe(source), RenderSpec("mp4", "720p"), at=0.0))
    with av.open(str(path)) as container:
        picture = next(container.decode(video=0)).to_ndarray(format="rgb24")
    assert picture.shape == (1280, 720, 3) and marker_corner(picture) == "top_left"
    scaled = picture[:: 1280 // 320, :: 720 // 180].astype(int)  # back at the source's size as shown, 180x320

    def distance(index: int) -> float:
        return float(np.abs(scaled - shown_picture(index, 180, 320)).mean())

    assert distance(0) < distance(FRAMES // 3) / 2  # frame 0, not the preview's frame a third in (its bar moved)


@pytest.mark.slow
def test_preview_of_an_interlaced_source_is_its_frame(corpus, media_dir):
    source = corpus["interlaced_tff"]
    path = media_dir / "interlaced_preview.png"
    path.write_bytes(render_preview(source, probe(source), RenderSpec("mp4", "720p")))
    with av.open(str(path)) as container:
        picture = next(container.decode(video=0)).to_ndarray(format="rgb24")
    assert picture.shape == (720, 1280, 3) and marker_corner(picture) == "top_left"


# --- truncated and empty files -------------------------------------------------------------------------------


@pytest.mark.slow
def test_truncated_file_is_called_truncated_or_corrupt(media_dir):
    whole = make_clip(str(media_dir / "whole.mp4"), seconds=3.0)  # > 60 kB, its index at the end
    cut = make_truncated(str(media_dir / "cut.mp4"), whole, keep=60_000)
    with pytest.raises(UnsupportedMedia) as caught:
        probe(cut)
    assert caught.value.reason.startswith("file is truncated or corrupt"), caught.value.reason


@pytest.mark.slow
def test_zero_byte_file_is_called_empty(media_dir):
    with pytest.raises(UnsupportedMedia) as caught:
        probe(make_empty(str(media_dir / "empty.mp4")))
    assert caught.value.reason == "file is empty"
