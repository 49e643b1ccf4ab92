"""What a render runs inside Ray workers: the segment, audio, picture, codec, mux and warm-up task bodies, each with
the typed arguments it takes (`SegmentTask`, ...; serve_app.rendering._task_calls submits them), and the progress
tally the tasks report to.

Kept apart from the driver, and free of the MCP SDK and the rest of serve_app: a worker imports the module of
every function it runs, and a worker process started for a render (the pool growing, a worker replaced after a
crash) would otherwise import the whole server, a second and a half of CPU per process. For the same reason a
task calls back its host actor (`TaskHost`) here, through `call_host`, and not through actors.actor_calls: importing
that package loads the task registry and its stores (~200 modules) into every render worker.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import time
from collections.abc import Callable, Coroutine, Generator, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Concatenate, Generic, ParamSpec, Protocol, TypeVar, cast

import ray

from media_store.base import MediaStore
from render_kernels.audio import AudioStats, EncodedAudio, encode_audio
from render_kernels.decoders import choose_video_decoder
from render_kernels.encoders import choose_video_encoder
from render_kernels.ladder import LadderSpec
from render_kernels.media_io import Media
from render_kernels.mux import MuxStats, mux_segments
from render_kernels.plan import Segment
from render_kernels.preview import Still, render_preview
from render_kernels.qc.findings import QcReport, QcRequest, QcThresholds, SegmentQc
from render_kernels.qc.merge import merge_qc
from render_kernels.qc.sheet import contact_sheet
from render_kernels.source_info import SourceInfo
from render_kernels.spec import RenderSpec
from render_kernels.video import EncodedSegment, SegmentStats, encode_segment
from render_kernels.warm_up import warm_up

if TYPE_CHECKING:  # its module is imported by a mux task only when its render streams
    from render_kernels.streaming import StreamPackage
    from serve_app.rendering._render_stream import StreamPackaging

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

P = ParamSpec("P")
T_co = TypeVar("T_co", covariant=True)


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


class TaskHost(Protocol):
    """What a render's tasks call back on the actor their pool lives in: the render supervisor (mypy checks its class
    against this), or for a pool outside any actor its own FrameTally actor, which serves the two reports."""

    async def report_frames(self, run: str, index: int, frames_done: int) -> None: ...
    async def report_still(self, run: str, name: str, png: bytes) -> None: ...
    async def warm_arrived(self, round_id: str) -> None: ...


def call_host(
    host: Any, method: Callable[Concatenate[Any, P], Coroutine[Any, Any, None]], *args: P.args, **kwargs: P.kwargs
) -> ray.ObjectRef:
    """Call `method` (a `TaskHost` method, whose signature mypy checks here) on the actor handle `host`, from a task;
    returns the call's reference, for a task that must wait for it (`ray.get`). See the module docstring for why
    this is not actors.actor_calls."""
    return getattr(host, method.__name__).remote(*args, **kwargs)


class TaskRef(Generic[T_co]):
    """One return of a started task: its Ray reference (to hand on to another task, wait on or cancel) and the type
    of its value. Awaiting it gives the value; a kernel's exception is raised as itself, not as Ray's wrapper."""

    __slots__ = ("ref",)

    def __init__(self, ref: ray.ObjectRef) -> None:
        self.ref = ref

    def __await__(self) -> Generator[Any, None, T_co]:
        return self._value().__await__()

    async def _value(self) -> T_co:
        try:
            return cast(T_co, await self.ref)
        except ray.exceptions.RayTaskError as err:
            raise err.cause from err


@dataclass(frozen=True)
class TallyRef:
    """Where one run's tasks report: an actor serving `report_frames` into the pool's FrameTally (the tally itself,
    or the actor holding it, a `TaskHost`), the run's key, the index its mux task reports under (after the
    segments') and how often the tasks report (picklable)."""

    actor: Any
    run: str
    mux_index: int
    interval_s: float

    def report(self, index: int, frames_done: int) -> ray.ObjectRef:
        return call_host(self.actor, TaskHost.report_frames, self.run, index, frames_done)

    def report_still(self, name: str, png: bytes) -> None:
        """Hand a still over and wait until it is held: a segment that has ended has delivered its stills, so a
        driver that sees a carrier end without them knows they are not coming. Best effort: a lost tally only
        leaves the stills to the driver's picture task."""
        try:
            ray.get(call_host(self.actor, TaskHost.report_still, self.run, name, png))
        except ray.exceptions.RayActorError:
            pass


