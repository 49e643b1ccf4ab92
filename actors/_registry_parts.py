"""What the TaskRegistry's parts share of it. The registry is one class whose public methods are the actor's calls;
its parts are mixins by concern, each in a module of its own: the sweep (``actors._housekeeping``), the render
driver's writes (``actors.driver_writes``), a principal's actions (``actors._principal_actions``) and the webhook
outbox's calls (``actors._outbox_calls``). Each works on the
registry's own state and calls, declared here once, and moves tasks only through the registry's state machine
(``transition``). ``actors.task_registry.TaskRegistry`` sets and implements them.
"""

import asyncio
from abc import abstractmethod
from typing import Protocol

from actors._observer import RegistryObserver
from actors._working_set import WorkingSet
from actors.change_feed import ChangeFeed
from actors.settings import RegistrySettings
from actors.store import TaskStore
from mcp_protocol.domain import TaskRecord, TaskStatus
from media_store.assets import AssetIndex
from media_store.base import MediaStore

DRIVER_LEASE_S = 15.0  # a task whose driver has not renewed its lease for this long is handed to a driver again


class Driver(Protocol):
    """What the sweep pokes to (re)drive a task that has no live driver (in a cluster: the render supervisor).

    ``drive`` must not block: it only asks. An asked driver renews the task's lease while it works on it
    (``renew_leases``); if it never does, the sweep asks again one lease later."""

    def drive(self, task_id: str) -> None: ...


class RegistryParts:
    """The registry's state and calls its parts use (see the module's docstring)."""

    _config: RegistrySettings
    _driver: Driver | None
    _leases: dict[str, int]  # task id -> when its driver's lease ends (ms)
    _started_ms: int
    _media: MediaStore
    _assets: AssetIndex
    _observer: RegistryObserver
    _feed: ChangeFeed
    _changed: asyncio.Condition | None
    _outbox_adds: int

    @property
    @abstractmethod
    def _store(self) -> TaskStore: ...

    @property
    @abstractmethod
    def _records(self) -> WorkingSet: ...

    @abstractmethod
    def _bind_loop(self) -> None: ...

    @abstractmethod
    def _now_ms(self) -> int: ...

    @abstractmethod
    async def _notify(self) -> None: ...

    @abstractmethod
    async def transition(self, task_id: str, status: TaskStatus, /, **fields: object) -> TaskRecord: ...

    @abstractmethod
    async def _update(
        self, task_id: str, status: TaskStatus | None = None, /, **fields: object
    ) -> TaskRecord | None: ...

    @abstractmethod
    def _require(self, task_id: str) -> TaskRecord: ...

    @abstractmethod
    def _owned(self, principal: str, task_id: str) -> TaskRecord | None: ...
