"""Package a render's ladder as a stream: one set of CMAF segments that HLS and DASH players both read.

The segments and the DASH manifest are libavformat's `dash` muxer's, remuxed from the packets the segment tasks
encoded (nothing is encoded again). The HLS playlists are written with the `m3u8` library over the same files:
each segment's duration measured from the segment itself, each rendition's BANDWIDTH (its peak segment rate, with
the audio's) and AVERAGE-BANDWIDTH measured from the bytes written, its CODECS as the DASH muxer named them.
Every URI inside the playlists and the manifest is relative, so a signed link to the directory covers them all.
"""

from __future__ import annotations

import heapq
import io
import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import av
import m3u8

from .audio import EncodedAudio
from .ladder import LadderSpec, sample_aspects
from .mux import audio_track, decode_time, popped_first, segment_packets, video_stream_for
from .source_info import frame_rate
from .video import EncodedSegment

MASTER_PLAYLIST = "master.m3u8"
DASH_MANIFEST = "manifest.mpd"
AUDIO_GROUP = "audio"
_MPD_NS = {"mpd": "urn:mpeg:dash:schema:mpd:2011"}
HLS_VERSION = 7  # EXT-X-MAP in a playlist without I-frames only: fMP4 segments (RFC 8216, section 7)


@dataclass(frozen=True)
class Rendition:
    """One rendition of a stream: a rung (its frame size) or the audio (width and height 0)."""

    name: str  # the rung's name, or "audio"
    playlist: str  # its media playlist, relative to the stream's directory
    codecs: str  # RFC 6381, as in the DASH manifest
    width: int
    height: int
    bandwidth_bps: int  # peak: the highest rate of any one segment
    average_bandwidth_bps: int


@dataclass(frozen=True)
class StreamPackage:
    """A packaged stream: where its files are (a directory, or a store's key prefix once stored), the files (paths
    relative to it, the master playlist last) and its renditions, rungs first."""

    directory: str
    files: tuple[str, ...]
    renditions: tuple[Rendition, ...]


def package_stream(
    chunks: Iterable[EncodedSegment], audio: EncodedAudio | None, ladder: LadderSpec, fps: float, out_dir: str
) -> StreamPackage:
    """Write the ladder of `chunks` (the render's segments, in index order, each with its `rungs`) and `audio`
    (AAC, or None) to `out_dir` (made, and expected empty) as CMAF segments with `master.m3u8` and
    `manifest.mpd`.

    `chunks` is read once, one at a time, as mux_segments reads its segments. Every chunk must have every rung of
    `ladder`, and every chunk but the last a multiple of the ladder's keyframe interval of frames: segments are
    cut at those keyframes, `ladder.segment_s` long each (to within a frame) but the last.
    """
    if audio is not None and audio.codec != "aac":
        raise ValueError(f"a stream's audio is AAC, not {audio.codec!r}")
    rate = frame_rate(fps)
    interval = ladder.keyframe_interval(float(rate))
    os.makedirs(out_dir, exist_ok=True)
    pending = iter(chunks)
    first = next(pending, None)
    if first is None:
        raise ValueError("no segments to package")
    if len(first.rungs) != len(ladder.rungs):
        raise ValueError(f"the segments hold {len(first.rungs)} rungs, the ladder {len(ladder.rungs)}")
    sizes = [(rung.width, rung.height) for rung in first.rungs]
    # Floored to the muxer's microseconds, so that every keyframe is at or past the boundary it starts.
    segment_us = math.floor(interval * 1_000_000 / rate)
    options = {
        "seg_duration": f"{segment_us / 1_000_000:.6f}",
        "use_template": "1",
        "use_timeline": "0",
        "init_seg_name": "init-$RepresentationID$.mp4",
        "media_seg_name": "seg-$RepresentationID$-$Number%05d$.m4s",
        "adaptation_sets": _adaptation_sets(sizes, audio is not None),
    }
    with av.open(os.path.join(out_dir, DASH_MANIFEST), "w", format="dash", options=options) as container:
        videos = []
        for rung, aspect in zip(first.rungs, sample_aspects(sizes), strict=True):
            stream = video_stream_for(container, rung, rate)
            stream.codec_context.sample_aspect_ratio = aspect
            videos.append(stream)
        in_order = popped_first([first], pending)
        del first  # from here only the list in `in_order` holds it, until the packets are taken out
        tracks: list[Iterator[av.Packet[av.stream.Stream]]] = [_rung_packets(in_order, videos, interval)]
        if audio is not None:
            tracks.append(audio_track(container, audio))
        for packet in heapq.merge(*tracks, key=decode_time):
            container.mux(packet)
    return _write_playlists(out_dir, ladder, rate)


