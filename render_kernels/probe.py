"""Probe a source video: every fact planning and encoding need, from one bounded demux pass."""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, fields
from fractions import Fraction
from typing import Any, BinaryIO, Protocol

import av

from .errors import UnsupportedMedia
from .orientation import display_orientation, field_order

# Output frame rates are kept to denominators <= 1001 so that the float `fps` in SourceInfo converts back to
# the exact same rational everywhere (encoder time base, mux stream rate): see `frame_rate`.
MAX_RATE_DENOMINATOR = 1001
# The slowest average rate a source may have: the slowest rate with a denominator <= MAX_RATE_DENOMINATOR.
MIN_FRAME_RATE = Fraction(1, MAX_RATE_DENOMINATOR)
# Declared stream rates are trusted when within this relative distance of the measured average rate.
RATE_TOLERANCE = 0.005


# What the probe calls a file that libav cannot open or decode, or that holds fewer frames than its index lists:
# almost always an upload cut short or a damaged file.
TRUNCATED_OR_CORRUPT = "file is truncated or corrupt"


class Damaged(UnsupportedMedia):
    """libav failed to open or decode the file (its own message is the reason): the probe reports it as
    truncated or corrupt; later readers of an accepted file pass the reason on as it is."""


class OverLimit(UnsupportedMedia):
    """Media past one of the caller's limits. `limit` names the MediaLimits field (or the caller's own limit),
    so the caller can name the setting behind it; `reason` states the value and the limit."""

    def __init__(self, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.limit = limit

    # It crosses process boundaries (a parse runs in a worker of its own).
    def __reduce__(self) -> tuple[type[OverLimit], tuple[str, str]]:
        return OverLimit, (self.limit, self.reason)


@dataclass(frozen=True)
class MediaLimits:
    """What one source (or watermark image) may cost to render; None is unbounded.

    Checked from headers and the demux pass, before the decoding they would make expensive: the probe stops
    reading as soon as a source is known to be past one, so a file of millions of tiny packets costs at most
    `max_frames` packet reads, not a pass over all of them.
    """

    max_duration_s: float | None = None
    max_frame_pixels: int | None = None
    max_frame_rate: float | None = None
    max_frames: int | None = None  # output frames; the output keeps the source's frame count
    max_image_pixels: int | None = None

    def check_frame_size(self, width: int, height: int) -> None:
        if self.max_frame_pixels is not None and width * height > self.max_frame_pixels:
            raise OverLimit(
                "max_frame_pixels",
                f"frames are {width}x{height} = {width * height} pixels, over the {self.max_frame_pixels}-pixel limit",
            )

    def check_image_size(self, width: int, height: int) -> None:
        if self.max_image_pixels is not None and width * height > self.max_image_pixels:
            raise OverLimit(
                "max_image_pixels",
                f"image is {width}x{height} = {width * height} pixels, over the {self.max_image_pixels}-pixel limit",
            )

    def check_video(self, width: int, height: int, fps: float, frame_count: int, duration_s: float) -> None:
        """Every video limit, on a probed source's facts (also stored ones: limits may have been lowered)."""
        self.check_frame_size(width, height)
        if self.max_frame_rate is not None and fps > self.max_frame_rate:
            raise OverLimit("max_frame_rate", f"frame rate {fps:.6g} fps is over the {self.max_frame_rate:g} fps limit")
        if self.max_frames is not None and frame_count > self.max_frames:
            raise OverLimit("max_frames", f"{frame_count} frames, over the {self.max_frames}-frame limit")
        if self.max_duration_s is not None and duration_s > self.max_duration_s:
            raise OverLimit(
                "max_duration_s", f"duration {duration_s:.6g} s is over the {self.max_duration_s:g} s limit"
            )


NO_LIMITS = MediaLimits()


class MediaSource(Protocol):
    """Media that is not a file on this node (e.g. an object in a bucket): `open` gives a seekable binary file
    for one read, which fetches only the byte ranges the demuxer asks for. Picklable, so a task can take it."""

    def open(self) -> AbstractContextManager[BinaryIO]: ...


# What every kernel reads: a local path (opened natively by libav), or a MediaSource.
Media = str | MediaSource


def open_binary(media: Media) -> AbstractContextManager[BinaryIO]:
    """`media` as a binary file, for readers that are not libav (Pillow, a header check)."""
    return open(media, "rb") if isinstance(media, str) else media.open()


@dataclass(frozen=True)
class AudioInfo:
    codec: str
    sample_rate: int
    channels: int
    duration_s: float


@dataclass(frozen=True)
class SourceInfo:
    """Facts about a source video. Times are seconds from the first video frame (which is at 0.0).

    `duration_s` is `frame_count / fps` (the duration of the constant-frame-rate output); `fps` is the
    average frame rate. The fields after `audio` are extras with defaults, so a hand-built SourceInfo
    with only the contract fields still works (keyframe frame indices are then derived from times and fps).
    """

    path: Media
    duration_s: float
    fps: float
    frame_count: int
    width: int
    height: int
    video_codec: str
    keyframe_times: tuple[float, ...]
    audio: AudioInfo | None
    start_time_s: float = 0.0  # stream timestamp of the first frame, for seeking
    keyframe_frames: tuple[int, ...] = ()  # presentation index of each keyframe, parallel to keyframe_times
    pixel_format: str = ""  # the decoder's, e.g. "yuv420p" (for the decoder choice: decoders.nvdec_refusal)
    # How the decoded width x height picture is shown (see orientation.py); the render outputs what is shown.
    rotation: int = 0  # clockwise degrees (0, 90, 180, 270) that turn a decoded picture upright (display matrix)
    hflip: bool = False  # then mirrored left-right (a vertical mirror is recorded as rotation 180 + hflip)
    sample_aspect: tuple[int, int] = (1, 1)  # width : height of one decoded pixel on screen (anamorphic video)
    field_order: str = "progressive"  # interlaced: "tff", "bff" or "auto" (per frame); renders deinterlace it

    def display_size(self) -> tuple[float, float]:
        """(width, height) of the picture as players show it, in square pixels: the sample aspect ratio
        stretches the width (as players do), then a quarter turn swaps the sides. Not rounded, so sizes
        derived from it (spec.output_size) keep the exact display aspect ratio."""
        width = self.width * self.sample_aspect[0] / self.sample_aspect[1]
        return (self.height, width) if self.rotation in (90, 270) else (width, self.height)

    def keyframes(self) -> list[tuple[int, float]]:
        """(frame index, time) of each keyframe, always starting with frame 0 at 0.0."""
        frames = self.keyframe_frames or tuple(round(t * self.fps) for t in self.keyframe_times)
        starts = [(0, 0.0)]
        starts += [(f, t) for f, t in zip(frames, self.keyframe_times) if 0 < f < self.frame_count]
        return starts


def source_record(info: SourceInfo) -> dict[str, Any]:
    """`info` as JSON-ready values, without its path (where the file is may change; what it holds does not)."""
    record = {f.name: getattr(info, f.name) for f in fields(info) if f.name != "path"}
    record["audio"] = asdict(info.audio) if info.audio is not None else None
    record["keyframe_times"], record["keyframe_frames"] = list(info.keyframe_times), list(info.keyframe_frames)
    record["sample_aspect"] = list(info.sample_aspect)
    return record


def source_from_record(record: dict[str, Any], path: Media) -> SourceInfo:
    """The SourceInfo `source_record` made, for the file at `path`.

    A record stored by an older version lacks the later fields (orientation, sample aspect, field order):
    they take their defaults, which describe an upright, square-pixel, progressive source.
    """
    audio = record["audio"]
    return SourceInfo(
        **{
            **record,
            "path": path,
            "keyframe_times": tuple(record["keyframe_times"]),
            "keyframe_frames": tuple(record["keyframe_frames"]),
            "audio": AudioInfo(**audio) if audio is not None else None,
            "sample_aspect": tuple(record.get("sample_aspect", (1, 1))),
        }
    )


def frame_rate(fps: float) -> Fraction:
    """The exact output frame rate for a SourceInfo.fps value."""
    return Fraction(fps).limit_denominator(MAX_RATE_DENOMINATOR)


@contextmanager
def open_input(media: Media) -> Iterator[av.container.InputContainer]:
    """Open media, turning "not media" into UnsupportedMedia (a missing file stays OSError)."""
    with nullcontext(media) if isinstance(media, str) else media.open() as opened:
        if _size(opened) == 0:
            raise UnsupportedMedia("file is empty")
        try:
            container = av.open(opened, "r", metadata_errors="ignore")
        except MemoryError:  # av.error.MemoryError too: out of memory is the caller's limit, not the media's fault
            raise
        except av.FFmpegError as err:
            raise Damaged(f"cannot open: {describe(err)}") from err
        with container:
            yield container


def _size(opened: str | BinaryIO) -> int:
    if isinstance(opened, str):
        return os.path.getsize(opened)
    size = opened.seek(0, os.SEEK_END)
    opened.seek(0)
    return size


def describe(err: av.FFmpegError) -> str:
    """FFmpeg's message for an error, lower-cased, without the file name PyAV appends."""
    return (err.strerror or str(err)).lower()


def is_still_image_format(container: av.container.InputContainer) -> bool:
    """True for FFmpeg's image demuxers (png_pipe, jpeg_pipe, image2, ...)."""
    name = container.format.name
    return name.startswith("image2") or name.endswith("_pipe")


def main_video_stream(container: av.container.InputContainer) -> av.VideoStream:
    """The first real video stream (cover art in audio files is a one-picture "video" stream: skipped)."""
    for stream in container.streams.video:
        if not stream.disposition & av.stream.Disposition.attached_pic:
            return stream
    raise UnsupportedMedia("no video stream")


def probe(path: Media, limits: MediaLimits = NO_LIMITS) -> SourceInfo:
    """Probe a source video with one demux pass (exact frame count, keyframes) plus one decoded frame.

    The work is bounded by the file size and by `limits`: packets are read once (and no further than a
    limit), and only the first picture is decoded to prove the stream is decodable (and to read how it is
    shown: its display matrix and field order). Raises UnsupportedMedia for empty ("file is empty"),
    truncated or corrupt ("file is truncated or corrupt ..."), audio-only or still-image input, OverLimit (a
    subclass) for a source past `limits`, MemoryError when the process runs out of memory; a missing file
    raises FileNotFoundError (the caller's "source not found").
    """
    try:
        return _probe(path, limits)
    except Damaged as err:
        raise UnsupportedMedia(f"{TRUNCATED_OR_CORRUPT} ({err.reason})") from err


def _probe(path: Media, limits: MediaLimits) -> SourceInfo:
    with open_input(path) as container:
        if is_still_image_format(container):
            raise UnsupportedMedia("file is a still image, not a video")
        video = main_video_stream(container)
        limits.check_frame_size(video.codec_context.width, video.codec_context.height)  # before any decode
        audio = main_audio_stream(container)
        scan = _scan(container, video, audio, limits)
        first_frame = _check_frames(video, scan)

        tb = time_base(video)
        first = min(scan.video_pts)
        count = len(scan.video_pts)
        rate = _average_rate(video, scan.video_pts)
        ordered = sorted(scan.video_pts)
        keyframe_pts = sorted(set(scan.keyframe_pts))
        ctx = video.codec_context
        limits.check_video(ctx.width, ctx.height, float(rate), count, float(count / rate))
        rotation, hflip = display_orientation(first_frame)
        return SourceInfo(
            path=path,
            duration_s=float(count / rate),
            fps=float(rate),
            frame_count=count,
            width=ctx.width,
            height=ctx.height,
            video_codec=ctx.name,
            keyframe_times=tuple(float((p - first) * tb) for p in keyframe_pts),
            audio=_audio_info(audio, scan.audio_ticks) if audio is not None else None,
            start_time_s=float(first * tb),
            keyframe_frames=tuple(bisect_left(ordered, p) for p in keyframe_pts),
            pixel_format=ctx.pix_fmt or "",
            rotation=rotation,
            hflip=hflip,
            sample_aspect=_sample_aspect(video),
            field_order=field_order(ctx.field_order, first_frame),
        )


def main_audio_stream(container: av.container.InputContainer) -> av.AudioStream | None:
    """The audio track a render carries: the one marked default (what a player picks), else the first."""
    tracks = container.streams.audio
    default = (track for track in tracks if track.disposition & av.stream.Disposition.default)
    return next(default, tracks[0] if tracks else None)


def _sample_aspect(video: av.VideoStream) -> tuple[int, int]:
    """The stream's sample aspect ratio (the container's, else the codec's) as (num, den); 1:1 when unset."""
    sar = video.sample_aspect_ratio
    return (sar.numerator, sar.denominator) if sar else (1, 1)


@dataclass
class _Scan:
    video_pts: list[int]
    keyframe_pts: list[int]
    audio_ticks: int  # summed audio packet durations, in the audio stream's time base
    first_frame: av.VideoFrame | None = None  # the first decoded picture


def _check_frames(video: av.VideoStream, scan: _Scan) -> av.VideoFrame:
    """The first decoded picture, once the scan is known to hold every frame the index lists and one decodes."""
    count = len(scan.video_pts)
    if video.frames and count < video.frames:
        raise Damaged(f"{count} of {video.frames} video frames present")
    if not count:
        raise UnsupportedMedia("no video frames")
    if scan.first_frame is None:
        raise Damaged("cannot decode: no video frame could be decoded")
    return scan.first_frame


def _scan(
    container: av.container.InputContainer, video: av.VideoStream, audio: av.AudioStream | None, limits: MediaLimits
) -> _Scan:
    """Read every packet once, stopping at a limit; decode only until the first picture appears."""
    scan = _Scan([], [], 0)
    streams = [video] if audio is None else [video, audio]
    max_frames = limits.max_frames
    max_span = None if limits.max_duration_s is None else limits.max_duration_s / time_base(video)
    try:
        for packet in container.demux(streams):
            if packet.size == 0 or packet.is_discard:  # flush markers and edit-list-discarded packets
                continue
            if packet.stream is audio:
                scan.audio_ticks += packet.duration or 0
                continue
            pts = packet.pts if packet.pts is not None else packet.dts
            if pts is None:
                raise UnsupportedMedia("video packets carry no timestamps")
            scan.video_pts.append(pts)
            if packet.is_keyframe:
                scan.keyframe_pts.append(pts)
            if max_frames is not None and len(scan.video_pts) > max_frames:
                raise OverLimit("max_frames", f"more than {max_frames} frames, over the {max_frames}-frame limit")
            if max_span is not None and abs(pts - scan.video_pts[0]) > max_span:  # exact check after the scan
                seen = float(abs(pts - scan.video_pts[0]) * time_base(video))
                raise OverLimit(
                    "max_duration_s", f"duration is at least {seen:.6g} s, over the {limits.max_duration_s:g} s limit"
                )
            if scan.first_frame is None:
                scan.first_frame = next(iter(video.decode(packet)), None)
        if scan.first_frame is None and scan.video_pts:
            scan.first_frame = next(iter(video.decode(None)), None)
    except MemoryError:  # see open_input
        raise
    except av.FFmpegError as err:
        raise Damaged(f"cannot decode: {describe(err)}") from err
    return scan


def _average_rate(video: av.VideoStream, pts: list[int]) -> Fraction:
    """Average frame rate: the declared rate when it matches the measured one (it is exact), else measured."""
    count = len(pts)
    span = (max(pts) - min(pts)) * time_base(video)
    if count < 2 or span <= 0:
        declared = video.average_rate or video.guessed_rate
        if not declared:
            raise UnsupportedMedia("cannot determine the frame rate")
        return _output_rate(Fraction(declared))
    measured = (count - 1) / span
    for declared in (video.average_rate, video.guessed_rate):
        if declared and abs(declared - measured) <= measured * RATE_TOLERANCE:
            return _output_rate(Fraction(declared))
    return _output_rate(measured)


def _output_rate(rate: Fraction) -> Fraction:
    """`rate` as an output rate (denominator <= 1001); a rate that would round to zero is unsupported media."""
    if rate < MIN_FRAME_RATE:
        # E.g. two frames hours apart: no output time base can represent it.
        raise UnsupportedMedia(
            f"frame rate {float(rate):.6g} fps is below the minimum of {float(MIN_FRAME_RATE):.6g} fps "
            f"(one frame per {MAX_RATE_DENOMINATOR} s)"
        )
    return rate.limit_denominator(MAX_RATE_DENOMINATOR)


def _audio_info(audio: av.AudioStream, ticks: int) -> AudioInfo:
    """The facts of the track main_audio_stream chose (audio.encode_audio renders the same one)."""
    ctx = audio.codec_context
    return AudioInfo(
        codec=ctx.name,
        sample_rate=ctx.sample_rate,
        channels=ctx.channels,
        duration_s=float(ticks * time_base(audio)),
    )


def time_base(stream: av.stream.Stream) -> Fraction:
    """The unit of a stream's timestamps; a stream without one cannot be timed, so it is unusable media."""
    if stream.time_base is None:
        raise UnsupportedMedia(f"the {stream.type} stream has no time base")
    return stream.time_base
