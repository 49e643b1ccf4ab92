"""Quality control in the render kernels (render_kernels/qc): defects found at their times across segment cuts,
loudness and PSNR against reference meters, the contact sheet, inspection of an existing file, and a render's bytes
left as they are. Small clips (320x180 sources, 6 s at 30 fps): the fast lane."""

from __future__ import annotations

import dataclasses
import io
from itertools import islice

import av
import numpy as np
import pytest
from PIL import Image

from render_kernels._frames import frames_from, open_video
from render_kernels.audio import encode_audio
from render_kernels.compose import FramePipeline
from render_kernels.errors import UnsupportedMedia
from render_kernels.plan import Segment, keyframe_at_or_before
from render_kernels.probe import probe
from render_kernels.qc._fidelity import DECODERS
from render_kernels.qc.findings import (
    PSNR_CAP_DB,
    AudioQc,
    FidelitySample,
    FrameRun,
    Interval,
    QcRequest,
    QcThresholds,
    SegmentQc,
    Thumbnail,
)
from render_kernels.qc.inspect import inspect_video
from render_kernels.qc.merge import merge_qc
from render_kernels.qc.sheet import SHEET_MAX_BYTES, SHEET_MAX_WIDTH, contact_sheet, make_tile
from render_kernels.source_info import SourceInfo
from render_kernels.spec import RenderSpec, WatermarkSpec
from render_kernels.video import encode_segment
from tests.defect_media import make_audio_only, make_defect_clip
from tests.media import make_watermark_png, psnr_y

FPS = 30
SECONDS = 6.0
FRAME_S = 1 / FPS
AUDIO_TOLERANCE_S = 0.05
# The defects, each cut by a segment boundary (CUTS): black over the cut at 2.0 s, frozen over the one at ~4.17 s.
BLACK = (1.5, 2.5)
FROZEN = (3.5, 5.0)
SILENT = (0.5, 2.0)
CLIPPING = (4.0, 5.0)
CUTS = (0, 60, 125, 180)  # frames: 60 is on a keyframe, 125 is five frames past one (a lead-in)
THRESHOLDS = QcThresholds()


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("qc")


@pytest.fixture(scope="module")
def defect_clip(media_dir):
    return make_defect_clip(
        str(media_dir / "defects.mp4"), SECONDS, FPS, black=BLACK, frozen=FROZEN, silent=SILENT, clipping=CLIPPING
    )


@pytest.fixture(scope="module")
def clean_clip(media_dir):
    return make_defect_clip(str(media_dir / "clean.mp4"), SECONDS, FPS)


@pytest.fixture(scope="module")
def watermarked(media_dir):
    """720p mp4 with an opaque watermark: it lies over the black stretch, which must still be found."""
    logo = make_watermark_png(str(media_dir / "logo.png"), w=64, h=32, rgba=(255, 255, 255, 255))
    return RenderSpec("mp4", "720p", watermark=WatermarkSpec(logo), segment_threads=1)


def cut(info: SourceInfo, starts: tuple[int, ...]) -> list[Segment]:
    """Segments from the frames `starts` (and the source's end), each read from the keyframe at or before it."""
    segments = []
    for index, (start, end) in enumerate(zip(starts, starts[1:])):
        keyframe, keyframe_s = keyframe_at_or_before(info.keyframes(), start)
        segments.append(Segment(index, start, end - start, keyframe_s, start - keyframe))
    return segments


def render_qc(source: str, spec: RenderSpec, starts: tuple[int, ...] = CUTS, tiles: int = 6):
    info = probe(source)
    request = QcRequest.evenly(info.frame_count, info.fps, tiles, THRESHOLDS)
    segments = [encode_segment(source, segment, spec, info, qc=request) for segment in cut(info, starts)]
    audio = encode_audio(source, spec.output_format, qc=THRESHOLDS)
    assert audio is not None and audio.qc is not None and all(s.qc is not None for s in segments)
    return info, segments, audio


@pytest.fixture(scope="module")
def defect_render(defect_clip, watermarked):
    return render_qc(defect_clip, watermarked)


def assert_interval(found: dict, expected: tuple[float, float], tolerance: float) -> None:
    assert abs(found["start_s"] - expected[0]) <= tolerance + 1e-9, (found, expected)
    assert abs(found["end_s"] - expected[1]) <= tolerance + 1e-9, (found, expected)