def _adaptation_sets(sizes: list[tuple[int, int]], has_audio: bool) -> str:
    """The dash muxer's `adaptation_sets`: the rungs of one exact shape together (a player switches between the
    rungs of one set), then the audio. The muxer takes every stream's pixels as square here (PyAV cannot give it a
    stream's sample aspect ratio), so a rung whose even sides are a little off the others' shape (854x480 beside
    1280x720) is a set of its own; HLS players switch between every rung."""
    shapes: dict[Fraction, list[str]] = {}
    for index, (width, height) in enumerate(sizes):
        shapes.setdefault(Fraction(width, height), []).append(str(index))
    sets = [",".join(streams) for streams in shapes.values()] + ([str(len(sizes))] if has_audio else [])
    return " ".join(f"id={number},streams={streams}" for number, streams in enumerate(sets))


def _rung_packets(
    chunks: Iterator[EncodedSegment], streams: list[av.VideoStream], interval: int
) -> Iterator[av.Packet[av.stream.Stream]]:
    """Every rung's packets, chunk after chunk, timed from the render's first frame and merged by decode time."""
    offset = 0
    for index, chunk in enumerate(chunks):
        if chunk.index != index:
            raise ValueError(f"segment {chunk.index} came where {index} belongs")
        if offset % interval:
            raise ValueError(f"segment {chunk.index} starts at frame {offset}, between two of the ladder's keyframes")
        rungs = [segment_packets(rung, stream, offset) for rung, stream in zip(chunk.rungs, streams, strict=True)]
        yield from heapq.merge(*rungs, key=decode_time)
        offset += chunk.frame_count
        del chunk, rungs  # before the next one is fetched: one chunk in memory at a time


@dataclass(frozen=True)
class _Representation:
    id: str
    codecs: str
    width: int
    height: int
    channels: str | None
    init: str
    media: str  # its SegmentTemplate's, with $Number%05d$ in it
    start_number: int


def _write_playlists(out_dir: str, ladder: LadderSpec, rate: Fraction) -> StreamPackage:
    """The HLS media and master playlists over the DASH muxer's segments, measured from the files."""
    representations = _representations(os.path.join(out_dir, DASH_MANIFEST))
    files = [DASH_MANIFEST]
    measured: list[tuple[_Representation, str, list[tuple[str, float, int]]]] = []
    for index, representation in enumerate(representations):
        name = ladder.rungs[index] if index < len(ladder.rungs) else AUDIO_GROUP
        segments = _segments(out_dir, representation)
        playlist = f"{name}.m3u8"
        _media_playlist(representation, segments).dump(os.path.join(out_dir, playlist))
        files += [playlist, representation.init, *(uri for uri, _, _ in segments)]
        measured.append((representation, name, segments))
    renditions = [_rendition(representation, name, segments) for representation, name, segments in measured]
    rungs = renditions[: len(ladder.rungs)]
    sound = renditions[len(ladder.rungs)] if len(renditions) > len(ladder.rungs) else None
    master = m3u8.M3U8()
    master.version = HLS_VERSION
    master.is_independent_segments = True
    if sound is not None:
        channels = representations[-1].channels
        master.add_media(
            m3u8.Media(
                uri=sound.playlist,
                type="AUDIO",
                group_id=AUDIO_GROUP,
                name="audio",
                default="YES",
                autoselect="YES",
                channels=channels,
            )
        )
    for rung in rungs:
        with_sound = [rung] if sound is None else [rung, sound]
        info: dict[str, object] = {  # a variant's bandwidth is its video's and its audio's (RFC 8216, 4.3.4.2)
            "bandwidth": sum(rendition.bandwidth_bps for rendition in with_sound),
            "average_bandwidth": sum(rendition.average_bandwidth_bps for rendition in with_sound),
            "resolution": f"{rung.width}x{rung.height}",
            "frame_rate": round(float(rate), 3),
            "codecs": ",".join(rendition.codecs for rendition in with_sound),
        }
        if sound is not None:
            info["audio"] = AUDIO_GROUP
        master.add_playlist(m3u8.Playlist(rung.playlist, stream_info=info, media=master.media, base_uri=None))
    master.dump(os.path.join(out_dir, MASTER_PLAYLIST))
    return StreamPackage(out_dir, (*files, MASTER_PLAYLIST), tuple(renditions))