def reporter(tally: TallyRef, index: int, total: int) -> Callable[[int], None]:
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


@dataclass(frozen=True)
class CodecsTask:
    """What `choose_codecs` is given: the render's spec and its source's facts."""

    spec: RenderSpec
    info: SourceInfo


def choose_codecs(task: CodecsTask) -> RenderSpec:
    """The task's spec with its video encoder (when unset) and decoder chosen on this node: the driver runs it on a
    GPU node, both choices on the same one."""
    spec = task.spec
    encoder = spec.video_encoder or choose_video_encoder(spec.output_format)
    return replace(spec, video_encoder=encoder, video_decoder=spec.video_decoder or choose_video_decoder(task.info))


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


@dataclass(frozen=True)
class SegmentTask:
    """What `encode_segment_parts` is given: one segment of the source to encode to `spec`, where to report its
    frames, and the stills it makes as it passes their frames."""

    source: Media
    segment: Segment
    spec: RenderSpec
    info: SourceInfo
    tally: TallyRef
    stills: tuple[Still, ...] = ()
    qc: QcRequest | None = None  # what the render's quality check asks of the segment; None: no check
    ladder: LadderSpec | None = None  # the streaming ladder's rungs to encode besides; None: none


def encode_segment_parts(task: SegmentTask) -> tuple[SegmentSummary, EncodedSegment]:
    """`encode_segment` as (summary, segment), reporting live to the task's tally, its stills included; see
    serve_app.rendering._task_calls."""
    bound_heap()
    segment, tally = task.segment, task.tally
    try:
        on_frame = reporter(tally, segment.index, segment.frame_count)
        encoded = encode_segment(
            task.source,
            segment,
            task.spec,
            task.info,
            on_frame,
            task.stills,
            tally.report_still,
            qc=task.qc,
            ladder=task.ladder,
        )
    finally:
        release_freed_memory()
    return SegmentSummary.of(encoded), encoded


@dataclass(frozen=True)
class AudioTask:
    """What `encode_audio_parts` is given: the source whose audio to encode for `output_format`."""

    source: Media
    output_format: str
    qc: QcThresholds | None = None  # the render's quality check's thresholds; None: no check


def encode_audio_parts(task: AudioTask) -> tuple[AudioSummary, EncodedAudio | None]:
    """`encode_audio` as (summary, audio): the driver awaits the summary only (see serve_app.rendering._task_calls)."""
    bound_heap()
    try:
        audio = encode_audio(task.source, task.output_format, task.qc)
    finally:
        release_freed_memory()
    return AudioSummary(audio.stats if audio is not None else None, attempt_number()), audio


@dataclass(frozen=True)
class PicturesTask:
    """What `render_pictures` is given: the source, and each picture wanted as (spec, at) as render_preview takes
    them."""

    source: Media
    info: SourceInfo
    wanted: tuple[tuple[RenderSpec, float], ...]


def render_pictures(task: PicturesTask) -> list[bytes]:
    """`render_preview` of each (spec, at) the task wants, in turn, in one task (the driver's approval gate: the
    watermark preview and the source's first frame)."""
    bound_heap()
    try:
        return [render_preview(task.source, task.info, spec, at) for spec, at in task.wanted]
    finally:
        release_freed_memory()


@dataclass(frozen=True)
class MuxTask:
    """What `mux_stored_segments` is given besides the audio: the segments (references, each fetched when the mux
    reaches it), the output's format and facts, where the file and its poster go, and where to report."""

    output_format: str
    media: MediaStore
    out_path: str
    info: SourceInfo
    segments: tuple[TaskRef[EncodedSegment], ...]
    tally: TallyRef
    poster_path: str | None = None
    quality: QualityCheck | None = None
    stream: StreamPackaging | None = None  # the ladder to package and store beside the file; None: no stream


