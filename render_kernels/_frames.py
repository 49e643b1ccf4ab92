"""Reading source frames from a keyframe onwards (shared by segment encoding and the preview)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from itertools import chain

import av

from .errors import UnsupportedMedia
from .media_io import Media, describe, main_video_stream, open_input, time_base
from .source_info import SourceInfo

DECODER_THREADS = 2  # when the caller does not say; decoding is bit-exact at any thread count
SEEK_BACKOFF_S = 1.0  # how much further back a seek that landed past its keyframe tries next (doubling)


@contextmanager
def open_video(
    path: Media, threads: int = DECODER_THREADS
) -> Iterator[tuple[av.container.InputContainer, av.VideoStream]]:
    """The source's first video stream, set up for decoding with `threads` threads."""
    with open_input(path) as container:
        stream = main_video_stream(container)
        stream.thread_type = "AUTO"
        stream.codec_context.thread_count = threads
        yield container, stream


def frames_from(
    container: av.container.InputContainer,
    stream: av.VideoStream,
    info: SourceInfo,
    start_s: float,
    decoder: av.VideoCodecContext | None = None,
) -> Iterator[av.VideoFrame]:
    """Frames in presentation order from the frame at `start_s` (a keyframe time, as in SourceInfo) onwards,
    decoded by `decoder` (default: the stream's own; see decoders.open_video_decoder).

    Seeks to the keyframe at or before the start and drops anything earlier (e.g. open-GOP leading frames).
    Every decoder passes the packets' timestamps through, so the same start holds for each.
    """
    decoder = decoder or stream.codec_context
    start_pts = round((info.start_time_s + start_s) / time_base(stream))
    # The first segment reads from the top; no seek needed.
    packets = _packets_from(container, stream, start_pts) if start_s > 0 else container.demux(stream)
    try:
        for packet in packets:
            for frame in decoder.decode(packet):
                if frame.pts is None or frame.pts >= start_pts:
                    yield frame
    except av.FFmpegError as err:
        raise UnsupportedMedia(f"cannot decode: {describe(err)}") from err


def _packets_from(
    container: av.container.InputContainer, stream: av.VideoStream, start_pts: int
) -> Iterator[av.Packet[av.VideoStream]]:
    """The stream's packets from a keyframe at or before `start_pts` onwards.

    A container without an index (MPEG-TS, MPEG-PS) seeks by bisecting timestamps and can land just past the
    keyframe asked for; decoding from there gives nothing until the next keyframe, so a segment would come out
    short. When the first packet read is already past `start_pts`, seek again further back (1 s, 2 s, 4 s ...),
    down to the stream's start; the caller drops the frames before `start_pts`.
    """
    floor = stream.start_time or 0
    backoff = max(1, round(SEEK_BACKOFF_S / time_base(stream)))
    target = start_pts
    while True:
        container.seek(max(target, floor), stream=stream, backward=True)
        packets = container.demux(stream)
        first = next(packets, None)
        if first is None or first.pts is None or first.pts <= start_pts or target <= floor:
            return chain([first] if first is not None else [], packets)
        target, backoff = target - backoff, backoff * 2
