"""Join encoded segments and the audio track into the final file, without re-encoding."""

from __future__ import annotations

import heapq
import io
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import TypeVar

import av

from .audio import EncodedAudio
from .source_info import frame_rate
from .video import EncodedSegment

# Muxer options per output format (the format names are FFmpeg's muxer names). mp4/mov: moov box first, so players can start before the whole file has arrived.
CONTAINER_OPTIONS = {"mp4": {"movflags": "+faststart"}, "mov": {"movflags": "+faststart"}, "webm": {}}

# What a segment's packets must share with the first's to go in one track: codec, width, height, time base and
# codec header.
_SegmentEncoding = tuple[str, int, int, tuple[int, int], bytes | None]
_Track = TypeVar("_Track", av.VideoStream, av.AudioStream)
_KINDS = {av.VideoStream: "video", av.AudioStream: "audio"}


@dataclass
class MuxStats:
    path: str
    size_bytes: int
    duration_s: float
    frame_count: int
    width: int
    height: int
    cpu_s: float = 0.0  # CPU seconds of the process while it muxed, fetching the segments included


def mux_segments(
    segments: Iterable[EncodedSegment],
    audio: EncodedAudio | None,
    output_format: str,
    out_path: str,
    fps: float,
    on_frame: Callable[[int], None] | None = None,
) -> MuxStats:
    """Remux the segments (in index order) and the audio into `out_path`, atomically.

    `segments` is read once, in order, one segment at a time: given a generator that fetches each segment as
    it is asked for, the mux holds one segment in memory, not the whole video. Video timestamps are made
    continuous by offsetting each segment by the frames before it; packets of both streams are interleaved by
    decode time. The file is written beside `out_path` under a temporary name and renamed into place only when
    complete, so a failed or cancelled mux leaves no partial artifact.

    All segments must come from the same encoder settings (one codec header describes them all), so the
    driver should fix `RenderSpec.video_encoder` once for the whole render; mixed segments, or indexes other
    than 0, 1, 2, ..., raise ValueError.

    `on_frame`, when given, is called after every video packet written with the frames written so far (the last
    call with all of them, before the file is finished and renamed), so a caller can report live progress; like
    `encode_segment`'s, it should only decide cheaply whether to pass the count on.
    """
    if output_format not in CONTAINER_OPTIONS:
        raise ValueError(f"unknown output format {output_format!r}")
    cpu_started = time.process_time()
    pending = iter(segments)
    first = next(pending, None)
    if first is None:
        raise ValueError("no segments to mux")
    track = _VideoTrack(_encoding(first))
    directory = os.path.dirname(os.path.abspath(out_path))
    fd, tmp_path = tempfile.mkstemp(prefix=".mux-", suffix=f".{output_format}", dir=directory)
    os.close(fd)
    try:
        with av.open(
            tmp_path, "w", format=output_format, container_options=CONTAINER_OPTIONS[output_format]
        ) as container:
            video = video_stream_for(container, first, frame_rate(fps))
            in_order = popped_first([first], pending)
            del first  # from here only the list in `in_order` holds it, until the mux takes it out
            tracks: list[Iterator[av.Packet[av.stream.Stream]]] = [track.packets(in_order, video)]
            if audio is not None:
                tracks.append(audio_track(container, audio))
            written = 0  # video packets: one a frame
            for packet in heapq.merge(*tracks, key=decode_time):
                container.mux(packet)
                if on_frame is not None and packet.stream is video:
                    written += 1
                    on_frame(written)
        with av.open(tmp_path) as check:  # report what a reader of the file sees
            duration_s = (check.duration or 0) / av.time_base
        _fsync(tmp_path)  # on disk before it has its name: a power loss cannot leave it empty
        os.replace(tmp_path, out_path)
    except BaseException:
        os.unlink(tmp_path)
        raise
    _, width, height, _, _ = track.encoding
    return MuxStats(
        path=out_path,
        size_bytes=os.path.getsize(out_path),
        duration_s=duration_s,
        frame_count=track.frames,
        width=width,
        height=height,
        cpu_s=time.process_time() - cpu_started,
    )


def _fsync(path: str) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _encoding(segment: EncodedSegment) -> _SegmentEncoding:
    return segment.codec, segment.width, segment.height, segment.time_base, segment.extradata


