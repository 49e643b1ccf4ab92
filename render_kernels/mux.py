"""Join encoded segments and the audio track into the final file, without re-encoding."""

from __future__ import annotations

import heapq
import io
import os
import tempfile
from dataclasses import dataclass
from fractions import Fraction

import av

from .audio import EncodedAudio
from .probe import frame_rate
from .video import EncodedSegment

# Muxer options per output format (the format names are FFmpeg's muxer names). mp4/mov: moov box first, so players can start before the whole file has arrived.
CONTAINER_OPTIONS = {"mp4": {"movflags": "+faststart"}, "mov": {"movflags": "+faststart"}, "webm": {}}


@dataclass
class MuxStats:
    path: str
    size_bytes: int
    duration_s: float
    frame_count: int
    width: int
    height: int


def mux_segments(segments: list[EncodedSegment], audio: EncodedAudio | None, output_format: str, out_path: str,
                 fps: float) -> MuxStats:
    """Remux the segments (in index order) and the audio into `out_path`, atomically.

    Video timestamps are made continuous by offsetting each segment by the frames before it; packets of both
    streams are interleaved by decode time. The file is written beside `out_path` under a temporary name and
    renamed into place only when complete, so a failed or cancelled mux leaves no partial artifact.

    All segments must come from the same encoder settings (one codec header describes them all), so the
    driver should fix `RenderSpec.video_encoder` once for the whole render; mixed segments raise ValueError.
    """
    if output_format not in CONTAINER_OPTIONS:
        raise ValueError(f"unknown output format {output_format!r}")
    if not segments:
        raise ValueError("no segments to mux")
    segments = sorted(segments, key=lambda s: s.index)
    first = segments[0]
    if any(_encoding(s) != _encoding(first) for s in segments):
        raise ValueError("segments were encoded with different codecs, sizes, rates or codec headers")
    directory = os.path.dirname(os.path.abspath(out_path))
    fd, tmp_path = tempfile.mkstemp(prefix=".mux-", suffix=f".{output_format}", dir=directory)
    os.close(fd)
    try:
        with av.open(tmp_path, "w", format=output_format,
                     container_options=CONTAINER_OPTIONS[output_format]) as container:
            video = _stream_like(container, first.codec, first.extradata)
            video.codec_context.width, video.codec_context.height = first.width, first.height
            video.codec_context.pix_fmt = "yuv420p"
            video.codec_context.framerate = frame_rate(fps)
            video.codec_context.time_base = Fraction(*first.time_base)
            sound = None
            if audio is not None:
                sound = _stream_like(container, audio.codec, audio.extradata)
                sound.codec_context.sample_rate = audio.sample_rate
                sound.codec_context.layout = audio.layout
                sound.codec_context.time_base = Fraction(*audio.time_base)
            for packet in heapq.merge(_video_packets(segments, video), _audio_packets(audio, sound),
                                      key=lambda p: p.dts * p.time_base):
                container.mux(packet)
        with av.open(tmp_path) as check:  # report what a reader of the file sees
            duration_s = (check.duration or 0) / av.time_base
        _fsync(tmp_path)  # on disk before it has its name: a power loss cannot leave it empty
        os.replace(tmp_path, out_path)
    except BaseException:
        os.unlink(tmp_path)
        raise
    return MuxStats(
        path=out_path,
        size_bytes=os.path.getsize(out_path),
        duration_s=duration_s,
        frame_count=sum(s.frame_count for s in segments),
        width=first.width,
        height=first.height,
    )


def _fsync(path: str) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _encoding(segment: EncodedSegment) -> tuple:
    return segment.codec, segment.width, segment.height, segment.time_base, segment.extradata


def _stream_like(container: av.container.OutputContainer, codec: str, extradata: bytes | None) -> av.stream.Stream:
    """An output stream for already-encoded `codec` packets, carrying the encoder's extradata.

    `add_stream` would open a new encoder when the header is written (replacing the extradata with its own),
    so the stream is made from a template instead: its codec context is never opened, and its parameters,
    extradata included, are copied as they are into the container.
    """
    with av.open(io.BytesIO(), "w", format=container.format.name) as scratch:
        stream = container.add_stream_from_template(scratch.add_stream(codec))
    stream.codec_context.extradata = extradata
    return stream


def _video_packets(segments: list[EncodedSegment], stream):
    offset = 0
    for segment in segments:
        tb = Fraction(*segment.time_base)
        for data, pts, dts, key in zip(segment.packets, segment.pts, segment.dts, segment.keyframes):
            yield _packet(data, pts + offset, dts + offset, tb, stream, key)
        offset += segment.frame_count


def _audio_packets(audio: EncodedAudio | None, stream):
    if audio is None:
        return
    tb = Fraction(*audio.time_base)
    for data, pts, dts in zip(audio.packets, audio.pts, audio.dts):
        yield _packet(data, pts, dts, tb, stream, True)


def _packet(data: bytes, pts: int, dts: int, time_base: Fraction, stream, keyframe: bool) -> av.Packet:
    packet = av.Packet(data)
    packet.pts, packet.dts, packet.time_base = pts, dts, time_base
    packet.stream = stream
    packet.is_keyframe = keyframe
    return packet
