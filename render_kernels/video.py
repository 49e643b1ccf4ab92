"""Render one segment: decode -> (deinterlace) -> scale -> (turn upright) -> watermark -> encode, returning only
encoded packets."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice

import av

from ._frames import DECODER_THREADS, frames_from, open_video
from .compose import FramePipeline
from .decoders import open_video_decoder
from .encoders import ENCODER_THREADS, choose_video_encoder, open_video_encoder
from .errors import UnsupportedMedia
from .ladder import LadderSpec, RungEncoder, sample_aspects
from .media_io import Media
from .plan import Segment
from .preview import Still, png_of
from .qc.findings import QcRequest, SegmentQc
from .qc.segment_checks import SegmentChecks
from .source_info import SourceInfo, frame_rate
from .spec import RenderSpec


@dataclass(frozen=True)
class SegmentStats:
    """Where one segment's encode spent its wall seconds (all 0.0 until it has ended)."""

    decode_s: float = 0.0  # decoding, scaling and watermarking
    encode_s: float = 0.0
    wall_s: float = 0.0
    fps: float = 0.0  # frames per wall second
    cpu_s: float = 0.0  # CPU seconds of the process meanwhile, its codec threads included (a task has the process)


@dataclass
class EncodedSegment:
    """One segment's encoded video: picklable, bytes only (raw frames never leave the task).

    Timestamps are in `time_base` (1/frame rate), counted in frames from 0 at the segment's first frame;
    the muxer offsets them by the frames of the segments before it.
    """

    index: int
    packets: list[bytes]
    pts: list[int]
    dts: list[int]
    keyframes: list[bool]
    time_base: tuple[int, int]
    width: int
    height: int
    codec: str
    frame_count: int
    extradata: bytes | None
    stats: SegmentStats = field(default_factory=SegmentStats)
    qc: SegmentQc | None = None  # what quality control found, when encode_segment was asked for it
    # The ladder's rungs of the same frames (ladder.LadderSpec's order), when encode_segment was asked for them:
    # each as a segment of its own (no rungs, stats or qc of its own).
    rungs: list[EncodedSegment] = field(default_factory=list)

    @classmethod
    def empty(cls, index: int, encoder: av.VideoCodecContext) -> EncodedSegment:
        """A segment with no packets yet, for what `encoder` (opened) will encode."""
        tb = encoder.time_base
        assert tb is not None and encoder.name is not None  # an opened encoder's
        return cls(
            index=index,
            packets=[],
            pts=[],
            dts=[],
            keyframes=[],
            time_base=(tb.numerator, tb.denominator),
            width=encoder.width,
            height=encoder.height,
            codec=encoder.name,
            frame_count=0,
            extradata=encoder.extradata,
        )

    def take(self, packets: Iterable[av.Packet[av.VideoStream]]) -> None:
        """Keep `packets` (an encoder's, in its order) as bytes and timestamps."""
        for packet in packets:
            assert packet.pts is not None and packet.dts is not None  # an encoder's packets are timed
            self.packets.append(bytes(packet))
            self.pts.append(packet.pts)
            self.dts.append(packet.dts)
            self.keyframes.append(packet.is_keyframe)


