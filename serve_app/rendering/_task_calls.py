"""How a render's Ray tasks are started: one typed method (or function) per task, taking the task's arguments as one
typed object (render_tasks' `SegmentTask`, `AudioTask`, `PicturesTask`, `CodecsTask`, `MuxTask`, `WarmTask`) and
giving typed references to what it returns (`TaskRef`). A field's type changed there makes mypy fail where the task
is started. Ray's `.remote(` is written here, in render_tasks (the tasks' calls back to their host) and in tally (the
frame tally actor and its client), nowhere else in the package.

Where they run: a render's tasks are started by its run's `RenderTasks`, which remembers them so that a render that
ends short cancels every one still running (the warm pool's holding tasks by `hold_worker`). Each segment asks Ray
for a CPU (and a GPU share on the GPU path), and so does the audio unless it rides along on the first segment's CPU.
The pictures task, the mux and a ride-along audio ask for none: Ray runs a CPU-less task on the node that submits
it, the supervisor's, where the warm pool keeps workers ready (serve_app.rendering._warm_pool).

Retries: every task retries up to 3 times on worker death only (`retry_exceptions=False`: a kernel error is
deterministic, retrying it is wasted work). The kernels are deterministic, so a retried segment produces the same
bytes and the output does not depend on failures. A task's worker that crashes takes only that task down; one that
hangs is ended with its render at VIDFORGE_RENDER_TIMEOUT_S.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Generic, NamedTuple, ParamSpec, TypeVar, cast

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from render_kernels.audio import EncodedAudio
from render_kernels.spec import RenderSpec
from render_kernels.video import EncodedSegment
from serve_app.rendering._render_tasks import (
    AudioSummary,
    AudioTask,
    CodecsTask,
    MuxTask,
    PicturesTask,
    SegmentSummary,
    SegmentTask,
    StoredVideo,
    TaskRef,
    WarmTask,
    choose_codecs,
    encode_audio_parts,
    encode_segment_parts,
    mux_stored_segments,
    render_pictures,
    warm_worker,
)

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S")
D = TypeVar("D")

TASK_OPTIONS: dict[str, Any] = {"num_cpus": 1, "max_retries": 3, "retry_exceptions": False}
CODEC_CHOICE_GPU_SHARE = 0.01  # just enough to be scheduled on a GPU node; it only opens an encoder and a decoder
CANCEL_WAIT_S = 10.0  # how long a cancelled render waits for its killed tasks to be gone


class RemoteTask(Generic[P, R]):
    """A task body as Ray runs it (`ray.remote(**options)(body)`), started with the body's own signature: mypy
    checks the arguments of every start against the body, and the references it gives against what it returns."""

    def __init__(self, body: Callable[P, R], **options: Any) -> None:
        self._remote = ray.remote(**options)(body)

    def submit(self, options: dict[str, Any], *args: P.args, **kwargs: P.kwargs) -> Any:
        """Start it with `options` added to its own; Ray's reference (or, with `num_returns`, references)."""
        remote = self._remote.options(**options) if options else self._remote
        return remote.remote(*args, **kwargs)

    def one(self, options: dict[str, Any], *args: P.args, **kwargs: P.kwargs) -> TaskRef[R]:
        """Start a task of one return."""
        return TaskRef(self.submit(options, *args, **kwargs))

    def two(
        self: RemoteTask[P, tuple[S, D]], options: dict[str, Any], *args: P.args, **kwargs: P.kwargs
    ) -> tuple[TaskRef[S], TaskRef[D]]:
        """Start a task of two returns (made with `num_returns=2`)."""
        first, second = self.submit(options, *args, **kwargs)
        return TaskRef(first), TaskRef(second)


# What segment tasks run (`num_returns=2`: summary, segment). A module attribute, so a test can put a faulty twin of it
# in place without the driver knowing.
segment_task = RemoteTask(encode_segment_parts, num_returns=2, **TASK_OPTIONS)
_audio_task = RemoteTask(encode_audio_parts, num_returns=2, **TASK_OPTIONS)
# No CPU for Ray: the scheduler counts the mux on the CPU its render's last task freed (serve_app.rendering._render_mux).
_mux_task = RemoteTask(mux_stored_segments, **{**TASK_OPTIONS, "num_cpus": 0})
_codecs_task = RemoteTask(choose_codecs, num_cpus=0, num_gpus=CODEC_CHOICE_GPU_SHARE, max_retries=3)
# The approval gate's pictures. No CPU: it must start while the segments hold every core, and it decodes a few frames.
_pictures_task = RemoteTask(render_pictures, **{**TASK_OPTIONS, "num_cpus": 0})
_warm_task = RemoteTask(warm_worker, num_cpus=0, max_retries=0)


