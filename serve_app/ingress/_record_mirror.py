"""A replica's read mirror of task records, kept fresh by one long poll on the registry's change feed.

Agents poll `tasks/get` (and `vidforge_get_render_status`) all the time, mostly on tasks that have not changed
since their last poll: queued, awaiting approval, finished. Asking the TaskRegistry actor each time costs a
Ray call in this replica and the registry's one event loop. So each replica keeps the records its clients
read (at most `VIDFORGE_RECORD_MIRROR_SIZE`, least recently read out first; 0 turns the mirror off) and
follows the registry's change feed (`actors.change_feed`) with one long poll: every change the registry
publishes reaches every replica's mirror within the feed's latency (milliseconds), and a poll on a mirrored
record is answered here.

Why serving a mirrored record is safe:
- It is the registry's record, at most one feed delivery behind. Polling is a hint loop: the contract has
  clients poll at `pollIntervalMs` (seconds), so a change that lands milliseconds later in one replica than
  in the registry is seen on the next poll either way. Long polls (`subscriptions/listen`, which need a
  wake-up per change) stay on the registry.
- Nothing is served unless the mirror is live: the feed has answered within its wait plus a grace. On any
  feed error the mirror is emptied and not used until the feed answers again; a restarted registry has a new
  epoch, and its first answer tells the mirror to drop everything (reset).
- "Unknown" is never mirrored: a task created through another replica is read from the registry, so it is
  visible at once. A foreign task answers exactly like an unknown one (None), as the registry does.
- A record read from the registry is kept only if the read saw every change the mirror has applied (its feed
  position is not behind the mirror's, in the same epoch): a change applied before the record was kept would
  otherwise be missed, the change feed only refreshing records the mirror already holds.
- A write through this replica (create, approval answer, cancel) drops its task from the mirror once the write
  returned, so a client reads its own write on the same replica; through other replicas, within the feed's
  latency. A record a long poll answered on this replica replaces an older copy here (`saw`): a client told of a
  change on its listen stream never reads the task back older.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import anyio

from actors.change_feed import Changes, Snapshot
from mcp_protocol.domain import TaskRecord

log = logging.getLogger(__name__)

FEED_WAIT_S = 10.0  # one long poll of the change feed waits this long for a change
LIVE_GRACE_S = 5.0  # beyond the wait, how late an answer may be before the mirror stops serving
RETRY_S = 1.0  # after a failed feed call (the registry restarting: Ray retries its calls), ask again after this


class RegistryFeed(Protocol):
    """What the mirror needs of the TaskRegistry: its change feed and a positioned read (any `actors.RegistryApi`:
    the registry actor's client, or `TaskRegistry` itself in-process)."""

    async def changes(self, epoch: str | None, since: int, timeout_s: float) -> Changes: ...

    async def read(self, principal: str, task_id: str) -> Snapshot: ...


class RecordMirror:
    def __init__(
        self,
        feed: RegistryFeed,
        capacity: int,
        wait_s: float = FEED_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.feed = feed
        self.capacity = capacity
        self.wait_s = wait_s
        self._clock = clock
        self._records: OrderedDict[str, TaskRecord] = OrderedDict()  # least recently read first
        self._epoch: str | None = None  # the feed position applied: nothing before it is missing here
        self._seq = 0
        self._answered_at = -math.inf
        self._writes = 0  # writes seen (`forget`): a read that overlapped one is not kept

    @property
    def live(self) -> bool:
        return self._epoch is not None and self._clock() - self._answered_at <= self.wait_s + LIVE_GRACE_S

    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._records

    async def get(self, principal: str, task_id: str) -> TaskRecord | None:
        """The record as `TaskRegistry.get` answers it: None when unknown or another principal's."""
        if self.live and (rec := self._records.get(task_id)) is not None:
            self._records.move_to_end(task_id)
            return rec if rec.principal == principal else None
        writes = self._writes
        snapshot = await self.feed.read(principal, task_id)
        if writes == self._writes:
            self._keep(snapshot)
        return snapshot.record

    def saw(self, records: list[TaskRecord]) -> None:
        """Records the registry answered another way (a long poll): each replaces an older copy held here, so no read
        on this replica goes back behind what its clients were told (a terminal notification, then `tasks/get`).
        Only held records are replaced: a record not held is kept only from a positioned read (see `_keep`)."""
        for rec in records:
            held = self._records.get(rec.task_id)
            if held is not None and held.version < rec.version:
                self._records[rec.task_id] = rec

    def forget(self, task_id: str) -> None:
        """A write to `task_id` through this replica returned: the next read asks the registry."""
        self._writes += 1
        self._records.pop(task_id, None)

    def _keep(self, snapshot: Snapshot) -> None:
        rec = snapshot.record
        if rec is None or not self.capacity or not self.live:
            return
        if snapshot.epoch != self._epoch or snapshot.seq < self._seq:
            return  # the read may predate a change already applied (and so never applied to this record)
        held = self._records.get(rec.task_id)
        if held is None or held.version <= rec.version:
            self._records[rec.task_id] = rec
        self._records.move_to_end(rec.task_id)
        while len(self._records) > self.capacity:
            self._records.popitem(last=False)

    def apply(self, changes: Changes) -> None:
        """One feed answer: refresh the records held, drop the deleted ones, or everything on a reset."""
        if changes.reset or changes.epoch != self._epoch:
            self._records.clear()
        for rec in changes.records:
            held = self._records.get(rec.task_id)
            if held is not None and held.version <= rec.version:
                self._records[rec.task_id] = rec
        for task_id in changes.deleted:
            self._records.pop(task_id, None)
        self._epoch, self._seq = changes.epoch, changes.seq
        self._answered_at = self._clock()

    def _lose_feed(self) -> None:
        self._records.clear()
        self._epoch, self._seq, self._answered_at = None, 0, -math.inf

    async def follow(self) -> None:
        """Apply the change feed, forever."""
        while True:
            try:
                changes = await self.feed.changes(self._epoch, self._seq, self.wait_s)
            except Exception:  # the registry restarting, a lost node: read through until the feed answers again
                log.warning("record mirror: the registry's change feed failed; retrying", exc_info=True)
                self._lose_feed()
                await anyio.sleep(RETRY_S)
                continue
            self.apply(changes)

    @contextlib.asynccontextmanager
    async def following(self) -> AsyncIterator[None]:
        """Run the feed for the app's lifetime (its lifespan); a disabled mirror (capacity 0) follows nothing."""
        if not self.capacity:
            yield
            return
        async with anyio.create_task_group() as group:
            group.start_soon(self.follow)
            yield
            group.cancel_scope.cancel()
