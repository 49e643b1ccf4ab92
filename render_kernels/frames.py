"""Reading source frames from a keyframe onwards (shared by segment encoding and the preview)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import av

from .errors import UnsupportedMedia
from .probe import Media, SourceInfo, describe, main_video_stream, open_input, time_base

DECODER_THREADS = 2  # decoding is bit-exact at any thread count; kept small as tasks run one per core


@contextmanager
def open_video(path: Media) -> Iterator[tuple[av.container.InputContainer, av.VideoStream]]:
    """The source's first video stream, set up for threaded decoding."""
    with open_input(path) as container:
        stream = main_video_stream(container)
        stream.thread_type = "AUTO"
        stream.codec_context.thread_count = DECODER_THREADS
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
    if start_s > 0:  # the first segment reads from the top; no seek needed
        container.seek(start_pts, stream=stream, backward=True)
    try:
        for packet in container.demux(stream):
            for frame in decoder.decode(packet):
                if frame.pts is None or frame.pts >= start_pts:
                    yield frame
    except av.FFmpegError as err:
        raise UnsupportedMedia(f"cannot decode: {describe(err)}") from err
