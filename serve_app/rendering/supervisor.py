"""The RenderSupervisor actor: runs one render driver per task and maps its life onto the registry.

Detached and named, so renders outlive the Serve replica that accepted them. On (re)start — its constructor,
not a first call — it resumes every non-terminal task it finds in the registry (after a crash, the whole
server being restarted, or the actor itself being restarted), so an accepted render is never silently lost:
it runs again from its (deterministic) segments, or ends as a clear `render_failed` after repeated
interruptions. While it drives tasks it renews their leases in the registry every HEARTBEAT_S; the
registry's sweep hands any non-terminal task without a live lease back to `start` (a start that never ran:
a client gone during create, a replica crash). `start` is idempotent per task, so those paths, the service's
own start after create and an idempotent replay never render one task twice.

Cancel is always applied: `cancel` ends the task even when no driver holds it; the driver checks the
registry's `cancel_requested` at its checkpoints (its start, every progress report, the approval wait),
so a cancel whose `cancel` call never arrived still stops it; and the registry completes nothing once a
cancel is requested.

The renders it drives share the cluster through one RenderPool: a fair scheduler of their CPU tasks
(round-robin across principals, FIFO within one; serve_app.rendering._scheduling) and one progress tally, held here: the
segment tasks report their frames to this actor (`report_frames`), so the tally costs no process of its own. On an
autoscaling cluster (VIDFORGE_AUTOSCALING_CONFIG) that scheduler is also the one voice telling Ray's autoscaler what
the queue needs (serve_app.rendering._autoscaling). This actor, the registry and the ingress live on the head and no
object of theirs is held on a worker node, so a worker node whose work has ended is idle and can be removed.

Cost is bounded per render, and this shared process parses no uploaded byte: a source nobody has vetted (an
asset stored without its upload's facts) is probed in a parser process of its own under the media limits
(VIDFORGE_MAX_*, VIDFORGE_PARSE_*); a vetted one is decoded only by the render's own tasks. Each run of a render
is stopped at VIDFORGE_RENDER_TIMEOUT_S (the approval wait included) exactly like a cancel, then ends as
`render_timeout`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from dataclasses import replace

import ray

from actors.client import RegistryApi, SupervisorApi, open_supervisor
from actors.driver_writes import CANCELLED_MESSAGE
from actors.outage import until_state_answers
from mcp_protocol.domain import (
    Artifact,
    Cancelled,
    Failed,
    RenderEnd,
    RenderRequest,
    Succeeded,
    TaskRecord,
    TaskStatus,
    Unsupported,
)
from mcp_protocol.envelope import VidforgeError
from mcp_protocol.error_codes import ErrorCode
from mcp_protocol.errors import over_time_limit
from mcp_protocol.progress import RenderProgress
from mcp_protocol.quality import QcReport
from mcp_protocol.state_outage import StateUnavailable
from mcp_protocol.timefmt import now_ms
from media_store.artifacts import (
    discard,
)
from render_kernels.errors import UnsupportedMedia
from render_kernels.mux import MuxStats
from serve_app._config import Config
from serve_app._handles import registry_client
from serve_app.media.assets import AssetStore
from serve_app.media.disk_full import is_disk_full
from serve_app.media.media_limits import media_refusal
from serve_app.observability.catalog import ENCODE_SPEED, ENCODED_FRAMES, RENDER_DURATION, RENDER_QUEUE
from serve_app.observability.metric import principal_label
from serve_app.observability.process import observe_process
from serve_app.rendering._autoscaling import ElasticCluster
from serve_app.rendering._render_driver import RenderRun
from serve_app.rendering._render_job import RenderJob, RenderRejected, RenderTimings
from serve_app.rendering._render_pool import RenderPool
from serve_app.rendering._render_tasks import TaskHost
from serve_app.rendering._scheduling import SegmentScheduler
from serve_app.rendering._warm_pool import WarmPool

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
KEPT_TIMINGS = 1000  # finished renders whose stage timings `render_timings` can still answer
WATCH_S = 10.0
HEARTBEAT_S = 3.0  # lease renewal; well inside the registry's DRIVER_LEASE_S (15 s)


class RegistryHooks:
    """The driver's callbacks, written through to the TaskRegistry (the only owner of task state).

    Built inside the task that drives the render: what the registry answers is a checkpoint, and a render
    whose task has ended elsewhere or has a cancel requested is stopped by cancelling that task, exactly as
    `RenderSupervisor.cancel` would (a hook may run in one of the driver's helper futures, where an exception
    would not reach the render)."""

    def __init__(self, registry: RegistryApi, rec: TaskRecord, config: Config) -> None:
        self.registry = registry
        self.task_id = rec.task_id
        self.principal = rec.principal
        self.config = config
        driving = asyncio.current_task()
        assert driving is not None, "built inside the task that drives the render"
        self._driving = driving
        self._stopping = False

    def _checkpoint(self, rec: TaskRecord | None) -> None:
        """Stop the render, once, when the registry says it must not go on."""
        if not self._stopping and (rec is None or rec.status.terminal or rec.cancel_requested):
            self._stopping = True
            self._driving.cancel()

    async def progress(self, report: RenderProgress) -> None:
        """The driver already reports at a bounded rate (once a progress interval, 0.25-1 s, only when a count
        moves); the registry publishes each at once and stores only phase changes (frames and speed are volatile)."""
        try:
            self._checkpoint(await self.registry.set_progress(self.task_id, **report.fields()))
        except StateUnavailable:
            pass  # counts only: the next report carries them, so the render goes on while the state is away

    async def preview_ready(self, path: str) -> bool:
        """Contract §3.3: publish the preview, go `input_required`, and wait for the decision (or the
        registry's sweep ending the task on the approval timeout). A cancel requested meanwhile stops the
        render at once (`_checkpoint`): the wait below is then cancelled with it."""
        task_id, registry = self.task_id, self.registry
        rec = await until_state_answers(
            lambda: registry.get_any(task_id),
            f"render {task_id}'s record read",
            retry_max_s=self.config.state_retry_max_s,
        )
        self._checkpoint(rec)
        if rec is not None and rec.status is TaskStatus.WORKING and rec.approval is None:
            # None: ended meanwhile (cancelled), and there is nothing left to approve
            timeout_s = self.config.approval_timeout_s

            async def ask() -> TaskRecord | None:
                asked = await registry.get_any(task_id)  # a try whose answer was lost may have asked already
                if asked is not None and asked.status is TaskStatus.INPUT_REQUIRED:
                    return asked
                return await registry.request_input(task_id, timeout_s)

            rec = await until_state_answers(
                ask, f"render {task_id}'s approval request", retry_max_s=self.config.state_retry_max_s
            )
        while rec is not None and rec.status is TaskStatus.INPUT_REQUIRED:
            wait = functools.partial(registry.watch, self.principal, [task_id], {task_id: rec.version}, WATCH_S)
            await until_state_answers(wait, f"render {task_id}'s wait", retry_max_s=self.config.state_retry_max_s)
            rec = await until_state_answers(
                lambda: registry.get_any(task_id),
                f"render {task_id}'s record read",
                retry_max_s=self.config.state_retry_max_s,
            )
            self._checkpoint(rec)
        return rec is not None and rec.status is TaskStatus.WORKING


class RenderTimedOut(Exception):
    """The render ran past VIDFORGE_RENDER_TIMEOUT_S and was stopped (its tasks cancelled, its files removed)."""


def metered_use(run: RenderRun, stats: MuxStats) -> tuple[float, float]:
    """What a finished run used: the CPU seconds its segment, audio and mux tasks measured (a segment's last attempt:
    one that lost its worker reports nothing), and its wall seconds less the wait for the watermark's approval."""
    audio_s = run.audio_stats.cpu_s if run.audio_stats is not None else 0.0
    cpu_s = sum(segment.stats.cpu_s for segment in run.segment_stats) + audio_s + stats.cpu_s
    render_s = run.stages.get("total", 0.0) - run.stages.get("approval", 0.0)
    return round(cpu_s, 3), round(render_s, 3)


async def run_render_within(limit_s: float, run: RenderRun) -> MuxStats:
    """`run.run()`, stopped at `limit_s` the way a cancel stops it and then raised as RenderTimedOut. A
    TimeoutError from inside the render (not this deadline) passes through as the fault it is."""
    try:
        async with asyncio.timeout(limit_s) as deadline:
            return await run.run()
    except TimeoutError:
        if deadline.expired():
            raise RenderTimedOut from None
        raise


def elastic_cluster(config: Config) -> ElasticCluster | None:
    """The autoscaler the renders tell their demand to (VIDFORGE_AUTOSCALING_CONFIG); None on a fixed cluster."""
    return ElasticCluster.of(config.autoscaling_config, config.max_principal_cpus, config.max_cluster_cpus)


class RenderSupervisor:
    def __init__(self, config_json: str) -> None:
        self.config = Config.from_json(config_json)
        observe_process(self.config)
        self.assets = AssetStore(self.config)
        self.registry = registry_client(self.config)
        self.running: dict[str, asyncio.Task[None]] = {}
        # Every render driven here shares one fair scheduler of the cluster's CPUs (serve_app.rendering._scheduling),
        # and the tally this actor serves (in-process, outside an actor, the pool starts a tally actor instead).
        context = ray.get_runtime_context()
        host = context.current_actor if context.get_actor_id() is not None else None
        self.pool = RenderPool(SegmentScheduler(elastic=elastic_cluster(self.config)), host=host)
        # Render workers started and loaded before the first render, and held so while none runs
        # (serve_app.rendering._warm_pool): only in an actor (the rounds' tasks wait in it), unless VIDFORGE_WARM_POOL
        # is off.
        every_node = self.config.autoscaling_config is None  # on an autoscaling cluster, its own node only
        self.warm_pool = WarmPool(host, every_node) if host is not None and self.config.warm_pool else None
        self.timings: OrderedDict[str, RenderTimings] = OrderedDict()  # the last KEPT_TIMINGS completed renders
        # Resume on this instance's own start: a restarted actor may get no call for a long time (a task's
        # progress is read from the registry, never from here). Ray runs an async actor's constructor on its
        # event loop; in-process, construct it inside one.
        self._resumed = asyncio.ensure_future(self._resume())
        self._heartbeat = asyncio.ensure_future(self._renew_leases())
        if self.warm_pool is not None:
            self._warming = asyncio.ensure_future(self.warm_pool.keep_warm(lambda: bool(self.running)))

    async def resumed(self) -> bool:
        """Returns once the renders in flight at this instance's start are (re)started."""
        await self._resumed
        return True

    async def ready(self) -> bool:
        """Returns once the renders in flight at this instance's start are (re)started and the warm pool's first
        round's workers are ready: `vidforge serve` prints its endpoint, and `/readyz` answers ready, only then
        (a render asked for sooner waits here, in `start`)."""
        await self._resumed
        if self.warm_pool is not None:
            await self.warm_pool.warm.wait()
        return True

    async def warm_arrived(self, round_id: str) -> None:
        """A holding round's task has made its worker ready: returns once the whole round has and a render wants the
        workers (WarmPool.arrived)."""
        assert self.warm_pool is not None, "only a warm pool's tasks call this"
        await self.warm_pool.arrived(round_id)

    async def _resume(self) -> None:
        for rec in await until_state_answers(
            self.registry.nonterminal, "the unfinished renders' read", retry_max_s=self.config.state_retry_max_s
        ):
            self._launch(rec)

    async def _renew_leases(self) -> None:
        """Every HEARTBEAT_S, tell the registry which tasks this instance drives: its sweep re-drives the others."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if self.running:
                try:
                    await self.registry.renew_leases(sorted(self.running))
                except Exception:  # a missed beat only lets the sweep ask `start`, which is a no-op here
                    logger.exception("lease renewal failed; retrying next beat")

    async def report_frames(self, run: str, index: int, frames_done: int) -> None:
        """A segment's or the mux's live frame count, into the pool's tally (fire-and-forget from the task)."""
        self.pool.report_frames(run, index, frames_done)

    async def report_still(self, run: str, name: str, png: bytes) -> None:
        """A picture a segment task made as it passed its frame (the watermark preview), into the pool's tally."""
        self.pool.report_still(run, name, png)

    async def start(self, task_id: str) -> None:
        """Drive `task_id` unless this instance already does or it has ended: idempotent per task."""
        await self.ready()
        if task_id not in self.running:
            rec = await self.registry.get_any(task_id)
            if rec is not None and not rec.status.terminal:
                self._launch(rec)

    async def cancel(self, task_id: str) -> None:
        """Stop the driver, if any (it `ray.cancel`s its tasks), and end the task cancelled — also when no
        driver holds it or it was stopped before its first step; a no-op on a task that already ended."""
        await self.ready()
        task = self.running.get(task_id)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.registry.finish(task_id, Cancelled(), message=CANCELLED_MESSAGE)

    async def active(self) -> list[str]:
        return sorted(self.running)

    async def render_timings(self, task_id: str) -> RenderTimings | None:
        """Where a completed render's time went (stages, segments), while it is among the last KEPT_TIMINGS;
        for benchmarks and operators (the same figures are logged at completion)."""
        return self.timings.get(task_id)

    def _launch(self, rec: TaskRecord) -> None:
        """Start one driver for the task, unless one runs (checked here, with no await since the caller's)."""
        task_id = rec.task_id
        if task_id in self.running:
            return
        task = asyncio.ensure_future(self._drive(rec))
        self.running[task_id] = task
        task.add_done_callback(lambda _: self.running.pop(task_id, None))

    async def _drive(self, rec: TaskRecord) -> None:
        task_id, request = rec.task_id, rec.request
        config = self.config
        if rec.attempt >= MAX_ATTEMPTS:  # a requested cancel still wins: finish applies it instead
            interrupted = Failed(code=ErrorCode.RENDER_FAILED, reason=f"render interrupted {rec.attempt} times")
            await self._finish(task_id, interrupted)
            return
        try:
            if self.warm_pool is not None:  # the held workers back in Ray's pool, for this render's tasks
                await self.warm_pool.release()
            started = await until_state_answers(
                lambda: self.registry.bump_attempt(task_id),
                f"render {task_id}'s start",
                retry_max_s=self.config.state_retry_max_s,
            )
            if started is None or started.cancel_requested:  # the first checkpoint: ended or cancelled before any work
                raise asyncio.CancelledError
            rec = started
            job = RenderJob.of_record(rec, config, self.assets)
            run = RenderRun(job, RegistryHooks(self.registry, rec, config), self.pool)
            stats = await run_render_within(config.render_timeout_s, run)
        except (asyncio.CancelledError, Exception) as exc:
            await asyncio.to_thread(discard, self.assets.media, task_id)  # every way out but success leaves no file
            await self._end_unfinished(task_id, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        # The file exists: from here only the registry decides, so a cancel arriving now cannot cut the
        # completion in half (the shielded call runs on; `cancel`'s own finish then finds the task ended).
        if await asyncio.shield(self._complete(task_id, request, stats, run)):
            record_success(rec, run, stats)
        self._keep_timings(task_id, replace(run.timings(), completed_at=time.time()))

    def _keep_timings(self, task_id: str, timings: RenderTimings) -> None:
        stages = {f"{stage}_s": round(seconds, 3) for stage, seconds in timings.stages.items()}
        fields = {"event": "render_timings", "task_id": task_id, **stages}
        logger.info("render %s done: %s", task_id, timings.summary(), extra=fields)
        self.timings[task_id] = timings
        while len(self.timings) > KEPT_TIMINGS:
            self.timings.popitem(last=False)

    async def _complete(self, task_id: str, request: RenderRequest, stats: MuxStats, run: RenderRun) -> bool:
        """Publish the finished render (its artifact, with its quality report and what it used, in the one registry
        commit that completes it), or delete its files when the registry discards it (a cancel was requested, or the
        task ended meanwhile). True: published."""
        qc = run.qc
        cpu_s, render_s = metered_use(run, stats)
        artifact = Artifact(  # where its files are is media_store.artifacts' layout
            ext=request.output_format,
            size_bytes=stats.size_bytes,
            duration_s=stats.duration_s,
            finished_at_ms=now_ms(),
            width=stats.width,
            height=stats.height,
            qc=QcReport.model_validate(qc.to_json()) if qc is not None else None,
            cpu_s=cpu_s,
            render_s=render_s,
        )
        # The size delivered, said where every client era reads it: `resolution` names only the short side.
        message = f"Render complete: {stats.width}x{stats.height} {request.output_format}."
        finished = await self._finish(task_id, Succeeded(artifact=artifact), message)
        if finished is None:
            await asyncio.to_thread(discard, self.assets.media, task_id)
        return finished is not None

    async def _end_unfinished(self, task_id: str, exc: BaseException) -> None:
        """End a task whose render stopped short, with the outcome that says why."""
        if isinstance(exc, asyncio.CancelledError):
            await self._finish(task_id, Cancelled(), CANCELLED_MESSAGE)
            return
        if isinstance(exc, RenderRejected):
            return  # the decision (reject or timeout) already ended the task
        end: RenderEnd
        if isinstance(exc, RenderTimedOut):
            logger.info("render %s stopped at the %g s limit", task_id, self.config.render_timeout_s)
            end = Failed(code=ErrorCode.RENDER_TIMEOUT, reason=over_time_limit(self.config.render_timeout_s))
        elif isinstance(exc, UnsupportedMedia):  # unreadable, or over a limit lowered since create
            logger.info("render %s: source refused", task_id, exc_info=exc, extra={"task_id": task_id})
            end = unusable(media_refusal("source_asset_uri", exc))
        elif isinstance(exc, VidforgeError):  # an asset gone since create (retention): source_not_found
            end = unusable(exc)
        elif is_disk_full(exc):
            logger.error("render %s: storage full", task_id, exc_info=exc)
            end = Failed(code=ErrorCode.STORAGE_FULL, reason="the server's storage is full")
        else:  # any renderer fault ends as a retryable render_failed
            logger.error("render %s failed", task_id, exc_info=exc)
            end = Failed(code=ErrorCode.RENDER_FAILED, reason=f"{type(exc).__name__}: {exc}")
        await self._finish(task_id, end)

    async def _finish(self, task_id: str, end: RenderEnd, message: str | None = None) -> TaskRecord | None:
        """The registry's `finish`, held while the task state is out of reach: a render whose segments and mux
        finished during an outage completes once it is back, exactly once (a finish repeated for the same outcome
        changes nothing)."""
        return await until_state_answers(
            lambda: self.registry.finish(task_id, end, message=message),
            f"render {task_id}'s end",
            retry_max_s=self.config.state_retry_max_s,
        )


def record_success(rec: TaskRecord, run: RenderRun, stats: MuxStats) -> None:
    """A finished render's metrics: its run's wall time, its wait for a CPU, its encode speed, its frames."""
    labels = {"resolution": rec.request.resolution, "format": rec.request.output_format}
    RENDER_DURATION.observe(run.stages["total"], **labels)
    if (queued_s := run.stages.get("queue")) is not None:
        RENDER_QUEUE.observe(queued_s, **labels)
    if segments_s := run.stages.get("segments"):
        ENCODE_SPEED.observe(stats.frame_count / segments_s, **labels)
    ENCODED_FRAMES.inc(stats.frame_count, principal=principal_label(rec.principal))


def unusable(error: VidforgeError) -> Unsupported:
    """The end of a render whose source or watermark could not be used: the refusal's code, field and reason,
    under its request_id (logged once, with the render's end: serve_app/observability/registry_observer.py)."""
    return Unsupported.model_validate(
        {"code": error.code, "field": error.field, "reason": error.reason, "request_id": error.request_id}
    )


_HOSTS_ITS_TASKS: type[TaskHost] = RenderSupervisor  # what its render tasks call back: mypy checks every signature


def supervisor_client(config: Config) -> SupervisorApi:
    """The cluster's render supervisor (created unless it runs), through its typed client."""
    return open_supervisor(RenderSupervisor, config.to_json(), config.namespace)