def test_defects_are_found_at_their_times_as_one_interval_across_cuts(defect_render):
    info, segments, audio = defect_render
    # The cuts do fall inside the defects: each of the two defects is split between two segments' own runs.
    assert [len(s.qc.black) for s in segments] == [1, 1, 0]
    assert [bool(s.qc.frozen) for s in segments[1:]] == [True, True]

    report = merge_qc([s.qc for s in segments], audio.qc, info.fps, THRESHOLDS).to_json()

    (black,) = report["black"]
    assert_interval(black, BLACK, FRAME_S)
    (frozen,) = report["frozen"]  # the black stretch, a still picture too, is reported once: as black
    assert_interval(frozen, FROZEN, FRAME_S)
    (silent,) = report["silent"]
    assert_interval(silent, SILENT, AUDIO_TOLERANCE_S)
    assert report["clipped_samples"] > 0
    assert report["loudness"]["true_peak_dbtp"] > 0
    assert report["verdict"] == "warn"
    assert report["frames"] == {"source": 180, "output": 180}
    reasons = report["reasons"]
    assert "black for 1.0 s at 0:01.5" in reasons
    assert "frozen for 1.5 s at 0:03.5" in reasons
    assert "silent for 1.5 s at 0:00.5" in reasons
    assert f"{report['clipped_samples']} clipped audio samples" in reasons
    assert any(reason.startswith("true peak +") and reason.endswith(" dBTP: clips") for reason in reasons)
    assert len(reasons) == 5
    # Fidelity: against the encoder's input (the watermark included), at least one sample a second.
    assert report["fidelity"]["frames_compared"] >= SECONDS
    assert report["fidelity"]["psnr_y_db"] > THRESHOLDS.psnr_warn_db


def test_report_json_has_exactly_the_documented_shape(defect_render):
    info, segments, audio = defect_render
    report = merge_qc([s.qc for s in segments], audio.qc, info.fps, THRESHOLDS).to_json()
    assert list(report) == [
        "verdict",
        "reasons",
        "black",
        "frozen",
        "silent",
        "loudness",
        "clipped_samples",
        "fidelity",
        "frames",
    ]
    assert set(report["loudness"]) == {"integrated_lufs", "range_lu", "true_peak_dbtp"}
    assert set(report["fidelity"]) == {"psnr_y_db", "ssim", "frames_compared"}
    assert all(set(i) == {"start_s", "end_s"} for kind in ("black", "frozen", "silent") for i in report[kind])
    assert round(report["black"][0]["start_s"], 3) == report["black"][0]["start_s"]
    assert merge_qc([s.qc for s in segments], None, info.fps, THRESHOLDS).to_json()["loudness"] is None


def test_clean_control_passes_with_no_reasons(clean_clip):
    info, segments, audio = render_qc(clean_clip, RenderSpec("mp4", "720p", segment_threads=1), (0, 90, 180))
    report = merge_qc([s.qc for s in segments], audio.qc, info.fps, THRESHOLDS)
    assert (report.verdict, report.reasons) == ("pass", ())
    assert report.to_json()["fidelity"]["frames_compared"] == 6
    assert report.clipped_samples == 0 and report.events == ()


def test_qc_leaves_the_encoded_bytes_as_they_are(defect_clip, defect_render, watermarked):
    info, segments, _ = defect_render
    segment = cut(info, CUTS)[1]  # a segment with a black and a frozen run, under the watermark
    plain = encode_segment(defect_clip, segment, watermarked, info)
    assert plain.qc is None
    assert plain.packets == segments[1].packets and plain.pts == segments[1].pts


def test_integrated_loudness_matches_a_reference_bs1770_meter(clean_clip):
    # Imported here: it loads SciPy's signal package (1 CPU-s), which every pytest process would pay at collection.
    import pyloudnorm

    audio = encode_audio(clean_clip, "mp4", qc=THRESHOLDS)
    assert audio is not None and audio.qc is not None
    with av.open(clean_clip) as container:  # the samples the encoder got: 48 kHz stereo float, as decoded
        samples = np.concatenate([frame.to_ndarray() for frame in container.decode(audio=0)], axis=1)
    reference = pyloudnorm.Meter(48000).integrated_loudness(samples.T.astype(np.float64))
    assert abs(audio.qc.integrated_lufs - reference) <= 0.5, (audio.qc.integrated_lufs, reference)
    assert -12 < reference < -10.5  # a 0.3-peak tone on both channels: about -11.2 LUFS
    assert audio.qc.true_peak_dbtp < THRESHOLDS.true_peak_max_dbtp


