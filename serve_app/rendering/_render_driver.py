"""The render driver: one RenderJob -> Ray tasks over `render_kernels` -> the finished file in the media store.

    the upload's facts, or read_source (probe, and the watermark preview; isolated) -> plan_segments
        -> encode_audio || encode_segment x N (each started by the pool's fair scheduler; the audio beside the
        first) || [preview (a task; with the probe when there were no facts), approval gate] -> mux_segments
        -> out_path in job.media (and a JPEG frame of it, the poster, at poster_path; with a ladder, the stream)

`RenderRun` tells that story step by step; each step's module says how it is done, and why so: `_render_plan` (the
source's facts, from the upload or an isolated parse; the segments, the codecs, the nodes they run on), `_render_pool`
(the fair scheduler every render of a supervisor shares, and this run's turns in it), `_task_calls` (each Ray task
started with its typed arguments, its body in `_render_tasks`; retries; the cancel of those still running),
`_frame_progress` (the frames done and written, from the tasks' reports to the pool's tally), `_approval_gate` (the
watermark preview and the source's first frame, and the decision on them), `_render_mux` (the file muxed and stored
by the last task, and the stream packaged beside it: `_render_stream`); the job (`_render_job`) says what its tasks
are and what they add: the quality check (render_kernels.qc), the streaming ladder (render_kernels.ladder).

Data flow: raw frames never leave a task, and encoded media never passes through the driver. Audio and segment
tasks each return a small summary (frame count, timings), which the driver awaits to fail fast, and the encoded
media, which stays in the object store until the mux task fetches it, one segment's refs at a time: no process ever
holds the whole video (a segment task holds one segment, bounded by `segment_max_megapixels`).
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from mcp_protocol.progress import PROBING, RenderProgress
from render_kernels.audio import AudioStats
from render_kernels.mux import MuxStats
from render_kernels.preview import PREVIEW, SOURCE_FRAME, plan_stills
from render_kernels.qc.findings import QcReport
from render_kernels.streaming import StreamPackage
from serve_app.observability.catalog import WORKER_LOSSES
from serve_app.rendering._approval_gate import ApprovalGate, pictures_wanted
from serve_app.rendering._frame_progress import FrameProgress
from serve_app.rendering._render_job import RenderHooks, RenderJob, RenderTimings, timed
from serve_app.rendering._render_mux import mux_and_store
from serve_app.rendering._render_plan import plan_render, source_facts
from serve_app.rendering._render_pool import RenderPool, RunQueue
from serve_app.rendering._render_tasks import (
    AudioSummary,
    AudioTask,
    SegmentSummary,
)
from serve_app.rendering._scheduling import Dispatched
from serve_app.rendering._task_calls import AudioParts, RenderTasks, SegmentParts


async def run_render(job: RenderJob, hooks: RenderHooks, pool: RenderPool | None = None) -> MuxStats:
    """Render `job` into `job.out_path` and return what was written; with `pool`, sharing its scheduler and tally
    with the other renders driven through it (without, on a pool of its own).

    Raises UnsupportedMedia (OverLimit past `job.limits` or `job.parse`) for unusable sources, RenderRejected
    when the preview is not approved. On any failure or cancellation every outstanding task is force-cancelled
    (and the parser killed), its queued tasks are withdrawn, and no file is left at `out_path`; the preview PNG,
    if written, is left to the caller.
    """
    return await RenderRun(job, hooks, pool).run()


@dataclass
class RenderRun:
    """One execution of a RenderJob. After `run` ends, `stages` holds wall seconds per stage (probe; preview, the
    source's first frame with it; plan: segments, codecs and placement, a GPU node's wait included; queue: the wait
    for the first CPU; approval, segments, audio, mux, total; stages overlap), `segment_stats` each segment's
    summary, in segment order (with the kernel's own timings), `audio_stats` the audio kernel's (None without
    audio), `start_order` the scheduler's start order of each of its CPU tasks (for comparing runs of one pool), and
    `stills_from` who made the approval gate's pictures (the segments, or a picture task; None: none were made), and
    `qc` the quality check's report (render_kernels.qc; None when the job asks for none)."""

    job: RenderJob
    hooks: RenderHooks
    pool: RenderPool | None = None  # None: a pool of its own, closed when the run ends
    stages: dict[str, float] = field(default_factory=dict, init=False)
    segment_stats: list[SegmentSummary] = field(default_factory=list, init=False)
    audio_stats: AudioStats | None = field(default=None, init=False)
    qc: QcReport | None = field(default=None, init=False)  # the quality check's report, once muxed (with job.qc)
    stream: StreamPackage | None = field(default=None, init=False)  # the stream, once stored (with job.ladder)
    start_order: list[int] = field(default_factory=list, init=False)
    started_at: float = field(default=0.0, init=False)  # epoch seconds
    _key: str = field(default_factory=lambda: uuid.uuid4().hex, init=False)  # this run, in scheduler and tally
    _tasks: RenderTasks = field(default_factory=RenderTasks, init=False)
    _tally_open: bool = field(default=False, init=False)  # once the segments are planned
    _gate: ApprovalGate | None = field(default=None, init=False)  # with a watermark, once the segments are queued

    @property
    def stills_from(self) -> str | None:
        return self._gate.stills_from if self._gate is not None else None

    async def run(self) -> MuxStats:
        self.started_at = time.time()
        started = time.perf_counter()
        own_pool = self.pool is None
        pool = self.pool = self.pool or RenderPool()
        queue = RunQueue(pool, self.job.principal, self._key, self.stages, self.start_order)
        try:
            return await self._render(pool, queue)
        except BaseException:
            queue.withdraw()
            await self._tasks.cancel_unfinished()  # a cancelled mux is gone: it cannot publish the file any more
            await asyncio.to_thread(self.job.remove_outputs)
            raise
        finally:
            if self._tally_open:  # every segment task has ended (or was cancelled): nobody reports
                pool.tally.close(self._key)
            if own_pool:
                pool.close()
            self.stages["total"] = time.perf_counter() - started

    def timings(self) -> RenderTimings:
        return RenderTimings(
            self.started_at,
            dict(self.stages),
            tuple(s.stats.wall_s for s in self.segment_stats),
            self.audio_stats.wall_s if self.audio_stats is not None else None,
        )

    async def _render(self, pool: RenderPool, queue: RunQueue) -> MuxStats:
        job, tasks, key = self.job, self._tasks, self._key
        await self.hooks.progress(RenderProgress(PROBING))
        info, parsed_preview = await source_facts(job, self.stages)
        planning = time.perf_counter()
        plan = await plan_render(job, info, pool.scheduler, tasks, key)
        spec = plan.spec
        tally = await pool.tally.open(key, len(plan.segments), job.progress_interval_s)
        self._tally_open = True
        self.stages["plan"] = time.perf_counter() - planning
        progress = FrameProgress(self.hooks, pool.tally, key, job.progress_interval_s, info, plan.placement)
        await progress.rendering()

        ride_along = pool.audio_rides_along()  # with the first segment, or first in the scheduler
        audio_task = AudioTask(job.source_path, spec.output_format, job.qc)
        # The quality check rides in the tasks that already hold the frames: each segment measures its own, the mux
        # merges them (render_kernels.qc).
        qc = job.segment_checks(info)
        audio = None if ride_along else queue.schedule(lambda: tasks.audio(audio_task))
        pictures = pictures_wanted(job, parsed_preview)
        # No stills (none wanted, or plan_stills left them to a task): the approval gate makes its pictures itself.
        stills = plan_stills(plan.segments, info, PREVIEW in pictures, SOURCE_FRAME in pictures) or {}
        parts = [
            queue.schedule(
                functools.partial(
                    tasks.segment,
                    job.segment_task(segment, spec, info, tally, stills.get(segment.index, ()), qc),
                    plan.placement.gpu_share,
                ),
                bundle=plan.segment_bundle,
            )
            for segment in plan.segments
        ]
        if audio is None:
            audio = queue.ride_along(parts[0], lambda: tasks.audio(audio_task, ride_along=True))

        carriers = {still.name: parts[index] for index, made in stills.items() for still in made}
        work: list[Coroutine[Any, Any, None]] = [self._encode(parts, queue, progress), self._audio(audio, queue)]
        if job.spec.watermark is not None:
            self._gate = ApprovalGate(job, self.hooks, key, queue, pool.tally, tasks, self.stages)
            work.append(self._gate.passed(parsed_preview, info, pictures, carriers))
        waits = [asyncio.ensure_future(w) for w in work]
        try:
            await asyncio.gather(*waits)  # raises the first failure (or the rejection) at once
        finally:
            for waiting in waits:
                waiting.cancel()

        await progress.muxing()
        segments = tuple(part.result().refs.segment for part in parts)
        mux = job.mux_task(spec.output_format, info, segments, tally)
        stored = await timed(self.stages, "mux", mux_and_store(mux, audio.result().refs.audio, queue, tasks, progress))
        self.qc, self.stream = stored.qc, stored.stream
        return stored.stats

    async def _encode(
        self, parts: list[asyncio.Future[Dispatched[SegmentParts]]], queue: RunQueue, progress: FrameProgress
    ) -> None:
        """Await the segments, reporting the frames done meanwhile; their summaries in `segment_stats`."""

        async def summary(part: asyncio.Future[Dispatched[SegmentParts]]) -> SegmentSummary:
            return await (await queue.started(part)).summary

        following = progress.follow_segments(parts, [summary(part) for part in parts])
        self.segment_stats = await timed(self.stages, "segments", following)

    async def _audio(self, audio: asyncio.Future[Dispatched[AudioParts]], queue: RunQueue) -> None:
        """Await the audio; its kernel's figures in `audio_stats`."""

        async def summary() -> AudioSummary:
            return await (await queue.started(audio)).summary

        ended = await timed(self.stages, "audio", summary())
        if ended.attempt:
            WORKER_LOSSES.inc(ended.attempt, task="audio")
        self.audio_stats = ended.stats
