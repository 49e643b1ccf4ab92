"""The inspection desk: the desk (serve_app.desks.job_desk) that runs every inspection and keeps it as a task.

An inspection is one Ray task (serve_app.inspecting._inspect_task) over a file a replica has already checked to be
the principal's (serve_app.inspecting._targets); the desk bounds it (VIDFORGE_INSPECT_TIMEOUT_S, force-cancelled past
it or on a cancel), and at most VIDFORGE_MAX_INSPECTIONS run at once per principal. A principal's inspection of one
URI is one job while the desk keeps it (a file behind a URI never changes): asking again finds it, unless it ended
in an error or was cancelled. Ended inspections hold their contact sheet (up to ~150 KB) until the task TTL, and
at most INSPECTIONS_KEPT of them are kept, the oldest dropped first.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol

import ray

from actors.actor_calls import ActorCall, ActorClient
from mcp_protocol import errors
from mcp_protocol.desk_jobs import DeskJob
from mcp_protocol.domain import TaskStatus
from mcp_protocol.envelope import tool_error_result
from mcp_protocol.inspections import INSPECT_TASK_PREFIX, AudioFacts, VideoFacts, inspected_result
from mcp_protocol.json_types import JSONObject
from mcp_protocol.quality import QcReport
from mcp_protocol.timefmt import now_ms
from render_kernels.errors import UnsupportedMedia
from render_kernels.source_info import SourceInfo
from serve_app._config import Config
from serve_app.desks.job_desk import HeldJob, JobDesk, LazyDesk, new_task_id
from serve_app.inspecting._inspect_task import InspectedVideo, InspectTask, inspect_parts
from serve_app.inspecting._targets import InspectTarget
from serve_app.media.media_limits import media_limits, media_refusal

INSPECT_DESK_NAME = "vidforge-inspect-desk"
DESK = "inspection desk"  # the actor, as its errors name it
INSPECTIONS_KEPT = 256  # ended inspections held for `tasks/get` and repeated calls, each with its contact sheet

# One CPU, like a segment; no retry: a file that crashes its decoder would crash it again.
_inspect_remote = ray.remote(num_cpus=1, max_retries=0)(inspect_parts)


def video_facts(info: SourceInfo) -> VideoFacts:
    """What the wire says of a probed video."""
    shown_w, shown_h = info.display_size()
    audio = info.audio
    return VideoFacts(
        width=info.width,
        height=info.height,
        display_width=round(shown_w),
        display_height=round(shown_h),
        rotation=info.rotation,
        mirrored=info.hflip,
        duration_seconds=round(info.duration_s, 3),
        frame_rate=round(info.fps, 3),
        frame_count=info.frame_count,
        video_codec=info.video_codec,
        pixel_format=info.pixel_format,
        interlaced=info.field_order != "progressive",
        audio=AudioFacts(codec=audio.codec, sample_rate=audio.sample_rate, channels=audio.channels) if audio else None,
    )


@dataclass
class _Inspection(HeldJob):
    target: InspectTarget = field(kw_only=True)

    def message(self) -> str:
        if self.status is TaskStatus.CANCELLED:
            return "Inspection cancelled."
        if self.status is TaskStatus.COMPLETED:
            result = self.result or {}
            if result.get("isError"):
                return "Inspection ended with an error; the result holds it."
            return "Inspected; the result holds the facts, the quality report and the contact sheet."
        return f"Inspecting {self.target.duration_s:g} s of video."


class InspectDesk(JobDesk[_Inspection]):
    def __init__(self, config_json: str) -> None:
        config = Config.from_json(config_json)
        super().__init__(config, config.max_inspections)
        self.limits = media_limits(config)
        self.thresholds = config.qc_thresholds()

    async def start(self, principal: str, target: InspectTarget) -> DeskJob:
        """The principal's inspection of `target.uri` while one is kept (not ended in an error or cancelled), else
        a new one, held before this returns (DeskAtCapacity past the cap)."""
        self._forget_expired()
        for held in self.jobs.values():
            if held.principal == principal and held.target.uri == target.uri and self._reusable(held):
                return self._job(held)
        self._keep_latest()
        now = now_ms()
        return self._take(_Inspection(new_task_id(INSPECT_TASK_PREFIX), principal, now, now, target=target))

    async def _result(self, held: _Inspection) -> JSONObject:
        target = held.target
        task = InspectTask(target.source, target.info, self.limits, self.thresholds)
        ref = _inspect_remote.remote(task)
        limit_s = self.config.inspect_timeout_s
        try:
            async with asyncio.timeout(limit_s):
                inspected: InspectedVideo = await ref
        except BaseException as exc:
            ray.cancel(ref, force=True)  # a timeout or a cancel: the worker stops decoding now
            if isinstance(exc, TimeoutError):
                reason = f"it took longer than {limit_s:g} s (VIDFORGE_INSPECT_TIMEOUT_S)"
                return tool_error_result(errors.inspect_failed(reason, target.uri))
            if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(exc.cause, UnsupportedMedia):
                return tool_error_result(media_refusal("uri", exc.cause))
            if isinstance(exc, ray.exceptions.RayError):  # its worker lost (a crash, the node gone), or a fault
                error = errors.inspect_failed("its worker was lost before it finished", target.uri)
                error.report(cause=exc)
                return tool_error_result(error)
            raise
        report = QcReport.model_validate(inspected.report.to_json())
        return inspected_result(target.uri, video_facts(inspected.info), report, inspected.contact_sheet)

    @staticmethod
    def _reusable(held: _Inspection) -> bool:
        if held.status is TaskStatus.WORKING:
            return True
        return held.status is TaskStatus.COMPLETED and not (held.result or {}).get("isError")

    def _keep_latest(self) -> None:
        """Drop the oldest ended inspections past INSPECTIONS_KEPT (each holds its contact sheet)."""
        ended = sorted((held for held in self.jobs.values() if held.status.terminal), key=lambda h: h.updated_at_ms)
        for held in ended[: max(0, len(ended) - INSPECTIONS_KEPT + 1)]:
            del self.jobs[held.task_id]


class InspectDeskApi(Protocol):
    """What a replica asks of the desk: the in-process `InspectDesk` is one, and so is `InspectDeskClient`."""

    async def start(self, principal: str, target: InspectTarget) -> DeskJob: ...
    async def get(self, principal: str, task_id: str) -> DeskJob | None: ...
    async def wait(self, principal: str, task_id: str, timeout_s: float | None = None) -> DeskJob | None: ...
    async def cancel(self, principal: str, task_id: str) -> DeskJob | None: ...


_IN_PROCESS: type[InspectDeskApi] = InspectDesk  # mypy checks the desk's signatures against the protocol


class InspectDeskActor(ActorClient):
    """The cluster's inspection desk actor, as an `InspectDeskApi` (DeskAtCapacity arrives as itself)."""

    start = ActorCall(InspectDeskApi.start)
    get = ActorCall(InspectDeskApi.get)
    wait = ActorCall(InspectDeskApi.wait)
    cancel = ActorCall(InspectDeskApi.cancel)


class InspectDeskClient(LazyDesk[InspectDeskActor]):
    """The cluster's inspection desk, as an `InspectDeskApi`: started with the cluster's first inspection."""

    def __init__(self, config: Config) -> None:
        super().__init__(config, InspectDesk, INSPECT_DESK_NAME, InspectDeskActor, DESK)

    async def start(self, principal: str, target: InspectTarget) -> DeskJob:
        return await self.started().start(principal, target)


_CLUSTER: type[InspectDeskApi] = InspectDeskClient  # and the cluster's client
