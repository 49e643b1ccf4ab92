"""The render driver: one RenderJob -> Ray tasks over `render_kernels` -> the finished file in the media store.

    the upload's facts, or read_source (probe, and the watermark preview; isolated) -> plan_segments
        -> encode_audio || encode_segment x N (each started by the pool's fair scheduler; the audio beside the
        first) || [preview (a task; with the probe when there were no facts), approval gate] -> mux_segments
        -> out_path in job.media (and a JPEG frame of it, the poster, at poster_path)

Data flow: raw frames never leave a task, and encoded media never passes through the driver (the task
bodies are in serve_app.rendering.render_tasks, light for every worker to import). Audio and
segment tasks each return two objects: a small summary (frame count, timings) that the driver awaits for
fail-fast error detection, and the encoded media, which stays in the object store until the mux task fetches
it. The mux gets the segments' refs (not their values) and fetches them one at a time, so no process ever
holds the whole video: a segment task holds one segment, bounded by `segment_max_megapixels` however long
the video is, and the mux one segment at a time.

Sharing the cluster: the CPU tasks (audio, segments) are not handed to Ray at once but queued in the
`RenderPool`'s SegmentScheduler (serve_app.rendering.scheduling), shared by every render of a supervisor, which starts
them as CPUs free up, round-robin across principals and FIFO within one; a render is cut into a segment per CPU
of the cluster, busy or not, so the last renders of a batch spread over the CPUs the others leave.
`job.workers` (VIDFORGE_RENDER_WORKERS) fixes the count instead. Each segment's decoder, scaler and encoder get the
CPUs the render has to itself as threads (render_kernels.segment_threads): one where every CPU has a segment or
other work waits, as a thread more only costs CPU there.

Live progress: while it encodes, each segment task reports its frames done so far (at its first frame, then at
most every `job.progress_interval_s` of the time passing in its worker, and at its last frame; fire-and-forget) to
the pool's FrameTally (one for all renders of the pool, each run under a key of its own; held by the supervisor, or
an actor of its own); the driver reads the tally as a report comes in (every interval from a tally actor), at most
once per interval, and hands the hooks one RenderProgress (phase, frames done/total, measured speed) when the count
moved. The mux task reports the frames it has written the same way, the last of them as it goes on to finish and
store the file. So a render reports once an interval while it encodes and muxes, however few segments it has, each
count without an interval's delay, and a slow reader never slows the encode. The interval is half the poll hint
clients are told (render_tasks.progress_interval_s): every poll sees a new figure.

Where things run:
- the source's facts (size, rate, frame count, keyframes) come from the upload's own parse when the job has
  them (`job.source_info`, kept with the asset): they are held to `job.limits` again (lowered since, perhaps)
  and the segments start without another parse of the file. The file has then passed the upload's isolated
  parse, and its watermark preview is rendered as the segments are: by the segment that holds its frame, as
  it passes it, when that is a few seconds into the segment (render_kernels.plan_stills) and the segment
  starts within STILL_START_WAIT_S; else by a Ray task in a pooled worker, beside them (a single-use parser's
  start-up cost ~0.6 CPU-s, more than the frame; the task's own decode and worker ~0.5 CPU-s more than the
  segment's picture, 5-10 % of a 10 s render). Otherwise the probe and the
  preview run first, together, in one isolated parser. That parse of a file nobody vetted runs in
  `parse_isolated` (a single-use worker with the job's memory limit and deadline, serve_app.media.media_probe),
  never in this process: a libav crash, hang or memory bomb on that file ends this render as unusable media
  (UnsupportedMedia or OverLimit), and the supervisor and every other render carry on. A task's worker that
  crashes takes only that task down (retried on worker death, as every task here); one that hangs is ended
  with its render at VIDFORGE_RENDER_TIMEOUT_S.
- mux runs in a Ray task rather than in a thread: a task can be force-cancelled mid-write, where a thread
  would have to be waited for; and a crash in libav takes down a worker, not the supervisor actor. It writes
  into a private staging folder (`MediaStore.staged`), then hands the file to the store: a rename beside
  `out_path` on a local store (the task is then pinned to this node, whose disk that is), a multipart upload
  from wherever it ran on a bucket. Sources are read where the tasks run: a local path on a local store, a
  ranged reader of the object on a bucket (render_kernels.MediaSource).
  The mux asks Ray for no CPU: on a local store it is pinned to the driver's node, which in a cluster is the
  head, started with no CPUs so that segment work goes to the workers only. It is still the render's final
  task in the scheduler, whose own count of busy CPUs keeps the slot the render's last segment (or audio)
  freed until the mux ends: a finished render does not wait behind other renders' queued segments, and no
  other segment is started onto that CPU while the mux copies packets beside it (on one node, Ray then
  reuses the idle worker that slot's segment left, rather than starting one more).
- the video encoder and decoder are chosen once per render, on a GPU node when the cluster has GPUs (h264_nvenc
  when it opens there, else libx264; NVDEC decoding and downscaling when it decodes the source there, else
  software), and written into the spec every segment gets: all segments must share one encoder (one stream, one
  set of parameter sets), and a retried segment must not switch encoder or decoder (its bytes would change).
  Without GPUs nothing is probed: software decoding, and the encoder chosen here. Segment tasks ask for a GPU
  share when either choice is on the GPU (an H100/H200 has NVDEC but no NVENC): they must run where it opens.
  VIDFORGE_GPU (`job.gpu`) decides whether that is tried: `off` never; `auto` where a GPU node is up, or where the
  autoscaler offers a GPU node type and one starts within VIDFORGE_GPU_WAIT_S (the codec task, pending for a GPU, is
  the demand the autoscaler sees), else on CPU nodes; `require` always, waiting for a GPU node as long as the render
  may run, and then every segment runs on a GPU node, whatever opened there (a GPU's NVENC/NVDEC, or that node's
  CPUs for what they do not take). On an autoscaling cluster, or where a GPU was considered, the choice and the nodes
  the segments finished on are reported as the status message's placement note, and logged.

Retries: every task retries up to 3 times on worker death only (`retry_exceptions=False`: a kernel error is
deterministic, retrying it is wasted work). The kernels are deterministic, so a retried segment produces the
same bytes and the output does not depend on failures. A retried segment reports from 0 again; the tally
keeps each segment's high-water mark, so its frames are never counted twice and progress never goes back.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mcp_protocol.progress import MUXING, PLACEMENT_PREFIX, PROBING, RENDERING, RenderProgress, SpeedMeter
from media_store import LocalMediaStore, MediaStore
from render_kernels import (
    AudioStats,
    Media,
    MuxStats,
    RenderSpec,
    SourceInfo,
    choose_video_encoder,
    plan_segments,
    plan_stills,
    read_source,
    segment_threads,
)
from render_kernels.decoders import NVDEC_DECODERS
from render_kernels.limits import MediaLimits
from render_kernels.preview import PREVIEW, PREVIEW_AT, SOURCE_FRAME
from render_kernels.spec import FORMAT_ENCODERS
from serve_app.config import Config
from serve_app.media.media_limits import media_limits
from serve_app.media.media_probe import ParseBounds, parse_isolated
from serve_app.observability.catalog import SEGMENT_RETRIES, WORKER_LOSSES
from serve_app.rendering.autoscaling import CPU_BUNDLE, Bundle, bundle
from serve_app.rendering.render_tasks import (
    PROGRESS_INTERVAL_S,
    AudioSummary,
    SegmentSummary,
    TallyRef,
    choose_codecs,
    encode_audio_parts,
    encode_segment_parts,
    mux_stored_segments,
    render_pictures,
)
from serve_app.rendering.scheduling import Dispatched, SegmentScheduler
from serve_app.rendering.tally import ActorTally, HostedTally, PoolTally, stills_made

logger = logging.getLogger(__name__)

TASK_OPTIONS: dict[str, Any] = {"num_cpus": 1, "max_retries": 3, "retry_exceptions": False}
GPU_ENCODERS = frozenset({"h264_nvenc"})
GPU_ENCODED_FORMATS = frozenset({"mp4", "mov"})  # what h264_nvenc encodes; webm is VP9, on the CPU
CODEC_CHOICE_GPU_SHARE = 0.01  # just enough to be scheduled on a GPU node; it only opens an encoder and a decoder
CANCEL_WAIT_S = 10.0  # how long a cancelled render waits for its killed tasks to be gone
# How long the approval gate waits for the segments that make its pictures to start before it makes them in a
# task: past it the render is queued behind others, and its reviewer would wait for its turn.
STILL_START_WAIT_S = 2.0
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
    # Seconds between the progress reports of its tasks (render_tasks.progress_interval_s of the poll hint).
    progress_interval_s: float = PROGRESS_INTERVAL_S

    def __post_init__(self) -> None:
        if self.spec.watermark is not None and not self.preview_path:
            raise ValueError("a render with a watermark needs a preview_path")


class RenderHooks(Protocol):
    async def progress(self, report: RenderProgress) -> None:
        """Probing, then rendering at most every `job.progress_interval_s` while the frame count moves (monotonic),
        then muxing, as often while the frames written move. Awaited inline: keep it short."""

    async def preview_ready(self, preview_path: str) -> bool:
        """Called once when a watermark is set, after the preview PNG is written; segments keep encoding
        meanwhile. True: approved, the render is muxed. False: rejected, the render stops."""


class RenderRejected(Exception):
    """The watermark preview was not approved; nothing was muxed."""


class GpuUnavailable(Exception):
    """VIDFORGE_GPU=require, but the cluster has no GPU node and its autoscaler offers none."""


def gpu_path_serves(spec: RenderSpec, info: SourceInfo) -> bool:
    """Whether a GPU would take part of this render's work: NVENC encodes its output, or NVDEC decodes its source."""
    return spec.output_format in GPU_ENCODED_FORMATS or info.video_codec in NVDEC_DECODERS


