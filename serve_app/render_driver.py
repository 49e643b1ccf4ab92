"""The render driver: one RenderJob -> Ray tasks over `render_kernels` -> the finished file on this node.

    probe (isolated) -> plan_segments -> [render_preview (isolated)] -> encode_segment x N  ||  encode_audio
        -> [approval gate] -> mux_segments (Ray task pinned to this node) -> out_path

Data flow: raw frames never leave a task. Each segment task returns two objects, a small summary (frame
count, timings) that the driver awaits for fail-fast error detection, and the encoded segment, which goes
from the object store straight into the mux task as a top-level argument. So the driver (the supervisor
actor, shared by every render) never holds encoded video.

Live progress: while it encodes, each segment task reports its frames done so far (at most every
PROGRESS_INTERVAL_S, fire-and-forget) to the render's FrameTally actor; the driver reads the tally as often
and hands the hooks one RenderProgress (phase, frames done/total, measured speed) when the count moved. So a
render reports a few times a second however few segments it has, and a slow reader never slows the encode.

Where things run:
- probe and the watermark preview parse the tenant's source, so they run in `parse_isolated` (a single-use
  worker with the job's memory limit and deadline, serve_app.media_probe), never in this process: a libav
  crash, hang or memory bomb on that file ends this render as unusable media (UnsupportedMedia or OverLimit),
  and the supervisor and every other render carry on. The probe also holds the source to `job.limits` again
  (they may have been lowered since the upload). The preview is an asyncio future, so cancelling the render
  kills its parser.
- mux runs in a Ray task pinned to this node (`NodeAffinitySchedulingStrategy`, hard) rather than in a
  thread: the artifact store is this node's disk; a task can be force-cancelled mid-write, where a thread
  would have to be waited for; and a crash in libav takes down a worker, not the supervisor actor. It writes
  into a private staging directory beside `out_path`, so every leftover of a killed mux is removed exactly.
- the video encoder is chosen once per render, on a GPU node when the cluster has GPUs (h264_nvenc when it
  opens there, else libx264), and written into the spec every segment gets: all segments must share one
  encoder (one stream, one set of parameter sets), and a retried segment must not switch encoders. Segment
  tasks only ask for a GPU share when that choice is a GPU encoder, so GPUs without NVENC (H100/H200) do not
  throttle CPU encoding.

Retries: every task retries up to 3 times on worker death only (`retry_exceptions=False`: a kernel error is
deterministic, retrying it is wasted work). The kernels are deterministic, so a retried segment produces the
same bytes and the output does not depend on failures. A retried segment reports from 0 again; the tally
keeps each segment's high-water mark, so its frames are never counted twice and progress never goes back.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mcp_protocol.progress import MUXING, PROBING, RENDERING, RenderProgress, SpeedMeter
from render_kernels import (
    EncodedAudio,
    EncodedSegment,
    MuxStats,
    RenderSpec,
    Segment,
    SourceInfo,
    choose_video_encoder,
    encode_audio,
    encode_segment,
    mux_segments,
    plan_segments,
    probe,
    render_preview,
)
from render_kernels.probe import MediaLimits
from serve_app.config import Config
from serve_app.media_limits import media_limits
from serve_app.media_probe import ParseBounds, parse_isolated

TASK_OPTIONS: dict[str, Any] = {"num_cpus": 1, "max_retries": 3, "retry_exceptions": False}
GPU_ENCODERS = frozenset({"h264_nvenc"})
ENCODER_CHOICE_GPU_SHARE = 0.01  # just enough to be scheduled on a GPU node; it only opens an encoder
CANCEL_WAIT_S = 10.0  # how long a cancelled render waits for its killed tasks to be gone
PROGRESS_INTERVAL_S = 0.5  # how often a segment task reports its frames, and the driver reads them


@dataclass(frozen=True)
class RenderJob:
    source_path: str
    spec: RenderSpec
    out_path: str
    preview_path: str | None = None  # where the watermark preview PNG goes; used only when spec.watermark
    workers: int = 0  # segments to aim for; 0: the cluster's CPU count
    # How the source is parsed (probe, preview) and what it may cost; Config's defaults unless the caller says.
    parse: ParseBounds = field(default_factory=lambda: ParseBounds.of(Config()))
    limits: MediaLimits = field(default_factory=lambda: media_limits(Config()))

    def __post_init__(self) -> None:
        if self.spec.watermark is not None and not self.preview_path:
            raise ValueError("a render with a watermark needs a preview_path")


class RenderHooks(Protocol):
    async def progress(self, report: RenderProgress) -> None:
        """Probing, then rendering at most every PROGRESS_INTERVAL_S while the frame count moves (monotonic),
        then muxing. Awaited inline: keep it short."""

    async def preview_ready(self, preview_path: str) -> bool:
        """Called once when a watermark is set, after the preview PNG is written; segments keep encoding
        meanwhile. True: approved, the render is muxed. False: rejected, the render stops."""


class RenderRejected(Exception):
    """The watermark preview was not approved; nothing was muxed."""


class FrameTally:
    """Frames encoded so far by each segment of one render, as its segment tasks report them.

    One per RenderRun, owned by the driver: it dies with the run, so a report from an abandoned run's task
    can never count towards a later run of the same render. Reports are cumulative per segment and kept as a
    high-water mark, so a segment retried from scratch after a worker death is not counted twice.
    """

    def __init__(self, segment_count: int) -> None:
        self.frames = [0] * segment_count

    def report(self, index: int, frames_done: int) -> None:
        self.frames[index] = max(self.frames[index], frames_done)

    def counts(self) -> list[int]:
        return self.frames


def reporter(tally, index: int):
    """The kernel's per-frame callback for segment `index`: passes the count on to the tally at most every
    PROGRESS_INTERVAL_S. Fire-and-forget: a lost report only makes the next one the first to arrive."""
    last = time.monotonic()

    def on_frame(frames_done: int) -> None:
        nonlocal last
        if (now := time.monotonic()) - last >= PROGRESS_INTERVAL_S:
            last = now
            tally.report.remote(index, frames_done)

    return on_frame


def encode_segment_parts(source_path: str, segment: Segment, spec: RenderSpec, info: SourceInfo,
                         tally) -> tuple[dict[str, Any], EncodedSegment]:
    """`encode_segment` as (summary, segment), reporting live to `tally`; see module docstring."""
    encoded = encode_segment(source_path, segment, spec, info, reporter(tally, segment.index))
    return {"index": encoded.index, "frame_count": encoded.frame_count, **encoded.stats}, encoded


def _mux(audio: EncodedAudio | None, output_format: str, out_path: str, fps: float,
         *segments: EncodedSegment) -> MuxStats:
    """`mux_segments` taking the segments as top-level arguments, so Ray resolves them in the task."""
    return mux_segments(list(segments), audio, output_format, out_path, fps)


# The remote function segment tasks run (`num_returns=2`: summary, segment). A module attribute, so a test
# can put a faulty twin of it in place without the driver knowing.
segment_task = ray.remote(num_returns=2, **TASK_OPTIONS)(encode_segment_parts)
_audio_task = ray.remote(**TASK_OPTIONS)(encode_audio)
_mux_task = ray.remote(**TASK_OPTIONS)(_mux)
_encoder_task = ray.remote(num_cpus=0, num_gpus=ENCODER_CHOICE_GPU_SHARE, max_retries=3)(choose_video_encoder)
_tally_actor = ray.remote(num_cpus=0)(FrameTally)  # no CPU: it must start while the segments hold every core


async def run_render(job: RenderJob, hooks: RenderHooks) -> MuxStats:
    """Render `job` into `job.out_path` and return what was written.

    Raises UnsupportedMedia (OverLimit past `job.limits` or `job.parse`) for unusable sources, RenderRejected
    when the preview is not approved. On any failure or cancellation every outstanding task is force-cancelled
    (and the preview's parser killed) and no file is left at `out_path`; the preview PNG, if written, is left to
    the caller.
    """
    return await RenderRun(job, hooks).run()


@dataclass
class RenderRun:
    """One execution of a RenderJob. After `run` ends, `stages` holds wall seconds per stage (probe,
    preview, approval, segments, audio, mux, total; stages overlap) and `segment_stats` each segment's own
    timings from the kernel (decode_s, encode_s, wall_s, fps)."""

    job: RenderJob
    hooks: RenderHooks
    stages: dict[str, float] = field(default_factory=dict, init=False)
    segment_stats: list[dict[str, Any]] = field(default_factory=list, init=False)
    _submitted: list[ray.ObjectRef] = field(default_factory=list, init=False)
    _staging: str | None = field(default=None, init=False)  # the mux's private directory, once made
    _tally: Any = field(default=None, init=False)  # the FrameTally actor, once the segments are planned
    _frames_reported: int = field(default=0, init=False)
    _speed: SpeedMeter = field(default_factory=SpeedMeter, init=False)

    async def run(self) -> MuxStats:
        started = time.perf_counter()
        try:
            return await self._render()
        except BaseException:
            await self._cancel_unfinished()
            _remove(self.job.out_path)
            raise
        finally:
            if self._tally is not None:  # every segment task has ended (or was cancelled): nobody reports
                ray.kill(self._tally)
            if self._staging is not None:  # only now: a cancelled mux is gone, it cannot write there any more
                shutil.rmtree(self._staging, ignore_errors=True)
            self.stages["total"] = time.perf_counter() - started

    async def _render(self) -> MuxStats:
        job = self.job
        await self.hooks.progress(RenderProgress(PROBING))
        info = await self._timed("probe", parse_isolated(job.parse, probe, job.source_path, job.limits))
        workers = job.workers or int(ray.cluster_resources().get("CPU", 1))
        segments = plan_segments(info, workers)
        spec, segment_options = await self._fix_encoder(job.spec, len(segments))
        self._tally = _tally_actor.remote(len(segments))
        await self.hooks.progress(RenderProgress(RENDERING, 0, info.frame_count, source_fps=info.fps))

        # Submission order is start order when CPUs are short: the preview first, as a person waits on it;
        # then the audio, which would otherwise run alone after the (equally sized) segments end together.
        preview = (asyncio.ensure_future(parse_isolated(job.parse, render_preview, job.source_path, info, spec))
                   if spec.watermark else None)
        audio = self._submit(_audio_task, {}, job.source_path, spec.output_format)
        parts = [self._submit(segment_task, segment_options, job.source_path, s, spec, info, self._tally)
                 for s in segments]
        summaries, encoded = [p[0] for p in parts], [p[1] for p in parts]

        gate = [self._approval_gate(preview)] if preview is not None else []
        work = (self._encode(summaries, info), self._timed("audio", _value(audio)), *gate)
        waits = [asyncio.ensure_future(w) for w in work]
        try:
            await asyncio.gather(*waits)  # raises the first failure (or the rejection) at once
        finally:
            for waiting in (*waits, *([preview] if preview is not None else [])):
                waiting.cancel()  # the preview too: a gate cancelled before it ran never awaited it

        await self.hooks.progress(RenderProgress(MUXING, info.frame_count, info.frame_count, source_fps=info.fps))
        return await self._timed("mux", self._mux(audio, encoded, spec.output_format, info.fps))

    async def _fix_encoder(self, spec: RenderSpec, segment_count: int) -> tuple[RenderSpec, dict[str, Any]]:
        """The spec with its video encoder decided, and the extra Ray options its segment tasks need."""
        gpus = ray.cluster_resources().get("GPU", 0)
        if spec.video_encoder is None:
            if gpus:  # decide where a GPU is: whether NVENC opens is a property of the node
                encoder = await _value(self._submit(_encoder_task, {}, spec.output_format))
            else:
                encoder = await asyncio.to_thread(choose_video_encoder, spec.output_format)
            spec = replace(spec, video_encoder=encoder)
        if spec.video_encoder in GPU_ENCODERS:
            return spec, {"num_gpus": min(1.0, gpus / segment_count)}  # every segment fits on the GPUs at once
        return spec, {}

    async def _encode(self, summaries: list[ray.ObjectRef], info: SourceInfo) -> None:
        """Await the segment summaries as they complete, reporting the frames done meanwhile: each segment's
        count is the larger of its live tally and, once it has ended, its final frame count."""
        started = time.perf_counter()
        self._speed.add(0)  # the segments start now: speed is measured from here
        frames = [0] * len(summaries)
        watching = asyncio.ensure_future(self._watch_tally(frames, info))
        waiting = {asyncio.ensure_future(_value(ref)) for ref in summaries}
        try:
            while waiting:
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for finished in done:
                    summary = finished.result()
                    self.segment_stats.append(summary)
                    frames[summary["index"]] = summary["frame_count"]
                await self._report_frames(sum(frames), info)
        finally:
            watching.cancel()
            for future in waiting:
                future.cancel()
        self.segment_stats.sort(key=lambda s: s["index"])
        self.stages["segments"] = time.perf_counter() - started

    async def _watch_tally(self, frames: list[int], info: SourceInfo) -> None:
        """Every PROGRESS_INTERVAL_S, fold the tally's live counts into `frames` and report. Best effort: if the
        tally actor is lost, progress goes on moving one segment at a time, and the render is unaffected."""
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            try:
                live = await self._tally.counts.remote()
            except ray.exceptions.RayActorError:
                return
            frames[:] = map(max, frames, live)
            await self._report_frames(sum(frames), info)

    async def _report_frames(self, frames_done: int, info: SourceInfo) -> None:
        """Hand the hooks a rendering report when the count moved (so never backwards, never repeated)."""
        if frames_done <= self._frames_reported:
            return
        self._frames_reported = frames_done
        fps = self._speed.add(frames_done)
        await self.hooks.progress(RenderProgress(RENDERING, frames_done, info.frame_count, fps, info.fps))

    async def _approval_gate(self, preview: asyncio.Future) -> None:
        """Write the preview PNG, then wait for the decision while the segments keep encoding."""
        png = await self._timed("preview", preview)
        path = self.job.preview_path
        assert path is not None  # a watermark render has one (RenderJob checks)
        await asyncio.to_thread(_write_atomically, path, png)
        approved = await self._timed("approval", self.hooks.preview_ready(path))
        if not approved:
            raise RenderRejected("the watermark preview was rejected")

    async def _mux(self, audio: ray.ObjectRef, encoded: list[ray.ObjectRef], output_format: str,
                   fps: float) -> MuxStats:
        out_path = os.path.abspath(self.job.out_path)
        os.makedirs(os.path.dirname(out_path), exist_ok=True)
        self._staging = tempfile.mkdtemp(prefix=".mux-", dir=os.path.dirname(out_path))
        staged = os.path.join(self._staging, os.path.basename(out_path))
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        ref = self._submit(_mux_task, {"scheduling_strategy": here}, audio, output_format, staged, fps, *encoded)
        stats = await _value(ref)
        os.chmod(staged, 0o644)  # the kernel's temp file is private; the artifact is served to its owner
        os.replace(staged, out_path)  # same directory tree, so atomic
        return replace(stats, path=self.job.out_path)

    def _submit(self, task, options: dict[str, Any], *args) -> Any:
        """Start a task, remembering it (by its first return) for cancellation."""
        refs = task.options(**options).remote(*args) if options else task.remote(*args)
        self._submitted.append(refs[0] if isinstance(refs, list) else refs)
        return refs

    async def _timed(self, stage: str, awaitable) -> Any:
        started = time.perf_counter()
        result = await awaitable
        self.stages[stage] = time.perf_counter() - started
        return result

    async def _cancel_unfinished(self) -> None:
        """Force-cancel every unfinished task and wait (bounded) until they are gone, so a killed mux cannot
        still be writing when its staging files are removed."""
        if not self._submitted:
            return
        _, unfinished = ray.wait(self._submitted, num_returns=len(self._submitted), timeout=0, fetch_local=False)
        for ref in unfinished:
            ray.cancel(ref, force=True)
        if unfinished:
            await asyncio.wait([asyncio.ensure_future(_settled(ref)) for ref in unfinished], timeout=CANCEL_WAIT_S)


async def _value(ref: ray.ObjectRef) -> Any:
    """A task's value; a kernel exception is re-raised as itself (not wrapped in a RayTaskError)."""
    try:
        return await ref
    except ray.exceptions.RayTaskError as err:
        raise err.cause from err


async def _settled(ref: ray.ObjectRef) -> None:
    try:
        await ref
    except Exception:  # noqa: BLE001 - a cancelled task's ref resolves to TaskCancelledError; any end will do
        pass


def _write_atomically(path: str, data: bytes) -> None:
    """Write `path` so that readers see either nothing or the whole file."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # on disk before it has its name: a power loss cannot leave it empty
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
