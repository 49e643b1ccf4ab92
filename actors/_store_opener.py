"""The registry's task store, opened now or, while it cannot be, in the background: a registry whose database is
down at its start is constructed anyway and answers `StateUnavailable` until the store opens.

An actor whose constructor raises is dead for good in Ray, and a head must outlive a database restart, a failover or
another head's ownership: so opening never raises here. The first attempt is made at once (on a healthy database
the registry is usable when constructed); each later one after a bounded, jittered wait, said once in the log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from actors.backoff import Backoff
from actors.errors import StateOwned
from actors.store import TaskStore
from mcp_protocol.state_outage import StateUnavailable

log = logging.getLogger(__name__)


class StoreOpener:
    def __init__(self, open_store: Callable[[], TaskStore], location: str, retry_max_s: float) -> None:
        """``open_store`` opens the store without waiting for another head's lock (it raises instead)."""
        self._open = open_store
        self.location = location
        self._backoff = Backoff(retry_max_s)
        self._store: TaskStore | None = None
        self._reason: str | None = None
        self._owned_elsewhere = False  # another head held the state when this one last tried
        self._closed = False
        if not self._attempt(first=True):
            threading.Thread(target=self._keep_trying, name="vidforge-state-open", daemon=True).start()

    def store(self) -> TaskStore:
        """The open store; `StateUnavailable` (naming why) while it is not."""
        if self._store is None:
            raise StateUnavailable(f"{self._reason}; trying again", self._backoff.hint_ms())
        return self._store

    def unavailable_reason(self) -> str | None:
        """Why the state cannot be reached now (not open, or its open store's own reason); None while it can."""
        return self._reason if self._store is None else self._store.unavailable_reason()

    def close(self) -> None:
        self._closed = True
        if self._store is not None:
            self._store.close()

    def _attempt(self, first: bool = False) -> bool:
        try:
            store = self._open()
        except StateOwned as owned:
            if not self._owned_elsewhere:  # the one line a waiting head writes
                log.warning("vidforge: another head owns the task state in %s; waiting to take over", self.location)
                self._owned_elsewhere = True
            self._reason = str(owned)
            return False
        except Exception as exc:  # noqa: BLE001 - any failure to open is waited out: the operator is told, once
            reason = str(exc).strip() or type(exc).__name__
            if first:
                log.warning(
                    "vidforge: cannot open the task state in %s (%s); trying again every %g s at most",
                    self.location,
                    reason,
                    self._backoff.max_s,
                )
            self._reason = reason
            return False
        if self._closed:
            store.close()
            return True
        if not first:
            taken = "took over" if self._owned_elsewhere else "opened"
            log.warning("vidforge: %s the task state in %s", taken, self.location)
        self._reason = None
        self._store = store
        return True

    def _keep_trying(self) -> None:
        while not self._closed:
            time.sleep(self._backoff.next_s())
            if self._attempt():
                return
