"""Contact sheets: small JPEG tiles of output pictures, made where the frames are, and one sheet of them with each
tile's time drawn on it, small enough to show in a chat or a web page."""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

import av
from PIL import Image, ImageDraw, ImageFont

from ..spec import even
from .findings import QcReport, SegmentQc, Tile, clock

TILE_QUALITY = 85  # each tile's own JPEG: it is decoded again for the sheet, so it keeps most of its detail
SHEET_MAX_WIDTH = 1280
SHEET_MAX_BYTES = 150_000
SHEET_COLUMNS = 5
SHEET_TILES = 20  # evenly spaced tiles on a contact sheet (QcRequest.evenly), before the events' own
GUTTER = 2  # pixels between tiles: two dark pictures side by side still read as two
MAX_EVENT_TILES = 40  # the first events' tiles only: a slideshow may hold hundreds of still pictures
SHEET_QUALITIES = (80, 65, 50, 35)  # tried in turn at each tile size before the tiles shrink
SHRINK = 0.8  # how much smaller the tiles get when no quality makes the sheet fit
LABEL_TEXT = (255, 255, 255)
EVENT_TEXT = (255, 96, 96)  # an event's tile reads differently from the evenly spaced ones
LABEL_BACKGROUND = (0, 0, 0)


def make_tile(picture: av.VideoFrame, frame: int, time_s: float, width: int, colorspace: int) -> Tile:
    """`picture` (yuv420p, in the source's `colorspace`) as a `width`-pixel-wide JPEG tile, aspect kept."""
    height = even(picture.height * width / picture.width)
    rgb = picture.reformat(width, height, "rgb24", src_colorspace=colorspace, interpolation="AREA")
    out = io.BytesIO()
    Image.fromarray(rgb.to_ndarray()).save(out, "JPEG", quality=TILE_QUALITY)
    return Tile(frame, time_s, out.getvalue())


def contact_sheet(segments: Sequence[SegmentQc], report: QcReport) -> bytes:
    """One JPEG of the segments' evenly spaced tiles and, after them, a tile at the start of each event of `report`
    (for black or frozen picture the tile the segment where it starts made, for silence the evenly spaced tile
    nearest its start), each labelled with its time (and an event's
    kind); at most SHEET_MAX_WIDTH pixels wide and SHEET_MAX_BYTES bytes: the JPEG quality, then the tiles' size,
    go down until it fits (the first MAX_EVENT_TILES events only). With no tile at all, one black tile."""
    even_tiles = sorted((tile for segment in segments for tile in segment.tiles), key=lambda tile: tile.frame)
    by_frame = {tile.frame: tile for segment in segments for tile in segment.event_tiles}
    labelled = [(tile, clock(tile.time_s), LABEL_TEXT) for tile in even_tiles]
    events = []
    for event in report.events:
        # A picture event's own first frame; a silence (the segments hear nothing) the nearest evenly spaced tile.
        tile = by_frame.get(event.first_frame) or _nearest(even_tiles, event.interval.start_s)
        if tile is not None:
            events.append((tile, f"{event.kind} {clock(event.interval.start_s)}", EVENT_TEXT))
    labelled += events[:MAX_EVENT_TILES]
    pictures = [(Image.open(io.BytesIO(tile.jpeg)).convert("RGB"), label, colour) for tile, label, colour in labelled]
    tile_width = (SHEET_MAX_WIDTH - (SHEET_COLUMNS - 1) * GUTTER) // SHEET_COLUMNS
    while True:  # ends: tiles a few pixels wide make a sheet of a few kB
        sheet = _draw(pictures, tile_width)
        for quality in SHEET_QUALITIES:
            out = io.BytesIO()
            sheet.save(out, "JPEG", quality=quality, optimize=True)
            if out.tell() <= SHEET_MAX_BYTES:
                return out.getvalue()
        tile_width = max(1, int(tile_width * SHRINK))


def _nearest(tiles: Sequence[Tile], time_s: float) -> Tile | None:
    return min(tiles, key=lambda tile: abs(tile.time_s - time_s), default=None)


def _draw(pictures: Iterable[tuple[Image.Image, str, tuple[int, int, int]]], tile_width: int) -> Image.Image:
    """The tiles in rows of SHEET_COLUMNS, each `tile_width` wide (aspect kept), its label on its lower left."""
    tiles = list(pictures)
    aspect = tiles[0][0].height / tiles[0][0].width if tiles else 9 / 16
    tile_height = max(1, round(tile_width * aspect))
    columns = max(1, min(SHEET_COLUMNS, len(tiles)))
    rows = max(1, -(-len(tiles) // columns))
    gutter = GUTTER if tile_width > 4 * GUTTER else 0
    step_x, step_y = tile_width + gutter, tile_height + gutter
    sheet = Image.new("RGB", (columns * step_x - gutter, rows * step_y - gutter), (96, 96, 96))
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=max(8, tile_height // 8))
    for i, (picture, label, colour) in enumerate(tiles):
        x, y = i % columns * step_x, i // columns * step_y
        sheet.paste(picture.resize((tile_width, tile_height), Image.Resampling.BILINEAR), (x, y))
        left, top, right, bottom = draw.textbbox((x + 3, y + tile_height - 3), label, font=font, anchor="ld")
        draw.rectangle((left - 2, top - 2, right + 2, bottom + 2), fill=LABEL_BACKGROUND)
        draw.text((x + 3, y + tile_height - 3), label, fill=colour, font=font, anchor="ld")
    return sheet
