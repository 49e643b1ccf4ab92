"""The TaskRegistry's housekeeping: the sweep that runs every ``sweep_interval_s`` for the registry's lifetime.

It ends approvals past their deadline, deletes what is past its retention (finished renders with their files,
idle assets, old idempotency keys, settled webhook deliveries) and hands tasks whose driver went quiet to a driver
again. One of the registry's parts (actors._registry_parts).
"""

import asyncio
import logging
from dataclasses import dataclass

from actors._registry_parts import DRIVER_LEASE_S, RegistryParts
from mcp_protocol.domain import ApprovalTimedOut, TaskRecord, TaskStatus
from mcp_protocol.state_outage import StateUnavailable
from media_store.artifacts import ExpiredRender, delete_renders
from media_store.assets import hide_assets, settle_hidden

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepReport:
    """What one housekeeping pass did (see ``TaskRegistry.sweep``)."""

    approvals_timed_out: int
    tasks_deleted: int
    assets_deleted: int
    idempotency_keys_dropped: int
    webhook_deliveries_dropped: int
    redriven: list[str]
    backlog: bool  # a batch was full: more is left to delete


class Housekeeping(RegistryParts):
    """The sweep of a TaskRegistry, mixed into it."""

    async def _sweep_forever(self) -> None:
        backlog = False
        while True:
            # A pass that filled its batch left more to delete: go on at once, but only after the calls that
            # queued meanwhile have been answered (sleep(0) lets them run first).
            await asyncio.sleep(0 if backlog else self._config.sweep_interval_s)
            try:
                backlog = (await self.sweep()).backlog
            except StateUnavailable:  # said where the state went away; the next pass tries again
                backlog = False
            except Exception:  # a failed pass must not end housekeeping for the actor's lifetime
                backlog = False
                log.exception("task registry sweep failed; retrying next interval")

    # -- the sweep ---------------------------------------------------------------------------------------

    async def sweep(self) -> SweepReport:
        """One housekeeping pass.

        1. Approvals past their deadline complete as an approval timeout (contract:
           ``watermark_approval_timeout``; ext-tasks lets the server bound the wait).
        2. Terminal tasks past result retention are deleted with their artifact file. Task ``ttl_ms`` is not
           a deletion: the protocol layer answers ``task_expired`` on tasks/* after it, while the fallback
           status tool keeps working until retention.
        3. Idempotency keys older than ``idempotency_ttl_s`` are dropped.
        4. A non-terminal task whose driver lease has run out is handed to the driver again: whatever left it
           without one (its start never ran, the supervisor or the whole server died), it runs, or applies a
           requested cancel, and ends. The poke itself holds the lease for one term, so an unanswered poke is
           repeated once a lease later, never every pass.
        5. Assets past ``asset_retention_s`` that no non-terminal task names are deleted (``_expire_assets``).
        6. Webhook deliveries settled (delivered or given up) whose event is older than ``result_retention_s`` are
           forgotten, a batch at a time through the store's index on settled rows; pending ones stay until the
           dispatcher settles them (it gives up on an event past VIDFORGE_WEBHOOK_MAX_AGE_S).

        Deletions come in batches of at most ``sweep_batch`` tasks and as many assets, their file work in
        threads, so the registry keeps answering while thousands go; ``backlog`` says a batch was full. A pass
        reads the live records and, through the store's retention index, only the expired ones: its cost does not
        grow with the finished records retained.
        """
        self._bind_loop()
        now = self._now_ms()
        lease_ms = int(DRIVER_LEASE_S * 1000)
        timed_out = 0
        batch = self._config.sweep_batch
        # expires_ms(retention) <= now, read through the store's index on the retention start (expires_ms(0))
        expired = self._store.expired_tasks(now - self._config.result_retention_s * 1000, batch)
        redriven: list[str] = []
        for task_id in list(self._records.live):
            # Re-read after every await: another call may have answered or finished the task meanwhile.
            rec = self._records.live.get(task_id)
            if rec and rec.pending is not None and rec.pending.deadline_ms <= now:
                await self.transition(
                    task_id,
                    TaskStatus.COMPLETED,
                    end=ApprovalTimedOut(timeout_s=rec.pending.timeout_s),
                    status_message="Watermark approval timed out; the render was not finalized.",
                )
                timed_out += 1
            elif rec and self._leases.get(task_id, max(rec.created_at_ms, self._started_ms) + lease_ms) <= now:
                self._leases[task_id] = now + lease_ms
                redriven.append(task_id)
                if self._driver is not None:
                    self._driver.drive(task_id)
        await self._delete(expired)
        assets_deleted = await self._expire_assets(now, batch)
        dropped = self._store.drop_idempotency(now - self._config.idempotency_ttl_s * 1000)
        deliveries_dropped = self._store.drop_webhook_deliveries(now - self._config.result_retention_s * 1000, batch)
        self._observer.swept(now)
        return SweepReport(
            approvals_timed_out=timed_out,
            tasks_deleted=len(expired),
            assets_deleted=assets_deleted,
            idempotency_keys_dropped=dropped,
            webhook_deliveries_dropped=deliveries_dropped,
            redriven=redriven,
            backlog=batch in (len(expired), assets_deleted, deliveries_dropped),
        )

    async def _delete(self, recs: list[TaskRecord]) -> None:
        """Delete terminal tasks past their retention (``TaskRecord.expires_ms``: results are kept
        ``result_retention_s`` from creation, a finished video as long from its completion, since its download
        is authorised through the record) with their files (video, preview and source frame: media_store.artifacts' layout):
        the files in a thread, the records in one commit.

        Files first: a crash in between leaves records whose files are gone, which the next sweep finishes,
        rather than orphaned files nothing points at."""
        renders = [
            ExpiredRender(rec.task_id, rec.artifact.ext if rec.artifact else None, rec.request.streaming is not None)
            for rec in recs
        ]
        await asyncio.to_thread(delete_renders, self._media, renders)
        self._store.delete_tasks([rec.task_id for rec in recs])
        self._records.forget(rec.task_id for rec in recs)
        if recs:
            self._observer.deleted(recs)
            self._feed.deleted(rec.task_id for rec in recs)
            await self._notify()

    async def _expire_assets(self, now_ms: int, batch: int) -> int:
        """Delete up to ``batch`` assets uploaded more than ``asset_retention_s`` ago that no non-terminal task
        names; returns how many went.

        The in-use check runs here, the file work in threads, so a render may be created in between: the
        assets are first hidden (their metadata deleted; a new render's resolve then fails like an unknown id),
        then checked again, and those a render took meanwhile are put back. A create whose assets resolved before they were
        hidden but that commits only after this check ends as ``source_not_found`` when its render starts."""
        uploaded_before_s = now_ms / 1000 - self._config.asset_retention_s
        candidates = await asyncio.to_thread(self._assets.expired, uploaded_before_s, self._assets_in_use(), batch)
        hidden = await asyncio.to_thread(hide_assets, self._media, candidates)
        in_use = self._assets_in_use()
        gone = [asset_id for asset_id in hidden if asset_id not in in_use]
        restore = {asset_id: meta for asset_id, meta in hidden.items() if asset_id in in_use}
        await asyncio.to_thread(settle_hidden, self._media, restore, gone)
        return len(gone)

    def _assets_in_use(self) -> set[str]:
        """The ids of the assets non-terminal tasks name: compared as ids (`RenderRequest.asset_ids`), never as the
        URI strings they came in."""
        return {asset_id for rec in self._records.live.values() for asset_id in rec.request.asset_ids}
