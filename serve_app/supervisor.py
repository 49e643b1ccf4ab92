"""The RenderSupervisor actor: runs one render driver per task and maps its life onto the registry.

Detached and named, so renders outlive the Serve replica that accepted them. On (re)start it resumes every
non-terminal task it finds in the registry — after a crash, the whole server being restarted, or the
actor itself being restarted — so an accepted render is never silently lost: it runs again from its
(deterministic) segments, or ends as a clear `render_failed` after repeated interruptions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import ray

from actors.handle import singleton_actor_options
from mcp_protocol.catalog import preview_uri
from mcp_protocol.errors import tool_error_result
from mcp_protocol.progress import RenderProgress
from mcp_protocol.results import MIME_BY_EXT, approval_timeout_result, render_failed_error, render_success_result
from render_kernels import RenderSpec, UnsupportedMedia, WatermarkSpec
from serve_app.artifacts import discard, final_path, preview_path
from serve_app.assets import AssetStore, unsupported_source
from serve_app.config import Config
from serve_app.handles import registry_handle
from serve_app.render_driver import RenderJob, RenderRejected, run_render

logger = logging.getLogger(__name__)

SUPERVISOR_NAME = "vidforge-render-supervisor"
MAX_ATTEMPTS = 3
WATCH_S = 10.0


class RegistryHooks:
    """The driver's callbacks, written through to the TaskRegistry (the only owner of task state)."""

    def __init__(self, registry, rec: dict[str, Any], config: Config) -> None:
        self.registry = registry
        self.task_id = rec["task_id"]
        self.principal = rec["principal"]
        self.arguments = rec["arguments"]
        self.config = config

    async def progress(self, report: RenderProgress) -> None:
        """The driver already reports at a bounded rate (a few a second, only when the count moves); the
        registry publishes each at once and stores only phase changes (frames and speed are volatile)."""
        await self.registry.set_progress.remote(self.task_id, **report.fields())

    async def preview_ready(self, path: str) -> bool:
        """Contract §3.3: publish the preview, go `input_required`, and wait for the decision (or the
        registry's sweep ending the task on the approval timeout)."""
        rec = await self.registry.get_any.remote(self.task_id)
        if rec["status"] == "working" and not rec.get("approval"):
            watermark = self.arguments["watermark"]
            timeout_s = self.config.approval_timeout_s
            rec = await self.registry.request_input.remote(
                self.task_id,
                {
                    "preview_uri": preview_uri(self.task_id),
                    "position": watermark["position"],
                    "opacity": watermark["opacity"],
                    "timeout_s": timeout_s,
                },
                int((time.time() + timeout_s) * 1000),
                approval_timeout_result(self.arguments, timeout_s),
            )
            if rec is None:  # ended meanwhile (cancelled): there is nothing left to approve
                return False
        while rec["status"] == "input_required":
            await self.registry.watch.remote(self.principal, [self.task_id], {self.task_id: rec["version"]}, WATCH_S)
            rec = await self.registry.get_any.remote(self.task_id)
        return rec["status"] == "working"


def render_job(rec: dict[str, Any], config: Config, assets: AssetStore) -> RenderJob:
    args, principal, task_id = rec["arguments"], rec["principal"], rec["task_id"]
    source = assets.resolve(args["source_asset_uri"], principal, "source_asset_uri")
    watermark = None
    if (wm := args.get("watermark")) is not None:
        image = assets.resolve(wm["image_asset_uri"], principal, "watermark.image_asset_uri")
        watermark = WatermarkSpec(image_path=image.path, position=wm["position"], opacity=float(wm["opacity"]))
    spec = RenderSpec(output_format=args["output_format"], resolution=args["resolution"], watermark=watermark)
    return RenderJob(
        source_path=source.path,
        spec=spec,
        out_path=final_path(config.data_dir, task_id, args["output_format"]),
        preview_path=preview_path(config.data_dir, task_id) if watermark else None,
        workers=config.render_workers,
    )