@pytest.mark.parametrize("output_format", ["mp4", "webm"])
def test_psnr_matches_the_frames_decoded_and_compared_whole(clean_clip, output_format):
    """The sampled frames, decoded from the segment's own packets with the others skipped, give the PSNR-Y that
    decoding every packet and comparing with the scaled source gives (numpy's, as ffmpeg's psnr filter counts)."""
    info = probe(clean_clip)
    spec = RenderSpec(output_format, "720p", segment_threads=1)
    (segment,) = cut(info, (0, 60))
    request = QcRequest(fidelity_frames=frozenset({0, 7, 31, 59}))
    encoded = encode_segment(clean_clip, segment, spec, info, qc=request)
    assert encoded.qc is not None
    decoder = av.CodecContext.create(DECODERS[encoded.codec], "r")
    decoder.extradata = encoded.extradata
    outputs = {}
    for data, pts, dts in zip(encoded.packets, encoded.pts, encoded.dts):
        packet = av.Packet(data)
        packet.pts, packet.dts = pts, dts
        outputs.update((frame.pts, frame.to_ndarray()[:720]) for frame in decoder.decode(packet))
    outputs.update((frame.pts, frame.to_ndarray()[:720]) for frame in decoder.decode(None))
    with open_video(clean_clip) as (container, stream):
        pipeline = FramePipeline.for_source(info, 1280, 720, None, stream.codec_context.colorspace)
        sources = [p.to_ndarray()[:720] for p in pipeline.pictures(islice(frames_from(container, stream, info, 0), 60))]
    assert [s.frame for s in encoded.qc.fidelity] == [0, 7, 31, 59]
    for sample in encoded.qc.fidelity:
        expected = min(psnr_y(outputs[sample.frame], sources[sample.frame]), PSNR_CAP_DB)
        assert abs(sample.psnr_y_db - expected) <= 0.1, (sample, expected)
        assert 0.9 < sample.ssim <= 1.0


def test_contact_sheet_fits_its_limits(defect_render):
    info, segments, audio = defect_render
    qcs = [s.qc for s in segments]
    report = merge_qc(qcs, audio.qc, info.fps, THRESHOLDS)
    sheet = contact_sheet(qcs, report)
    with Image.open(io.BytesIO(sheet)) as image:
        assert image.format == "JPEG" and image.width <= SHEET_MAX_WIDTH
        tile_height = image.width // 5 * 9 // 16
        assert image.height >= 2 * tile_height  # six evenly spaced tiles and the two events: two rows
    assert len(sheet) <= SHEET_MAX_BYTES