class SegmentParts(NamedTuple):
    """A segment task's returns: its summary, which the driver awaits, and the encoded segment, for the mux."""

    summary: TaskRef[SegmentSummary]
    segment: TaskRef[EncodedSegment]


class AudioParts(NamedTuple):
    """An audio task's returns: its summary, which the driver awaits, and the encoded audio, for the mux."""

    summary: TaskRef[AudioSummary]
    audio: TaskRef[EncodedAudio | None]


class RenderTasks:
    """The Ray tasks of one render run, each started through its typed method and remembered by its first return,
    so that `cancel_unfinished` stops every one still running."""

    def __init__(self) -> None:
        self._started: list[TaskRef[object]] = []

    def segment(self, task: SegmentTask, gpu_share: float = 0.0) -> SegmentParts:
        """Start a segment task; `gpu_share`: the part of a GPU it asks for (0: none)."""
        parts = SegmentParts(*segment_task.two({"num_gpus": gpu_share} if gpu_share else {}, task))
        self._started.append(parts.summary)
        return parts

    def audio(self, task: AudioTask, ride_along: bool = False) -> AudioParts:
        """Start the audio task; `ride_along`: asking Ray for no CPU, on the one a segment started with it holds."""
        parts = AudioParts(*_audio_task.two({"num_cpus": 0} if ride_along else {}, task))
        self._started.append(parts.summary)
        return parts

    def pictures(self, task: PicturesTask) -> TaskRef[list[bytes]]:
        pictures = _pictures_task.one({}, task)
        self._started.append(pictures)
        return pictures

    async def codecs_within(self, task: CodecsTask, wait_s: float | None) -> RenderSpec | None:
        """The codecs chosen on a GPU node; None when no GPU node ran the choice within `wait_s` (None: no limit).
        While no GPU node is up, the pending choice is what the autoscaler sees and starts one for."""
        chosen = _codecs_task.one({}, task)
        self._started.append(chosen)
        try:
            return await asyncio.wait_for(chosen, wait_s)
        except TimeoutError:
            ray.cancel(chosen.ref)
            return None

    def mux(self, task: MuxTask, audio: TaskRef[EncodedAudio | None]) -> TaskRef[StoredVideo]:
        """Start the mux, pinned to this node when the media store is this node's disk. The audio is a top-level
        argument, so Ray hands the task its value; the segments are fetched by the task one at a time."""
        options: dict[str, Any] = {}
        if task.media.node_local:
            options["scheduling_strategy"] = _on(ray.get_runtime_context().get_node_id())
        # The audio's reference, not its TaskRef: Ray resolves a top-level reference before the task starts.
        stats = _mux_task.one(options, task, audio.ref)
        self._started.append(stats)
        return stats

    async def cancel_unfinished(self) -> None:
        """Force-cancel every started task that has not finished, and wait (at most CANCEL_WAIT_S) until they are
        gone, so that a killed mux cannot still publish its file after the render ended."""
        if not self._started:
            return
        refs = [started.ref for started in self._started]
        _, unfinished = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
        for ref in unfinished:
            ray.cancel(ref, force=True)
        if unfinished:
            await asyncio.wait([asyncio.ensure_future(settled(ref)) for ref in unfinished], timeout=CANCEL_WAIT_S)


def hold_worker(task: WarmTask, node: str) -> Awaitable[int]:
    """Start a warm pool's holding task on `node`; awaiting it gives its worker's process id, or Ray's error as Ray
    raises it."""
    return cast(Awaitable[int], _warm_task.submit({"scheduling_strategy": _on(node)}, task))


async def settled(ref: Awaitable[object]) -> None:
    """Returns once the task behind `ref` has ended, however it ended."""
    try:
        await ref
    except Exception:  # noqa: BLE001 - a cancelled task's ref resolves to TaskCancelledError; any end will do
        pass


def _on(node: str) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node, soft=False)
