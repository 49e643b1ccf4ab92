"""The registry's records in memory, loaded from its task store, and loaded again whenever the store's session
changes: the store may be out of reach for a while (its database down, hung, failing over; its disk full), and a
commit whose answer was lost in that while may have landed.

While the store is out of reach the records stay readable from memory and every write fails at the store; before
they were ever loaded, reading them is `StateUnavailable` too. Whether the state answers is told to the registry's
observer when it changes (a gauge and a count of outages).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from actors._observer import RegistryObserver
from actors._store_opener import StoreOpener
from actors._working_set import WorkingSet
from actors.store import TaskStore
from mcp_protocol.state_outage import StateUnavailable

# At most this many unsaved (volatile) version bumps per task; the next one is committed. Records loaded from the
# store get it added to their stored version, so versions never go back for a watcher whose long poll Ray retries on
# a restarted registry (it would otherwise wait for a version the task already "had").
MAX_UNSAVED_BUMPS = 120  # 30 s to 2 minutes of reports: the driver reports 1-4 times a second
RELOAD_RETRY_AFTER_MS = 1000  # a write that met a new session: the records are reloaded by the next call


class StateHealth(NamedTuple):
    """Whether the task state can be reached now, and if not why (for `/readyz`)."""

    available: bool
    reason: str | None


class HeldRecords:
    def __init__(
        self,
        opener: StoreOpener,
        cache_size: int,
        observer: RegistryObserver,
        on_reload: Callable[[set[str]], None],
    ) -> None:
        """``on_reload`` is told the ids of every task held before or after a reload (their records may differ)."""
        self._opener = opener
        self._cache_size = cache_size
        self._observer = observer
        self._on_reload = on_reload
        self._held: WorkingSet | None = None
        self._session: int | None = None  # the store's session the records were loaded from
        self._state_down: str | None = None  # why the state was out of reach when last looked at
        self.unsaved: dict[str, int] = {}  # live task id -> version bumps not yet in the store

    def store(self) -> TaskStore:
        """The open store (`StateUnavailable` while it is not)."""
        return self._opener.store()

    def current(self) -> WorkingSet:
        """The records, loaded first when the store's session is not the one they came from."""
        try:
            store = self._opener.store()
            session = store.session()
        except StateUnavailable as unavailable:
            self._observe(unavailable.reason)
            if self._held is None:
                raise
            return self._held
        if session != self._session:
            self._load(store, session)
        else:
            self._observe(store.unavailable_reason())
        assert self._held is not None
        return self._held

    def store_to_write(self) -> TaskStore:
        """The store, for a write computed from the records held: `StateUnavailable` when it has reconnected since
        they were read (the next call reloads them first)."""
        store = self._opener.store()
        if store.session() != self._session:
            raise StateUnavailable(f"{self._opener.location}: reconnected; reloading", RELOAD_RETRY_AFTER_MS)
        return store

    def health(self) -> StateHealth:
        """Asked of the store now (a session lost while nothing was asked is noticed), loading on a new session, so
        an available answer is a usable registry."""
        try:
            self._opener.store().probe()
            self.current()
        except StateUnavailable:
            pass
        reason = self._opener.unavailable_reason()
        self._observe(reason)
        return StateHealth(available=reason is None, reason=reason)

    def close(self) -> None:
        self._opener.close()

    def _load(self, store: TaskStore, session: int) -> None:
        """Load the live records as a restarted registry does, versions moved past any bump published but never
        saved."""
        live = [rec.model_copy(update={"version": rec.version + MAX_UNSAVED_BUMPS}) for rec in store.live_tasks()]
        for rec in live:
            store.save_task(rec)
        held_before = set(self._held.live) if self._held is not None else set()
        self._held = WorkingSet(store, live, self._cache_size)
        self._session = session
        self.unsaved = {}
        self._observer.opened(live, store.count_finished())
        self._observe(None)
        if held_before:
            self._on_reload(held_before | {rec.task_id for rec in live})

    def _observe(self, reason: str | None) -> None:
        if (reason is None) != (self._state_down is None):
            self._observer.state_changed(reason)
        self._state_down = reason
