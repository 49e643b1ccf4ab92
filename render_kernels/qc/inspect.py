"""Quality control of an existing video, with no render: the detectors and audio measures a render's quality control
runs, over the whole file in one decode, and its contact sheet.

The picture is checked as players show it (upright, square pixels, deinterlaced) but at most INSPECT_WIDTH pixels
wide: black and frozen tests look at whole pictures (a share of dark pixels, a mean difference), which a downscale
keeps, and a 4k video then costs its decode and little more. Times count frames at the average frame rate, as a
render's output does.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

import av

from ..compose import FramePipeline
from ..errors import UnsupportedMedia
from ..media_io import Media, describe, main_audio_stream, main_video_stream, open_input
from ..source_info import SourceInfo, frame_rate
from ..spec import even
from ._video_checks import PictureChecks
from .audio_checks import AudioChecks
from .findings import AudioQc, QcReport, QcRequest, QcThresholds
from .merge import merge_qc
from .sheet import SHEET_TILES, contact_sheet

INSPECT_WIDTH = 640


def inspect_video(
    source: Media, info: SourceInfo, thresholds: QcThresholds, tiles: int = SHEET_TILES
) -> tuple[QcReport, bytes]:
    """The report on `source` (whose probe found `info`) and its contact sheet (JPEG bytes) with `tiles` evenly
    spaced tiles. No fidelity (nothing was encoded): `fidelity` is None, and the source and output frame counts are
    both the frames decoded. Raises UnsupportedMedia for a file with no video stream, or one that does not
    decode."""
    shown_w, shown_h = info.display_size()
    width = min(even(shown_w), INSPECT_WIDTH)
    height = even(shown_h * width / shown_w)
    rate = frame_rate(info.fps)
    request = QcRequest.evenly(info.frame_count, info.fps, tiles, thresholds)
    with open_input(source) as container:
        try:
            stream = main_video_stream(container)
        except UnsupportedMedia as err:
            raise UnsupportedMedia(f"cannot inspect: {err.reason}") from err
        stream.thread_type = "AUTO"
        sound = main_audio_stream(container)
        colorspace = stream.codec_context.colorspace
        pictures = PictureChecks(0, rate, request, colorspace)
        pipeline = FramePipeline.for_source(info, width, height, None, colorspace, before_watermark=pictures.push)
        audio = AudioChecks(thresholds) if sound is not None else None
        decoded = 0
        try:
            for _ in pipeline.pictures(_video_frames(container, stream, sound, audio)):
                decoded += 1
        except av.FFmpegError as err:
            raise UnsupportedMedia(f"cannot decode: {describe(err)}") from err
    if not decoded:
        raise UnsupportedMedia("cannot inspect: the video stream has no picture")
    audio_qc: AudioQc | None = audio.result() if audio is not None else None
    segment = pictures.result(decoded, decoded)
    report = merge_qc([segment], audio_qc, float(rate), thresholds)
    return report, contact_sheet([segment], report)


def _video_frames(
    container: av.container.InputContainer,
    video: av.VideoStream,
    sound: av.AudioStream | None,
    audio: AudioChecks | None,
) -> Iterator[av.VideoFrame]:
    """The video's frames, in order, from one demux of the file; its audio, on the way, goes to `audio`, with
    timestamps counting its samples from 0."""
    samples = 0
    for packet in container.demux(*(stream for stream in (video, sound) if stream is not None)):
        if packet.stream.index == video.index:
            yield from video.decode(packet)
        elif sound is not None and audio is not None:
            for frame in sound.decode(packet):
                audio.source(frame)
                frame.pts, frame.time_base = samples, Fraction(1, frame.sample_rate)
                samples += frame.samples
                audio.push(frame)