class RenderSupervisor:
    def __init__(self, config_json: str) -> None:
        self.config = Config.from_json(config_json)
        self.assets = AssetStore(self.config)
        self.registry = registry_handle(self.config)
        self.running: dict[str, asyncio.Task] = {}
        self._resumed: asyncio.Task | None = None

    async def ready(self) -> bool:
        """Resume in-flight renders once per actor life; returns when they are (re)started."""
        if self._resumed is None:
            self._resumed = asyncio.ensure_future(self._resume())
        await self._resumed
        return True

    async def _resume(self) -> None:
        for rec in await self.registry.nonterminal.remote():
            task_id = rec["task_id"]
            if rec["cancel_requested"]:
                await self.registry.finish.remote(task_id, "cancelled", message="Render cancelled.")
            elif rec["attempt"] >= MAX_ATTEMPTS:
                error = render_failed_error(task_id, f"render interrupted {rec['attempt']} times", rec["arguments"])
                await self.registry.finish.remote(task_id, "completed", result=tool_error_result(error))
            else:
                self._launch(rec)

    async def start(self, task_id: str) -> None:
        await self.ready()
        if task_id not in self.running:
            rec = await self.registry.get_any.remote(task_id)
            if rec is not None and rec["status"] not in ("completed", "failed", "cancelled"):
                self._launch(rec)

    async def cancel(self, task_id: str) -> None:
        """Cooperative cancel: stop the driver (which `ray.cancel`s its tasks) and end the task cancelled."""
        await self.ready()
        task = self.running.get(task_id)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        else:
            await self.registry.finish.remote(task_id, "cancelled", message="Render cancelled.")

    async def active(self) -> list[str]:
        return sorted(self.running)

    def _launch(self, rec: dict[str, Any]) -> None:
        task = asyncio.ensure_future(self._drive(rec))
        self.running[rec["task_id"]] = task
        task.add_done_callback(lambda _: self.running.pop(rec["task_id"], None))

    async def _drive(self, rec: dict[str, Any]) -> None:
        task_id, args = rec["task_id"], rec["arguments"]
        await self.registry.bump_attempt.remote(task_id)
        config = self.config
        try:
            job = render_job(rec, config, self.assets)
            stats = await run_render(job, RegistryHooks(self.registry, rec, config))
        except (asyncio.CancelledError, Exception) as exc:
            discard(config.data_dir, task_id)  # every way out but success leaves no file behind
            await self._end_unfinished(task_id, args, exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        now_ms = int(time.time() * 1000)
        expires_ms = now_ms + config.result_retention_s * 1000  # the video is kept 7 days from completion
        ext = args["output_format"]
        await self.registry.record_artifact.remote(
            task_id,
            {
                "path": stats.path,
                "files": [stats.path] + ([job.preview_path] if job.preview_path else []),
                "ext": ext,
                "mime": MIME_BY_EXT[ext],
                "size_bytes": stats.size_bytes,
                "duration_s": stats.duration_s,
                "expires_at_ms": expires_ms,
            },
        )
        artifact = {"size_bytes": stats.size_bytes, "duration_s": stats.duration_s}
        result = render_success_result(task_id, args, artifact, now_ms, expires_ms)
        if await self.registry.finish.remote(task_id, "completed", result=result, message="Render complete.") is None:
            # Lost the race to a cancel: the task is already terminal, so the artifact must not survive.
            discard(config.data_dir, task_id)


    async def _end_unfinished(self, task_id: str, args: dict[str, Any], exc: BaseException) -> None:
        """End a task whose render stopped short, with the outcome that says why."""
        if isinstance(exc, asyncio.CancelledError):
            await self.registry.finish.remote(task_id, "cancelled", message="Render cancelled.")
            return
        if isinstance(exc, RenderRejected):
            return  # the decision (reject or timeout) already ended the task
        if isinstance(exc, UnsupportedMedia):
            error = unsupported_source("source_asset_uri", exc.reason)
        else:  # any renderer fault ends as a retryable render_failed
            logger.error("render %s failed", task_id, exc_info=exc)
            error = render_failed_error(task_id, f"{type(exc).__name__}: {exc}", args)
        await self.registry.finish.remote(task_id, "completed", result=tool_error_result(error))

def supervisor_handle(config: Config):
    return (
        ray.remote(RenderSupervisor)
        .options(**singleton_actor_options(SUPERVISOR_NAME, config.namespace))
        .remote(config.to_json())
    )