@dataclass(frozen=True)
class QualityCheck:
    """What the mux makes of the segments' and the audio's quality findings: the verdict's thresholds, and where
    the contact sheet goes (a key of the media store)."""

    thresholds: QcThresholds
    contact_sheet_path: str


@dataclass(frozen=True)
class StoredVideo:
    """What the mux task stored: the file's figures, its quality report (None without a check) and its stream (None
    without one)."""

    stats: MuxStats
    qc: QcReport | None
    stream: StreamPackage | None = None


def mux_stored_segments(task: MuxTask, audio: EncodedAudio | None) -> StoredVideo:
    """`mux_segments` fetching the segments one at a time: references inside an argument are not resolved by Ray
    before the task starts, so each is read from the object store only when the mux reaches it (the audio, a
    top-level argument, is). The file is made in a staging folder on this node and then handed to the store under
    `out_path` (a rename, or a multipart upload). Reports the frames written to the tally as the segments' tasks do
    theirs, the last one as the file is finished and stored. With `poster_path`, a frame of the file goes there as a
    JPEG first (serve_app.rendering._poster), so that the poster is in the store whenever the video is; with
    `quality`, the segments' and the audio's findings are merged into the report (render_kernels.qc.merge: an event
    over a segment cut is one) and its contact sheet goes into the store beside them; with `stream`, the segments are
    read once more for their rungs, packaged and stored under its prefix (serve_app.rendering._render_stream)."""
    bound_heap()
    media, out_path, tally = task.media, task.out_path, task.tally
    on_frame = reporter(tally, tally.mux_index, task.info.frame_count)
    findings: list[SegmentQc] = []  # each segment's, kept as the mux passes it (its packets are not)

    def fetched(keep_findings: bool = True) -> Iterator[EncodedSegment]:
        for ref in task.segments:
            segment: EncodedSegment = ray.get(ref.ref)
            if segment.qc is not None and keep_findings:
                findings.append(segment.qc)
            yield segment

    report = stream = None
    try:
        with media.staged(out_path) as staged:
            stats = mux_segments(fetched(), audio, task.output_format, staged, task.info.fps, on_frame)
            if task.poster_path is not None:
                # Here, not at the top: every render worker imports this module, which imports nothing else of the
                # server.
                from serve_app.rendering._poster import poster_jpeg

                media.put_bytes(task.poster_path, poster_jpeg(staged))
            if (quality := task.quality) is not None:
                audio_qc = audio.qc if audio is not None else None
                report = merge_qc(findings, audio_qc, task.info.fps, quality.thresholds)
                media.put_bytes(quality.contact_sheet_path, contact_sheet(findings, report))
            if task.stream is not None:
                from serve_app.rendering._render_stream import package_and_store  # as _poster's, above

                staging = os.path.join(os.path.dirname(staged), "stream")
                stream = package_and_store(task.stream, fetched(False), audio, task.info.fps, media, staging)
            media.put_file(staged, out_path, move=True)
    finally:
        release_freed_memory()
    return StoredVideo(replace(stats, path=out_path), report, stream)


@dataclass(frozen=True)
class WarmTask:
    """What `warm_worker` is given: the actor holding the warm pool (a `TaskHost`) and the holding round's id."""

    host: Any
    round_id: str


def warm_worker(task: WarmTask) -> int:
    """Make this worker ready to render (render_kernels.warm_up), then hold it in the host's `warm_arrived` until
    every worker of the task's holding round has arrived, so that the round's tasks run in as many distinct
    processes as it has tasks, and until a render wants the workers (serve_app.rendering._warm_pool). Returns this
    process's id."""
    bound_heap()
    warm_up()
    release_freed_memory()
    ray.get(call_host(task.host, TaskHost.warm_arrived, task.round_id))
    return os.getpid()