def _stream_like(
    container: av.container.OutputContainer, codec: str, extradata: bytes | None, kind: type[_Track]
) -> _Track:
    """An output stream of `kind` for already-encoded `codec` packets, carrying the encoder's extradata.

    `add_stream` would open a new encoder when the header is written (replacing the extradata with its own),
    so the stream is made from a template instead: its codec context is never opened, and its parameters,
    extradata included, are copied as they are into the container.
    """
    with av.open(io.BytesIO(), "w", format=container.format.name) as scratch:
        template = scratch.add_stream(codec)
        if not isinstance(template, kind):
            raise ValueError(f"{codec!r} encodes {template.type}, not {_KINDS[kind]}")
        stream = container.add_stream_from_template(template)
    stream.codec_context.extradata = extradata
    return stream


def popped_first(box: list[EncodedSegment], rest: Iterator[EncodedSegment]) -> Iterator[EncodedSegment]:
    """The segment in `box`, taken out of it (so nothing here keeps it), then the rest."""
    yield box.pop()
    yield from rest


class _VideoTrack:
    """The video packets of segments read one by one, checked as they come against the first segment's encoding
    and for their index (0, 1, ...); `frames` counts the frames passed so far (all of them once the mux is done)."""

    def __init__(self, encoding: _SegmentEncoding) -> None:
        self.encoding = encoding
        self.next_index = 0
        self.frames = 0

    def packets(
        self, segments: Iterator[EncodedSegment], stream: av.VideoStream
    ) -> Iterator[av.Packet[av.stream.Stream]]:
        for segment in segments:
            if _encoding(segment) != self.encoding:
                raise ValueError("segments were encoded with different codecs, sizes, rates or codec headers")
            if segment.index != self.next_index:
                raise ValueError(f"segment {segment.index} came where segment {self.next_index} belongs")
            yield from segment_packets(segment, stream, self.frames)
            self.frames += segment.frame_count
            self.next_index += 1
            del segment  # before the next one is fetched: one segment in memory at a time


def segment_packets(
    segment: EncodedSegment, stream: av.VideoStream, offset: int
) -> Iterator[av.Packet[av.stream.Stream]]:
    """`segment`'s packets on `stream`, timed `offset` frames later (the frames of the segments before it)."""
    tb = Fraction(*segment.time_base)
    for data, pts, dts, key in zip(segment.packets, segment.pts, segment.dts, segment.keyframes, strict=True):
        yield _timed_packet(data, pts + offset, dts + offset, tb, stream, key)


def video_stream_for(
    container: av.container.OutputContainer, segment: EncodedSegment, rate: Fraction
) -> av.VideoStream:
    """An output stream of `container` for `segment`'s encoded video (its codec, header, size and time base), at
    `rate` frames a second."""
    video = _stream_like(container, segment.codec, segment.extradata, av.VideoStream)
    video.codec_context.width, video.codec_context.height = segment.width, segment.height
    video.codec_context.pix_fmt = "yuv420p"
    video.codec_context.framerate = rate
    video.codec_context.time_base = Fraction(*segment.time_base)
    return video


def audio_track(container: av.container.OutputContainer, audio: EncodedAudio) -> Iterator[av.Packet[av.stream.Stream]]:
    """`audio`'s packets, on an output stream of `container` made for them."""
    sound = _stream_like(container, audio.codec, audio.extradata, av.AudioStream)
    sound.codec_context.sample_rate = audio.sample_rate
    sound.codec_context.layout = audio.layout
    sound.codec_context.time_base = Fraction(*audio.time_base)
    return _audio_packets(audio, sound)


def _audio_packets(audio: EncodedAudio, stream: av.AudioStream) -> Iterator[av.Packet[av.stream.Stream]]:
    tb = Fraction(*audio.time_base)
    for data, pts, dts in zip(audio.packets, audio.pts, audio.dts):
        yield _timed_packet(data, pts, dts, tb, stream, True)


def _timed_packet(
    data: bytes, pts: int, dts: int, time_base: Fraction, stream: av.VideoStream | av.AudioStream, keyframe: bool
) -> av.Packet[av.stream.Stream]:
    packet = av.Packet(data)
    packet.pts, packet.dts, packet.time_base = pts, dts, time_base
    packet.stream = stream
    packet.is_keyframe = keyframe
    return packet


def decode_time(packet: av.Packet[av.stream.Stream]) -> Fraction:
    """When `packet` is decoded, in seconds: the order a muxer interleaves the tracks in."""
    assert packet.dts is not None  # set by _packet on every packet here
    return packet.dts * packet.time_base
