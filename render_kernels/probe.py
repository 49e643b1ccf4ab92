"""Probe a source video: every fact planning and encoding need, from one bounded demux pass."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from fractions import Fraction

import av

from ._orientation import display_orientation, field_order
from .errors import UnsupportedMedia
from .limits import NO_LIMITS, MediaLimits, OverLimit
from .media_io import (
    Damaged,
    Media,
    describe,
    is_still_image_format,
    main_audio_stream,
    main_video_stream,
    open_input,
    time_base,
)
from .source_info import MAX_RATE_DENOMINATOR, AudioInfo, SourceInfo

# The slowest average rate a source may have: the slowest rate with a denominator <= MAX_RATE_DENOMINATOR.
MIN_FRAME_RATE = Fraction(1, MAX_RATE_DENOMINATOR)
# Declared stream rates are trusted when within this relative distance of the measured average rate.
RATE_TOLERANCE = 0.005
# What the probe calls a file that libav cannot open or decode, or that holds fewer frames than its index lists:
# almost always an upload cut short or a damaged file.
TRUNCATED_OR_CORRUPT = "file is truncated or corrupt"


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
    except MemoryError:  # see media_io.open_input
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
