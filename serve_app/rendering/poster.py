"""The poster of a finished video: one of its frames as a JPEG, which the watch page shows before the video plays
(`<video poster>`) and clients read as `vidforge://videos/<render_id>/poster.jpg`.

Made by the mux task from the file it has just written on its node's disk, before the video is stored: a seek to
the keyframe before the poster's moment and the decode of the frames up to it, a few milliseconds beside the mux.
Light to import, as the rest of a render's task bodies (serve_app.rendering.render_tasks): PyAV and Pillow only.
"""

from __future__ import annotations

import io

import av

POSTER_AT = 1 / 3  # of the duration, as the watermark preview: past any intro, well before the credits
POSTER_BOX = (1280, 720)  # at most this size, aspect kept: a 4k frame would be megabytes for a thumbnail
JPEG_QUALITY = 85


def poster_jpeg(path: str) -> bytes:
    """The video frame at POSTER_AT of the file at `path` (or its last, for a video shorter than that frame's time),
    as JPEG bytes no larger than POSTER_BOX."""
    with av.open(path) as container:
        stream = container.streams.video[0]
        duration_s = container.duration / av.time_base if container.duration else 0.0
        at_s = duration_s * POSTER_AT
        if stream.time_base is not None:
            container.seek(int(at_s / stream.time_base), stream=stream)  # back to the keyframe before it
        shown = None
        for frame in container.decode(stream):
            shown = frame
            if frame.time is None or frame.time >= at_s:
                break
    if shown is None:
        raise ValueError(f"{path} has no video frame to make a poster of")
    image = shown.to_image()
    image.thumbnail(POSTER_BOX)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=JPEG_QUALITY)
    return out.getvalue()
