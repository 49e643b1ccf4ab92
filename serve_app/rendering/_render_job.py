"""What the render driver is asked to do (`RenderJob`), what it tells its caller while it works (`RenderHooks`) and
afterwards (`RenderTimings`), and the end it raises when the watermark preview is rejected (`RenderRejected`)."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar

from mcp_protocol.domain import TaskRecord
from mcp_protocol.progress import RenderProgress
from media_store.artifacts import (
    contact_sheet_key,
    final_key,
    poster_key,
    preview_key,
    source_frame_key,
    stream_prefix,
)
from media_store.base import MediaStore
from media_store.local import LocalMediaStore
from render_kernels.ladder import LadderSpec
from render_kernels.limits import MediaLimits
from render_kernels.media_io import Media
from render_kernels.plan import Segment
from render_kernels.preview import Still
from render_kernels.qc.findings import QcRequest, QcThresholds
from render_kernels.qc.sheet import SHEET_TILES
from render_kernels.source_info import SourceInfo
from render_kernels.spec import RenderSpec, WatermarkSpec
from render_kernels.video import EncodedSegment
from serve_app._config import Config
from serve_app.media.assets import AssetStore
from serve_app.media.media_limits import media_limits
from serve_app.media.media_probe import ParseBounds
from serve_app.rendering._render_stream import StreamPackaging
from serve_app.rendering._render_tasks import (
    PROGRESS_INTERVAL_S,
    MuxTask,
    QualityCheck,
    SegmentTask,
    TallyRef,
    TaskRef,
    progress_interval_s,
)

T = TypeVar("T")

FILESYSTEM = LocalMediaStore(os.sep)  # a job's default store: its out_path and preview_path are local paths


@dataclass(frozen=True)
class RenderJob:
    source_path: Media  # a local path, or an object of the media store (render_kernels.MediaSource)
    spec: RenderSpec
    out_path: str  # where the video goes, as a key of `media`
    preview_path: str | None = None  # where the watermark preview PNG goes (a key of `media`); only with a watermark
    # Where the source's first frame goes (a key of `media`), made beside the preview for the review page; None: not made
    source_frame_path: str | None = None
    poster_path: str | None = None  # where a JPEG frame of the finished video goes (a key of `media`); None: not made
    # The quality check's thresholds (render_kernels.qc), and where its contact sheet goes (a key of `media`); either
    # None: no check.
    qc: QcThresholds | None = None
    contact_sheet_path: str | None = None
    # With the check: whether the segments measure fidelity (VIDFORGE_QC_FIDELITY).
    qc_fidelity: bool = Config.model_fields["qc_fidelity"].default
    workers: int = 0  # segments to aim for; 0: one per CPU of the cluster (SegmentScheduler.plan_width)
    # How the source is parsed (probe, preview) and what it may cost; Config's defaults unless the caller says.
    parse: ParseBounds = field(default_factory=lambda: ParseBounds.of(Config()))
    limits: MediaLimits = field(default_factory=lambda: media_limits(Config()))
    principal: str = "local"  # whose render: the scheduler shares CPUs round-robin across principals
    segment_max_megapixels: int = Config.model_fields[
        "segment_max_megapixels"
    ].default  # output pixels one segment task may encode
    min_segment_s: float = Config.model_fields["min_segment_s"].default  # the shortest segment (VIDFORGE_MIN_SEGMENT_S)
    media: MediaStore = FILESYSTEM
    # What the upload's parse found in the source (serve_app.media.assets), for `source_path`; None: probe it first.
    source_info: SourceInfo | None = None
    gpu: str = Config.model_fields["gpu"].default  # VIDFORGE_GPU: auto, off or require
    gpu_wait_s: float = Config.model_fields["gpu_wait_s"].default  # with auto: how long to wait for a GPU node
    # Seconds between the progress reports of its tasks (_render_tasks.progress_interval_s of the poll hint).
    progress_interval_s: float = PROGRESS_INTERVAL_S
    # The streaming ladder to make beside the file (render_kernels.ladder), and where its files go (a key prefix of
    # `media`); None: no stream.
    ladder: LadderSpec | None = None
    stream_prefix: str | None = None

    @classmethod
    def of_record(cls, rec: TaskRecord, config: Config, assets: AssetStore) -> RenderJob:
        """The job a task's record asks for, with the server's settings: its assets resolved in `assets`, its files
        at media_store.artifacts' keys."""
        request, principal, task_id = rec.request, rec.principal, rec.task_id
        source = assets.resolve(request.source_asset_uri, principal, "source_asset_uri")
        watermark = None
        if (wm := request.watermark) is not None:
            image = assets.resolve(wm.image_asset_uri, principal, "watermark.image_asset_uri")
            watermark = WatermarkSpec(image=assets.media_of(image), position=wm.position, opacity=wm.opacity)
        spec = RenderSpec(output_format=request.output_format, resolution=request.resolution, watermark=watermark)
        streaming = request.streaming
        ladder = LadderSpec(streaming.rungs(request.resolution), streaming.segment_s) if streaming is not None else None
        return cls(
            source_path=assets.media_of(source),
            spec=spec,
            out_path=final_key(task_id, request.output_format),
            preview_path=preview_key(task_id) if watermark else None,
            source_frame_path=source_frame_key(task_id) if watermark else None,
            poster_path=poster_key(task_id),
            qc=config.qc_thresholds() if config.qc else None,
            contact_sheet_path=contact_sheet_key(task_id) if config.qc else None,
            qc_fidelity=config.qc_fidelity,
            workers=config.render_workers,
            parse=ParseBounds.of(config),
            limits=media_limits(config),
            media=assets.media,
            principal=principal,
            segment_max_megapixels=config.segment_max_megapixels,
            min_segment_s=config.min_segment_s,
            gpu=config.gpu,
            gpu_wait_s=config.gpu_wait_s,
            source_info=assets.source_info(source),
            progress_interval_s=progress_interval_s(config.poll_interval_ms),
            ladder=ladder,
            stream_prefix=stream_prefix(task_id) if ladder is not None else None,
        )

    def __post_init__(self) -> None:
        if self.spec.watermark is not None and not self.preview_path:
            raise ValueError("a render with a watermark needs a preview_path")
        if self.ladder is not None and not self.stream_prefix:
            raise ValueError("a render with a ladder needs a stream_prefix")

    def cut_multiple(self, info: SourceInfo) -> int:
        """What every segment's first frame is a multiple of: the ladder's keyframe interval (1 without one)."""
        return self.ladder.keyframe_interval(info.fps) if self.ladder is not None else 1

    def segment_task(
        self,
        segment: Segment,
        spec: RenderSpec,
        info: SourceInfo,
        tally: TallyRef,
        stills: tuple[Still, ...],
        qc: QcRequest | None,
    ) -> SegmentTask:
        """The task of one segment of a run of the job, with the stills it makes and the checks and rungs it adds."""
        return SegmentTask(self.source_path, segment, spec, info, tally, stills, qc, self.ladder)

    def mux_task(
        self, output_format: str, info: SourceInfo, segments: tuple[TaskRef[EncodedSegment], ...], tally: TallyRef
    ) -> MuxTask:
        """The last task of a run of the job: `segments` muxed into `out_path`, with the poster, the quality check's
        verdict and the stream the job asks for."""
        return MuxTask(
            output_format,
            self.media,
            self.out_path,
            info,
            segments,
            tally,
            self.poster_path,
            self.mux_check(),
            self.stream_packaging(),
        )

    def remove_outputs(self) -> None:
        """Delete what a failed or cancelled run may have stored: the file, and the stream (stored before it)."""
        self.media.delete([self.out_path])
        if self.stream_prefix is not None:
            self.media.delete_prefix(f"{self.stream_prefix}/")

    def stream_packaging(self) -> StreamPackaging | None:
        """What the mux task makes of the segments' rungs (None without a ladder): the stream, under `stream_prefix`."""
        if self.ladder is None or self.stream_prefix is None:
            return None
        return StreamPackaging(self.ladder, self.stream_prefix, self.source_path)

    def segment_checks(self, info: SourceInfo) -> QcRequest | None:
        """What each segment task measures for the quality check (None without one): the contact sheet's evenly
        spaced tiles, and the fidelity samples only with `qc_fidelity`."""
        if self.qc is None:
            return None
        request = QcRequest.evenly(info.frame_count, info.fps, SHEET_TILES, self.qc)
        return request if self.qc_fidelity else replace(request, fidelity_frames=frozenset())

    def mux_check(self) -> QualityCheck | None:
        """What the mux task makes of the findings (None without a check): the verdict and the contact sheet."""
        if self.qc is None or self.contact_sheet_path is None:
            return None
        return QualityCheck(self.qc, self.contact_sheet_path)


