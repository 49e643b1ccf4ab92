"""Issue 4 recovery: no accepted render is ever silently lost — not when the TaskRegistry actor is killed
mid-render, and not when the whole server is stopped and started again (a second client, holding only the
taskId, polls the render to completion)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.harness import TERMINAL, ServerProcess, Wire, poll_task, upload
from tests.media import decode_all, make_clip

pytestmark = pytest.mark.ray


def kill_registry(server: ServerProcess) -> int:
    """SIGKILL the TaskRegistry actor's worker process of this server (a crash, not a polite ray.kill);
    Ray restarts the actor (max_restarts=-1) and it reloads from its SQLite store."""
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            if b"ray::TaskRegistry" in title and os.getsid(int(entry.name)) == server.proc.pid:
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
        except (OSError, ProcessLookupError):
            continue
    assert killed, "no TaskRegistry actor process found for this server"
    return killed


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory):
    return make_clip(str(tmp_path_factory.mktemp("rec") / "long.mp4"), seconds=20.0, width=640, height=360)


def start_long_render(server: ServerProcess, clip: str) -> tuple[Wire, str]:
    wire = Wire(server.url, tasks=True)
    source = upload(server, clip)
    args = {"source_asset_uri": source, "output_format": "mp4", "resolution": "720p"}
    task_id = wire.tool("vidforge_render_video", args)["taskId"]
    poll_task(wire, task_id, lambda t: t["status"] == "working" and "Rendering" in t["statusMessage"], timeout=120)
    return wire, task_id


def test_registry_actor_killed_mid_render(tmp_path, long_clip):
    server = ServerProcess(tmp_path / "data", env={"VIDFORGE_POLL_INTERVAL_MS": "500"}).start()
    try:
        wire, task_id = start_long_render(server, long_clip)
        before = wire.task("tasks/get", task_id)["result"]
        kill_registry(server)
        done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
        assert done["status"] == "completed" and done["result"]["isError"] is False
        assert done["createdAt"] == before["createdAt"]
    finally:
        server.stop()


def test_whole_server_restarted_mid_render(tmp_path, long_clip):
    server = ServerProcess(tmp_path / "data", env={"VIDFORGE_POLL_INTERVAL_MS": "500"}).start()
    try:
        wire, task_id = start_long_render(server, long_clip)
        wire.close()
        server.restart()
        recovered = Wire(server.url, tasks=True)  # a second client: it knows nothing but the taskId
        done = poll_task(recovered, task_id, lambda t: t["status"] in TERMINAL)
        assert done["status"] == "completed", done
        assert done["result"]["isError"] is False
        path = server.data_dir / "artifacts" / task_id / "final.mp4"
        decoded = decode_all(str(path), keep="none")
        assert decoded.frame_count == decode_all(long_clip, keep="none").frame_count
        status = recovered.tool("vidforge_get_render_status", {"render_id": task_id})["structuredContent"]
        assert status["state"] == "succeeded"
    finally:
        server.stop()