def _representations(manifest: str) -> list[_Representation]:
    """The manifest's representations in their id order (the muxer's stream order: the rungs, then the audio)."""
    found = []
    for adaptation in ET.parse(manifest).getroot().iterfind(".//mpd:AdaptationSet", _MPD_NS):
        for representation in adaptation.iterfind("mpd:Representation", _MPD_NS):
            template = representation.find("mpd:SegmentTemplate", _MPD_NS)
            assert template is not None  # use_template=1
            channels = representation.find("mpd:AudioChannelConfiguration", _MPD_NS)
            rid = representation.attrib["id"]
            found.append(
                _Representation(
                    id=rid,
                    codecs=representation.attrib["codecs"],
                    width=int(representation.attrib.get("width", 0)),
                    height=int(representation.attrib.get("height", 0)),
                    channels=channels.attrib["value"] if channels is not None else None,
                    init=template.attrib["initialization"].replace("$RepresentationID$", rid),
                    media=template.attrib["media"].replace("$RepresentationID$", rid),
                    start_number=int(template.attrib.get("startNumber", 1)),
                )
            )
    return sorted(found, key=lambda representation: int(representation.id))


def _segments(out_dir: str, representation: _Representation) -> list[tuple[str, float, int]]:
    """(file, duration in seconds, bytes) of each of a representation's segments, in order: its duration read from
    the segment's own samples (the init segment before it, as a player reads them)."""
    with open(os.path.join(out_dir, representation.init), "rb") as fh:
        init = fh.read()
    found = []
    number = representation.start_number
    while os.path.exists(
        path := os.path.join(out_dir, name := representation.media.replace("$Number%05d$", f"{number:05d}"))
    ):
        with open(path, "rb") as fh:
            body = fh.read()
        found.append((name, _duration_s(init + body), len(body)))
        number += 1
    return found


def _duration_s(fragmented_mp4: bytes) -> float:
    """The summed sample durations of an init segment and one media segment."""
    with av.open(io.BytesIO(fragmented_mp4), "r", format="mp4") as container:
        stream = container.streams[0]
        ticks: int = sum((packet.duration or 0) for packet in container.demux(stream) if packet.size)
        assert stream.time_base is not None  # a demuxed stream's
        return float(ticks * stream.time_base)


def _media_playlist(representation: _Representation, segments: list[tuple[str, float, int]]) -> m3u8.M3U8:
    playlist = m3u8.M3U8()
    playlist.version = HLS_VERSION
    playlist.target_duration = max(round(duration) for _, duration, _ in segments)  # RFC 8216, 4.3.3.1
    playlist.media_sequence = representation.start_number
    playlist.playlist_type = "vod"
    playlist.is_independent_segments = True
    playlist.is_endlist = True
    for uri, duration, _ in segments:
        playlist.add_segment(m3u8.Segment(uri=uri, duration=duration, init_section={"uri": representation.init}))
    return playlist


def _rendition(representation: _Representation, name: str, segments: list[tuple[str, float, int]]) -> Rendition:
    total_bytes = sum(size for _, _, size in segments)
    total_s = sum(duration for _, duration, _ in segments)
    return Rendition(
        name=name,
        playlist=f"{name}.m3u8",
        codecs=representation.codecs,
        width=representation.width,
        height=representation.height,
        bandwidth_bps=max(math.ceil(size * 8 / duration) for _, duration, size in segments if duration > 0),
        average_bandwidth_bps=math.ceil(total_bytes * 8 / total_s),
    )
