"""The poster of a finished video: one of its frames as a JPEG, which the watch page shows before the video plays
(`<video poster>`) and clients read as `vidforge://videos/<render_id>/poster.jpg`.

Made by the mux task from the file it has just written on its node's disk, before the video is stored. The frame
is the video's keyframe nearest to POSTER_AT, when one lies within POSTER_WINDOW: it decodes alone, where the frame
at POSTER_AT itself needs every frame from the keyframe before it (for a 20 s 720p render, 0.11 CPU-s against
0.01, most of the mux task's CPU; a render's keyframes are x264's and each segment's first frame, seconds apart).
Otherwise the frame at POSTER_AT, decoded from the keyframe before it.
Light to import, as the rest of a render's task bodies (serve_app.rendering._render_tasks): PyAV and Pillow only.
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import av
from PIL import Image

POSTER_AT = 1 / 3  # of the duration, as the watermark preview: past any intro, well before the credits
POSTER_WINDOW = (1 / 6, 1 / 2)  # of the duration: where a keyframe may stand in for the frame at POSTER_AT
POSTER_BOX = (1280, 720)  # at most this size, aspect kept: a 4k frame would be megabytes for a thumbnail
JPEG_QUALITY = 85


def poster_jpeg(path: str) -> bytes:
    """The poster frame (see the module) of the video file at `path`, or its last frame for a video shorter than
    POSTER_AT's time, as JPEG bytes no larger than POSTER_BOX."""
    with av.open(path) as container:
        stream = container.streams.video[0]
        duration_s = container.duration / av.time_base if container.duration else 0.0
        keyframe = _keyframe_near(stream, duration_s)
        if keyframe is not None:
            dts, seek_to = keyframe
            container.seek(seek_to, stream=stream)
            shown = _first_keyframe_from(container.decode(stream), dts)
        else:
            shown = _frame_at(container, stream, duration_s * POSTER_AT)
    if shown is None:
        raise ValueError(f"{path} has no video frame to make a poster of")
    image = Image.fromarray(shown.to_ndarray(format="rgb24"))  # what PyAV's untyped `to_image` makes
    image.thumbnail(POSTER_BOX)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def _keyframe_near(stream: av.VideoStream, duration_s: float) -> tuple[int, int] | None:
    """The keyframe nearest POSTER_AT within POSTER_WINDOW, from the container's index (none for a container that
    has not read one): its decode timestamp, and where to seek for it. A demuxer seeks by presentation time (MP4's
    by the time its edit list shows), which for a keyframe is its decode time plus the encoder's reorder delay: the
    seek aims halfway to the next keyframe, well past that delay and before the next keyframe."""
    tick = stream.time_base
    if tick is None or duration_s <= 0:
        return None
    start = stream.start_time or 0
    at_s, (low_s, high_s) = duration_s * POSTER_AT, (duration_s * share for share in POSTER_WINDOW)
    keyframes = [entry.timestamp for entry in stream.index_entries if entry.is_keyframe]
    near = [(index, dts) for index, dts in enumerate(keyframes) if low_s <= float((dts - start) * tick) <= high_s]
    if not near:
        return None
    index, dts = min(near, key=lambda kf: abs(float((kf[1] - start) * tick) - at_s))
    end = keyframes[index + 1] if index + 1 < len(keyframes) else start + int(duration_s / tick)
    return dts, (dts + end) // 2


def _first_keyframe_from(frames: Iterator[av.VideoFrame], dts: int) -> av.VideoFrame | None:
    """The keyframe shown from decode time `dts` on: the first decoded one timed at or after it (a keyframe's
    presentation time is never before its decode time; a seek that lands a keyframe early only costs its GOP)."""
    last: av.VideoFrame | None = None
    for frame in frames:
        last = frame
        if frame.key_frame and frame.pts is not None and frame.pts >= dts:
            return frame
    return last


def _frame_at(container: av.container.InputContainer, stream: av.VideoStream, at_s: float) -> av.VideoFrame | None:
    """The frame shown at `at_s` (or the last one before the end), decoded from the keyframe before it."""
    if stream.time_base is not None:
        container.seek(int(at_s / stream.time_base), stream=stream)
    shown = None
    for frame in container.decode(stream):
        shown = frame
        if frame.time is None or frame.time >= at_s:
            break
    return shown
