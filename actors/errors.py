"""Errors the task registry raises.

Every error keeps its constructor arguments in ``args`` so it survives the pickling Ray applies when an
actor method raises (``BaseException`` rebuilds an instance as ``cls(*args)``).
"""


class RegistryError(Exception):
    """Base class for task-registry errors."""


class TaskNotFound(RegistryError):
    """An internal (driver-facing) call named a task id the registry does not hold."""

    def __init__(self, task_id: str) -> None:
        super().__init__(task_id)
        self.task_id = task_id

    def __str__(self) -> str:
        return f"unknown task {self.task_id!r}"


class InvalidTransition(RegistryError):
    """A transition the state machine forbids (``working <-> input_required -> terminal``; terminal is final)."""

    def __init__(self, task_id: str, current: str, requested: str) -> None:
        super().__init__(task_id, current, requested)
        self.task_id = task_id
        self.current = current
        self.requested = requested

    def __str__(self) -> str:
        return f"task {self.task_id!r}: cannot go from {self.current!r} to {self.requested!r}"


class QuotaExceeded(RegistryError):
    """The principal already has ``limit`` non-terminal renders; retry after ``retry_after_ms``."""

    def __init__(self, retry_after_ms: int, active: int, limit: int) -> None:
        super().__init__(retry_after_ms, active, limit)
        self.retry_after_ms = retry_after_ms
        self.active = active
        self.limit = limit

    def __str__(self) -> str:
        return f"{self.active} renders in progress (limit {self.limit}); retry after {self.retry_after_ms} ms"


class StateOwned(RuntimeError):
    """Another head owns the task state (raised instead of waiting: `vidforge state migrate`, and the registry's
    opener, which waits in the background)."""
