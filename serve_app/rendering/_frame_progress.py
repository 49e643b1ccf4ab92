"""One render run's progress as its hooks see it: the frames its segments have encoded, then those its mux has
written, read from the pool's frame tally.

While it encodes, each segment task reports its frames done so far (at its first frame, then at most every
`job.progress_interval_s` of the time passing in its worker, and at its last frame; fire-and-forget) to the pool's
FrameTally (one for all renders of the pool, each run under a key of its own; held by the supervisor, or an actor of
its own); the driver reads the tally as a report comes in (every interval from a tally actor), at most once per
interval, and hands the hooks one RenderProgress (phase, frames done/total, measured speed) when the count moved. The
mux task reports the frames it has written the same way, the last of them as it goes on to finish and store the file.
So a render reports once an interval while it encodes and muxes, however few segments it has, each count without an
interval's delay, and a slow reader never slows the encode. The interval is half the poll hint clients are told
(_render_tasks.progress_interval_s): every poll sees a new figure. A retried segment reports from 0 again; the tally
keeps each segment's high-water mark, so its frames are never counted twice and progress never goes back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from actors.actor_calls import ActorUnavailable
from mcp_protocol.progress import MUXING, RENDERING, RenderProgress, SpeedMeter
from render_kernels.source_info import SourceInfo
from serve_app.observability.catalog import SEGMENT_RETRIES, WORKER_LOSSES
from serve_app.rendering._render_job import RenderHooks
from serve_app.rendering._render_plan import Placement
from serve_app.rendering._render_tasks import SegmentSummary
from serve_app.rendering._tally import PoolTally


class FrameProgress:
    """The progress reports of run `run` of a render of `info`, to `hooks`, from the pool's `tally`: rendering with
    the frames done (monotonic, with `placement`'s note), then muxing with the frames written."""

    def __init__(
        self,
        hooks: RenderHooks,
        tally: PoolTally,
        run: str,
        interval_s: float,
        info: SourceInfo,
        placement: Placement,
    ) -> None:
        self.hooks = hooks
        self.tally = tally
        self.run = run
        self.interval_s = interval_s
        self.info = info
        self.placement = placement
        self._frames_reported = 0
        self._written_reported = 0
        self._speed = SpeedMeter()

    async def rendering(self) -> None:
        """The first rendering report: no frame done yet, and where the segments go."""
        info = self.info
        note = self.placement.note()
        await self.hooks.progress(RenderProgress(RENDERING, 0, info.frame_count, source_fps=info.fps, placement=note))

    async def follow_segments(
        self, started: Sequence[asyncio.Future[Any]], summaries: Sequence[Awaitable[SegmentSummary]]
    ) -> list[SegmentSummary]:
        """Await the segments' summaries as they come (`started`: the segments' starts, in segment order), reporting
        the frames done meanwhile: each segment's count is the larger of its live tally and, once it has ended, its
        final frame count. The summaries, in segment order."""
        frames = [0] * len(summaries)
        ended: list[SegmentSummary] = []
        watching = asyncio.ensure_future(self._watch_segments(frames, started))
        waiting = {asyncio.ensure_future(summary) for summary in summaries}
        try:
            while waiting:
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for finished in done:
                    summary = finished.result()
                    if summary.attempt:
                        SEGMENT_RETRIES.inc(summary.attempt)
                        WORKER_LOSSES.inc(summary.attempt, task="segment")
                    ended.append(summary)
                    frames[summary.index] = summary.frame_count
                    self.placement.segment_finished(summary.node)
                await self._frames_done(sum(frames), placement_changed=self.placement.said is not None)
        finally:
            watching.cancel()
            for future in waiting:
                future.cancel()
        self.placement.log_note()
        return sorted(ended, key=lambda summary: summary.index)

    async def muxing(self) -> None:
        """The first muxing report: every frame encoded, none written yet."""
        total = self.info.frame_count
        await self.hooks.progress(RenderProgress(MUXING, total, total, source_fps=self.info.fps))

    async def watch_mux(self) -> None:
        """Report the frames the mux has written (it reports last, after the segments), as they move."""
        await self._follow(lambda live: self._written(live[-1]))

    async def _watch_segments(self, frames: list[int], started: Sequence[asyncio.Future[Any]]) -> None:
        """Fold the segments' live counts into `frames` (each segment's, by index) and report, from the moment one
        of the segments has `started` (a render queued behind others costs the tally nothing). Best effort: if the
        tally actor is lost, progress goes on moving one segment at a time, and the render is unaffected."""
        await asyncio.wait(started, return_when=asyncio.FIRST_COMPLETED)
        self._speed.add(sum(frames))  # a segment has started: speed is measured from here, not from the queue

        async def fold(live: list[int]) -> None:
            frames[:] = map(max, frames, live[: len(frames)])
            await self._frames_done(sum(frames))

        await self._follow(fold)

    async def _frames_done(self, frames_done: int, placement_changed: bool = False) -> None:
        """Hand the hooks a rendering report when the count moved (so never backwards, never repeated), or the
        placement note did (a segment finished)."""
        if frames_done <= self._frames_reported and not placement_changed:
            return
        self._frames_reported = max(self._frames_reported, frames_done)
        fps = self._speed.add(self._frames_reported)
        info = self.info
        report = RenderProgress(
            RENDERING, self._frames_reported, info.frame_count, fps, info.fps, self.placement.note()
        )
        await self.hooks.progress(report)

    async def _written(self, frames_written: int) -> None:
        """Hand the hooks a muxing report when the frames written moved."""
        if frames_written <= self._written_reported:
            return
        self._written_reported = frames_written
        total = self.info.frame_count
        await self.hooks.progress(
            RenderProgress(MUXING, total, total, source_fps=self.info.fps, frames_written=frames_written)
        )

    async def _follow(self, fold: Callable[[list[int]], Awaitable[None]]) -> None:
        """Hand `fold` this run's tally counts as a report arrives (in-process tally; else every interval), at most
        once per interval: a report reaches the hooks at once rather than up to an interval late, and a poller sees
        every interval's count. Returns if the tally actor is lost."""
        while True:
            await self.tally.moved(self.run, self.interval_s)
            read_at = time.monotonic()
            try:
                live = await self.tally.counts(self.run)
            except ActorUnavailable:
                return
            if live is not None:
                await fold(live)
            await asyncio.sleep(max(0.0, read_at + self.interval_s - time.monotonic()))
