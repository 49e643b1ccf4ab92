"""The TaskRegistry's observer (actors/_observer.py): render states, ends and waiting approvals as metrics, and the
one log line of each render's end.

It runs inside the registry actor, which sees every change to every task: counts are kept as changes arrive (a
live-progress change, which alters neither status nor approval, costs one comparison), and the clock-dependent
age of the oldest waiting approval is refreshed by each housekeeping pass. The end line is where a failed,
rejected or timed-out render's `request_id` (the one its error envelope shows on every read) is logged, once.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping

from mcp_protocol.domain import TaskRecord, TaskStatus
from mcp_protocol.results import end_error
from serve_app._config import Config
from serve_app.observability.catalog import (
    APPROVAL_OLDEST_WAIT,
    APPROVALS_WAITING,
    QUEUE_DEPTH,
    RENDERS,
    RENDERS_CREATED,
    RENDERS_ENDED,
    STATE_AVAILABLE,
    STATE_OUTAGES,
)
from serve_app.observability.metric import principal_label
from serve_app.observability.process import observe_process

logger = logging.getLogger(__name__)


class RegistryMetrics:
    """Counts the registry's tasks by status and unfinished ones by principal; logs each render's end."""

    def __init__(self, config: Config) -> None:
        self.config = config  # pickled into the registry actor with this object
        self._states: Counter[TaskStatus] = Counter()
        self._unfinished: Counter[str] = Counter()  # by principal label
        self._asked_ms: dict[str, int] = {}  # task id -> when its pending approval was asked
        self._observed = False  # whether this process's metrics are reported yet

    def opened(self, live: Iterable[TaskRecord], finished: Mapping[TaskStatus, int]) -> None:
        self._observe_process()
        for label in self._unfinished:  # a reload replaces what an earlier call said
            QUEUE_DEPTH.set(0, principal=label)
        self._states, self._unfinished = Counter(), Counter()
        STATE_AVAILABLE.set(1)
        for rec in live:
            self._count(rec, 1)
        self._states.update(finished)  # the finished ones are counted, not loaded (actors/_working_set.py)
        for status in TaskStatus:
            RENDERS.set(self._states[status], state=status.value)
        self._publish_unfinished()

    def committed(self, before: TaskRecord | None, after: TaskRecord) -> None:
        if before is not None and before.status is after.status and before.pending == after.pending:
            return
        if before is None:
            RENDERS_CREATED.inc(principal=principal_label(after.principal))
            logger.info(
                "render %s created",
                after.task_id,
                extra={"event": "render_created", "task_id": after.task_id, "principal": after.principal},
            )
        else:
            self._count(before, -1)
        self._count(after, 1)
        for rec in (before, after):
            if rec is not None:
                RENDERS.set(self._states[rec.status], state=rec.status.value)
        self._publish_unfinished()
        if after.status.terminal and (before is None or not before.status.terminal):
            self._ended(after)

    def deleted(self, tasks: list[TaskRecord]) -> None:
        for rec in tasks:
            self._count(rec, -1)
        for status in {rec.status for rec in tasks}:
            RENDERS.set(self._states[status], state=status.value)

    def state_changed(self, unavailable_reason: str | None) -> None:
        self._observe_process()
        STATE_AVAILABLE.set(0 if unavailable_reason else 1)
        if unavailable_reason is not None:
            STATE_OUTAGES.inc()
            logger.warning(
                "task state unavailable: %s",
                unavailable_reason,
                extra={"event": "state_unavailable", "reason": unavailable_reason},
            )
        else:
            logger.warning("task state available again", extra={"event": "state_available"})

    def _observe_process(self) -> None:
        """This process's metrics are reported from the first call on (once)."""
        if not self._observed:
            self._observed = True
            observe_process(self.config)

    def swept(self, now_ms: int) -> None:
        APPROVALS_WAITING.set(len(self._asked_ms))
        oldest_ms = min(self._asked_ms.values(), default=now_ms)
        APPROVAL_OLDEST_WAIT.set(max(0.0, (now_ms - oldest_ms) / 1000))

    def _count(self, rec: TaskRecord, step: int) -> None:
        self._states[rec.status] += step
        if not rec.status.terminal:
            self._unfinished[principal_label(rec.principal)] += step
        if step > 0 and rec.pending is not None:
            self._asked_ms[rec.task_id] = rec.pending.deadline_ms - int(rec.pending.timeout_s * 1000)
        elif step < 0:
            self._asked_ms.pop(rec.task_id, None)

    def _publish_unfinished(self) -> None:
        for label, count in self._unfinished.items():
            QUEUE_DEPTH.set(count, principal=label)
        APPROVALS_WAITING.set(len(self._asked_ms))

    def _ended(self, rec: TaskRecord) -> None:
        """The render's one end line: its outcome, and for an error its code, reason and request_id."""
        assert rec.end is not None, "a terminal record has its end"
        error = end_error(rec)
        code = error.code.value if error is not None else "none"
        RENDERS_ENDED.inc(outcome=rec.end.outcome.value, code=code)
        fields: dict[str, object] = {
            "event": "render_ended",
            "task_id": rec.task_id,
            "principal": rec.principal,
            "outcome": rec.end.outcome.value,
            "attempt": rec.attempt,
            "duration_s": round((rec.last_updated_at_ms - rec.created_at_ms) / 1000, 3),
        }
        if error is not None:
            fields.update(code=code, request_id=error.request_id, reason=error.reason)
        logger.info("render %s ended: %s", rec.task_id, rec.end.outcome.value, extra=fields)
