"""What quality control works by and finds: the thresholds of a verdict, what a render asks a segment to measure,
what a segment and the audio task find (small frozen values that travel back through Ray: bytes and numbers,
never frames), and the report a render or an inspection ends with."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

# A frame identical to its source has an infinite PSNR (ffmpeg's psnr filter says "inf"); it counts as this many
# dB in the mean, as x264's own PSNR does, so one identical frame cannot make the mean infinite.
PSNR_CAP_DB = 100.0
# The quietest true peak reported: digital silence has none (-inf dBTP), which JSON cannot carry.
PEAK_FLOOR_DBTP = -144.0
# Threads of each quality control filter graph: one, in the thread that feeds it. Its work is small beside the
# encode's, and a graph's default (as many as the machine has CPUs) would start a pool per segment task.
GRAPH_THREADS = 1
TILE_WIDTH = 256  # a contact sheet tile's width in pixels, as a segment makes it (its height keeps the aspect)

Verdict = Literal["pass", "warn", "fail"]


@dataclass(frozen=True)
class QcThresholds:
    """What a verdict is judged by; these defaults are the documented ones.

    An event (black, frozen or silent for at least its minimum), a clipped sample, a true peak above
    `true_peak_max_dbtp` or a mean PSNR-Y under `psnr_warn_db` warns. Black or frozen picture over at least
    `fail_fraction` of the output's duration, a mean PSNR-Y under `psnr_fail_db`, or an output whose frame count
    differs from its source's fails.
    """

    black_min_s: float = 0.5
    frozen_min_s: float = 1.0
    silence_min_s: float = 1.0
    silence_db: float = -50.0
    true_peak_max_dbtp: float = -1.0
    psnr_warn_db: float = 30.0
    psnr_fail_db: float = 20.0
    fail_fraction: float = 0.5


@dataclass(frozen=True)
class QcRequest:
    """What a render asks each segment to measure besides black and frozen picture: the output frames (numbered
    render-wide from 0) that get a contact sheet tile, and those whose encoded picture is compared with its
    source. `thresholds` decide which black or frozen runs a segment makes a tile of (those that may be events)."""

    tile_frames: frozenset[int] = frozenset()
    fidelity_frames: frozenset[int] = frozenset()
    thresholds: QcThresholds = QcThresholds()
    tile_width: int = TILE_WIDTH

    @classmethod
    def evenly(cls, frame_count: int, fps: float, tiles: int, thresholds: QcThresholds = QcThresholds()) -> QcRequest:
        """`tiles` tiles evenly spaced over `frame_count` frames (each in the middle of its share), and a fidelity
        sample every whole number of frames at most a second apart, starting half a step in."""
        step = max(1, math.floor(fps))
        return cls(
            tile_frames=frozenset(min(frame_count - 1, int((i + 0.5) * frame_count / tiles)) for i in range(tiles)),
            fidelity_frames=frozenset(range(step // 2, frame_count, step)),
            thresholds=thresholds,
        )


@dataclass(frozen=True)
class FrameRun:
    """Output frames [start, end) (render-wide numbers) of one black or frozen run."""

    start: int
    end: int


@dataclass(frozen=True)
class Tile:
    """A small JPEG of the output frame `frame` (render-wide), `time_s` into the video."""

    frame: int
    time_s: float
    jpeg: bytes


@dataclass(frozen=True)
class Thumbnail:
    """A tiny yuv420p picture (its three planes, one after another): enough to tell whether the last picture of
    one segment and the first of the next are the same, as freezedetect would over the cut."""

    width: int
    height: int
    planes: bytes


@dataclass(frozen=True)
class FidelitySample:
    """One output frame's encoded picture against the picture the encoder was given."""

    frame: int
    psnr_y_db: float  # capped at PSNR_CAP_DB
    ssim: float  # of the luma (ffmpeg's ssim filter's Y)