def test_every_event_has_a_tile_a_silence_the_nearest(media_dir):
    """Five evenly spaced tiles fill one row; a black event's own tile and a silence's (the evenly spaced tile
    nearest its start: no segment sees sound) make a second."""
    picture = av.VideoFrame.from_ndarray(np.zeros((180 * 3 // 2, 320), np.uint8), format="yuv420p")
    tiles = tuple(make_tile(picture, i * 30, float(i), 256, 1) for i in range(5))
    quiet = AudioQc(5.0, (Interval(2.0, 3.5),), 0, -20.0, 1.0, -12.0)
    plain = dataclasses.replace(_segment(0, 150), tiles=tiles)
    one_row = Image.open(io.BytesIO(contact_sheet([plain], merge_qc([plain], None, 30.0, THRESHOLDS))))
    two_rows = Image.open(io.BytesIO(contact_sheet([plain], merge_qc([plain], quiet, 30.0, THRESHOLDS))))
    assert two_rows.width == one_row.width and two_rows.height > 1.9 * one_row.height


def test_contact_sheet_of_sixty_4k_tiles_fits(media_dir):
    rng = np.random.default_rng(1)
    noise = rng.integers(0, 256, (2160 * 3 // 2, 3840), dtype=np.uint8)  # yuv420p: the hardest picture to compress
    tiles = []
    for i in range(60):
        picture = av.VideoFrame.from_ndarray(np.roll(noise, i * 97, axis=1), format="yuv420p")
        tiles.append(make_tile(picture, i * 30, i * 1.0, 256, 1))
    qc = dataclasses.replace(_segment(0, 1800), tiles=tuple(tiles))
    sheet = contact_sheet([qc], merge_qc([qc], None, 30.0, THRESHOLDS))
    assert len(sheet) <= SHEET_MAX_BYTES
    with Image.open(io.BytesIO(sheet)) as image:
        assert image.format == "JPEG" and image.width <= SHEET_MAX_WIDTH


def test_inspect_finds_the_same_events(defect_clip):
    info = probe(defect_clip)
    report, sheet = inspect_video(defect_clip, info, THRESHOLDS, tiles=8)
    found = report.to_json()
    (black,) = found["black"]
    assert_interval(black, BLACK, FRAME_S)
    (frozen,) = found["frozen"]
    assert_interval(frozen, FROZEN, FRAME_S)
    (silent,) = found["silent"]
    assert_interval(silent, SILENT, AUDIO_TOLERANCE_S)
    assert found["fidelity"] is None
    assert found["frames"] == {"source": 180, "output": 180}
    assert found["clipped_samples"] > 0 and found["verdict"] == "warn"
    assert sheet[:2] == b"\xff\xd8" and len(sheet) <= SHEET_MAX_BYTES


def test_inspect_refuses_a_file_without_video(media_dir):
    path = make_audio_only(str(media_dir / "tone.m4a"))
    info = SourceInfo(path, 2.0, 30.0, 60, 320, 180, "h264", (), None)
    with pytest.raises(UnsupportedMedia, match="no video stream"):
        inspect_video(path, info, THRESHOLDS)


def _thumbnail(level: int = 0) -> Thumbnail:
    return Thumbnail(2, 2, bytes([level]) * 6)


DARK, BRIGHT = _thumbnail(0), _thumbnail(200)


def _segment(
    start: int,
    frames: int,
    output: int | None = None,
    black: tuple[FrameRun, ...] = (),
    frozen: tuple[FrameRun, ...] = (),
    first: Thumbnail = DARK,
    end_reference: Thumbnail = BRIGHT,
    end_reference_frame: int | None = None,
    fidelity: tuple[FidelitySample, ...] = (),
) -> SegmentQc:
    """A segment's findings by hand: by default no run, and a last picture unlike the next segment's first."""
    return SegmentQc(
        start_frame=start,
        source_frames=frames,
        output_frames=frames if output is None else output,
        black=black,
        frozen=frozen,
        first_picture=first,
        end_reference=end_reference,
        end_reference_frame=start + frames - 1 if end_reference_frame is None else end_reference_frame,
        fidelity=fidelity,
    )


def test_merge_joins_a_freeze_over_a_cut_that_starts_on_the_last_frame():
    """The last frame of one segment moves (no run of its own), and the next segment starts with its picture for
    40 frames: one frozen run from that last frame."""
    still = _thumbnail(90)
    first = _segment(0, 50, end_reference=still, end_reference_frame=49)
    second = _segment(50, 50, first=still, frozen=(FrameRun(50, 89),))
    report = merge_qc([second, first], None, 10.0, THRESHOLDS)
    assert report.intervals("frozen") == [Interval(4.9, 8.9)]
    assert report.reasons == ("frozen for 4.0 s at 0:04.9",)
    other = dataclasses.replace(second, first_picture=_thumbnail(120))
    assert merge_qc([first, other], None, 10.0, THRESHOLDS).intervals("frozen") == [Interval(5.0, 8.9)]


def test_merge_holds_runs_to_their_minimum_only_after_joining():
    halves = [_segment(0, 30, black=(FrameRun(26, 30),)), _segment(30, 30, black=(FrameRun(30, 34),))]
    assert merge_qc(halves, None, 10.0, THRESHOLDS).intervals("black") == [Interval(2.6, 3.4)]
    assert merge_qc(halves[:1], None, 10.0, THRESHOLDS).intervals("black") == []


def test_merge_verdicts():
    ok = (FidelitySample(0, 35.0, 0.95), FidelitySample(30, PSNR_CAP_DB, 1.0))
    clean = merge_qc([_segment(0, 60, fidelity=ok)], None, 30.0, THRESHOLDS)
    assert (clean.verdict, clean.fidelity.psnr_y_db) == ("pass", 67.5)

    blurred = merge_qc([_segment(0, 60, fidelity=(FidelitySample(0, 25.04, 0.8),))], None, 30.0, THRESHOLDS)
    assert (blurred.verdict, blurred.reasons) == ("warn", ("PSNR-Y 25.0 dB: the output differs from its source",))
    wrecked = merge_qc([_segment(0, 60, fidelity=(FidelitySample(0, 18.2, 0.5),))], None, 30.0, THRESHOLDS)
    assert (wrecked.verdict, wrecked.reasons) == ("fail", ("PSNR-Y 18.2 dB: the output differs from its source",))

    short = merge_qc([_segment(0, 60, output=59)], None, 30.0, THRESHOLDS)
    assert (short.verdict, short.reasons) == ("fail", ("the output has 59 frames, its source 60",))

    dark = merge_qc([_segment(0, 60, black=(FrameRun(0, 30),))], None, 30.0, THRESHOLDS)
    assert dark.verdict == "fail"
    assert dark.reasons == ("black or frozen for 1.0 s of 2.0 s (50%)", "black for 1.0 s at 0:00.0")

    loud = AudioQc(2.0, (), 0, -9.0, 3.0, -0.6)
    assert merge_qc([_segment(0, 60)], loud, 30.0, THRESHOLDS).reasons == ("true peak -0.6 dBTP: above -1.0 dBTP",)
