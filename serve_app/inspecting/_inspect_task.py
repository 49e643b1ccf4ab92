"""What an inspection runs inside a Ray worker: the probe (for a video without stored facts) and the kernels' quality
check over the whole file (render_kernels.qc), returning small picklable values only: the facts, the report and
the contact sheet's JPEG. Light to import, like the render tasks' module: a worker imports the module of every
function it runs."""

from __future__ import annotations

from dataclasses import dataclass

from render_kernels.limits import MediaLimits
from render_kernels.media_io import Media
from render_kernels.probe import probe
from render_kernels.qc.findings import QcReport, QcThresholds
from render_kernels.qc.inspect import inspect_video
from render_kernels.source_info import SourceInfo


@dataclass(frozen=True)
class InspectTask:
    """What `inspect_parts` is given: the file, its facts when they are known (an asset's, found at upload), the
    media limits a probe enforces, and what the verdict is judged by."""

    source: Media
    info: SourceInfo | None
    limits: MediaLimits
    thresholds: QcThresholds


@dataclass(frozen=True)
class InspectedVideo:
    info: SourceInfo
    report: QcReport
    contact_sheet: bytes


def inspect_parts(task: InspectTask) -> InspectedVideo:
    """Probe the file unless its facts are known, then check it (UnsupportedMedia, OverLimit included, when it is
    not a video the kernels can read)."""
    info = task.info if task.info is not None else probe(task.source, task.limits)
    report, sheet = inspect_video(task.source, info, task.thresholds)
    return InspectedVideo(info, report, sheet)
