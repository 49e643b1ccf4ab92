"""The approval gate of a render with a watermark: its pictures (the watermark preview and the source's first frame)
written for the reviewer, then the wait for the decision while the segments keep encoding.

The preview of a source the upload's parse vetted is rendered as the segments are: by the segment that holds its
frame, as it passes it, when that is a few seconds into the segment (render_kernels.plan_stills) and the segment
starts within STILL_START_WAIT_S; else by a Ray task in a pooled worker, beside them (the task's own decode and
worker ~0.5 CPU-s more than the segment's picture, 5-10 % of a 10 s render). A source nobody vetted had its preview
made by the parser that probed it (serve_app.rendering._render_plan).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace

from render_kernels.preview import PREVIEW, PREVIEW_AT, SOURCE_FRAME
from render_kernels.source_info import SourceInfo
from render_kernels.spec import RenderSpec
from serve_app.rendering._render_job import RenderHooks, RenderJob, RenderRejected, timed
from serve_app.rendering._render_pool import RunQueue
from serve_app.rendering._render_tasks import PROGRESS_INTERVAL_S, PicturesTask
from serve_app.rendering._scheduling import Dispatched
from serve_app.rendering._tally import PoolTally, stills_made
from serve_app.rendering._task_calls import RenderTasks, SegmentParts, settled

# How long the approval gate waits for the segments that make its pictures to start before it makes them in a
# task: past it the render is queued behind others, and its reviewer would wait for its turn.
STILL_START_WAIT_S = 2.0

# The pictures a gate needs made, by still name: (spec, at) as render_preview takes them.
Wanted = dict[str, tuple[RenderSpec, float]]
# The scheduled segments that make the gate's stills, by still name.
Carriers = Mapping[str, asyncio.Future[Dispatched[SegmentParts]]]


def pictures_wanted(job: RenderJob, parsed_preview: bytes | None) -> Wanted:
    """The pictures the approval gate needs made: the watermark preview unless the parser made it, and the source's
    first frame when the job asks for it."""
    if job.spec.watermark is None:
        return {}
    wanted = {} if parsed_preview is not None else {PREVIEW: (job.spec, PREVIEW_AT)}
    if job.source_frame_path is not None:  # the source as the render shows it, before the watermark
        wanted[SOURCE_FRAME] = (replace(job.spec, watermark=None), 0.0)
    return wanted


class ApprovalGate:
    """The gate of run `run` of `job`. `stills_from` says who made its pictures once it knows: "segments" or
    "task" (None: none were made)."""

    def __init__(
        self,
        job: RenderJob,
        hooks: RenderHooks,
        run: str,
        queue: RunQueue,
        tally: PoolTally,
        tasks: RenderTasks,
        stages: dict[str, float],
    ) -> None:
        self.job = job
        self.hooks = hooks
        self.run = run
        self.queue = queue
        self.tally = tally
        self.tasks = tasks
        self.stages = stages
        self.stills_from: str | None = None

    async def passed(self, parsed_preview: bytes | None, info: SourceInfo, wanted: Wanted, carriers: Carriers) -> None:
        """Write the preview PNG and, when the job asks, the source's first frame beside it: as the segments
        `carriers` make them, or else both in one pooled task (the source has been parsed by now: its upload's
        parse, or this run's); then wait for the decision while the segments keep encoding. Raises RenderRejected
        when the preview is not approved.

        One task, not one each: a task that starts while the segments hold every worker needs a worker process of
        its own, and a process started in a render's path costs it ~1 CPU-s, more than both pictures."""
        job = self.job
        path = job.preview_path
        assert path is not None  # a watermark render has one (RenderJob checks)
        pictures: dict[str, bytes] = {}
        if wanted:
            pictures = await timed(self.stages, "preview", self._pictures(info, wanted, carriers))
        await asyncio.to_thread(job.media.put_bytes, path, parsed_preview or pictures[PREVIEW])
        if job.source_frame_path is not None:
            await asyncio.to_thread(job.media.put_bytes, job.source_frame_path, pictures[SOURCE_FRAME])
        self.queue.awaiting_input(True)
        try:
            approved = await timed(self.stages, "approval", self.hooks.preview_ready(path))
        finally:
            self.queue.awaiting_input(False)
        if not approved:
            raise RenderRejected("the watermark preview was rejected")

    async def _pictures(self, info: SourceInfo, wanted: Wanted, carriers: Carriers) -> dict[str, bytes]:
        """The `wanted` pictures: the segments' stills when they come, else from a pooled task."""
        if carriers and (made := await self._segment_stills(carriers)) is not None:
            self.stills_from = "segments"
            return made
        self.stills_from = "task"
        made_by_task = await self.tasks.pictures(PicturesTask(self.job.source_path, info, tuple(wanted.values())))
        return dict(zip(wanted, made_by_task, strict=True))

    async def _segment_stills(self, carriers: Carriers) -> dict[str, bytes] | None:
        """The stills the carrier segments make; None when they will not come soon: a carrier has not started
        within STILL_START_WAIT_S (the render waits its turn behind others), or the carriers ended without them
        (their tally was lost)."""
        segments = set(carriers.values())
        _, waiting = await asyncio.wait(segments, timeout=STILL_START_WAIT_S)
        if waiting:
            return None
        arrived = asyncio.ensure_future(stills_made(self.tally, self.run, set(carriers)))
        ended = asyncio.ensure_future(
            asyncio.wait([asyncio.ensure_future(settled(segment.result().refs.summary)) for segment in segments])
        )
        try:
            await asyncio.wait({arrived, ended}, return_when=asyncio.FIRST_COMPLETED)
            if not arrived.done():  # a still reported before its segment ended is in the tally: read once more
                await asyncio.wait({arrived}, timeout=2 * PROGRESS_INTERVAL_S)
            return arrived.result() if arrived.done() and not arrived.exception() else None
        finally:
            arrived.cancel()
            ended.cancel()
