"""A stream's storyboard and animated preview, made from the stream's own rungs after it is packaged.

The storyboard has a tile for each stream segment, at the segment's start: a keyframe, where a player's seek lands,
and one that decodes alone, so each tile costs one picture's decode of the smallest rung. Past STORYBOARD_MAX_TILES
segments, every n-th. The tiles make one JPEG sprite, STORYBOARD_COLUMNS across; the WebVTT file maps each stretch
of time to its tile with a `#xywh=` media fragment, the thumbnail track players read for scrubbing.

The preview is an animated WebP of the stream's first PREVIEW_MAX_S seconds, PREVIEW_WIDTH pixels wide, at
PREVIEW_FPS, looping, from the smallest rung at least that wide (the largest when none is).

Both read each rung through its HLS media playlist, as a player does: the init segment, then the media segments.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterator
from dataclasses import replace

import av
import m3u8
from PIL import Image

from .spec import even
from .streaming import StreamPackage

STORYBOARD_SPRITE = "storyboard.jpg"
STORYBOARD_VTT = "storyboard.vtt"
ANIMATED_PREVIEW = "preview.webp"
STORYBOARD_TILE_WIDTH = 160
STORYBOARD_COLUMNS = 10
STORYBOARD_MAX_TILES = 200  # an hour in 4 s segments is 900: every 5th then, one tile per 20 s
STORYBOARD_QUALITY = 75
PREVIEW_MAX_S = 5.0
PREVIEW_WIDTH = 480
PREVIEW_FPS = 10
PREVIEW_QUALITY = 60  # libwebp's lossy quality: a preview is looked at small and briefly


def with_pictures(package: StreamPackage) -> StreamPackage:
    """`package` (written to its directory) with its storyboard and preview written beside it, their files listed
    before the master playlist, which stays last."""
    rungs = [rendition for rendition in package.renditions if rendition.width]
    smallest = min(rungs, key=lambda rendition: rendition.width)
    wide_enough = [rendition for rendition in rungs if rendition.width >= PREVIEW_WIDTH]
    previewed = (
        min(wide_enough, key=lambda rendition: rendition.width)
        if wide_enough
        else max(rungs, key=lambda rendition: rendition.width)
    )
    write_storyboard(os.path.join(package.directory, smallest.playlist))
    write_preview(os.path.join(package.directory, previewed.playlist))
    *files, master = package.files
    return replace(package, files=(*files, STORYBOARD_SPRITE, STORYBOARD_VTT, ANIMATED_PREVIEW, master))


def write_storyboard(playlist: str) -> None:
    """The sprite and its WebVTT map, beside the media playlist `playlist` of the rung they are made from."""
    segments = _segments(playlist)
    starts = [*_starts(segments)]
    step = math.ceil(len(segments) / STORYBOARD_MAX_TILES)
    picked = range(0, len(segments), step)
    columns = min(STORYBOARD_COLUMNS, len(picked))
    sprite: Image.Image | None = None
    cues = ["WEBVTT", ""]
    for number, index in enumerate(picked):
        tile = _first_picture(playlist, segments[index])  # scaled at once: one tile's pixels at a time
        width, height = tile.size
        if sprite is None:
            sprite = Image.new("RGB", (columns * width, math.ceil(len(picked) / columns) * height))
        x, y = (number % columns) * width, (number // columns) * height
        sprite.paste(tile, (x, y))
        until = starts[index + step] if index + step < len(segments) else starts[-1] + segments[-1].duration
        cues += [
            f"{_vtt_time(starts[index])} --> {_vtt_time(until)}",
            f"{STORYBOARD_SPRITE}#xywh={x},{y},{width},{height}",
            "",
        ]
    assert sprite is not None  # a playlist has a segment
    directory = os.path.dirname(playlist)
    sprite.save(os.path.join(directory, STORYBOARD_SPRITE), "JPEG", quality=STORYBOARD_QUALITY)
    with open(os.path.join(directory, STORYBOARD_VTT), "w", encoding="utf-8") as fh:
        fh.write("\n".join(cues))


def write_preview(playlist: str) -> None:
    """The animated preview, beside the media playlist `playlist` of the rung it is made from."""
    pictures: list[Image.Image] = []
    for time_s, picture in _pictures(playlist):
        if time_s >= PREVIEW_MAX_S:
            break
        if time_s * PREVIEW_FPS >= len(pictures) - 1e-6:  # the first picture at or past each tick
            height = even(picture.height * PREVIEW_WIDTH / picture.width)
            pictures.append(_image(picture, PREVIEW_WIDTH, height))
    first, *rest = pictures
    first.save(
        os.path.join(os.path.dirname(playlist), ANIMATED_PREVIEW),
        "WEBP",
        save_all=True,
        append_images=rest,
        duration=round(1000 / PREVIEW_FPS),
        loop=0,
        quality=PREVIEW_QUALITY,
    )


def _segments(playlist: str) -> list[m3u8.Segment]:
    segments = list(m3u8.load(playlist).segments)
    if not segments:
        raise ValueError(f"{playlist} lists no segments")
    return segments


def _starts(segments: list[m3u8.Segment]) -> Iterator[float]:
    start = 0.0
    for segment in segments:
        yield start
        start += segment.duration


def _fragment(playlist: str, segment: m3u8.Segment) -> io.BytesIO:
    """The init segment and `segment`, one fragmented MP4 a demuxer reads from the start."""
    data = io.BytesIO()
    for part in (segment.init_section.uri, segment.uri):
        with open(os.path.join(os.path.dirname(playlist), part), "rb") as fh:
            data.write(fh.read())
    data.seek(0)
    return data


def _first_picture(playlist: str, segment: m3u8.Segment) -> Image.Image:
    """The first picture of `segment` as a storyboard tile: STORYBOARD_TILE_WIDTH wide, its aspect kept."""
    with av.open(_fragment(playlist, segment), "r", format="mp4") as container:
        for frame in container.decode(video=0):
            return _image(frame, STORYBOARD_TILE_WIDTH, even(frame.height * STORYBOARD_TILE_WIDTH / frame.width))
    raise ValueError(f"{segment.uri} holds no picture")


def _pictures(playlist: str) -> Iterator[tuple[float, av.VideoFrame]]:
    """Every picture of the rung in order, with its time in seconds from the stream's start."""
    for segment in _segments(playlist):
        with av.open(_fragment(playlist, segment), "r", format="mp4") as container:
            for frame in container.decode(video=0):
                assert frame.time is not None  # a demuxed stream's frames are timed
                yield frame.time, frame


def _image(picture: av.VideoFrame, width: int | None = None, height: int | None = None) -> Image.Image:
    """`picture` as RGB, scaled to `width` x `height` by area averaging (its own size by default)."""
    return Image.fromarray(picture.reformat(width, height, "rgb24", interpolation="AREA").to_ndarray())


def _vtt_time(seconds: float) -> str:
    millis = round(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    return f"{hours:02d}:{minutes:02d}:{millis / 1000:06.3f}"
