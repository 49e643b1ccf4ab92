"""What the TaskRegistry tells an observer: the records it holds and every change to them.

The registry owns task state, so it is where render states, ends and waiting approvals are known exactly; what to
make of them (metrics, the log line of a render's end) is the server's business (serve_app/observability/
registry_observer.py), handed in like the `Driver`. The observer runs inside the registry's process, on its one
event loop: each call must be quick and must not raise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from mcp_protocol.domain import TaskRecord, TaskStatus


class RegistryObserver(Protocol):
    def opened(self, live: Iterable[TaskRecord], finished: Mapping[TaskStatus, int]) -> None:
        """In the registry's process, before any other call, and again whenever the registry reloads from its store
        (a new session after the state was out of reach): the live tasks it holds from then on (what an earlier call
        said is replaced) and how many finished ones of each status the store holds (those are not loaded)."""

    def committed(self, before: TaskRecord | None, after: TaskRecord) -> None:
        """A record was created (`before` None) or changed; called for every change, live progress included."""

    def deleted(self, tasks: list[TaskRecord]) -> None:
        """These records went (past their retention)."""

    def swept(self, now_ms: int) -> None:
        """A housekeeping pass ended (every `sweep_interval_s`): time to refresh what depends on the clock."""

    def state_changed(self, unavailable_reason: str | None) -> None:
        """The task state went out of reach (why), or answers again (None)."""


class Unobserved:
    """The observer of a registry nobody watches (tests, tools): does nothing."""

    def opened(self, live: Iterable[TaskRecord], finished: Mapping[TaskStatus, int]) -> None:
        pass

    def committed(self, before: TaskRecord | None, after: TaskRecord) -> None:
        pass

    def deleted(self, tasks: list[TaskRecord]) -> None:
        pass

    def swept(self, now_ms: int) -> None:
        pass

    def state_changed(self, unavailable_reason: str | None) -> None:
        pass
