"""TaskRegistry: the only owner of task state.

A plain class whose public methods are coroutines, so the same object runs in-process (tests) and as an
async Ray actor (``actors.handle``). Every mutation is written through to the ``TaskStore`` before the
method returns, and its records are loaded from the store (``actors.held_records``) — that is the whole recovery
story for a restarted actor or server. In memory it holds only the live records and a bounded cache of finished ones
(``actors._working_set``), so neither its start nor any request grows with the retained history.

Live progress is the one exception to write-through: see ``DriverWrites.set_progress`` and ``VOLATILE``.

The store may be out of reach (its database down, hung, failing over; its disk full): the registry is constructed
anyway (``actors._store_opener``), reads of what it holds go on from memory, and every call that needs the store raises
``StateUnavailable`` until it answers again; when the store's session changes (a reconnection), the records are
loaded again, as a restarted registry loads them, since a commit whose answer was lost may have landed.

Concurrency model: all methods run on one event loop. A check and the write that depends on it never have
an ``await`` between them (the store commit is synchronous), so each transition is atomic with respect to
every other caller; the only suspension points are publishing a change and waiting in ``watch``.
"""

import asyncio
import base64
import secrets
import time
from collections.abc import Callable
from typing import NamedTuple

from actors._housekeeping import Housekeeping
from actors._observer import RegistryObserver, Unobserved
from actors._outbox_calls import OutboxCalls
from actors._principal_actions import PrincipalActions
from actors._registry_parts import Driver
from actors._store_opener import StoreOpener
from actors._working_set import WorkingSet
from actors.change_feed import ChangeFeed, Changes, Snapshot
from actors.driver_writes import DriverWrites
from actors.errors import InvalidTransition, QuotaExceeded, RegistryError, TaskNotFound
from actors.held_records import MAX_UNSAVED_BUMPS, HeldRecords, StateHealth
from actors.open_store import open_task_store
from actors.settings import RegistrySettings
from actors.store import TaskStore
from mcp_protocol.domain import (
    TERMINAL,
    Artifact,
    Phase,
    RenderRequest,
    TaskRecord,
    TaskStatus,
)
from mcp_protocol.state_outage import StateUnavailable
from mcp_protocol.webhook_events import events_for
from media_store.assets import AssetIndex
from media_store.opening import open_media_store

WORKING, INPUT_REQUIRED = TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED

# ext-tasks: working <-> input_required -> completed | cancelled, terminal is final (vidforge never uses
# `failed`: see TaskStatus). A non-terminal status may also go to itself: that is how a plain field update
# (progress, cancel intent) is expressed. What each status implies of the other fields, TaskRecord checks.
_ALLOWED = {
    WORKING: frozenset({WORKING, INPUT_REQUIRED}) | TERMINAL,
    INPUT_REQUIRED: frozenset({INPUT_REQUIRED, WORKING}) | TERMINAL,
}

MIN_RETRY_AFTER_MS = 1000
QUEUED_MESSAGE = "Render queued; encoding starts shortly."

# What a transition may set; identity and bookkeeping (task_id, principal, version, ...) are the registry's.
_MUTABLE = frozenset(
    {
        "phase",
        "status_message",
        "frames_done",
        "frames_total",
        "fps",
        "source_fps",
        "frames_written",
        "poll_interval_ms",
        "input_seq",
        "pending",
        "approval",
        "cancel_requested",
        "end",
        "attempt",
    }
)
# Fields that change several times a second while a render encodes. A transition that changes only these is
# published (version bump, watchers woken) but not committed to the store: they are measurements, re-measured
# by a resumed render (which starts its segments over anyway), so an fsync each would buy nothing and would
# stall this actor's one event loop for every render's every report.
VOLATILE = frozenset({"frames_done", "frames_total", "fps", "source_fps", "frames_written"})
# The change feed remembers the deletions of this many sweep batches (10 000 ids at the default sweep_batch), and
# as many tasks' last changes: a reader follows the feed continuously, so it falls behind by what one pass deletes
# (or a few seconds of changes) while its call travels; one further behind is told to reset, which only costs it its
# cache.
DELETION_LOG_BATCHES = 20


class IdempotencyConflict(RegistryError):
    """The principal's idempotency key already names ``task_id``, created with other arguments: a replay must
    be the same request, so the caller gets an error naming the original task rather than that task."""

    def __init__(self, task_id: str) -> None:
        super().__init__(task_id)  # in ``args``, so it survives Ray's pickling (see actors.errors)
        self.task_id = task_id

    def __str__(self) -> str:
        return f"the idempotency key already names {self.task_id!r}, created with other arguments"


