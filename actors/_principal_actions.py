"""A principal's actions on its tasks in the TaskRegistry: the watermark decision and the cancel intent. One of the
registry's parts (actors._registry_parts).
"""

from actors._registry_parts import RegistryParts
from mcp_protocol.domain import AnswerResult, Approval, ApprovalAnswer, Phase, Rejected, TaskRecord, TaskStatus


class PrincipalActions(RegistryParts):
    """The principal's actions, mixed into the registry."""

    async def answer_input(
        self, principal: str, task_id: str, approved: bool, note: str | None = None, key: str | None = None
    ) -> ApprovalAnswer:
        """Resolve the pending watermark approval.

        - unknown or foreign task: not_found (task None);
        - ``key`` given but not the outstanding one (unknown, answered, superseded): ignored
          (ext-tasks: such responses SHOULD be ignored);
        - a decision already recorded for this round: replayed if the same, conflict if different
          (contract §4: approve is idempotent, a conflicting decision fails);
        - nothing pending: not_pending;
        - otherwise recorded: approval resumes rendering; rejection completes the task, rejected with the
          note, in the same transition.
        """
        self._bind_loop()
        current = self._owned(principal, task_id)
        if current is None:
            return ApprovalAnswer(result=AnswerResult.NOT_FOUND, task=None)
        pending = current.pending
        if key is not None and (pending is None or key != pending.key):
            result = AnswerResult.IGNORED
        elif current.approval is not None:
            result = AnswerResult.REPLAYED if current.approval.approved == approved else AnswerResult.CONFLICT
        elif pending is None:
            result = AnswerResult.NOT_PENDING
        else:
            approval = Approval(key=pending.key, approved=approved, note=note, at_ms=self._now_ms())
            if approved:
                task = await self.transition(
                    task_id,
                    TaskStatus.WORKING,
                    pending=None,
                    approval=approval,
                    phase=Phase.RENDERING,
                    poll_interval_ms=self._config.poll_interval_ms,
                    status_message="Watermark approved; rendering resumes.",
                )
            else:
                task = await self.transition(
                    task_id,
                    TaskStatus.COMPLETED,
                    end=Rejected(note=note),
                    approval=approval,
                    status_message="Watermark rejected; the render was not finalized.",
                )
            return ApprovalAnswer(result=AnswerResult.RECORDED, task=task)
        return ApprovalAnswer(result=result, task=current)

    async def request_cancel(self, principal: str, task_id: str) -> TaskRecord | None:
        """ext-tasks: cancellation is cooperative — record the intent; the render driver stops the work and
        makes the cancelled transition. Idempotent; a no-op on terminal tasks. None if unknown or foreign."""
        self._bind_loop()
        current = self._owned(principal, task_id)
        if current is None:
            return None
        if current.status.terminal:
            return current
        return await self.transition(task_id, current.status, cancel_requested=True)
