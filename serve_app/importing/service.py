"""The wire's `AssetImports` (mcp_protocol.imports) over the cluster's import desk, as an ingress replica holds it.

A URL that names nothing importable is refused here, before the desk is asked (its scheme, credentials in it, a
bucket that is not the server's); the addresses it leads to are the desk's to check, on every connect. The desk's
own refusals come back as the contract's errors.
"""

from __future__ import annotations

from mcp_protocol import errors
from mcp_protocol.desk_jobs import DeskJob
from serve_app._config import Config
from serve_app.desks.job_desk import DeskAtCapacity
from serve_app.importing._failures import ImportRefused
from serve_app.importing._sources import source_of
from serve_app.importing.desk import ImportDeskApi
from serve_app.outbound.address_guard import AddressGuard


class DeskImports:
    def __init__(self, config: Config, desk: ImportDeskApi) -> None:
        self.config = config
        self.guard = AddressGuard.of(config.import_allow_hosts)
        self.desk = desk  # the cluster's (desk.DeskClient), or one in this process

    async def start(self, principal: str, url: str) -> DeskJob:
        try:
            source = source_of(url, self.config.storage_url, self.guard)
        except ImportRefused as exc:
            raise errors.import_refused(exc.reason) from None
        try:
            job = await self.desk.start(principal, source)
        except DeskAtCapacity as exc:
            raise errors.concurrency_limit_exceeded(
                exc.limit,
                "imports in progress (vidforge_import_asset)",
                "VIDFORGE_MAX_IMPORTS",
                "Wait for one of your imports to end, then call again (tasks/get shows when it has).",
                self.config.busy_retry_after_s,
            ) from None
        return job

    async def get(self, principal: str, task_id: str) -> DeskJob | None:
        return await self.desk.get(principal, task_id)

    async def wait(self, principal: str, task_id: str) -> DeskJob | None:
        return await self.desk.wait(principal, task_id)

    async def cancel(self, principal: str, task_id: str) -> DeskJob | None:
        return await self.desk.cancel(principal, task_id)
