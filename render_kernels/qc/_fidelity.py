"""How faithful a segment's encode is: sampled output frames decoded from the segment's own packets, as they come
out of the encoder, against the pictures the encoder was given, with FFmpeg's psnr and ssim filters.

The reference is the encoder's input: the source at the output size, upright, with the watermark as asked (outside
the watermark's box, the bare scaled source). Against the bare source the watermark itself would count as lost
fidelity: the benchmarks' white 256x96 logo alone puts a 720p render at 21-24 dB PSNR-Y, a warning (almost a
failure) on every render that carries it.

The cheapest exact decode measured: one decoder thread (two cost ~40 % more CPU for the same frames); frames that
nothing refers to are skipped unless sampled (`skip_frame` NONREF, set per packet: x264's non-reference B-frames,
about a third of its decode); and the decoder stops once the last sample is out. Every reference frame up to the
last sample is decoded: a sampled frame is exact only from its whole chain of references.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

import av
from av.filter.context import FilterContext

from .findings import GRAPH_THREADS, PSNR_CAP_DB, FidelitySample

# The software decoder of each encoder's output.
DECODERS = {"libx264": "h264", "h264_nvenc": "h264", "libvpx-vp9": "vp9"}
TIME_BASE = Fraction(1, 1)  # the comparison's: frames are paired by their number


class FidelityMeter:
    """Compares the output frames `frames` (numbered from 0 at the segment's first, as its packets' pts are) with
    the pictures the encoder was given; `offset` turns them into render-wide frame numbers for the samples.

    `sent` each picture as it goes to the encoder, `packets` each batch the encoder gives out, `flush` once the
    encoder is flushed; `samples` are then the comparisons, in order.
    """

    def __init__(self, codec: str, extradata: bytes | None, frames: Iterable[int], offset: int) -> None:
        self._wanted = frozenset(frames)
        self._pending: dict[int, av.VideoFrame] = {}  # the encoder's input for sampled frames not yet decoded
        self._left = len(self._wanted)
        self._offset = offset
        self._samples: list[FidelitySample] = []
        self._graph: tuple[av.filter.Graph, FilterContext, FilterContext] | None = None
        decoder = av.CodecContext.create(DECODERS[codec], "r")
        assert isinstance(decoder, av.VideoCodecContext)  # a video codec's decoder
        decoder.extradata = extradata
        decoder.thread_count = 1
        self._decoder = decoder

    @property
    def samples(self) -> tuple[FidelitySample, ...]:
        return tuple(self._samples)

    def sent(self, picture: av.VideoFrame) -> None:
        """`picture` goes to the encoder (its pts is its frame number in the segment)."""
        assert picture.pts is not None
        if picture.pts in self._wanted:
            self._pending[picture.pts] = picture

    def packets(self, packets: Iterable[av.Packet[av.VideoStream]]) -> None:
        for packet in packets:
            if not self._left:
                return
            self._decoder.skip_frame = "DEFAULT" if packet.pts in self._wanted else "NONREF"
            for frame in self._decoder.decode(packet):
                self._compare(frame)

    def flush(self) -> None:
        if self._left:
            for frame in self._decoder.decode(None):
                self._compare(frame)

    def _compare(self, decoded: av.VideoFrame) -> None:
        reference = self._pending.pop(decoded.pts, None) if decoded.pts is not None else None
        if reference is None:
            return
        if self._graph is None:
            self._graph = _comparison(decoded)
        graph, main, source = self._graph
        # Both at the same time, so that the filters pair them.
        reference.pts = decoded.pts
        reference.time_base = decoded.time_base = TIME_BASE
        main.push(decoded)
        source.push(reference)
        metadata = graph.vpull().metadata
        psnr = float(metadata["lavfi.psnr.psnr.y"])  # "inf" for an identical luma
        assert decoded.pts is not None
        self._samples.append(
            FidelitySample(decoded.pts + self._offset, min(psnr, PSNR_CAP_DB), float(metadata["lavfi.ssim.Y"]))
        )
        self._left -= 1


def _comparison(frame: av.VideoFrame) -> tuple[av.filter.Graph, FilterContext, FilterContext]:
    """A graph that compares a decoded frame (the first input) with its source (the second): psnr, then ssim,
    each setting its per-frame metadata on the decoded frame that comes out."""
    graph = av.filter.Graph()
    graph.threads = GRAPH_THREADS
    main, source = (
        graph.add_buffer(width=frame.width, height=frame.height, format=frame.format, time_base=TIME_BASE)
        for _ in range(2)
    )
    psnr, ssim, split = graph.add("psnr"), graph.add("ssim"), graph.add("split")
    main.link_to(psnr, 0, 0)
    source.link_to(split)
    split.link_to(psnr, 0, 1)
    split.link_to(ssim, 1, 1)
    psnr.link_to(ssim, 0, 0)
    ssim.link_to(graph.add("buffersink"))
    graph.configure()
    return graph, main, source