class RenderHooks(Protocol):
    async def progress(self, report: RenderProgress) -> None:
        """Probing, then rendering at most every `job.progress_interval_s` while the frame count moves (monotonic),
        then muxing, as often while the frames written move. Awaited inline: keep it short."""

    async def preview_ready(self, preview_path: str) -> bool:
        """Called once when a watermark is set, after the preview PNG is written; segments keep encoding
        meanwhile. True: approved, the render is muxed. False: rejected, the render stops."""


class RenderRejected(Exception):
    """The watermark preview was not approved; nothing was muxed."""


@dataclass(frozen=True)
class RenderTimings:
    """Where one run's time went: when it started (epoch seconds), wall seconds per stage (see RenderRun; stages
    overlap), the kernels' own wall seconds for each segment and for the audio, and when the render's caller
    had published it (epoch seconds; None until it has)."""

    started_at: float
    stages: dict[str, float]
    segment_wall_s: tuple[float, ...]
    audio_wall_s: float | None
    completed_at: float | None = None

    def summary(self) -> str:
        stages = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.stages.items())
        return f"{stages}; {len(self.segment_wall_s)} segments"


async def timed(stages: dict[str, float], stage: str, awaitable: Awaitable[T]) -> T:
    """`awaitable`'s result, its wall seconds kept in `stages` under `stage` once it has one."""
    started = time.perf_counter()
    result = await awaitable
    stages[stage] = time.perf_counter() - started
    return result
