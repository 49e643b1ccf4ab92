"""Recovery: no accepted render is ever silently lost, and every accepted task reaches a terminal state
(issue 4; issue 8 item 4) — not when the TaskRegistry actor is killed mid-render, not when the
RenderSupervisor actor is (it resumes on its own restart, with nothing but status polls touching the
server), not when a task's start never ran (the registry's sweep drives it), and not when the whole server
is stopped and started again (a second client, holding only the taskId, polls the render to completion)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.harness import REPO, TERMINAL, ServerProcess, Wire, poll_task, upload
from tests.media import decode_all, make_clip

pytestmark = pytest.mark.ray


def kill_actor(server: ServerProcess, actor_class: str) -> int:
    """SIGKILL the worker process of this server's `actor_class` actor (a crash, not a polite ray.kill);
    Ray restarts the actor (max_restarts=-1): the registry reloads from its SQLite store."""
    killed = 0
    for pid, title in server.processes():
        if f"ray::{actor_class}" in title:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                continue
    assert killed, f"no {actor_class} actor process found for this server"
    return killed


def frames_done(task: dict) -> int:
    """The encoded frame count a working task's status message shows (`... (frame 3021/7200) ...`), else 0."""
    match = re.search(r"frame (\d+)/", task.get("statusMessage", ""))
    return int(match.group(1)) if match else 0


def create_behind_the_service(server: ServerProcess, principal: str, arguments: dict) -> str:
    """Write a task straight into the server's TaskRegistry actor, from another Ray driver: exactly what a
    create whose supervisor start never ran leaves behind (a client gone mid-call, a replica crash)."""
    address = re.search(r"Ray cluster at (\S+)", server.log_path.read_text()).group(1)
    script = (
        "import sys, ray\n"
        "from actors.handle import REGISTRY_NAME\n"
        "from mcp_protocol.domain import RenderRequest\n"
        "ray.init(address=sys.argv[1], namespace='vidforge', log_to_driver=False)\n"
        "registry = ray.get_actor(REGISTRY_NAME)\n"
        "request = RenderRequest.model_validate_json(sys.argv[3])\n"
        "print(ray.get(registry.create.remote(sys.argv[2], request)).task.task_id)\n"
    )
    # A local `ray.init` turns token auth on by default (the token in ~/.ray); a driver joining it must too.
    env = {**server.env, "RAY_AUTH_MODE": server.env.get("RAY_AUTH_MODE", "token")}
    done = subprocess.run(
        [sys.executable, "-c", script, address, principal, json.dumps(arguments)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the module (a start costs 15-30 s): each test leaves no render of its own running, and the
    whole-server restart comes last. A quota of one render makes a slot left taken show at the next create. The
    sweep runs every second (5 by default): the task no start ever ran is found sooner once its lease is out."""
    env = {"VIDFORGE_POLL_INTERVAL_MS": "500", "VIDFORGE_MAX_CONCURRENT_RENDERS": "1", "VIDFORGE_SWEEP_INTERVAL_S": "1"}
    with ServerProcess(tmp_path_factory.mktemp("recovery") / "data", env=env) as proc:
        yield proc


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory):
    # 300 frames: every kill below lands once the render is provably encoding, and it still has most to do
    return make_clip(str(tmp_path_factory.mktemp("rec") / "long.mp4"), seconds=10.0, width=640, height=360)


def start_long_render(server: ServerProcess, clip: str) -> tuple[Wire, str]:
    wire = Wire(server.url, tasks=True)
    source = upload(server, clip)
    args = {"source_asset_uri": source, "output_format": "mp4", "resolution": "720p"}
    task_id = wire.tool("vidforge_render_video", args)["taskId"]
    poll_task(wire, task_id, lambda t: t["status"] == "working" and "Rendering" in t["statusMessage"], timeout=120)
    return wire, task_id


def cancel_to_the_end(wire: Wire, task_id: str) -> None:
    """Cancel a render this test no longer needs and wait until it is terminal, so its quota slot is free."""
    wire.task("tasks/cancel", task_id)
    poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)


def test_registry_actor_killed_mid_render(server, long_clip):
    wire, task_id = start_long_render(server, long_clip)
    before = wire.task("tasks/get", task_id)["result"]
    assert before["status"] == "working", before  # the kill below comes mid-render
    kill_actor(server, "TaskRegistry")
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is False
    assert done["createdAt"] == before["createdAt"]


def test_supervisor_actor_killed_mid_render_resumes_on_its_own(server, long_clip):
    wire, task_id = start_long_render(server, long_clip)
    in_flight = poll_task(wire, task_id, lambda t: frames_done(t) > 0)  # segments are encoding
    kill_actor(server, "RenderSupervisor")
    assert in_flight["status"] == "working"
    # From here only tasks/get is asked (the registry): nothing calls the restarted supervisor.
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is False, done
    decoded = decode_all(str(server.data_dir / "artifacts" / task_id / "final.mp4"), keep="none")
    assert decoded.frame_count == decode_all(long_clip, keep="none").frame_count
    # The quota (1) is free again: a new render is accepted.
    args = {"source_asset_uri": upload(server, long_clip), "output_format": "webm", "resolution": "720p"}
    created = wire.tool("vidforge_render_video", args)
    assert created["resultType"] == "task"
    cancel_to_the_end(wire, created["taskId"])


def test_task_whose_start_never_ran_is_driven_by_the_sweep(server, tmp_path):
    clip = make_clip(str(tmp_path / "short.mp4"), seconds=3.0)
    args = {"source_asset_uri": upload(server, clip), "output_format": "mp4", "resolution": "720p"}
    task_id = create_behind_the_service(server, "local", args)
    wire = Wire(server.url, tasks=True)
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is False, done
    created = wire.tool("vidforge_render_video", args)
    assert created["resultType"] == "task"  # its quota slot is free
    cancel_to_the_end(wire, created["taskId"])


def test_whole_server_restarted_mid_render(server, long_clip):
    """Last in the module: it restarts the module's server."""
    wire, task_id = start_long_render(server, long_clip)
    in_flight = wire.task("tasks/get", task_id)["result"]
    assert in_flight["status"] == "working", in_flight  # the restart below comes mid-render
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
