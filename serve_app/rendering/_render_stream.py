"""A render's stream: its ladder packaged (render_kernels.streaming), with its storyboard and animated preview
(render_kernels.storyboard), and stored beside the file.

Made by the mux task once the file is muxed: it reads the segments from the object store a second time, one at a
time as the mux did (each holds its rungs, ladder.LadderSpec), packages them in the mux's private staging folder and
hands the files to the store under the stream's key prefix, the master playlist last: a reader who finds it finds
every file it names. A stream's audio is AAC; a file whose audio is not (webm's Opus) has the source's track encoded
once more for it. Imported by the mux task only when a render streams: render workers import nothing of the server.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace

from media_store.base import MediaStore
from render_kernels.audio import EncodedAudio, encode_audio
from render_kernels.ladder import LadderSpec
from render_kernels.media_io import Media
from render_kernels.storyboard import with_pictures
from render_kernels.streaming import StreamPackage, package_stream
from render_kernels.video import EncodedSegment

STREAM_AUDIO_FORMAT = "mp4"  # the container whose audio encode_audio makes AAC


@dataclass(frozen=True)
class StreamPackaging:
    """What the mux task makes a stream of: the ladder its segments encoded, where the files go (a key prefix of
    the media store, without a trailing `/`), and the source (for an AAC track when the file's audio is not)."""

    ladder: LadderSpec
    prefix: str
    source: Media


def package_and_store(
    packaging: StreamPackaging,
    segments: Iterable[EncodedSegment],
    audio: EncodedAudio | None,
    fps: float,
    media: MediaStore,
    staging: str,
) -> StreamPackage:
    """Package `segments` (in order) and `audio` in `staging` (a private folder, made here) and store the files under
    `packaging.prefix`; the package, its `directory` the prefix."""
    if audio is not None and audio.codec != "aac":
        audio = encode_audio(packaging.source, STREAM_AUDIO_FORMAT)
    package = with_pictures(package_stream(segments, audio, packaging.ladder, fps, staging))
    for name in package.files:  # the master playlist last
        media.put_file(os.path.join(staging, name), f"{packaging.prefix}/{name}", move=True)
    return replace(package, directory=packaging.prefix)