@dataclass(frozen=True)
class SegmentQc:
    """What one segment's quality control found, for merge_qc (which needs every segment's).

    `black` and `frozen` are the runs freezedetect and blackdetect found with no minimum duration, inside the
    segment only; a run open at the segment's end may go on in the next. `end_reference` is the picture a frozen
    run going on over the segment's end would still show (freezedetect's reference: the first picture of the run
    then open, else the last), the output frame `end_reference_frame`; `first_picture` the segment's first.
    """

    start_frame: int
    source_frames: int  # source frames decoded for the segment (its lead-in not counted)
    output_frames: int  # frames the encoder gave out
    black: tuple[FrameRun, ...]
    frozen: tuple[FrameRun, ...]
    first_picture: Thumbnail
    end_reference: Thumbnail
    end_reference_frame: int
    fidelity: tuple[FidelitySample, ...] = ()
    tiles: tuple[Tile, ...] = ()  # at the frames the request asked for
    event_tiles: tuple[Tile, ...] = ()  # at the first frame of each run that may be an event


@dataclass(frozen=True)
class Interval:
    """[start_s, end_s) in seconds from the start of the video."""

    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_json(self) -> dict[str, float]:
        return {"start_s": round(self.start_s, 3), "end_s": round(self.end_s, 3)}


@dataclass(frozen=True)
class Event:
    """A black, frozen or silent stretch that counts (at least its minimum duration), starting at output frame
    `first_frame`: where the contact sheet shows it."""

    kind: Literal["black", "frozen", "silent"]
    interval: Interval
    first_frame: int


@dataclass(frozen=True)
class AudioQc:
    """What the audio task found over the whole track (audio_checks.AudioChecks says what each number is)."""

    duration_s: float
    silent: tuple[Interval, ...]
    clipped_samples: int
    integrated_lufs: float
    range_lu: float
    true_peak_dbtp: float


@dataclass(frozen=True)
class Loudness:
    integrated_lufs: float
    range_lu: float
    true_peak_dbtp: float


@dataclass(frozen=True)
class Fidelity:
    psnr_y_db: float  # the mean of the sampled frames' PSNR-Y (each capped at PSNR_CAP_DB)
    ssim: float  # the mean of their luma SSIM
    frames_compared: int


@dataclass(frozen=True)
class QcReport:
    """The verdict on a video, why, and what it is based on (merge.merge_qc makes it)."""

    verdict: Verdict
    reasons: tuple[str, ...]
    events: tuple[Event, ...]  # black, frozen and silent stretches, in order of their start
    loudness: Loudness | None  # None: no audio, or the audio was not checked
    clipped_samples: int
    fidelity: Fidelity | None  # None: no frame was compared
    source_frames: int
    output_frames: int

    def intervals(self, kind: str) -> list[Interval]:
        """The stretches of one kind ("black", "frozen" or "silent"), in order."""
        return [event.interval for event in self.events if event.kind == kind]

    def to_json(self) -> dict[str, Any]:
        """The report as JSON: seconds to the millisecond, dB and LU to 0.01."""
        loudness = self.loudness
        fidelity = self.fidelity
        return {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            **{kind: [i.to_json() for i in self.intervals(kind)] for kind in ("black", "frozen", "silent")},
            "loudness": None
            if loudness is None
            else {
                "integrated_lufs": round(loudness.integrated_lufs, 2),
                "range_lu": round(loudness.range_lu, 2),
                "true_peak_dbtp": round(loudness.true_peak_dbtp, 2),
            },
            "clipped_samples": self.clipped_samples,
            "fidelity": None
            if fidelity is None
            else {
                "psnr_y_db": round(fidelity.psnr_y_db, 2),
                "ssim": round(fidelity.ssim, 4),
                "frames_compared": fidelity.frames_compared,
            },
            "frames": {"source": self.source_frames, "output": self.output_frames},
        }


def clock(seconds: float) -> str:
    """A time as people read it in a report: minutes, seconds and tenths (0:02.0, 1:15.5)."""
    tenths = round(seconds * 10)
    return f"{tenths // 600}:{tenths % 600 / 10:04.1f}"
