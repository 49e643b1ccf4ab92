"""Silence, clipping and loudness of a whole audio track, with FFmpeg's own meters: silencedetect, and ebur128
(ITU-R BS.1770-4 / EBU R128: integrated loudness, loudness range, true peak), in one filter graph the track's
audio passes through once, beside its encode."""

from __future__ import annotations

import math
from fractions import Fraction

import av
import numpy as np
from av.filter.context import FilterContext

from .findings import GRAPH_THREADS, PEAK_FLOOR_DBTP, AudioQc, Interval, QcThresholds

# ebur128 with its true-peak meter (4x oversampled, as BS.1770-4 asks), its running figures set on every frame.
EBUR128 = "peak=true:metadata=1"
FLOAT_FORMATS = frozenset({"flt", "fltp", "dbl", "dblp"})


class AudioChecks:
    """Audio in, an AudioQc out.

    `source` each frame as decoded from the file, to count clipped samples: every sample (each channel's own) at or
    beyond full scale — a float sample of magnitude 1.0 or more, an integer one at its format's largest or smallest
    value. `push` the audio that is measured (the track as the output carries it: downmixed and resampled, with
    pts counting samples from 0): silent stretches (silencedetect: below `silence_db` for at least
    `silence_min_s`, to the sample), integrated loudness (LUFS), loudness range (LU) and true peak (dBTP, at most
    PEAK_FLOOR_DBTP below full scale). `result` once the track has ended.
    """

    def __init__(self, thresholds: QcThresholds) -> None:
        self._silencedetect = f"noise={thresholds.silence_db}dB:duration={thresholds.silence_min_s}"
        self._graph: tuple[av.filter.Graph, FilterContext, FilterContext, FilterContext] | None = None
        self._silent: list[Interval] = []
        self._silence_start: float | None = None
        self._loudness: dict[str, str] = {}
        self._clipped = 0
        self._samples = 0
        self._rate = 0

    def source(self, frame: av.AudioFrame) -> None:
        samples = frame.to_ndarray()
        if frame.format.name in FLOAT_FORMATS:
            self._clipped += int(np.count_nonzero(np.abs(samples) >= 1.0))
        else:
            limits = np.iinfo(samples.dtype.name)
            self._clipped += int(np.count_nonzero((samples >= limits.max) | (samples <= limits.min)))

    def push(self, chunk: av.AudioFrame | None) -> None:
        """One chunk of the measured audio; None ends it."""
        if self._graph is None:
            if chunk is None:
                return
            self._graph = self._build(chunk)
            self._rate = chunk.sample_rate
        _, source, silence, loudness = self._graph
        if chunk is not None:
            self._samples += chunk.samples
        source.push(chunk)
        for frame in _pulled(silence):
            metadata = frame.metadata
            if "lavfi.silence_start" in metadata:
                self._silence_start = float(metadata["lavfi.silence_start"])
            if "lavfi.silence_end" in metadata and self._silence_start is not None:
                self._silent.append(Interval(self._silence_start, float(metadata["lavfi.silence_end"])))
                self._silence_start = None
        for frame in _pulled(loudness):
            self._loudness = dict(frame.metadata) or self._loudness

    def result(self) -> AudioQc:
        self.push(None)
        duration = self._samples / self._rate if self._rate else 0.0
        if self._silence_start is not None:  # silent to the end
            self._silent.append(Interval(self._silence_start, duration))
        peak = float(self._loudness.get("lavfi.r128.true_peak", "0"))
        return AudioQc(
            duration_s=duration,
            silent=tuple(self._silent),
            clipped_samples=self._clipped,
            integrated_lufs=float(self._loudness.get("lavfi.r128.I", "-70")),
            range_lu=float(self._loudness.get("lavfi.r128.LRA", "0")),
            true_peak_dbtp=max(PEAK_FLOOR_DBTP, 20 * math.log10(peak)) if peak > 0 else PEAK_FLOOR_DBTP,
        )

    def _build(self, chunk: av.AudioFrame) -> tuple[av.filter.Graph, FilterContext, FilterContext, FilterContext]:
        graph = av.filter.Graph()
        graph.threads = GRAPH_THREADS
        source = graph.add_abuffer(
            format=chunk.format.name,
            sample_rate=chunk.sample_rate,
            layout=chunk.layout.name,
            time_base=Fraction(1, chunk.sample_rate),
        )
        split = graph.add("asplit")
        detector, meter = graph.add("silencedetect", self._silencedetect), graph.add("ebur128", EBUR128)
        silence, loudness = graph.add("abuffersink"), graph.add("abuffersink")
        source.link_to(split)
        split.link_to(detector, 0, 0)
        split.link_to(meter, 1, 0)
        detector.link_to(silence)
        meter.link_to(loudness)
        graph.configure()
        return graph, source, silence, loudness


def _pulled(sink: FilterContext) -> list[av.frame.Frame]:
    """What `sink` has ready (all of it once the input has ended)."""
    frames = []
    while True:
        try:
            frames.append(sink.pull())
        except (BlockingIOError, EOFError):
            return frames
