"""How a decoded picture is shown: the display matrix (rotation, mirror) and the field order of interlaced video.

Phones record portrait video as a landscape stream plus a display matrix saying "turn this 90 degrees"; players
obey it, so a render must too. The matrix is nine int32 (a b u / c d v / x y w; a..d and x, y in 16.16 fixed
point) that map a decoded pixel (p, q), in picture coordinates with y pointing down, to the displayed one:
p' = a*p + c*q + x, q' = b*p + d*q + y. Only rotations by quarter turns and mirrors occur in practice; any
other angle is taken to the nearest quarter turn.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

import av
from av.sidedata.sidedata import Type

UPRIGHT = (0, False)  # (clockwise degrees, mirrored): the picture is shown as it is decoded

# AVFieldOrder (libavcodec) -> bwdif's parity: the field shown first. TB/BT are coded in one order and shown in
# the other; what matters to a deinterlacer is the order shown.
FIELD_ORDERS = {2: "tff", 3: "bff", 4: "bff", 5: "tff"}  # TT, BB, TB, BT
FIELD_ORDER_PROGRESSIVE = 1


def orientation_from_matrix(matrix: Sequence[int]) -> tuple[int, bool]:
    """(rotation, hflip) that turn a decoded picture into the displayed one: rotate `rotation` degrees clockwise
    (0, 90, 180 or 270), then mirror left-right when `hflip`.

    A mirror flips the sign of the matrix's determinant; undoing it (negating the x' column: a and c) leaves a
    pure rotation, whose angle is atan2(b, a) with y down (libavutil's av_display_rotation_get is the negative
    of that angle: it measures counter-clockwise). A vertical mirror is the same as a half turn plus hflip.
    """
    a, b, c, d = matrix[0], matrix[1], matrix[3], matrix[4]
    hflip = a * d - b * c < 0
    if hflip:
        a, c = -a, -c
    if a == b == 0:  # a degenerate matrix (all zeros): nothing trustworthy to apply
        return UPRIGHT
    quarter_turns = round(math.degrees(math.atan2(b, a)) / 90) % 4
    return quarter_turns * 90, hflip


def display_orientation(frame: av.VideoFrame) -> tuple[int, bool]:
    """(rotation, hflip) of a decoded frame: decoders attach the stream's display matrix to every frame."""
    # Looked up by type: iterating the container gives the entries in PyAV 18.1.0 and their types from 18.1.1 on.
    display_matrix = frame.side_data.get(Type.DISPLAYMATRIX)
    if display_matrix is not None and len(bytes(display_matrix)) == 36:
        return orientation_from_matrix(struct.unpack("=9i", bytes(display_matrix)))
    return UPRIGHT


def field_order(codec_field_order: int, frame: av.VideoFrame) -> str:
    """ "progressive", or the parity bwdif deinterlaces with: "tff"/"bff" as the stream declares it, "auto" (each
    frame's own flag) when only the frames say they are interlaced. A stream declared progressive stays so."""
    if codec_field_order == FIELD_ORDER_PROGRESSIVE:
        return "progressive"
    return FIELD_ORDERS.get(codec_field_order, "auto" if frame.interlaced_frame else "progressive")