def encode_segment(
    source_path: Media,
    segment: Segment,
    spec: RenderSpec,
    info: SourceInfo,
    on_frame: Callable[[int], None] | None = None,
    stills: Sequence[Still] = (),
    on_still: Callable[[str, bytes], None] | None = None,
    qc: QcRequest | None = None,
    ladder: LadderSpec | None = None,
) -> EncodedSegment:
    """Encode the segment's frames with a fresh encoder (so its first frame is a keyframe).

    `on_frame`, when given, is called after every frame handed to the encoder with the count so far, so a
    caller can report live progress from inside the loop; it is called on the hot path, so it should only
    decide cheaply whether to pass the count on (the render driver throttles it to a few reports a second).
    `on_still(name, png)` is called with each of `stills` (preview.plan_stills) as the loop passes its frame.

    The output is constant frame rate at the source's average fps with exactly one output frame per source
    frame: variable-frame-rate sources are retimed, never padded or dropped. It is the picture as players show
    the source (RenderSpec.output_size): turned upright, square pixels, deinterlaced. With
    `spec.video_encoder` unset the encoder is chosen on this node; a driver whose nodes differ (NVENC or not)
    should set it once for the render, since mux_segments needs every segment from the same encoder.
    `spec.video_decoder` (an NVDEC decoder) decodes and downscales on the GPU instead; the same frames come
    out, at the output size.

    `qc` asks for quality control of the segment (qc.segment_checks: black and frozen runs, fidelity samples,
    tiles), measured on the frames the loop holds; it leaves the packets as they are. None: none, at no cost.

    `ladder` asks for its rungs besides (`EncodedSegment.rungs`), each scaled from the same pictures, with a
    keyframe every `ladder.keyframe_interval` frames from the segment's first: the segment must start on a multiple
    of that interval for the rungs' keyframes to fall where every other segment's do (plan_segments'
    `cut_multiple`).
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    codec = spec.video_encoder or choose_video_encoder(spec.output_format)
    width, height = spec.output_size(info)
    encoder = open_video_encoder(codec, width, height, frame_rate(info.fps), spec.segment_threads or ENCODER_THREADS)
    tb = encoder.time_base
    out = EncodedSegment.empty(segment.index, encoder)
    rungs = _rung_encoders(ladder, info, spec.segment_threads or ENCODER_THREADS)
    out.rungs = [EncodedSegment.empty(segment.index, rung.encoder) for rung in rungs]
    encode_s = 0.0
    checks: SegmentChecks | None = None

    with open_video(source_path, spec.segment_threads or DECODER_THREADS) as (container, stream):
        colorspace = stream.codec_context.colorspace
        if qc is not None:
            checks = SegmentChecks(qc, segment, frame_rate(info.fps), codec, encoder.extradata, colorspace)
        pipeline = FramePipeline.for_source(
            info,
            width,
            height,
            spec.watermark,
            colorspace,
            spec.segment_threads or 0,
            checks.before_watermark if checks is not None else None,
        )
        # A GPU decoder may scale (not turn); interlaced frames must reach the deinterlacer at their own size.
        decode_size = (info.width, info.height) if pipeline.deinterlaces else pipeline.scaled_size
        decoder = open_video_decoder(stream, spec.video_decoder, *decode_size)
        frames = frames_from(container, stream, info, segment.keyframe_s, decoder)
        # The lead-in (the frames between the keyframe and the segment's first) is decoded and dropped.
        wanted: Iterable[av.VideoFrame] = islice(frames, segment.lead_in, segment.lead_in + segment.frame_count)
        if checks is not None:
            wanted = checks.source(wanted)
        marked = {still.offset: still.name for still in stills if still.marked}
        unmarked = [still for still in stills if not still.marked]
        if unmarked and on_still is not None:
            wanted = _with_unmarked_stills(wanted, unmarked, on_still, info, width, height, stream)
        for picture in pipeline.pictures(wanted):
            if (name := marked.get(out.frame_count)) is not None and on_still is not None:
                on_still(name, png_of(picture, colorspace))
            picture.pts = out.frame_count
            picture.time_base = tb
            if checks is not None:
                checks.sent(picture)
            out.frame_count += 1
            t = time.perf_counter()
            packets = encoder.encode(picture)
            out.take(packets)
            for rung, encoded in zip(rungs, out.rungs, strict=True):
                encoded.take(rung.encode(picture))
            encode_s += time.perf_counter() - t
            if checks is not None:
                checks.packets(packets)
            if on_frame is not None:
                on_frame(out.frame_count)
    if out.frame_count < segment.frame_count:  # a segment never comes out short: the file lost frames since probe
        raise UnsupportedMedia(
            f"cannot decode: frames {segment.start_frame + out.frame_count} to "
            f"{segment.start_frame + segment.frame_count - 1} are missing"
        )
    t = time.perf_counter()
    packets = encoder.encode(None)
    out.take(packets)
    for rung, encoded in zip(rungs, out.rungs, strict=True):
        encoded.take(rung.encode(None))
        encoded.frame_count = out.frame_count
    encode_s += time.perf_counter() - t
    if checks is not None:
        checks.packets(packets)
        out.qc = checks.result()

    wall_s = time.perf_counter() - started
    fps = out.frame_count / wall_s if wall_s else 0.0
    out.stats = SegmentStats(wall_s - encode_s, encode_s, wall_s, fps, time.process_time() - cpu_started)
    return out


def _rung_encoders(ladder: LadderSpec | None, info: SourceInfo, threads: int) -> list[RungEncoder]:
    if ladder is None:
        return []
    rate = frame_rate(info.fps)
    interval = ladder.keyframe_interval(float(rate))
    sizes = ladder.sizes(info)
    return [
        RungEncoder(rung, size, aspect, rate, interval, threads)
        for rung, size, aspect in zip(ladder.rungs, sizes, sample_aspects(sizes), strict=True)
    ]


def _with_unmarked_stills(
    frames: Iterable[av.VideoFrame],
    stills: Sequence[Still],
    on_still: Callable[[str, bytes], None],
    info: SourceInfo,
    width: int,
    height: int,
    stream: av.VideoStream,
) -> Iterator[av.VideoFrame]:
    """`frames`, handing each still's frame, before it goes on, to a pipeline of its own without the watermark:
    alone, as render_preview composes the source's first frame (the render's pipeline may then write the
    watermark into the decoder's buffer)."""
    colorspace = stream.codec_context.colorspace
    at = {still.offset: still.name for still in stills}
    for offset, frame in enumerate(frames):
        if (name := at.get(offset)) is not None:
            plain = FramePipeline.for_source(info, width, height, None, colorspace)
            (picture,) = plain.pictures([frame])
            on_still(name, png_of(picture, colorspace))
        yield frame
