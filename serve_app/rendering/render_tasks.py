"""What a render runs inside Ray workers: the segment, audio, picture and mux task bodies and the progress tally.

Kept apart from the driver, and free of the MCP SDK and the rest of serve_app: a worker imports the module of
every function it runs, and a worker process started for a render (the pool growing, a worker replaced after a
crash) would otherwise import the whole server, a second and a half of CPU per process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import time
from dataclasses import dataclass, replace
from typing import Any

import ray

from media_store import MediaStore
from render_kernels import (
    AudioStats,
    EncodedAudio,
    EncodedSegment,
    Media,
    MuxStats,
    RenderSpec,
    Segment,
    SegmentStats,
    SourceInfo,
    Still,
    choose_video_decoder,
    choose_video_encoder,
    encode_audio,
    encode_segment,
    mux_segments,
    render_preview,
)
from render_kernels.warm_up import warm_up

# How often a render's tasks report their frames, and its driver reads them: twice per poll interval its clients
# are told (VIDFORGE_POLL_INTERVAL_MS; `progress_interval_s`), so that every poll sees a new figure, within these
# bounds: at least once a second (the pace at the default 10 s hint, which `subscriptions/listen` clients see too),
# at most 4 times, since each report wakes the tally (the supervisor), the registry and every replica's record
# mirror (CPU in three kinds of process per render).
PROGRESS_INTERVAL_S = 1.0  # the longest interval
MIN_PROGRESS_INTERVAL_S = 0.25
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None)
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
# Allocations of this size or more get a mapping of their own (bound_heap): 256 KiB, twice glibc's starting value,
# keeps the small and mid-sized allocations (packets, audio frames, Python's) in the heaps, where they are cheaper.
MMAP_THRESHOLD = 256 * 1024
_heap_bounded = False


def progress_interval_s(poll_interval_ms: int) -> float:
    """Seconds between a render's progress reports for clients told to poll every `poll_interval_ms`."""
    return min(PROGRESS_INTERVAL_S, max(MIN_PROGRESS_INTERVAL_S, poll_interval_ms / 2000))


