"""One segment's quality control, fed from inside encode_segment's loop: the frames it already holds, nothing
decoded a second time but the sampled output frames (fidelity)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from fractions import Fraction

import av

from ..plan import Segment
from ._fidelity import FidelityMeter
from ._video_checks import PictureChecks
from .findings import QcRequest, SegmentQc


class SegmentChecks:
    """What encode_segment hands quality control: `source` wraps the segment's decoded source frames (counting
    them), `before_watermark` takes each picture as FramePipeline shows it before the watermark, `sent` each
    picture as it goes to the encoder (pts: its number in the segment), `packets` what the encoder gives out;
    `result` once the encoder is flushed."""

    def __init__(
        self,
        request: QcRequest,
        segment: Segment,
        rate: Fraction,
        codec: str,
        extradata: bytes | None,
        colorspace: int,
    ) -> None:
        first, end = segment.start_frame, segment.start_frame + segment.frame_count
        self._pictures = PictureChecks(first, rate, request, colorspace)
        sampled = (frame - first for frame in request.fidelity_frames if first <= frame < end)
        self._fidelity = FidelityMeter(codec, extradata, sampled, first)
        self.before_watermark = self._pictures.push
        self.sent = self._fidelity.sent
        self._source_frames = 0
        self._output_frames = 0

    def source(self, frames: Iterable[av.VideoFrame]) -> Iterator[av.VideoFrame]:
        for frame in frames:
            self._source_frames += 1
            yield frame

    def packets(self, packets: list[av.Packet[av.VideoStream]]) -> None:
        self._output_frames += len(packets)
        self._fidelity.packets(packets)

    def result(self) -> SegmentQc:
        self._fidelity.flush()
        found = self._pictures.result(self._source_frames, self._output_frames)
        return dataclasses.replace(found, fidelity=self._fidelity.samples)
