"""The render driver's writes to the TaskRegistry: progress, the approval request, the end, the (re)start count and
the driver's heartbeat. One of the registry's parts (actors._registry_parts).

Live progress is the one exception to write-through: frame counts and speed are ``VOLATILE`` (published at once,
stored with the next durable change), see ``actors.task_registry``.
"""

from actors._registry_parts import DRIVER_LEASE_S, RegistryParts
from actors.errors import InvalidTransition
from mcp_protocol.domain import Cancelled, PendingApproval, Phase, RenderEnd, TaskRecord, TaskStatus

APPROVAL_POLL_FACTOR = 3  # contract §3.3: pollIntervalMs lengthens 10 000 -> 30 000 while awaiting approval
INPUT_KEY_PREFIX = "watermark-approval-"
CANCELLED_MESSAGE = "Render cancelled."


class DriverWrites(RegistryParts):
    """What the render driver (the supervisor's) writes, mixed into the registry."""

    async def set_progress(
        self,
        task_id: str,
        frames_done: int,
        frames_total: int,
        phase: Phase | None = None,
        message: str | None = None,
        fps: float | None = None,
        source_fps: float | None = None,
        frames_written: int = 0,
    ) -> TaskRecord | None:
        """Progress is monotonic: ``frames_done`` and ``frames_written`` never decrease; terminal tasks ignore it
        (None).

        While input is pending, frames still count (segments render speculatively) but the phase and the
        status message keep naming the pending approval. A resumed render probes again with ``frames_total``
        0 (not known yet): the known total is kept, so the fraction shown never disappears. Frame counts and
        speed are ``VOLATILE``: published at once, stored only with the next durable change (a phase change
        is one).
        """
        current = self._require(task_id)
        fields: dict[str, object] = {
            "frames_done": max(current.frames_done, frames_done),
            "frames_total": frames_total or current.frames_total,
            "fps": fps,
            "source_fps": source_fps,
            "frames_written": max(current.frames_written, frames_written),
        }
        if current.status is TaskStatus.WORKING:
            if phase is not None:
                fields["phase"] = phase
            if message is not None:
                fields["status_message"] = message
        return await self._update(task_id, **fields)

    async def request_input(self, task_id: str, timeout_s: float, message: str | None = None) -> TaskRecord | None:
        """working -> input_required under a fresh key (ext-tasks: input keys are never reused), with the poll
        interval x3 (contract §3.3). The sweep ends the task as an approval timeout if no decision comes
        within ``timeout_s``.

        One request is outstanding at a time (``InvalidTransition`` otherwise); None if already terminal.
        """
        current = self._require(task_id)
        if current.status is TaskStatus.INPUT_REQUIRED:
            raise InvalidTransition(task_id, TaskStatus.INPUT_REQUIRED, TaskStatus.INPUT_REQUIRED)
        seq = current.input_seq + 1
        deadline_ms = self._now_ms() + int(timeout_s * 1000)
        fields: dict[str, object] = {
            "input_seq": seq,
            "pending": PendingApproval(key=f"{INPUT_KEY_PREFIX}{seq}", deadline_ms=deadline_ms, timeout_s=timeout_s),
            "approval": None,  # a new round: an earlier round's decision no longer answers anything
            "phase": Phase.AWAITING_WATERMARK_APPROVAL,
            "poll_interval_ms": self._config.poll_interval_ms * APPROVAL_POLL_FACTOR,
        }
        if message is not None:
            fields["status_message"] = message
        return await self._update(task_id, TaskStatus.INPUT_REQUIRED, **fields)

    async def finish(self, task_id: str, end: RenderEnd, message: str | None = None) -> TaskRecord | None:
        """End the task: ``completed`` with ``end`` (a success carries its artifact, so no cancel can land
        between the file's publication and the completion), or ``cancelled``.

        The same end sent again (a retry whose first answer was lost, the task state having gone away) answers
        the record it made. Returns None when the caller's outcome is discarded: the task is already terminal (a
        rejection, an approval timeout or another driver finished it first), or a cancel was requested — then the task
        ends cancelled here instead, whatever the driver got to. Either way the caller deletes its files.
        """
        cancelled = isinstance(end, Cancelled)
        current = self._require(task_id)
        if current.status.terminal and current.end == end:  # sent again, its first answer lost: it is done
            return current
        if not cancelled and current.cancel_requested:
            await self._update(task_id, TaskStatus.CANCELLED, end=Cancelled(), status_message=CANCELLED_MESSAGE)
            return None
        fields: dict[str, object] = {"end": end}
        if message is not None:
            fields["status_message"] = message
        return await self._update(task_id, TaskStatus.CANCELLED if cancelled else TaskStatus.COMPLETED, **fields)

    async def bump_attempt(self, task_id: str) -> TaskRecord | None:
        """Count one more (re)start of the render (``attempt`` starts at 0); None if already terminal."""
        return await self._update(task_id, attempt=self._require(task_id).attempt + 1)

    async def renew_leases(self, task_ids: list[str]) -> None:
        """A driver's heartbeat: it is working on these tasks; none of them is re-driven for ``driver_lease_s``."""
        self._bind_loop()
        expires = self._now_ms() + int(DRIVER_LEASE_S * 1000)
        for task_id in task_ids:
            if task_id in self._records.live:
                self._leases[task_id] = expires