class Created(NamedTuple):
    task: TaskRecord
    created: bool  # False: an idempotent replay answered with the task the key already names


def new_task_id() -> str:
    """Task ids are opaque and unguessable: 26 base32 characters carry 130 random bits (architecture: >= 128)."""
    return "task_" + base64.b32encode(secrets.token_bytes(17)).decode().lower()[:26]


class TaskRegistry(PrincipalActions, DriverWrites, OutboxCalls, Housekeeping):
    """Task records, their state machine, idempotency keys and quotas; a principal's decisions and cancels
    (actors._principal_actions), the render driver's writes (actors.driver_writes), the webhook outbox's calls
    (actors._outbox_calls) and housekeeping (the sweep: actors._housekeeping) are its parts."""

    def __init__(
        self,
        config: RegistrySettings,
        clock: Callable[[], float] = time.time,
        driver: Driver | None = None,
        observer: RegistryObserver | None = None,
    ) -> None:
        self._config = config
        self._observer = observer or Unobserved()
        self._clock = clock
        self._driver = driver
        # Driver leases (task id -> expiry ms) are liveness, not state: kept in memory only. A task without
        # one counts as leased from the later of its creation and this instance's start, so neither a task
        # whose start is on its way nor a driver that has not beaten since a registry restart is poked.
        self._leases: dict[str, int] = {}
        self._started_ms = self._now_ms()
        # State in the task store (SQLite on the head node's own disk, or PostgreSQL); files in the media store,
        # from which the sweep deletes expired renders and assets.
        self._media = open_media_store(config.storage_url, config.data_dir)
        self._assets = AssetIndex(self._media)  # the sweep applies the assets' retention too
        opener = StoreOpener(
            lambda: open_task_store(config, wait=False), config.state_location, config.state_retry_max_s
        )
        self._held = HeldRecords(opener, config.registry_cache_size, self._observer, self._reloaded)
        self._feed = ChangeFeed(log_size=DELETION_LOG_BATCHES * config.sweep_batch)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Condition | None = None
        self._outbox_adds = 0  # commits that added webhook events (`webhooks_added`)
        self._sweeper: asyncio.Task[None] | None = None
        try:
            self._held.current()  # loaded now when the store answers: a usable registry at once
        except StateUnavailable:
            pass  # loaded by the first call after the store answers

    @property
    def _store(self) -> TaskStore:
        return self._held.store()

    @property
    def _records(self) -> WorkingSet:
        return self._held.current()

    def _reloaded(self, task_ids: set[str]) -> None:
        """Records reloaded from the store: followers of the feed read these again, watchers look again."""
        for task_id in task_ids:
            self._feed.changed(task_id)
        if self._loop is not None and self._loop.is_running():
            self._loop.create_task(self._notify())

    async def state_health(self) -> StateHealth:
        """Whether the task state answers now (asked of the store, not of memory): for `/readyz`."""
        return self._held.health()

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background sweep now rather than on the first call."""
        self._bind_loop()

    def close(self) -> None:
        """Stop the background sweep and close the store. On PostgreSQL that lets go of the state's ownership, which
        another registry opening the same database waits for."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._held.close()

    def _bind_loop(self) -> None:
        """Tie the change condition and the sweep loop to the running event loop, once per loop.

        A Ray actor has one loop for life; tests run each scenario under a fresh ``asyncio.run``.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._loop = loop
            self._changed = asyncio.Condition()
            self._sweeper = loop.create_task(self._sweep_forever())

    # -- reads -------------------------------------------------------------------------------------------

    # Records are frozen: they are handed out as they are, never copied.

    async def get(self, principal: str, task_id: str) -> TaskRecord | None:
        """A foreign task answers exactly like an unknown one: None."""
        self._bind_loop()
        return self._owned(principal, task_id)

    async def read(self, principal: str, task_id: str) -> Snapshot:
        """``get`` with the change feed's position at the moment of reading (for a replica's record mirror)."""
        self._bind_loop()
        return Snapshot(epoch=self._feed.epoch, seq=self._feed.seq, record=self._owned(principal, task_id))

    async def changes(self, epoch: str | None, since: int, timeout_s: float) -> Changes:
        """Long-poll the change feed (``actors.change_feed``): every principal's records changed and the ids
        deleted after (``epoch``, ``since``), as soon as there is one, or none after ``timeout_s``; at once a
        reset when the reader's position is not one of this instance's feed."""
        self._bind_loop()
        assert self._changed is not None
        if self._feed.readable(epoch, since):
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait_for(lambda: self._feed.seq > since), timeout_s)
                except TimeoutError:
                    pass
        return self._feed.since(epoch, since, self._records.get)

    async def get_any(self, task_id: str) -> TaskRecord | None:
        """Unscoped read for the internal render driver."""
        self._bind_loop()
        return self._records.get(task_id)

    async def get_artifact(self, principal: str, task_id: str) -> Artifact | None:
        """An artifact is published only with its completed task; foreign or unfinished tasks answer None."""
        self._bind_loop()
        rec = self._owned(principal, task_id)
        return rec.artifact if rec is not None else None

    async def nonterminal(self) -> list[TaskRecord]:
        """Tasks a restarted render supervisor must resume (or cancel, if cancel was requested)."""
        self._bind_loop()
        return list(self._records.live.values())

    async def known_task_ids(self, task_ids: list[str]) -> set[str]:
        """Which of these ids are tasks held, for the start-up cleanup: files of any other render id are crash
        leftovers. The caller asks about the ids it found, a batch at a time, rather than being sent every id."""
        self._bind_loop()
        return self._store.known_task_ids(task_ids)

    async def count_active(self, principal: str) -> int:
        self._bind_loop()
        return len(self._records.active(principal))

    async def list_owned(self, principal: str, limit: int, before: tuple[int, str] | None = None) -> list[TaskRecord]:
        """A page of the principal's tasks, newest first (``TaskStore.owned_task_ids``: found through the store's
        index, not by reading every record); ``before`` is the previous page's last (created_at_ms, task_id)."""
        self._bind_loop()
        owned = self._store.owned_task_ids(principal, limit, before)
        return [rec for task_id in owned if (rec := self._records.get(task_id))]

    async def watch(
        self, principal: str, task_ids: list[str], versions: dict[str, int], timeout_s: float
    ) -> list[TaskRecord]:
        """Long-poll: the principal's listed tasks whose version is newer than ``versions`` (missing: -1),
        as soon as there is at least one, or [] after ``timeout_s``. Unknown and foreign ids never match.

        Only a live task can change, so after the first look only the ids live then are looked at again: a finished
        or unknown one would otherwise be read from the store on every change of any task."""
        self._bind_loop()
        assert self._changed is not None

        def newer(ids: list[str]) -> list[TaskRecord]:
            return [
                rec
                for task_id in ids
                if (rec := self._owned(principal, task_id)) and rec.version > versions.get(task_id, -1)
            ]

        if found := newer(task_ids):
            return found
        live = [task_id for task_id in task_ids if task_id in self._records.live]
        async with self._changed:
            try:
                return await asyncio.wait_for(self._changed.wait_for(lambda: newer(live)), timeout_s)
            except TimeoutError:
                return []

    # -- creation ----------------------------------------------------------------------------------------

    async def create(self, principal: str, request: RenderRequest, initial_message: str = QUEUED_MESSAGE) -> Created:
        """Create a durable task for ``request``.

        Idempotency: see ``replay`` (``created`` False) — checked before the quota, so a replay never fails on
        it. Quota: at ``max_concurrent_renders`` non-terminal tasks, raise ``QuotaExceeded``.
        """
        self._bind_loop()
        now = self._now_ms()
        if (existing := self._replayed(principal, request)) is not None:
            return Created(existing, created=False)
        active = self._records.active(principal)
        limit = self._config.max_concurrent_renders
        if len(active) >= limit:
            raise QuotaExceeded(self._retry_after_ms(active, now), len(active), limit)
        rec = TaskRecord(
            task_id=new_task_id(),
            principal=principal,
            request=request,
            status_message=initial_message,
            created_at_ms=now,
            last_updated_at_ms=now,
            ttl_ms=self._config.task_ttl_ms,
            poll_interval_ms=self._config.poll_interval_ms,
        )
        claim = request.idempotency_key is not None
        return Created(await self._commit(rec, claim_idempotency_key=claim), created=True)

    async def replay(self, principal: str, request: RenderRequest) -> TaskRecord | None:
        """The task the principal's idempotency key (``request.idempotency_key``) created within
        ``idempotency_ttl_s``, if any, so a replay can be answered before anything else is checked. Keys are
        scoped per principal. Raises ``IdempotencyConflict`` when that task was created with other arguments
        (``RenderRequest.request_form``)."""
        self._bind_loop()
        return self._replayed(principal, request)

    def _replayed(self, principal: str, request: RenderRequest) -> TaskRecord | None:
        if request.idempotency_key is None:
            return None
        claimed_after = self._now_ms() - self._config.idempotency_ttl_s * 1000
        task_id = self._store.find_idempotent(principal, request.idempotency_key, claimed_after)
        if task_id is None:
            return None
        existing = self._records.get(task_id)
        if existing is None:  # deleted past its retention with its key: the key names nothing any more
            return None
        if existing.request.request_form() != request.request_form():
            raise IdempotencyConflict(task_id)
        return existing

    def _retry_after_ms(self, active: list[TaskRecord], now_ms: int) -> int:
        """Quota retry hint: when the soonest-finishing render should free its slot, projected from its
        progress rate (elapsed / fraction done); the poll interval when no render has measurable progress."""
        remaining = [
            (now_ms - rec.created_at_ms) * (rec.frames_total - rec.frames_done) / rec.frames_done
            for rec in active
            if rec.status is WORKING and 0 < rec.frames_done <= rec.frames_total
        ]
        return max(MIN_RETRY_AFTER_MS, int(min(remaining, default=self._config.poll_interval_ms)))

    # -- the state machine -------------------------------------------------------------------------------

    async def transition(self, task_id: str, status: TaskStatus, /, **fields: object) -> TaskRecord:
        """ext-tasks: working <-> input_required -> completed | cancelled; terminal states never change.

        The single place the state machine is enforced: every mutation goes through here. Entering a terminal
        status sets phase done and clears any pending approval; what each status needs besides (an end exactly
        when terminal, a pending approval exactly when input_required: the sweep must always be able to end
        the wait) ``TaskRecord`` checks. Returns the record; when nothing differs it is returned as is, without a
        version bump. Raises ``TaskNotFound``, ``InvalidTransition``, ``ValueError``.
        """
        self._bind_loop()
        current = self._require(task_id)
        if status not in _ALLOWED.get(current.status, ()):
            raise InvalidTransition(task_id, current.status, status)
        status = TaskStatus(status)
        if unknown := set(fields) - _MUTABLE:
            raise ValueError(f"fields not settable by a transition: {sorted(unknown)}")
        values = {**dict(current), **fields, "status": status}
        if status.terminal:
            values.update(pending=None, phase=Phase.DONE)
        new = TaskRecord.model_validate(values)  # pydantic's ValidationError is a ValueError
        if new == current:
            return current
        changed = {name for name in TaskRecord.model_fields if getattr(new, name) != getattr(current, name)}
        new = new.model_copy(update={"version": current.version + 1, "last_updated_at_ms": self._now_ms()})
        return await self._commit(new, durable=not changed <= VOLATILE)

    async def _update(self, task_id: str, status: TaskStatus | None = None, /, **fields: object) -> TaskRecord | None:
        """Render-driver writes that lose a race with a terminal transition return None instead of raising."""
        current = self._require(task_id)
        if current.status.terminal:
            return None
        return await self.transition(task_id, status or current.status, **fields)

    async def _commit(
        self, rec: TaskRecord, *, claim_idempotency_key: bool = False, durable: bool = True
    ) -> TaskRecord:
        """Durable before visible: commit to the store, then swap into memory, then wake watchers.

        ``durable=False`` (a volatile-only change) skips the store until ``MAX_UNSAVED_BUMPS`` have piled up;
        any later durable commit saves the whole record, the volatile fields with it. A change that causes webhook
        events (``events_for``) is durable: its events are written in the record's own commit, so a crash cannot
        keep one without the other."""
        task_id = rec.task_id
        before = self._records.live.get(task_id)
        events = events_for(before, rec, retention_s=self._config.result_retention_s)
        unsaved = 0 if durable or events else self._held.unsaved.get(task_id, 0) + 1
        if unsaved in (0, MAX_UNSAVED_BUMPS):
            self._held.store_to_write().save_task(rec, claim_idempotency_key=claim_idempotency_key, events=events)
            unsaved = 0
        if events:
            self._outbox_adds += 1
        if rec.status.terminal:  # its last change (a terminal change is durable): nothing of it is live any more
            self._held.unsaved.pop(task_id, None)
            self._leases.pop(task_id, None)
        else:
            self._held.unsaved[task_id] = unsaved
        self._records.put(rec)
        self._observer.committed(before, rec)
        self._feed.changed(task_id)
        await self._notify()
        return rec

    async def _notify(self) -> None:
        """Wake the long polls (``watch``, ``changes``): something was published."""
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    # -- helpers -----------------------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _owned(self, principal: str, task_id: str) -> TaskRecord | None:
        rec = self._records.get(task_id)
        return rec if rec is not None and rec.principal == principal else None

    def _require(self, task_id: str) -> TaskRecord:
        rec = self._records.get(task_id)
        if rec is None:
            raise TaskNotFound(task_id)
        return rec
