"""One report from a render's segments and its audio: runs joined over the segments' cuts, held to their minimum
duration only then, the fidelity averaged, the frames counted, and a verdict with reasons a person can read."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from ._video_checks import same_picture
from .findings import (
    AudioQc,
    Event,
    Fidelity,
    FrameRun,
    Interval,
    Loudness,
    QcReport,
    QcThresholds,
    SegmentQc,
    Verdict,
    clock,
)


def merge_qc(segments: Sequence[SegmentQc], audio: AudioQc | None, fps: float, thresholds: QcThresholds) -> QcReport:
    """The report on a video made of `segments` (in any order) and `audio` (None: no audio, or not checked) at
    `fps` output frames a second.

    A black run that ends where the next segment's begins is one run; a frozen run goes on over a cut when the
    picture freezedetect holds at the segment's end and the next segment's first are the same (within its noise
    tolerance). Then black runs shorter than `black_min_s` and frozen ones whose last frame is less than
    `frozen_min_s` after their first (freezedetect's measure) are dropped; so is a frozen run within a black one
    (black is a still picture too: it is reported once, as black). Events and clipped samples warn; see
    QcThresholds for the verdict.
    """
    ordered = sorted(segments, key=lambda segment: segment.start_frame)
    output_frames = sum(segment.output_frames for segment in ordered)
    source_frames = sum(segment.source_frames for segment in ordered)
    duration = output_frames / fps
    black = [r for r in _joined(_black_runs(ordered), touching=True) if r.end - r.start >= thresholds.black_min_s * fps]
    frozen = [
        run
        for run in _joined(_frozen_runs(ordered), touching=False)
        if run.end - 1 - run.start >= thresholds.frozen_min_s * fps
        and not any(b.start <= run.start and run.end <= b.end for b in black)
    ]
    events = [Event("black", Interval(r.start / fps, r.end / fps), r.start) for r in black]
    events += [Event("frozen", Interval(r.start / fps, r.end / fps), r.start) for r in frozen]
    if audio is not None:
        events += [Event("silent", interval, round(interval.start_s * fps)) for interval in audio.silent]
    events.sort(key=lambda event: event.interval.start_s)

    samples = [sample for segment in ordered for sample in segment.fidelity]
    fidelity = (
        Fidelity(
            sum(s.psnr_y_db for s in samples) / len(samples), sum(s.ssim for s in samples) / len(samples), len(samples)
        )
        if samples
        else None
    )
    loudness = None if audio is None else Loudness(audio.integrated_lufs, audio.range_lu, audio.true_peak_dbtp)
    clipped = audio.clipped_samples if audio is not None else 0

    failures: list[str] = []
    warnings = [
        f"{event.kind} for {event.interval.duration_s:.1f} s at {clock(event.interval.start_s)}" for event in events
    ]
    still = _covered([*black, *frozen]) / fps
    if duration and still >= thresholds.fail_fraction * duration:
        failures.append(f"black or frozen for {still:.1f} s of {duration:.1f} s ({still / duration:.0%})")
    if output_frames != source_frames:
        failures.append(f"the output has {output_frames} frames, its source {source_frames}")
    if loudness is not None and loudness.true_peak_dbtp > thresholds.true_peak_max_dbtp:
        clips = ": clips" if loudness.true_peak_dbtp > 0 else f": above {thresholds.true_peak_max_dbtp:+.1f} dBTP"
        warnings.append(f"true peak {loudness.true_peak_dbtp:+.1f} dBTP{clips}")
    if clipped:
        warnings.append(f"{clipped} clipped audio samples")
    if fidelity is not None and fidelity.psnr_y_db < thresholds.psnr_warn_db:
        reason = f"PSNR-Y {fidelity.psnr_y_db:.1f} dB: the output differs from its source"
        (failures if fidelity.psnr_y_db < thresholds.psnr_fail_db else warnings).append(reason)
    verdict: Verdict = "fail" if failures else "warn" if warnings else "pass"
    return QcReport(
        verdict=verdict,
        reasons=(*failures, *warnings),
        events=tuple(events),
        loudness=loudness,
        clipped_samples=clipped,
        fidelity=fidelity,
        source_frames=source_frames,
        output_frames=output_frames,
    )


def _black_runs(segments: Sequence[SegmentQc]) -> list[FrameRun]:
    return [run for segment in segments for run in segment.black]


def _frozen_runs(segments: Sequence[SegmentQc]) -> list[FrameRun]:
    """Every segment's frozen runs, and at each cut where the picture held at the end of one segment is the next
    one's first a run from that picture's frame over the next segment's first frame: it overlaps the run open at
    the earlier segment's end (which starts at that frame) and any the next one starts with."""
    runs = [run for segment in segments for run in segment.frozen]
    for before, after in zip(segments, segments[1:]):
        if same_picture(before.end_reference, after.first_picture):
            runs.append(FrameRun(before.end_reference_frame, after.start_frame + 1))
    return runs


def _joined(runs: Iterable[FrameRun], touching: bool) -> list[FrameRun]:
    """`runs` with those that overlap (or, `touching`, also those that meet end to start) made one."""
    joined: list[FrameRun] = []
    for run in sorted(runs, key=lambda run: run.start):
        if joined and (run.start < joined[-1].end or touching and run.start == joined[-1].end):
            joined[-1] = FrameRun(joined[-1].start, max(joined[-1].end, run.end))
        else:
            joined.append(run)
    return joined


def _covered(runs: Iterable[FrameRun]) -> int:
    """How many frames at least one of `runs` covers."""
    return sum(run.end - run.start for run in _joined(runs, touching=True))
