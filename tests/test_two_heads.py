"""Exactly one owner (issue 36 item 5): two `vidforge serve` heads (each with its own Ray, port and data dir) against
the same PostgreSQL state and the same bucket. The first owns the state and renders; the second waits — it says
so once, serves nothing, starts no render supervisor — while a render submitted to the first completes. Once the
first head is SIGKILLed (`vidforge serve` and its Ray), the second takes over: it comes up ready, holds the first's
finished render, and completes a render of its own."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.harness import TERMINAL, ServerProcess, Wire, head_env, poll_task, upload, wait_until
from tests.media import decode_all, make_clip
from tests.postgres import postgres_url, state_url  # noqa: F401  (the fixtures: a real PostgreSQL server, a database)

pytestmark = pytest.mark.ray

RENDER = "vidforge_render_video"
REVIEW_KEY = "two-heads-review-key-" + "k" * 32
WAITING = "another head owns the task state"  # the one line a waiting head writes (actors/postgres_store.py)
TOOK_OVER = "took over the task state"
WAIT_S = 240


def ray_logs(server: ServerProcess) -> str:
    """What the workers of `server`'s Ray have written to their log files: the registry actor's log lines are there
    (a `vidforge serve` asks for no worker output). The log dir is on the command line of Ray's GCS server; "" while
    there is none yet."""
    logs = next(
        (
            Path(arg.removeprefix("--log_dir="))
            for _, command in server.processes()
            for arg in command.split()
            if arg.startswith("--log_dir=")
        ),
        None,
    )
    if logs is None:
        return ""
    return "".join(path.read_text(errors="replace") for path in logs.glob("worker-*.err"))


def output(server: ServerProcess) -> str:
    """What `vidforge serve` printed: what an operator tailing its log or `kubectl logs` sees."""
    return server.log_path.read_text(errors="replace")


def readyz(server: ServerProcess) -> int | None:
    """The status `/readyz` answers, None when nothing answers on the port."""
    try:
        return httpx.get(f"{server.base}/readyz", timeout=10).status_code
    except httpx.HTTPError:
        return None


def render_to_the_end(server: ServerProcess, clip: str, tmp_path: Path) -> str:
    """A render of `clip` through `server`, to its end: every frame in the video it serves."""
    wire = Wire(server.url, tasks=True)
    args = {"source_asset_uri": upload(server, clip), "output_format": "mp4", "resolution": "720p"}
    task_id = wire.tool(RENDER, args)["taskId"]
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is False, done
    video = httpx.get(f"{server.base}/artifacts/{task_id}/final.mp4", timeout=120)
    assert video.status_code == 200
    (tmp_path / f"{task_id}.mp4").write_bytes(video.content)
    rendered = decode_all(str(tmp_path / f"{task_id}.mp4"), keep="none").frame_count
    assert rendered == decode_all(clip, keep="none").frame_count
    wire.close()
    return task_id


def test_one_head_renders_the_other_waits_then_takes_over(s3_server, state_url, tmp_path):  # noqa: F811
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=1.5, audio=False)
    # The waiting head tries the database's lock again at most a second apart (5 s by default): it takes over sooner.
    env = {**head_env(s3_server, state_url, REVIEW_KEY), "VIDFORGE_STATE_RETRY_MAX_S": "1"}
    first = ServerProcess(tmp_path / "first", env=env).start()
    second = ServerProcess(tmp_path / "second", env=env)
    try:
        second.start(wait=False)
        # The operator watching the server's output is told why it waits (serve_app/launch/_startup.py).
        wait_until(lambda: WAITING in output(second), WAIT_S, interval=0.5, message="the second head to wait")

        rendered = render_to_the_end(first, clip, tmp_path)
        assert second.proc.poll() is None and readyz(second) is None  # waiting: it serves nothing yet
        assert output(second).count(WAITING) == 1
        wait_until(lambda: WAITING in ray_logs(second), WAIT_S, interval=0.5, message="the registry to say it waits")
        assert ray_logs(second).count(WAITING) == 1  # said once, not once a retry
        assert not [title for _, title in second.processes() if "RenderSupervisor" in title]  # drives nothing
        assert readyz(first) == 200

        first.kill()
        second.wait_up()
        assert TOOK_OVER in output(second) and TOOK_OVER in ray_logs(second) and readyz(second) == 200
        wire = Wire(second.url, tasks=True)
        assert wire.task("tasks/get", rendered)["result"]["status"] == "completed"  # the first's render, kept
        wire.close()
        own = render_to_the_end(second, clip, tmp_path)
        assert own != rendered
    finally:
        first.kill()
        second.kill()
