"""Issue 8 item 4: a cancel is always applied and frees the quota — the real RenderSupervisor class, run
in-process on a real local Ray beside the real (detached) TaskRegistry actor, so a cancel can be landed at
an exact point of the driver's life without a seam: before its first checkpoint, while it encodes, while it
waits for a watermark approval. (The registry-side race, a cancel landing while the driver records its
finished artifact, is `test_task_registry.py::test_a_requested_cancel_wins_over_any_completion`; a
supervisor actor killed mid-render and a task whose start never ran are in `test_recovery.py`.)"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray

from actors.handle import REGISTRY_NAME
from mcp_protocol.domain import RenderRequest, TaskRecord
from serve_app._config import Config
from serve_app._handles import registry_client
from serve_app.media.assets import AssetStore
from serve_app.rendering.supervisor import RenderSupervisor
from tests.media import make_clip, make_watermark_png

pytestmark = [pytest.mark.slow, pytest.mark.ray]

CPUS = 2
DEADLINE_S = 240.0  # generous: the machine running the tests may be loaded
PRINCIPAL = "alice"


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("no-stuck")
    namespace = f"test-no-stuck-{uuid.uuid4().hex}"
    ray.init(num_cpus=CPUS, include_dashboard=False, namespace=namespace)
    config = Config.from_env(data_dir=str(root / "data")).model_copy(
        update={"namespace": namespace, "render_workers": 2}
    )
    registry = registry_client(config)
    try:
        assets = AssetStore(config)
        # 300 frames to encode at 720p: seconds of work after the first frames, in which a cancel must land.
        clip = make_clip(str(root / "clip.mp4"), seconds=10.0, width=320, height=180)
        source = assets.add_file(clip, PRINCIPAL).uri
        logo = assets.add_file(make_watermark_png(str(root / "logo.png")), PRINCIPAL).uri
        yield SimpleNamespace(config=config, registry=registry, source=source, logo=logo)
    finally:
        ray.kill(ray.get_actor(REGISTRY_NAME, namespace=namespace))  # detached: it would outlive this module otherwise
        ray.shutdown()


@pytest.fixture
async def supervisor(env):
    """A fresh RenderSupervisor on the test's event loop (it resumes on construction)."""
    supervisor = RenderSupervisor(env.config.to_json())
    await supervisor.ready()
    return supervisor


async def create(env, watermark: bool = False) -> str:
    """A task as the service writes it (validated arguments, defaults applied), without starting it."""
    args = {"source_asset_uri": env.source, "output_format": "mp4", "resolution": "720p"}
    if watermark:
        args["watermark"] = {"image_asset_uri": env.logo, "position": "bottom_right", "opacity": 0.6}
    return (await env.registry.create(PRINCIPAL, RenderRequest.model_validate(args))).task.task_id


async def wait_for(env, task_id: str, condition, what: str) -> TaskRecord:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        rec = await env.registry.get_any(task_id)
        if condition(rec):
            return rec
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {rec.status} {rec.status_message}"
        await asyncio.sleep(0.2)


async def ended_cancelled(env, supervisor: RenderSupervisor, task_id: str) -> None:
    """The task ends cancelled, its driver is gone, no file of it is left, and the quota is free again."""
    rec = await wait_for(env, task_id, lambda r: r.status.terminal, "the task to end")
    assert rec.status == "cancelled", rec
    deadline = time.monotonic() + DEADLINE_S
    while task_id in supervisor.running:
        assert time.monotonic() < deadline, "the driver never stopped"
        await asyncio.sleep(0.2)
    assert not (Path(env.config.data_dir) / "artifacts" / task_id).exists()
    assert await env.registry.count_active(PRINCIPAL) == 0


@pytest.mark.anyio
async def test_cancel_before_the_drivers_first_checkpoint_is_applied(env, supervisor):
    task_id = await create(env)
    await env.registry.request_cancel(PRINCIPAL, task_id)  # the service records the intent first,
    await supervisor.start(task_id)  # a start arrives (launching a driver that has not run a step yet),
    await supervisor.cancel(task_id)  # and the cancel lands before the driver's bump_attempt
    await ended_cancelled(env, supervisor, task_id)


@pytest.mark.anyio
async def test_a_cancel_intent_alone_stops_a_render_while_it_encodes(env, supervisor):
    """The replica that recorded the cancel died before it reached the supervisor: the driver sees
    `cancel_requested` at its next progress report."""
    task_id = await create(env)
    await supervisor.start(task_id)
    await wait_for(env, task_id, lambda r: r.frames_done > 0, "frames to be encoded")
    await env.registry.request_cancel(PRINCIPAL, task_id)
    await ended_cancelled(env, supervisor, task_id)


@pytest.mark.anyio
async def test_a_cancel_intent_alone_stops_a_render_awaiting_approval(env, supervisor):
    task_id = await create(env, watermark=True)
    await supervisor.start(task_id)
    await wait_for(env, task_id, lambda r: r.status == "input_required", "the approval request")
    await env.registry.request_cancel(PRINCIPAL, task_id)
    await ended_cancelled(env, supervisor, task_id)
