"""Black and frozen picture in a run of consecutive pictures (one segment's, or a whole video's), with FFmpeg's own
detectors, blackdetect and freezedetect, in one filter graph the pictures pass through.

Both run with no minimum duration: a segment reports every run, so that merge_qc can join the runs that go on over
a cut before it holds them to their minimum (a black stretch over a cut is one interval, and long enough even when
neither half is). Over a cut freezedetect cannot look, so each segment keeps a thumbnail of its first picture and of
the picture a freeze open at its end still shows (freezedetect's reference), and `same_picture` compares them with
freezedetect's own measure.
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np

from ..compose import plane_array
from ..spec import even
from .findings import GRAPH_THREADS, FrameRun, QcRequest, SegmentQc, Thumbnail, Tile
from .sheet import make_tile

# ffmpeg's blackdetect test: a picture is black when at least 98 % of its pixels have a luma at most 10 % of the way
# from black to white.
BLACKDETECT = "d=0:pic_th=0.98:pix_th=0.10"
FREEZE_NOISE_DB = -60.0  # freezedetect's default noise tolerance
FREEZEDETECT = f"n={FREEZE_NOISE_DB}dB:d=0"
# Width of the thumbnails compared over a cut: small to carry, big enough that two different pictures differ by
# far more than the noise tolerance (area-averaged, a thumbnail's mean difference is at most the picture's).
THUMBNAIL_WIDTH = 128


class PictureChecks:
    """Pictures in, black and frozen runs, thumbnails and tiles out.

    `push` each picture (yuv420p, as the output shows it, before any watermark), numbered render-wide from
    `first_frame`; `result` then gives the runs and tiles. Tiles are made at the request's tile frames, and at the
    first picture of each black or frozen run that may be an event: long enough by itself, or open at the end
    (it may go on in the next segment). The picture a run starts with is held (a reference, not a copy) until the
    run ends, so that its tile is made only for runs that count.
    """

    def __init__(self, first_frame: int, rate: Fraction, request: QcRequest, colorspace: int) -> None:
        self._first_frame = first_frame
        self._next = first_frame
        self._rate = rate
        self._request = request
        self._colorspace = colorspace
        self._graph: av.filter.Graph | None = None
        self._black: list[FrameRun] = []
        self._frozen: list[FrameRun] = []
        self._tiles: list[Tile] = []
        self._event_tiles: list[Tile] = []
        self._first: Thumbnail | None = None
        # freezedetect's reference: the last picture that was not frozen (the first of a run while one is open).
        self._reference: tuple[int, av.VideoFrame] | None = None
        self._black_start: tuple[int, av.VideoFrame] | None = None
        self._freeze_open = False
        self._black_min = request.thresholds.black_min_s * rate
        self._frozen_min = request.thresholds.frozen_min_s * rate

    def push(self, picture: av.VideoFrame) -> None:
        frame = self._next
        self._next += 1
        if self._graph is None:
            self._graph = self._build(picture)
            self._first = thumbnail(picture)
        picture.pts, picture.time_base = frame, 1 / self._rate
        self._graph.vpush(picture)
        # The graph's own frame of the picture: held, it keeps the picture as it is now, as the caller's frame is
        # made writable (copied) before a watermark is blended into it.
        picture = self._graph.vpull()
        metadata = picture.metadata
        if frame in self._request.tile_frames:
            self._tiles.append(self._tile(picture, frame))

        if "lavfi.black_start" in metadata:
            self._black_start = frame, picture
        elif "lavfi.black_end" in metadata and self._black_start is not None:
            self._end_black(frame)

        # With no minimum duration freezedetect marks every picture after the first: a frozen one that starts a run
        # gets freeze_start alone, the first after a run freeze_end alone, any other moving one both (a "run" of
        # its reference alone, which is none).
        starts, ends = "lavfi.freezedetect.freeze_start" in metadata, "lavfi.freezedetect.freeze_end" in metadata
        if starts and not ends:
            self._freeze_open = True
        elif ends and not starts and self._freeze_open:
            self._end_freeze(frame)
        if not self._freeze_open:
            self._reference = frame, picture

    def result(self, source_frames: int, output_frames: int) -> SegmentQc:
        """What the pictures pushed showed; runs still open end with the last picture."""
        assert self._first is not None and self._reference is not None, "no picture was pushed"
        if self._black_start is not None:
            self._end_black(self._next, open_at_end=True)
        if self._freeze_open:
            self._end_freeze(self._next, open_at_end=True)
        reference_frame, reference = self._reference
        return SegmentQc(
            start_frame=self._first_frame,
            source_frames=source_frames,
            output_frames=output_frames,
            black=tuple(self._black),
            frozen=tuple(self._frozen),
            first_picture=self._first,
            end_reference=thumbnail(reference),
            end_reference_frame=reference_frame,
            tiles=tuple(self._tiles),
            # The end's reference may start a freeze that goes on in the next segment: its tile is the event's.
            event_tiles=(*self._event_tiles, self._tile(reference, reference_frame)),
        )

    def _end_black(self, end: int, open_at_end: bool = False) -> None:
        assert self._black_start is not None
        start, picture = self._black_start
        self._black.append(FrameRun(start, end))
        if open_at_end or end - start >= self._black_min:
            self._event_tiles.append(self._tile(picture, start))
        self._black_start = None

    def _end_freeze(self, end: int, open_at_end: bool = False) -> None:
        assert self._reference is not None
        start, picture = self._reference
        self._frozen.append(FrameRun(start, end))
        # As freezedetect counts: from the first picture to the last one that still shows it.
        if not open_at_end and end - 1 - start >= self._frozen_min:
            self._event_tiles.append(self._tile(picture, start))
        self._freeze_open = False

    def _tile(self, picture: av.VideoFrame, frame: int) -> Tile:
        return make_tile(picture, frame, float(frame / self._rate), self._request.tile_width, self._colorspace)

    def _build(self, picture: av.VideoFrame) -> av.filter.Graph:
        graph = av.filter.Graph()
        graph.threads = GRAPH_THREADS
        source = graph.add_buffer(
            width=picture.width, height=picture.height, format=picture.format, time_base=1 / self._rate
        )
        graph.link_nodes(
            source,
            graph.add("blackdetect", BLACKDETECT),
            graph.add("freezedetect", FREEZEDETECT),
            graph.add("buffersink"),
        )
        graph.configure()
        return graph


def thumbnail(picture: av.VideoFrame) -> Thumbnail:
    """`picture` (yuv420p) area-averaged down to THUMBNAIL_WIDTH pixels wide."""
    width = min(THUMBNAIL_WIDTH, picture.width)
    small = picture.reformat(width, even(picture.height * width / picture.width), "yuv420p", interpolation="AREA")
    planes = b"".join(plane_array(small, i).tobytes() for i in range(3))
    return Thumbnail(small.width, small.height, planes)


def same_picture(a: Thumbnail, b: Thumbnail) -> bool:
    """Whether freezedetect would call `b` a frozen repeat of `a`: their mean absolute difference over all three
    planes, as a fraction of the 8-bit range, at most its noise tolerance."""
    if (a.width, a.height) != (b.width, b.height):
        return False
    difference = np.abs(np.frombuffer(a.planes, np.uint8).astype(np.int16) - np.frombuffer(b.planes, np.uint8))
    return float(difference.mean()) / 256 <= 10 ** (FREEZE_NOISE_DB / 20)
