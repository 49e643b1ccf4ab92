"""Opening media for the kernels: local paths and MediaSources, libav's errors in the kernels' terms, and the
streams a render reads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from fractions import Fraction
from typing import BinaryIO, Protocol

import av

from .errors import UnsupportedMedia


class MediaSource(Protocol):
    """Media that is not a file on this node (e.g. an object in a bucket): `open` gives a seekable binary file
    for one read, which fetches only the byte ranges the demuxer asks for. Picklable, so a task can take it."""

    def open(self) -> AbstractContextManager[BinaryIO]: ...


# What every kernel reads: a local path (opened natively by libav), or a MediaSource.
Media = str | MediaSource


class Damaged(UnsupportedMedia):
    """libav failed to open or decode the file (its own message is the reason): the probe reports it as
    truncated or corrupt; later readers of an accepted file pass the reason on as it is."""


def open_binary(media: Media) -> AbstractContextManager[BinaryIO]:
    """`media` as a binary file, for readers that are not libav (Pillow, a header check)."""
    return open(media, "rb") if isinstance(media, str) else media.open()


@contextmanager
def open_input(media: Media) -> Iterator[av.container.InputContainer]:
    """Open media, turning "not media" into UnsupportedMedia (a missing file stays OSError)."""
    with nullcontext(media) if isinstance(media, str) else media.open() as opened:
        if _size(opened) == 0:
            raise UnsupportedMedia("file is empty")
        try:
            container = av.open(opened, "r", metadata_errors="ignore")
        except MemoryError:  # av.error.MemoryError too: out of memory is the caller's limit, not the media's fault
            raise
        except av.FFmpegError as err:
            raise Damaged(f"cannot open: {describe(err)}") from err
        with container:
            yield container


def _size(opened: str | BinaryIO) -> int:
    if isinstance(opened, str):
        return os.path.getsize(opened)
    size = opened.seek(0, os.SEEK_END)
    opened.seek(0)
    return size


def describe(err: av.FFmpegError) -> str:
    """FFmpeg's message for an error, lower-cased, without the file name PyAV appends."""
    return (err.strerror or str(err)).lower()


def is_still_image_format(container: av.container.InputContainer) -> bool:
    """True for FFmpeg's image demuxers (png_pipe, jpeg_pipe, image2, ...)."""
    name = container.format.name
    return name.startswith("image2") or name.endswith("_pipe")


def main_video_stream(container: av.container.InputContainer) -> av.VideoStream:
    """The first real video stream (cover art in audio files is a one-picture "video" stream: skipped)."""
    for stream in container.streams.video:
        if not stream.disposition & av.stream.Disposition.attached_pic:
            return stream
    raise UnsupportedMedia("no video stream")


def main_audio_stream(container: av.container.InputContainer) -> av.AudioStream | None:
    """The audio track a render carries: the one marked default (what a player picks), else the first."""
    tracks = container.streams.audio
    default = (track for track in tracks if track.disposition & av.stream.Disposition.default)
    return next(default, tracks[0] if tracks else None)


def time_base(stream: av.stream.Stream) -> Fraction:
    """The unit of a stream's timestamps; a stream without one cannot be timed, so it is unusable media."""
    if stream.time_base is None:
        raise UnsupportedMedia(f"the {stream.type} stream has no time base")
    return stream.time_base
