"""The task records a TaskRegistry holds in memory: what is live, and a bounded cache of finished ones.

A week of retained results is a million records; holding them all made the registry's start, its memory and every
quota check grow with history (issue 36). Only the live records (working, input_required) are always here: they
are few (each is a render in progress or awaiting approval) and every transition reads them. A finished record
never changes again, so it is cached, at most ``cache_size`` of them, the least recently used going first, and
any other is read from the store by its key when asked for. The store is the truth: every record here is as it
was last committed, or newer by volatile progress (see ``TaskRegistry._commit``).
"""

from collections import OrderedDict
from collections.abc import Iterable

from actors.store import TaskStore
from mcp_protocol.domain import TaskRecord


class WorkingSet:
    def __init__(self, store: TaskStore, live: Iterable[TaskRecord], cache_size: int) -> None:
        self._store = store
        self._cache_size = cache_size
        self.live: dict[str, TaskRecord] = {}
        self._live_by_principal: dict[str, dict[str, None]] = {}  # principal -> its live task ids, oldest first
        self._finished: OrderedDict[str, TaskRecord] = OrderedDict()  # least recently used first
        for rec in live:
            self.put(rec)

    def get(self, task_id: str) -> TaskRecord | None:
        """The record, from memory when held, else from the store (and then cached); None if there is none."""
        if (rec := self.live.get(task_id)) is not None:
            return rec
        if (rec := self._finished.get(task_id)) is not None:
            self._finished.move_to_end(task_id)
            return rec
        rec = self._store.get_task(task_id)
        if rec is not None and rec.status.terminal:
            self._cache(rec)
        return rec

    def put(self, rec: TaskRecord) -> None:
        """Hold a record just committed (or loaded): live ones by principal, a finished one in the cache."""
        task_id = rec.task_id
        if not rec.status.terminal:
            self.live[task_id] = rec
            self._live_by_principal.setdefault(rec.principal, {})[task_id] = None
            return
        if self.live.pop(task_id, None) is not None:
            owned = self._live_by_principal[rec.principal]
            del owned[task_id]
            if not owned:
                del self._live_by_principal[rec.principal]
        self._cache(rec)

    def active(self, principal: str) -> list[TaskRecord]:
        """The principal's live records, oldest first: read from its own index, never from everyone's."""
        return [self.live[task_id] for task_id in self._live_by_principal.get(principal, ())]

    def forget(self, task_ids: Iterable[str]) -> None:
        """Deleted (finished) records: out of the cache."""
        for task_id in task_ids:
            self._finished.pop(task_id, None)

    @property
    def cached(self) -> int:
        """How many finished records are in memory now (at most the cache size)."""
        return len(self._finished)

    def _cache(self, rec: TaskRecord) -> None:
        self._finished[rec.task_id] = rec
        self._finished.move_to_end(rec.task_id)
        while len(self._finished) > self._cache_size:
            self._finished.popitem(last=False)