def release_freed_memory() -> None:
    """Hand the memory the encoders and decoders freed back to the system (glibc's malloc_trim; elsewhere a no-op).

    A worker runs one task after another. glibc keeps freed buffers for reuse, and once it has freed a 4k frame it
    serves later ones from its heaps rather than fresh mappings; so without this a worker's resident memory only
    grows from task to task (a 4k segment worker: ~900 MiB fresh, ~1.1 GiB after a few segments). With the heap
    bounded (`bound_heap`) such frames no longer stay in the heaps; this returns what the smaller allocations left
    free there."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


def bound_heap() -> bool:
    """Make every allocation of MMAP_THRESHOLD or more in this process a mapping of its own, handed back to the system
    the moment it is freed (glibc's `mallopt(M_MMAP_THRESHOLD)`; elsewhere a no-op). Returns whether it is so.

    glibc's threshold is dynamic by default: it starts at 128 KiB and rises to the size of any mapped block freed, up
    to 32 MiB. A render frees frames of several MiB (a 1080p picture: 3 MiB, 4k: 13 MiB) within its first frames, so
    from then on its frames, pictures and arrays came from the heaps, and stayed there in pieces malloc_trim cannot
    return: pooled workers kept more after each render, up to 150 MiB more each within minutes (+30 % for the whole
    server over a 15-minute soak; docs/performance.md, "Memory after renders"). Each render task calls this first
    (only the first call sets it): a worker Ray starts for a render runs no warm-up."""
    global _heap_bounded
    if not _heap_bounded:
        mallopt = getattr(_LIBC, "mallopt", None)
        _heap_bounded = mallopt is not None and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    return _heap_bounded


class FrameTally:
    """Frames done so far by each reporting task of the runs of one RenderPool, as the tasks report them: each
    segment task's frames encoded, by its index, and after them the mux task's frames written (`TallyRef.mux_index`).

    Held by the actor the pool lives in (the RenderSupervisor serves `report_frames` into its pool's tally), or,
    for a pool outside any actor, run as an actor of its own.

    Keyed by run (a fresh key per RenderRun, opened once its segments are planned and closed when it ends), so a
    report from an abandoned run's task never counts towards a later run of the same render: reports for a run
    that is not open are dropped. Reports are cumulative per task and kept as a high-water mark, so a task
    retried from scratch after a worker death is not counted twice.
    """

    def __init__(self) -> None:
        self.runs: dict[str, list[int]] = {}
        self.stills: dict[str, dict[str, bytes]] = {}  # per open run: the PNGs its segments made, by name

    def open(self, run: str, task_count: int) -> None:
        self.runs[run] = [0] * task_count
        self.stills[run] = {}

    def close(self, run: str) -> None:
        self.runs.pop(run, None)
        self.stills.pop(run, None)

    def report_frames(self, run: str, index: int, frames_done: int) -> None:
        if (frames := self.runs.get(run)) is not None:
            frames[index] = max(frames[index], frames_done)

    def report_still(self, run: str, name: str, png: bytes) -> None:
        if (stills := self.stills.get(run)) is not None:
            stills.setdefault(name, png)  # a retried segment's second copy is the same picture

    def counts(self, run: str) -> list[int] | None:
        """Each task's count; None when the run is not open (e.g. the tally was restarted since)."""
        return self.runs.get(run)

    def stills_of(self, run: str) -> dict[str, bytes] | None:
        """The stills `run`'s segments have made so far; None when the run is not open."""
        return self.stills.get(run)


@dataclass(frozen=True)
class TallyRef:
    """Where one run's tasks report: an actor serving `report_frames` into the pool's FrameTally (the tally itself,
    or the actor holding it), the run's key, the index its mux task reports under (after the segments') and how
    often the tasks report (picklable)."""

    actor: Any
    run: str
    mux_index: int
    interval_s: float

    def report(self, index: int, frames_done: int) -> ray.ObjectRef:
        return self.actor.report_frames.remote(self.run, index, frames_done)

    def report_still(self, name: str, png: bytes) -> None:
        """Hand a still over and wait until it is held: a segment that has ended has delivered its stills, so a
        driver that sees a carrier end without them knows they are not coming. Best effort: a lost tally only
        leaves the stills to the driver's picture task."""
        try:
            ray.get(self.actor.report_still.remote(self.run, name, png))
        except ray.exceptions.RayActorError:
            pass


def reporter(tally: TallyRef, index: int, total: int):
    """A kernel's per-frame callback for the task reporting under `index`, which does `total` frames: passes the
    count on to the tally at its first frame (a render shows it is under way as soon as it is), then at most every
    `tally.interval_s` of the time passing in this worker, and at its last frame. Fire-and-forget: a lost report
    only makes the next one the first to arrive."""
    last = -math.inf

    def on_frame(frames_done: int) -> None:
        nonlocal last
        if (now := time.monotonic()) - last >= tally.interval_s or frames_done == total:
            last = now
            tally.report(index, frames_done)

    return on_frame


def choose_codecs(spec: RenderSpec, info: SourceInfo) -> RenderSpec:
    """`spec` with its video encoder (when unset) and decoder chosen on this node: the driver runs it on a GPU node,
    both choices on the same one."""
    encoder = spec.video_encoder or choose_video_encoder(spec.output_format)
    return replace(spec, video_encoder=encoder, video_decoder=spec.video_decoder or choose_video_decoder(info))


def attempt_number() -> int:
    """Which run of the current task this is: 0, then one more for each retry. vidforge's tasks are retried only
    when their worker died (`retry_exceptions=False`), so this counts the worker losses this task went through.
    Ray keeps it on the core worker only (no public accessor in 2.60)."""
    return int(ray._private.worker.global_worker.core_worker.get_current_task_attempt_number())


@dataclass(frozen=True)
class SegmentSummary:
    """What a segment task tells its driver (its first return; the encoded segment, its second, stays in the object
    store until the mux fetches it)."""

    index: int
    frame_count: int
    node: str  # the Ray node it ran on: the driver's placement note names it
    attempt: int  # the worker losses it went through (attempt_number)
    stats: SegmentStats

    @classmethod
    def of(cls, encoded: EncodedSegment) -> SegmentSummary:
        """The summary of `encoded`, made in the task that encoded it."""
        node = ray.get_runtime_context().get_node_id()
        return cls(encoded.index, encoded.frame_count, node, attempt_number(), encoded.stats)


@dataclass(frozen=True)
class AudioSummary:
    """What an audio task tells its driver (its first return; the encoded audio, its second, stays in the object
    store until the mux fetches it)."""

    stats: AudioStats | None  # None: the source has no audio
    attempt: int  # the worker losses it went through (attempt_number)


def encode_segment_parts(
    source_path: Media,
    segment: Segment,
    spec: RenderSpec,
    info: SourceInfo,
    tally: TallyRef,
    stills: tuple[Still, ...] = (),
) -> tuple[SegmentSummary, EncodedSegment]:
    """`encode_segment` as (summary, segment), reporting live to `tally`, its stills included; see module
    docstring."""
    bound_heap()
    try:
        on_frame = reporter(tally, segment.index, segment.frame_count)
        encoded = encode_segment(source_path, segment, spec, info, on_frame, stills, tally.report_still)
    finally:
        release_freed_memory()
    return SegmentSummary.of(encoded), encoded


def encode_audio_parts(source_path: Media, output_format: str) -> tuple[AudioSummary, EncodedAudio | None]:
    """`encode_audio` as (summary, audio): the driver awaits the summary only (see module docstring)."""
    bound_heap()
    try:
        audio = encode_audio(source_path, output_format)
    finally:
        release_freed_memory()
    return AudioSummary(audio.stats if audio is not None else None, attempt_number()), audio


def render_pictures(source_path: Media, info: SourceInfo, wanted: list[tuple[RenderSpec, float]]) -> list[bytes]:
    """`render_preview` of each (spec, at) in `wanted`, in turn, in one task (the driver's approval gate: the
    watermark preview and the source's first frame)."""
    bound_heap()
    try:
        return [render_preview(source_path, info, spec, at) for spec, at in wanted]
    finally:
        release_freed_memory()


def mux_stored_segments(
    audio: EncodedAudio | None,
    output_format: str,
    media: MediaStore,
    out_path: str,
    info: SourceInfo,
    segment_refs: list[ray.ObjectRef],
    tally: TallyRef,
    poster_path: str | None = None,
) -> MuxStats:
    """`mux_segments` fetching the segments one at a time: refs inside a list are not resolved by Ray before the
    task starts, so each is read from the object store only when the mux reaches it. The file is made in a
    staging folder on this node and then handed to the store under `out_path` (a rename, or a multipart
    upload). Reports the frames written to `tally` as the segments' tasks do theirs, the last one as the file is
    finished and stored. With `poster_path`, a frame of the file goes there as a JPEG first (serve_app.rendering.poster),
    so that the poster is in the store whenever the video is."""
    bound_heap()
    on_frame = reporter(tally, tally.mux_index, info.frame_count)
    try:
        with media.staged(out_path) as staged:
            segments = (ray.get(ref) for ref in segment_refs)
            stats = mux_segments(segments, audio, output_format, staged, info.fps, on_frame)
            if poster_path is not None:
                # Here, not at the top: every render worker imports this module, which imports nothing else of the
                # server.
                from serve_app.rendering.poster import poster_jpeg

                media.put_bytes(poster_path, poster_jpeg(staged))
            media.put_file(staged, out_path, move=True)
    finally:
        release_freed_memory()
    return replace(stats, path=out_path)


def warm_worker(host: Any, round_id: str) -> int:
    """Make this worker ready to render (render_kernels.warm_up), then hold it in `host.warm_arrived` until every
    worker of the holding round `round_id` has arrived, so that the round's tasks run in as many distinct processes
    as it has tasks, and until a render wants the workers (serve_app.rendering.warm_pool). Returns this process's
    id."""
    bound_heap()
    warm_up()
    release_freed_memory()
    ray.get(host.warm_arrived.remote(round_id))
    return os.getpid()