# The remote function segment tasks run (`num_returns=2`: summary, segment). A module attribute, so a test
# can put a faulty twin of it in place without the driver knowing.
segment_task = ray.remote(num_returns=2, **TASK_OPTIONS)(encode_segment_parts)
_audio_task = ray.remote(num_returns=2, **TASK_OPTIONS)(encode_audio_parts)
# No CPU for Ray (see "Where things run"): the scheduler counts the mux on the CPU its render's last task freed.
_mux_task = ray.remote(**{**TASK_OPTIONS, "num_cpus": 0})(mux_stored_segments)
_codecs_task = ray.remote(num_cpus=0, num_gpus=CODEC_CHOICE_GPU_SHARE, max_retries=3)(choose_codecs)
# The watermark preview of a source the upload's parse vetted, and the source's first frame (see "Where things
# run"). No CPU: it must start while the segments hold every core, and it decodes a few frames.
_pictures_task = ray.remote(**{**TASK_OPTIONS, "num_cpus": 0})(render_pictures)


class RenderPool:
    """What the renders driven from one process share: the scheduler of their CPU tasks, and one FrameTally for
    their live frame counts (serve_app.rendering.tally).

    `host`, when the pool lives in an actor: that actor's handle, which serves `report_frames` and `report_still`
    into this pool's tally (see RenderSupervisor.report_frames), so the tally costs no process and the driver reads
    it in place. Without one, the tally is an actor of its own, started on first use.
    """

    def __init__(self, scheduler: SegmentScheduler | None = None, host: Any = None) -> None:
        self.scheduler = scheduler or SegmentScheduler()
        self._hosted = HostedTally(host) if host is not None else None
        self.tally: PoolTally = self._hosted or ActorTally()
        self._local_cpus: float | None = None

    def local_node_takes_work(self) -> bool:
        """Whether the node this process runs on offers CPUs to tasks (not a head started with --num-cpus=0),
        so a CPU-less task, which Ray places on the submitting node, may run here. Read once."""
        if self._local_cpus is None:
            node_id = ray.get_runtime_context().get_node_id()
            nodes = [node for node in ray.nodes() if node["NodeID"] == node_id]
            self._local_cpus = nodes[0]["Resources"].get("CPU", 0.0) if nodes else 0.0
        return self._local_cpus > 0

    def report_frames(self, run: str, index: int, frames_done: int) -> None:
        """A segment's or the mux's report, served by the host actor (HostedTally.report_frames)."""
        assert self._hosted is not None, "only an actor's pool is reported to"
        self._hosted.report_frames(run, index, frames_done)

    def report_still(self, run: str, name: str, png: bytes) -> None:
        """A segment task's still, served by the host actor (HostedTally.report_still)."""
        assert self._hosted is not None, "only an actor's pool is reported to"
        self._hosted.report_still(run, name, png)

    def close(self) -> None:
        """End the tally's own actor, if any (for a pool of one render; a supervisor's pool lives as long as it
        does)."""
        self.tally.shutdown()


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
    for the first CPU; approval, segments, audio, mux, total; stages overlap),
    `segment_stats` each segment's summary, in segment order (with the kernel's own timings), `audio_stats` the audio
    kernel's (None without audio), and
    `start_order` the scheduler's start order of each of its CPU tasks (for comparing runs of one pool), and
    `stills_from` who made the approval gate's pictures (the segments, or a picture task; None: none were made)."""

    job: RenderJob
    hooks: RenderHooks
    pool: RenderPool | None = None  # None: a pool of its own, closed when the run ends
    stages: dict[str, float] = field(default_factory=dict, init=False)
    segment_stats: list[SegmentSummary] = field(default_factory=list, init=False)
    audio_stats: AudioStats | None = field(default=None, init=False)
    start_order: list[int] = field(default_factory=list, init=False)
    stills_from: str | None = field(default=None, init=False)  # who made the gate's pictures: "segments" or "task"
    started_at: float = field(default=0.0, init=False)  # epoch seconds
    _key: str = field(default_factory=lambda: uuid.uuid4().hex, init=False)  # this run, in scheduler and tally
    _submitted: list[ray.ObjectRef] = field(default_factory=list, init=False)
    _tally_open: bool = field(default=False, init=False)  # once the segments are planned
    _frames_reported: int = field(default=0, init=False)
    _written_reported: int = field(default=0, init=False)
    _speed: SpeedMeter = field(default_factory=SpeedMeter, init=False)
    _placement: str | None = field(default=None, init=False)  # where the segments go, once decided; None: not said
    _segment_nodes: Counter[str] = field(default_factory=Counter, init=False)  # finished segments per node

    async def run(self) -> MuxStats:
        self.started_at = time.time()
        started = time.perf_counter()
        own_pool = self.pool is None
        pool = self.pool = self.pool or RenderPool()
        try:
            return await self._render()
        except BaseException:
            await self._cancel_unfinished()  # a cancelled mux is gone: it cannot publish the file any more
            await asyncio.to_thread(self.job.media.delete, [self.job.out_path])
            raise
        finally:
            if self._tally_open:  # every segment task has ended (or was cancelled): nobody reports
                pool.tally.close(self._key)
            if own_pool:
                pool.close()
            self.stages["total"] = time.perf_counter() - started

    @property
    def _pool(self) -> RenderPool:
        assert self.pool is not None, "set when the run starts"
        return self.pool

    def timings(self) -> RenderTimings:
        return RenderTimings(
            self.started_at,
            dict(self.stages),
            tuple(s.stats.wall_s for s in self.segment_stats),
            self.audio_stats.wall_s if self.audio_stats is not None else None,
        )

    async def _render(self) -> MuxStats:
        job = self.job
        await self.hooks.progress(RenderProgress(PROBING))
        info, preview = await self._read_source()
        planning = time.perf_counter()
        width = job.workers or self._pool.scheduler.plan_width(job.principal)
        segments = plan_segments(info, width, job.min_segment_s, self._max_segment_frames(info))
        spec, segment_options = await self._fix_codecs(job.spec, info, len(segments))
        free = self._pool.scheduler.free_cpus()  # what the render has to itself: threads beyond one segment a CPU
        spec = replace(spec, segment_threads=segment_threads(free, len(segments)))
        segment_bundle = bundle({"CPU": 1, "GPU": segment_options.get("num_gpus", 0)})
        tally = await self._pool.tally.open(self._key, len(segments), job.progress_interval_s)
        self._tally_open = True
        self.stages["plan"] = time.perf_counter() - planning
        placement = self._placement_note()
        await self.hooks.progress(
            RenderProgress(RENDERING, 0, info.frame_count, source_fps=info.fps, placement=placement)
        )

        # On an idle cluster where a CPU-less task may run here (one node, or a head that takes work), the audio
        # rides along with the first segment: it shares that segment's CPU (the OS interleaves them, as ffmpeg's
        # threads would), so no segment waits behind it. Otherwise it takes a CPU of its own in the scheduler,
        # first (it would otherwise run alone after the equally sized segments end together): with every CPU busy
        # a rider gains nothing and costs Ray one more worker process.
        ride_along = self._pool.scheduler.idle() and self._pool.local_node_takes_work()
        audio = None if ride_along else self._schedule(_audio_task, {}, job.source_path, spec.output_format)
        pictures = self._pictures_wanted(preview)
        # No stills (none wanted, or plan_stills left them to a task): the approval gate makes its pictures itself.
        stills = plan_stills(segments, info, PREVIEW in pictures, SOURCE_FRAME in pictures) or {}
        parts = [
            self._schedule(
                segment_task,
                segment_options,
                *(job.source_path, s, spec, info, tally, stills.get(s.index, ())),
                bundle=segment_bundle,
            )
            for s in segments
        ]
        if audio is None:
            audio = self._ride_along(parts[0], _audio_task, job.source_path, spec.output_format)

        carriers = {still.name: parts[index] for index, made in stills.items() for still in made}
        gate = [self._approval_gate(preview, info, pictures, carriers)] if job.spec.watermark is not None else []
        work = (self._encode(parts, info), self._audio(audio), *gate)
        waits = [asyncio.ensure_future(w) for w in work]
        try:
            await asyncio.gather(*waits)  # raises the first failure (or the rejection) at once
        finally:
            for waiting in waits:
                waiting.cancel()

        await self.hooks.progress(RenderProgress(MUXING, info.frame_count, info.frame_count, source_fps=info.fps))
        encoded = [part.result().refs[1] for part in parts]
        return await self._timed("mux", self._mux(audio.result().refs[1], encoded, spec.output_format, info, tally))

    async def _read_source(self) -> tuple[SourceInfo, bytes | None]:
        """The source's facts, and the watermark preview PNG when the parser made it.

        Facts the upload found are held to `job.limits` (lowered since, perhaps) and used as they are: no parser
        starts, and the approval gate renders the preview in a task beside the segments. Without them, one
        parser probes the source and renders the preview together."""
        job = self.job
        if (info := job.source_info) is not None:
            job.limits.check_video(info.width, info.height, info.fps, info.frame_count, info.duration_s)
            return info, None
        started = time.perf_counter()
        source = await parse_isolated(job.parse, read_source, job.source_path, job.limits, job.spec)
        self.stages["probe"] = time.perf_counter() - started - source.preview_s  # the parser's start-up included
        if source.preview_png is not None:
            self.stages["preview"] = source.preview_s
        return source.info, source.preview_png

    def _max_segment_frames(self, info: SourceInfo) -> int:
        width, height = self.job.spec.output_size(info)
        return max(1, self.job.segment_max_megapixels * 1_000_000 // (width * height))

    async def _fix_codecs(
        self, spec: RenderSpec, info: SourceInfo, segment_count: int
    ) -> tuple[RenderSpec, dict[str, Any]]:
        """The spec with its video encoder and decoder decided, and the extra Ray options its segment tasks need
        (see "Where things run": VIDFORGE_GPU)."""
        job = self.job
        gpus = ray.cluster_resources().get("GPU", 0)
        elastic = self._pool.scheduler.elastic
        can_start = elastic is not None and elastic.view.offers_gpu
        if job.gpu == "require" and not gpus and not can_start:
            raise GpuUnavailable("VIDFORGE_GPU=require, but the cluster has no GPU node and its autoscaler offers none")
        wanted = job.gpu == "require" or (job.gpu == "auto" and gpu_path_serves(spec, info))
        if elastic is not None:
            self._placement = "CPU nodes"
        if wanted and (gpus or can_start):
            # Decide on a GPU node: whether NVENC and NVDEC open is a property of the node.
            wait_s = None if job.gpu == "require" or gpus else job.gpu_wait_s
            chosen = await self._codecs_on_gpu_node(spec, info, wait_s)
            if chosen is None:
                self._placement = f"CPU nodes (no GPU node started within VIDFORGE_GPU_WAIT_S, {wait_s:g} s)"
            elif job.gpu == "require" or chosen.video_encoder in GPU_ENCODERS or chosen.video_decoder is not None:
                self._placement = f"GPU nodes ({_codecs_text(chosen)})"
                logger.info("render %s: %s", self._key, self._placement)
                return chosen, {"num_gpus": min(1.0, max(gpus, 1) / segment_count)}  # the segments share the GPUs
            else:
                spec = chosen
                self._placement = "CPU nodes (neither NVENC nor NVDEC opens on the GPU node)"
        if spec.video_encoder is None and job.gpu == "off":  # the software encoder, even where this node has NVENC
            spec = replace(spec, video_encoder=FORMAT_ENCODERS[spec.output_format][0])
        elif spec.video_encoder is None:
            spec = replace(spec, video_encoder=await asyncio.to_thread(choose_video_encoder, spec.output_format))
        if self._placement is not None:
            logger.info("render %s: %s", self._key, self._placement)
        return spec, {}

    async def _codecs_on_gpu_node(self, spec: RenderSpec, info: SourceInfo, wait_s: float | None) -> RenderSpec | None:
        """The codecs chosen on a GPU node; None when no GPU node ran the choice within `wait_s` (None: no limit).
        While no GPU node is up, the pending choice is what the autoscaler sees and starts one for."""
        ref = self._submit(_codecs_task, {}, spec, info)
        try:
            chosen: RenderSpec = await asyncio.wait_for(_value(ref), wait_s)
        except TimeoutError:
            ray.cancel(ref)
            return None
        return chosen

    def _placement_note(self) -> str | None:
        """The status message's placement note: where the segments go, and the nodes those finished ran on."""
        if self._placement is None:
            return None
        note = f"{PLACEMENT_PREFIX}{self._placement}"
        if self._segment_nodes:
            nodes = ", ".join(f"{count} on node …{node}" for node, count in sorted(self._segment_nodes.items()))
            note += f"; segments finished: {nodes}"
        return note + "."

    def _schedule(
        self, task, options: dict[str, Any], *args, final: bool = False, bundle: Bundle = CPU_BUNDLE
    ) -> asyncio.Future[Dispatched]:
        """Queue a CPU task of this render in the pool's scheduler, which starts it (`_submit`) in its turn; `bundle`
        is what it asks Ray for (autoscaler demand while it waits or runs)."""

        def start() -> list[ray.ObjectRef]:
            refs = self._submit(task, options, *args)
            return refs if isinstance(refs, list) else [refs]

        return self._pool.scheduler.submit(self.job.principal, self._key, start, final, bundle)

    def _ride_along(self, carrier: asyncio.Future[Dispatched], task, *args) -> asyncio.Future[Dispatched]:
        """Start `task` the moment `carrier` (a scheduled task of this render) starts, asking Ray for no CPU: it
        shares the carrier's, on the driver's node (Ray places a CPU-less task locally)."""

        async def start() -> Dispatched:
            dispatched = await carrier
            return replace(dispatched, refs=self._submit(task, {"num_cpus": 0}, *args))

        return asyncio.ensure_future(start())

    async def _summary(self, started: asyncio.Future[Dispatched]) -> Any:
        """The summary (first return) of a scheduled task, once it has been started and has ended."""
        dispatched = await started
        self.start_order.append(dispatched.order)
        if dispatched.order == min(self.start_order):  # the render's first task to start
            self.stages["queue"] = dispatched.queued_s
        return await _value(dispatched.refs[0])

    async def _audio(self, audio: asyncio.Future[Dispatched]) -> None:
        summary: AudioSummary = await self._timed("audio", self._summary(audio))
        if summary.attempt:
            WORKER_LOSSES.inc(summary.attempt, task="audio")
        self.audio_stats = summary.stats

    async def _encode(self, parts: list[asyncio.Future[Dispatched]], info: SourceInfo) -> None:
        """Await the segment summaries as they complete, reporting the frames done meanwhile: each segment's
        count is the larger of its live tally and, once it has ended, its final frame count."""
        started = time.perf_counter()
        frames = [0] * len(parts)
        watching = asyncio.ensure_future(self._watch_tally(frames, info, parts))
        waiting = {asyncio.ensure_future(self._summary(part)) for part in parts}
        try:
            while waiting:
                done, waiting = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                for finished in done:
                    summary: SegmentSummary = finished.result()
                    if summary.attempt:
                        SEGMENT_RETRIES.inc(summary.attempt)
                        WORKER_LOSSES.inc(summary.attempt, task="segment")
                    self.segment_stats.append(summary)
                    frames[summary.index] = summary.frame_count
                    if self._placement is not None:
                        self._segment_nodes[summary.node[-8:]] += 1  # a node id's tail: where they differ
                await self._report_frames(sum(frames), info, placement_changed=self._placement is not None)
        finally:
            watching.cancel()
            for future in waiting:
                future.cancel()
        self.segment_stats.sort(key=lambda s: s.index)
        self.stages["segments"] = time.perf_counter() - started
        if self._placement is not None:
            logger.info("render %s: %s", self._key, self._placement_note())

    async def _watch_tally(self, frames: list[int], info: SourceInfo, parts: list[asyncio.Future[Dispatched]]) -> None:
        """Fold the segments' live counts into `frames` and report, from the moment one of the segments has started
        (a render queued behind others costs the tally nothing). Best effort: if the tally actor is lost, progress
        goes on moving one segment at a time, and the render is unaffected."""
        assert self._tally_open, "opened before the segments are queued"
        await asyncio.wait(parts, return_when=asyncio.FIRST_COMPLETED)
        self._speed.add(sum(frames))  # a segment has started: speed is measured from here, not from the queue

        async def fold(live: list[int]) -> None:
            frames[:] = map(max, frames, live[: len(frames)])
            await self._report_frames(sum(frames), info)

        await self._follow_tally(fold)

    async def _follow_tally(self, fold: Callable[[list[int]], Awaitable[None]]) -> None:
        """Hand `fold` this run's tally counts as a report arrives (in-process tally; else every interval), at most
        once per `job.progress_interval_s`: a report reaches the hooks at once rather than up to an interval late,
        and a poller sees every interval's count. Returns if the tally actor is lost."""
        interval_s = self.job.progress_interval_s
        while True:
            await self._pool.tally.moved(self._key, interval_s)
            read_at = time.monotonic()
            try:
                live = await self._pool.tally.counts(self._key)
            except ray.exceptions.RayActorError:
                return
            if live is not None:
                await fold(live)
            await asyncio.sleep(max(0.0, read_at + interval_s - time.monotonic()))

    async def _report_frames(self, frames_done: int, info: SourceInfo, placement_changed: bool = False) -> None:
        """Hand the hooks a rendering report when the count moved (so never backwards, never repeated), or the
        placement note did (a segment finished)."""
        if frames_done <= self._frames_reported and not placement_changed:
            return
        self._frames_reported = max(self._frames_reported, frames_done)
        fps = self._speed.add(self._frames_reported)
        placement = self._placement_note()
        await self.hooks.progress(
            RenderProgress(RENDERING, self._frames_reported, info.frame_count, fps, info.fps, placement)
        )

    def _pictures_wanted(self, parsed_preview: bytes | None) -> dict[str, tuple[RenderSpec, float]]:
        """The pictures the approval gate needs made, by still name: (spec, at) as render_preview takes them. The
        watermark preview unless the parser made it, and the source's first frame when the job asks for it."""
        job = self.job
        if job.spec.watermark is None:
            return {}
        wanted = {} if parsed_preview is not None else {PREVIEW: (job.spec, PREVIEW_AT)}
        if job.source_frame_path is not None:  # the source as the render shows it, before the watermark
            wanted[SOURCE_FRAME] = (replace(job.spec, watermark=None), 0.0)
        return wanted

    async def _approval_gate(
        self,
        parsed_preview: bytes | None,
        info: SourceInfo,
        wanted: dict[str, tuple[RenderSpec, float]],
        carriers: dict[str, asyncio.Future[Dispatched]],
    ) -> None:
        """Write the preview PNG and, when the job asks, the source's first frame beside it: as the segments
        `carriers` make them (by still name), or else both in one pooled task (the source has been parsed by now:
        its upload's parse, or this run's); then wait for the decision while the segments keep encoding.

        One task, not one each: a task that starts while the segments hold every worker needs a worker process of
        its own, and a process started in a render's path costs it ~1 CPU-s, more than both pictures."""
        job = self.job
        path = job.preview_path
        assert path is not None  # a watermark render has one (RenderJob checks)
        pictures: dict[str, bytes] = {}
        if wanted:
            pictures = await self._timed("preview", self._pictures(info, wanted, carriers))
        await asyncio.to_thread(job.media.put_bytes, path, parsed_preview or pictures[PREVIEW])
        if job.source_frame_path is not None:
            await asyncio.to_thread(job.media.put_bytes, job.source_frame_path, pictures[SOURCE_FRAME])
        scheduler = self._pool.scheduler
        scheduler.awaiting_input(job.principal, self._key, True)
        try:
            approved = await self._timed("approval", self.hooks.preview_ready(path))
        finally:
            scheduler.awaiting_input(job.principal, self._key, False)
        if not approved:
            raise RenderRejected("the watermark preview was rejected")

    async def _pictures(
        self,
        info: SourceInfo,
        wanted: dict[str, tuple[RenderSpec, float]],
        carriers: dict[str, asyncio.Future[Dispatched]],
    ) -> dict[str, bytes]:
        """The `wanted` pictures: the segments' stills when they come, else from a pooled task."""
        if carriers and (made := await self._segment_stills(carriers)) is not None:
            self.stills_from = "segments"
            return made
        self.stills_from = "task"
        ref = self._submit(_pictures_task, {}, self.job.source_path, info, list(wanted.values()))
        return dict(zip(wanted, await _value(ref), strict=True))

    async def _segment_stills(self, carriers: dict[str, asyncio.Future[Dispatched]]) -> dict[str, bytes] | None:
        """The stills the carrier segments make; None when they will not come soon: a carrier has not started
        within STILL_START_WAIT_S (the render waits its turn behind others), or the carriers ended without them
        (their tally was lost)."""
        tasks = set(carriers.values())
        _, waiting = await asyncio.wait(tasks, timeout=STILL_START_WAIT_S)
        if waiting:
            return None
        arrived = asyncio.ensure_future(stills_made(self._pool.tally, self._key, set(carriers)))
        ended = asyncio.ensure_future(
            asyncio.wait([asyncio.ensure_future(_settled(task.result().refs[0])) for task in tasks])
        )
        try:
            await asyncio.wait({arrived, ended}, return_when=asyncio.FIRST_COMPLETED)
            if not arrived.done():  # a still reported before its segment ended is in the tally: read once more
                await asyncio.wait({arrived}, timeout=2 * PROGRESS_INTERVAL_S)
            return arrived.result() if arrived.done() and not arrived.exception() else None
        finally:
            arrived.cancel()
            ended.cancel()

    async def _mux(
        self, audio: ray.ObjectRef, encoded: list[ray.ObjectRef], output_format: str, info: SourceInfo, tally: TallyRef
    ) -> MuxStats:
        """Mux and store the file in a task, reporting the frames it has written meanwhile."""
        media = self.job.media
        options = {}
        if media.node_local:  # its files are on this node's disk
            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            options["scheduling_strategy"] = here
        out_path = self.job.out_path
        dispatched = await self._schedule(
            _mux_task,
            options,
            *(audio, output_format, media, out_path, info, encoded, tally, self.job.poster_path),
            final=True,
            bundle=(),
        )
        watching = asyncio.ensure_future(self._follow_tally(lambda live: self._report_written(live[-1], info)))
        try:
            return await _value(dispatched.refs[0])
        finally:
            watching.cancel()

    async def _report_written(self, frames_written: int, info: SourceInfo) -> None:
        """Hand the hooks a muxing report when the frames written moved."""
        if frames_written <= self._written_reported:
            return
        self._written_reported = frames_written
        total = info.frame_count
        await self.hooks.progress(
            RenderProgress(MUXING, total, total, source_fps=info.fps, frames_written=frames_written)
        )

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
        """Withdraw the queued tasks, force-cancel every started one that has not finished, and wait (bounded)
        until they are gone, so a killed mux cannot still publish its file after the render ended."""
        if self.pool is not None:
            self.pool.scheduler.withdraw(self.job.principal, self._key)
        if not self._submitted:
            return
        _, unfinished = ray.wait(self._submitted, num_returns=len(self._submitted), timeout=0, fetch_local=False)
        for ref in unfinished:
            ray.cancel(ref, force=True)
        if unfinished:
            await asyncio.wait([asyncio.ensure_future(_settled(ref)) for ref in unfinished], timeout=CANCEL_WAIT_S)


def _codecs_text(spec: RenderSpec) -> str:
    decoder = spec.video_decoder or "software decoding"
    return f"encoder {spec.video_encoder}, {decoder}"


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
