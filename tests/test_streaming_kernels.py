"""A streaming ladder made in the render's segments and packaged as HLS and DASH (render_kernels.ladder, .streaming).

The source is cut into chunks the way a render cuts it, each chunk encoded once with every rung beside the
progressive picture, and the chunks packaged: players' readers (libavformat's HLS demuxer, the ffmpeg CLI's DASH
demuxer, the `m3u8` parser) must see every rung frame-exact and every rule of RFC 8216 the playlists promise.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import av
import m3u8
import numpy as np
import pytest
from PIL import Image

from mcp_protocol import streams as wire_streams
from render_kernels import storyboard
from render_kernels.audio import encode_audio
from render_kernels.ladder import DEFAULT_RUNGS, RUNGS, LadderSpec
from render_kernels.plan import plan_segments
from render_kernels.probe import probe
from render_kernels.spec import RenderSpec
from render_kernels.storyboard import (
    ANIMATED_PREVIEW,
    PREVIEW_FPS,
    PREVIEW_MAX_S,
    PREVIEW_WIDTH,
    STORYBOARD_SPRITE,
    STORYBOARD_TILE_WIDTH,
    STORYBOARD_VTT,
    with_pictures,
)
from render_kernels.streaming import DASH_MANIFEST, MASTER_PLAYLIST, package_stream
from render_kernels.video import encode_segment
from tests.media import make_clip

pytestmark = pytest.mark.slow  # the module's render encodes three pictures a frame for seconds

FPS = 24
SEGMENT_S = 1.0
LADDER = LadderSpec(("720p", "360p"), segment_s=SEGMENT_S)
MPD_NS = {"mpd": "urn:mpeg:dash:schema:mpd:2011"}


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    """A 5.5 s 640x360 clip with a tone, keyframes every 36 frames (not on the ladder's), rendered at 720p in the
    chunks a two-worker render cuts it into, and packaged."""
    root = tmp_path_factory.mktemp("stream")
    source = make_clip(str(root / "source.mp4"), seconds=5.5, width=640, height=360, fps=FPS, gop=36)
    info = probe(source)
    interval = LADDER.keyframe_interval(info.fps)
    chunks = plan_segments(info, 2, min_segment_s=2, cut_multiple=interval)
    encoded = [encode_segment(source, chunk, RenderSpec("mp4", "720p"), info, ladder=LADDER) for chunk in chunks]
    audio = encode_audio(source, "mp4")
    package = package_stream(iter(encoded), audio, LADDER, info.fps, str(root / "out"))
    return source, info, chunks, package


def frames_of(path: str) -> list[int]:
    with av.open(path) as container:
        return [frame.pts for frame in container.decode(video=0)]


def test_chunks_are_cut_on_the_ladders_keyframes(stream):
    _, info, chunks, _ = stream
    interval = LADDER.keyframe_interval(info.fps)
    assert len(chunks) == 2, chunks
    assert all(chunk.start_frame % interval == 0 for chunk in chunks)
    assert sum(chunk.frame_count for chunk in chunks) == info.frame_count


def test_every_rung_plays_frame_exact_through_its_playlist(stream):
    source, info, _, package = stream
    out = Path(package.directory)
    for rendition, (width, height) in zip(package.renditions, LADDER.sizes(info), strict=False):
        with av.open(str(out / rendition.playlist)) as container:
            video = container.streams.video[0]
            assert (video.width, video.height) == (width, height)
            pts = [frame.pts for frame in container.decode(video)]
        assert len(pts) == info.frame_count  # no frame lost or repeated at a chunk's or a segment's join
        steps = {b - a for a, b in zip(pts, pts[1:], strict=False)}
        assert len(steps) == 1, steps  # one frame's duration apart, every one
    with av.open(str(out / MASTER_PLAYLIST)) as container:  # the master names every rendition
        assert sorted((s.width, s.height) for s in container.streams.video) == sorted(LADDER.sizes(info))
        assert len(container.streams.audio) == 1


def test_the_audio_rendition_is_sample_exact(stream):
    source, _, _, package = stream
    audio = next(r for r in package.renditions if r.name == "audio")

    def samples(path: str) -> int:
        with av.open(path) as container:
            return sum(frame.samples for frame in container.decode(audio=0))

    assert samples(str(Path(package.directory) / audio.playlist)) == samples(source)


def test_the_playlists_follow_rfc_8216(stream):
    _, info, _, package = stream
    out = Path(package.directory)
    master = m3u8.load(str(out / MASTER_PLAYLIST))
    assert master.is_variant and master.is_independent_segments
    (audio_media,) = master.media
    assert audio_media.type == "AUDIO" and audio_media.uri == "audio.m3u8"
    audio = next(r for r in package.renditions if r.name == "audio")
    frame_s = 1 / info.fps
    for variant, rung, (width, height) in zip(master.playlists, LADDER.rungs, LADDER.sizes(info), strict=True):
        stream_info = variant.stream_info
        rendition = next(r for r in package.renditions if r.name == rung)
        assert variant.uri == f"{rung}.m3u8"
        assert stream_info.resolution == (width, height)
        assert stream_info.frame_rate == pytest.approx(info.fps, abs=0.001)
        codecs = stream_info.codecs.split(",")
        assert codecs[0].startswith("avc1.") and codecs[1] == "mp4a.40.2"
        assert stream_info.audio == audio_media.group_id
        # Measured from the bytes written: the peak segment rate, and the whole rendition's average.
        assert stream_info.bandwidth == rendition.bandwidth_bps + audio.bandwidth_bps
        assert stream_info.average_bandwidth == rendition.average_bandwidth_bps + audio.average_bandwidth_bps
        assert 0 < stream_info.average_bandwidth <= stream_info.bandwidth
        media = m3u8.load(str(out / variant.uri))
        assert media.playlist_type == "vod" and media.is_endlist and media.is_independent_segments
        durations = [segment.duration for segment in media.segments]
        assert media.target_duration == max(round(d) for d in durations)  # RFC 8216 4.3.3.1
        assert all(abs(d - SEGMENT_S) <= frame_s for d in durations[:-1]), durations
        assert sum(durations) == pytest.approx(info.frame_count / info.fps, abs=frame_s / 2)
        assert {segment.init_section.uri for segment in media.segments} == {f"init-{LADDER.rungs.index(rung)}.mp4"}
        sizes = [(out / segment.uri).stat().st_size for segment in media.segments]
        assert rendition.bandwidth_bps == max(math.ceil(size * 8 / d) for size, d in zip(sizes, durations, strict=True))
    listed = {segment.uri for variant in master.playlists for segment in m3u8.load(str(out / variant.uri)).segments}
    assert all("/" not in uri and ":" not in uri for uri in listed)  # relative: one signed directory covers them


def test_the_dash_manifest_names_the_same_segments(stream):
    _, info, _, package = stream
    out = Path(package.directory)
    root = ET.parse(out / DASH_MANIFEST).getroot()
    assert root.attrib["type"] == "static"
    hls_files = set()
    for rendition in package.renditions:
        hls_files |= {segment.uri for segment in m3u8.load(str(out / rendition.playlist)).segments}
    dash_files = set()
    for representation in root.iterfind(".//mpd:Representation", MPD_NS):
        template = representation.find("mpd:SegmentTemplate", MPD_NS)
        media = template.attrib["media"].replace("$RepresentationID$", representation.attrib["id"])
        number = int(template.attrib["startNumber"])
        while (out / (name := media.replace("$Number%05d$", f"{number:05d}"))).exists():
            dash_files.add(name)
            number += 1
    assert dash_files == hls_files
    assert set(package.files) == {p.name for p in out.iterdir()}


@pytest.mark.parametrize("manifest", [MASTER_PLAYLIST, DASH_MANIFEST])
def test_the_ffmpeg_cli_reads_the_stream(stream, manifest):
    """Debian's ffmpeg (.ci/run installs it): a reader of both manifests that no one here wrote."""
    _, info, _, package = stream
    for index in range(len(LADDER.rungs)):
        done = subprocess.run(
            ["ffmpeg", "-v", "quiet", "-i", manifest, "-map", f"0:v:{index}", "-f", "framemd5", "-"],
            cwd=package.directory,
            capture_output=True,
            text=True,
            timeout=120,
        )
        frames = [line for line in done.stdout.splitlines() if line and not line.startswith("#")]
        assert len(frames) == info.frame_count, (manifest, index, done.stderr[-2000:])


@pytest.mark.parametrize(
    "rungs, segment_s, fault",
    [
        (("720p", "240p"), 4.0, "rungs must be among"),
        (("360p", "720p"), 4.0, "highest first"),
        (("720p", "720p"), 4.0, "distinct"),
        ((), 4.0, "at least one rung"),
        (("720p",), 0.0, "segment_s must be within"),
        (("720p",), 60.0, "segment_s must be within"),
    ],
)
def test_a_ladder_names_what_is_wrong_with_it(rungs, segment_s, fault):
    with pytest.raises(ValueError, match=fault):
        LadderSpec(rungs, segment_s)


def test_the_default_ladder_and_rung_sizes_follow_the_progressive_rule(stream):
    _, info, _, _ = stream
    assert LadderSpec(DEFAULT_RUNGS).sizes(info) == [(1920, 1080), (1280, 720), (854, 480), (640, 360)]
    assert list(DEFAULT_RUNGS) == [name for name in RUNGS if name in DEFAULT_RUNGS]
    assert LadderSpec(("720p",)).sizes(info) == [RenderSpec("mp4", "720p").output_size(info)]


def test_packaging_refuses_a_chunk_between_keyframes_and_audio_that_is_not_aac(stream, tmp_path):
    source, info, chunks, _ = stream
    one = encode_segment(source, replace(chunks[0], frame_count=30), RenderSpec("mp4", "720p"), info, ladder=LADDER)
    rest = replace(one, index=1)
    with pytest.raises(ValueError, match="between two of the ladder's keyframes"):
        package_stream(iter([one, rest]), None, LADDER, info.fps, str(tmp_path / "cut"))
    opus = encode_audio(source, "webm")
    with pytest.raises(ValueError, match="AAC"):
        package_stream(iter([one]), opus, LADDER, info.fps, str(tmp_path / "opus"))
    assert Fraction(info.fps).limit_denominator() == FPS


def test_a_rung_a_little_off_the_pictures_shape_shows_at_it_and_is_packaged(stream, tmp_path):
    """854x480 of a 16:9 picture: its pixels declare the shape back (1280:1281), and the DASH manifest gives it
    a set of its own, since the muxer takes every stream's pixels as square (HLS players switch to it as to any)."""
    source, info, chunks, _ = stream
    ladder = LadderSpec(("720p", "480p"), segment_s=SEGMENT_S)
    one = replace(chunks[0], frame_count=2 * FPS)
    encoded = encode_segment(source, one, RenderSpec("mp4", "720p"), info, ladder=ladder)
    package = package_stream(iter([encoded]), None, ladder, info.fps, str(tmp_path / "out"))
    out = Path(package.directory)
    first = m3u8.load(str(out / "480p.m3u8")).segments[0]
    (tmp_path / "480p.mp4").write_bytes((out / first.init_section.uri).read_bytes() + (out / first.uri).read_bytes())
    shown = subprocess.run(
        ["ffprobe", "-v", "error", "-show_entries", "stream=width,height,sample_aspect_ratio,display_aspect_ratio"]
        + ["-of", "compact=p=0:nk=1", str(tmp_path / "480p.mp4")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.stdout.strip() == "854|480|1280:1281|16:9", shown.stderr  # 854 x 1280/1281 : 480 is 16:9 exactly
    root = ET.parse(Path(package.directory) / DASH_MANIFEST).getroot()
    sets = [
        [r.attrib["width"] for r in a.iterfind("mpd:Representation", MPD_NS)]
        for a in root.iterfind(".//mpd:AdaptationSet", MPD_NS)
    ]
    assert sets == [["1280"], ["854"]]
    assert [variant.uri for variant in m3u8.load(str(Path(package.directory) / MASTER_PLAYLIST)).playlists] == [
        "720p.m3u8",
        "480p.m3u8",
    ]


def test_every_file_the_packager_writes_is_a_resource_the_wire_serves(stream):
    """The wire cannot import the kernels: its entry-point names and its file-name rule are checked against what the
    packager writes."""
    _, _, _, package = stream
    assert (wire_streams.MASTER_PLAYLIST, wire_streams.DASH_MANIFEST) == (MASTER_PLAYLIST, DASH_MANIFEST)
    assert (wire_streams.STORYBOARD, wire_streams.ANIMATED_PREVIEW) == (STORYBOARD_VTT, ANIMATED_PREVIEW)
    for name in package.files:
        assert wire_streams.STREAM_FILE_URI.fullmatch(wire_streams.stream_file_uri("task_x", name)), name


@pytest.fixture(scope="module")
def pictured(stream, tmp_path_factory):
    """The stream, copied, with its storyboard and preview."""
    _, _, _, package = stream
    copy = tmp_path_factory.mktemp("pictured") / "out"
    shutil.copytree(package.directory, copy)
    return with_pictures(replace(package, directory=str(copy)))


def source_pictures(source: str, size: tuple[int, int]) -> list[tuple[float, np.ndarray]]:
    """Every picture of `source` with its time, scaled to `size`, as int16 RGB."""
    with av.open(source) as container:
        return [
            (float(frame.time), np.asarray(frame.to_image().resize(size, Image.Resampling.BOX), dtype=np.int16))
            for frame in container.decode(video=0)
        ]


def nearest_time(picture: Image.Image, candidates: list[tuple[float, np.ndarray]]) -> float:
    """The time of the source picture `picture` looks most like."""
    pixels = np.asarray(picture.convert("RGB"), dtype=np.int16)
    return min(candidates, key=lambda candidate: float(np.abs(candidate[1] - pixels).mean()))[0]


def vtt_cues(path: Path) -> list[tuple[float, float, str]]:
    def seconds(stamp: str) -> float:
        hours, minutes, rest = stamp.split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(rest)

    lines = path.read_text().splitlines()
    assert lines[0] == "WEBVTT"
    cues = []
    for index, line in enumerate(lines):
        if " --> " in line:
            start, end = line.split(" --> ")
            cues.append((seconds(start), seconds(end), lines[index + 1]))
    return cues


def test_the_storyboard_maps_each_segment_to_its_first_picture(stream, pictured):
    source = stream[0]
    directory = Path(pictured.directory)
    segments = m3u8.load(str(directory / "360p.m3u8")).segments  # the smallest rung's
    cues = vtt_cues(directory / STORYBOARD_VTT)
    assert len(cues) == len(segments)
    start = 0.0
    for (begin, end, _), segment in zip(cues, segments, strict=True):
        assert begin == pytest.approx(start, abs=0.001) and end == pytest.approx(start + segment.duration, abs=0.001)
        start += segment.duration
    sprite = Image.open(directory / STORYBOARD_SPRITE)
    tile = (STORYBOARD_TILE_WIDTH, STORYBOARD_TILE_WIDTH * 9 // 16)
    assert sprite.format == "JPEG" and sprite.size == (len(cues) * tile[0], tile[1])  # one row of six
    candidates = source_pictures(source, tile)
    for begin, _, target in cues:
        name, fragment = target.split("#xywh=")
        x, y, w, h = map(int, fragment.split(","))
        assert name == STORYBOARD_SPRITE and (w, h) == tile
        shown = nearest_time(sprite.crop((x, y, x + w, y + h)), candidates)
        assert shown == pytest.approx(begin, abs=0.5 / FPS), (target, shown)


def test_past_the_tile_limit_every_nth_segment_has_a_tile_whose_cue_covers_the_ones_between(
    pictured, tmp_path, monkeypatch
):
    monkeypatch.setattr(storyboard, "STORYBOARD_MAX_TILES", 4)  # six segments: every second one
    copy = tmp_path / "out"
    shutil.copytree(pictured.directory, copy)
    storyboard.write_storyboard(str(copy / "360p.m3u8"))
    segments = m3u8.load(str(copy / "360p.m3u8")).segments
    ends = np.cumsum([segment.duration for segment in segments])
    cues = vtt_cues(copy / STORYBOARD_VTT)
    bounds = [bound for begin, end, _ in cues for bound in (begin, end)]
    assert bounds == pytest.approx([0, ends[1], ends[1], ends[3], ends[3], ends[5]], abs=0.001)
    assert Image.open(copy / STORYBOARD_SPRITE).size == (3 * STORYBOARD_TILE_WIDTH, STORYBOARD_TILE_WIDTH * 9 // 16)


def test_the_preview_loops_the_first_seconds_at_its_width(stream, pictured):
    source = stream[0]
    preview = Image.open(Path(pictured.directory) / ANIMATED_PREVIEW)
    size = (PREVIEW_WIDTH, PREVIEW_WIDTH * 9 // 16)
    assert preview.format == "WEBP" and preview.is_animated and preview.size == size
    assert preview.n_frames == PREVIEW_MAX_S * PREVIEW_FPS and preview.info["loop"] == 0
    candidates = source_pictures(source, size)
    for number in (0, preview.n_frames // 2, preview.n_frames - 1):
        preview.seek(number)
        preview.load()  # a frame's duration is read with its picture
        assert preview.info["duration"] == 1000 / PREVIEW_FPS
        assert nearest_time(preview, candidates) == pytest.approx(number / PREVIEW_FPS, abs=1 / FPS), number


def test_the_pictures_are_listed_before_the_master_and_served_by_the_wire(pictured):
    assert pictured.files[-1] == MASTER_PLAYLIST
    for name in (STORYBOARD_SPRITE, STORYBOARD_VTT, ANIMATED_PREVIEW):
        assert name in pictured.files
        assert (Path(pictured.directory) / name).stat().st_size > 0
        assert wire_streams.STREAM_FILE_URI.fullmatch(wire_streams.stream_file_uri("task_x", name)), name
