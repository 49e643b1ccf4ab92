"""The wire's `VideoInspections` (mcp_protocol.inspections) over the cluster's inspection desk, as a replica holds it.

The URI is checked here, against the principal's own assets and renders, before the desk is asked: the desk only
ever reads files a caller may read. The desk's cap comes back as the contract's error.
"""

from __future__ import annotations

import anyio

from actors.client import RegistryApi
from mcp_protocol import errors
from mcp_protocol.desk_jobs import DeskJob
from mcp_protocol.inspections import StartedInspection
from serve_app._config import Config
from serve_app.desks.job_desk import DeskAtCapacity
from serve_app.inspecting._targets import (
    InspectTarget,
    asset_target,
    is_asset_uri,
    nothing_at,
    video_target,
    video_uri_parts,
)
from serve_app.inspecting.desk import InspectDeskApi
from serve_app.media.assets import AssetStore


class DeskInspections:
    def __init__(self, config: Config, desk: InspectDeskApi, registry: RegistryApi, assets: AssetStore) -> None:
        self.config = config
        self.desk = desk  # the cluster's (desk.InspectDeskClient), or one in this process
        self.registry = registry
        self.assets = assets

    async def start(self, principal: str, uri: str) -> StartedInspection:
        target = await self._target(principal, uri)
        try:
            job = await self.desk.start(principal, target)
        except DeskAtCapacity as exc:
            raise errors.concurrency_limit_exceeded(
                exc.limit,
                "inspections in progress (vidforge_inspect_video)",
                "VIDFORGE_MAX_INSPECTIONS",
                "Wait for one of your inspections to end, then call again.",
                self.config.busy_retry_after_s,
            ) from None
        return StartedInspection(job=job, duration_s=target.duration_s)

    async def get(self, principal: str, task_id: str) -> DeskJob | None:
        return await self.desk.get(principal, task_id)

    async def wait(self, principal: str, task_id: str, timeout_s: float) -> DeskJob | None:
        return await self.desk.wait(principal, task_id, timeout_s)

    async def cancel(self, principal: str, task_id: str) -> DeskJob | None:
        return await self.desk.cancel(principal, task_id)

    async def _target(self, principal: str, uri: str) -> InspectTarget:
        if is_asset_uri(uri):
            return await anyio.to_thread.run_sync(asset_target, self.assets, principal, uri)
        if (parts := video_uri_parts(uri)) is None:
            raise nothing_at(uri)
        render_id, ext = parts
        artifact = await self.registry.get_artifact(principal, render_id)
        return video_target(self.assets, uri, render_id, ext, artifact)
