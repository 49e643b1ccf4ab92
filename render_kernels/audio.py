"""Encode the source's audio once for the whole render (AAC for mp4/mov, Opus for webm)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import av
from av.audio.resampler import AudioResampler

from .errors import UnsupportedMedia
from .media_io import Media, describe, main_audio_stream, open_input
from .qc.audio_checks import AudioChecks
from .qc.findings import AudioQc, QcThresholds

AAC_BIT_RATE = 160_000
OPUS_BIT_RATE = 128_000
OPUS_SAMPLE_RATE = 48_000  # Opus runs at 48 kHz internally (and WebM players expect it)
FALLBACK_SAMPLE_RATE = 48_000  # for source rates AAC cannot carry
# swresample's downmix of more than two channels to stereo: its standard matrix (ITU-R BS.775: centre and
# surrounds at -3 dB into each side, LFE left out), scaled so no output sample can exceed full scale. Without
# this, swresample leaves the matrix unscaled for float output (AAC's and Opus's), and a loud 5.1 mix clips.
DOWNMIX_OPTIONS = {"rematrix_maxval": "1.0"}


@dataclass(frozen=True)
class AudioStats:
    """What encoding the audio track took: wall seconds, the samples it encoded, and the CPU seconds of its process
    meanwhile (0 until it has ended)."""

    wall_s: float = 0.0
    samples: int = 0
    cpu_s: float = 0.0


@dataclass
class EncodedAudio:
    """The whole encoded audio track: picklable packets with timestamps in `time_base` (1/sample_rate)."""

    codec: str
    packets: list[bytes]
    pts: list[int]
    dts: list[int]
    time_base: tuple[int, int]
    sample_rate: int
    channels: int
    layout: str
    extradata: bytes | None
    stats: AudioStats = field(default_factory=AudioStats)
    qc: AudioQc | None = None  # what quality control found, when encode_audio was asked for it


def encode_audio(source_path: Media, output_format: str, qc: QcThresholds | None = None) -> EncodedAudio | None:
    """Decode, resample and encode the source's main audio track; None when the source has no audio.

    The track is probe.main_audio_stream's (the default-disposition one, else the first), the one whose facts
    probe reports. AAC keeps the source sample rate when it can carry it (else 48 kHz); Opus is always 48 kHz.
    Mono stays mono (not upmixed: every player plays it on both speakers, and it costs half the bits);
    stereo stays stereo; more channels (5.1, 7.1, ...) are downmixed to stereo (DOWNMIX_OPTIONS). The track
    starts with the video (its first sample is laid at time 0): the source's audio/video start offset, if
    any, is not preserved.

    `qc` asks for quality control of the track (qc.audio_checks.AudioChecks, by these thresholds): clipped samples
    counted in the audio as decoded from the source, silence and loudness measured on the audio the encoder is
    given (downmixed and resampled). None: none, at no cost.
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    codec = "libopus" if output_format == "webm" else "aac"
    with open_input(source_path) as container:
        stream = main_audio_stream(container)
        if stream is None:
            return None
        source = stream.codec_context
        layout = "mono" if source.channels == 1 else "stereo"
        encoder = av.CodecContext.create(codec, "w")
        assert isinstance(encoder, av.AudioCodecContext)  # an audio codec's context
        if codec == "libopus":
            rate = OPUS_SAMPLE_RATE
        else:
            rates = encoder.codec.audio_rates or ()
            rate = source.sample_rate if source.sample_rate in rates else FALLBACK_SAMPLE_RATE
        encoder.sample_rate = rate
        encoder.layout = layout
        formats = encoder.codec.audio_formats
        assert formats, f"{codec} lists no sample format"
        encoder.format = formats[0]
        encoder.time_base = Fraction(1, rate)
        encoder.bit_rate = OPUS_BIT_RATE if codec == "libopus" else AAC_BIT_RATE
        encoder.flags |= av.codec.context.Flags.global_header
        encoder.open()
        # The resampler also re-chunks into the encoder's fixed frame size (1024 for AAC, 960 for Opus).
        resampler = AudioResampler(
            format=encoder.format,
            layout=layout,
            rate=rate,
            frame_size=encoder.frame_size,
            options=DOWNMIX_OPTIONS if source.channels > 2 else None,
        )

        out = EncodedAudio(
            codec=codec,
            packets=[],
            pts=[],
            dts=[],
            time_base=(1, rate),
            sample_rate=rate,
            channels=encoder.channels,
            layout=layout,
            extradata=None,
        )
        samples = 0
        checks = AudioChecks(qc) if qc is not None else None

        def encode(chunks: Iterable[av.AudioFrame | None]) -> None:
            nonlocal samples
            for chunk in chunks:
                if chunk is not None:  # sample-counted timestamps, gap-free from 0
                    chunk.pts, chunk.time_base = samples, encoder.time_base
                    samples += chunk.samples
                    if checks is not None:
                        checks.push(chunk)
                for packet in encoder.encode(chunk):
                    assert packet.pts is not None and packet.dts is not None  # an encoder's packets are timed
                    out.packets.append(bytes(packet))
                    out.pts.append(packet.pts)
                    out.dts.append(packet.dts)

        try:
            for frame in container.decode(stream):
                if checks is not None:
                    checks.source(frame)
                frame.pts = None  # timestamps are re-derived from sample counts above
                encode(resampler.resample(frame))
        except av.FFmpegError as err:
            raise UnsupportedMedia(f"cannot decode audio: {describe(err)}") from err
        encode(resampler.resample(None))
        encode([None])
    out.extradata = encoder.extradata
    if checks is not None:
        out.qc = checks.result()
    out.stats = AudioStats(time.perf_counter() - started, samples, time.process_time() - cpu_started)
    return out
