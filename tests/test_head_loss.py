"""A head you can lose (issue 36 item 4): with the registry's state in PostgreSQL (VIDFORGE_STATE_URL), the media in
a bucket (VIDFORGE_STORAGE_URL) and the review-link key from the environment (VIDFORGE_REVIEW_KEY), a batch is
submitted — a render finished, one encoding, one queued behind it, one watermarked render awaiting approval and one
created with an idempotency key — then the whole head (`vidforge serve` and its Ray, every process of its session)
is SIGKILLed and its data dir deleted. A new `vidforge serve` on a fresh data dir, against the same database and
bucket, has every task: the unfinished renders resume and complete with every frame, the finished video downloads as
it did, the approval is still pending and its review link, made before the kill, decides it, and the idempotency key
still names its render. Short clips (the one that must be caught mid-encode is a few seconds long)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import httpx
import pytest

from tests.harness import TERMINAL, ServerProcess, Wire, head_env, poll_task, upload
from tests.media import decode_all, make_clip, make_watermark_png
from tests.postgres import postgres_url, state_url  # noqa: F401  (the fixtures: a real PostgreSQL server, a database)

pytestmark = pytest.mark.ray

RENDER = "vidforge_render_video"
REVIEW_KEY = "head-loss-review-key-" + "k" * 32  # the deployment's Secret: the same for every head
IDEMPOTENCY_KEY = "head-loss-batch"
# A review link as a status message gives it; group 1 is what follows the server's origin.
LINK = re.compile(r"http://127\.0\.0\.1:\d+(/review/task_[A-Za-z0-9_-]+\?cap=[0-9.]+[A-Za-z0-9_-]{43})")
FRAMES = re.compile(r"frame (\d+)/(\d+)")


def frames(task: dict) -> tuple[int, int]:
    """(encoded, total) from a working task's status message (`... (frame 21/180) ...`); (0, 0) before probing."""
    match = FRAMES.search(task.get("statusMessage", ""))
    return (int(match[1]), int(match[2])) if match else (0, 0)


def download(server: ServerProcess, task_id: str) -> bytes:
    response = httpx.get(f"{server.base}/artifacts/{task_id}/final.mp4", timeout=120)
    assert response.status_code == 200, response.text
    return response.content


def frame_count(video: bytes, tmp_path: Path, name: str) -> int:
    path = tmp_path / f"{name}.mp4"
    path.write_bytes(video)
    return decode_all(str(path), keep="none").frame_count


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("head-loss-media")
    return {
        "short": make_clip(str(root / "short.mp4"), seconds=1.5, audio=False),
        # Long enough to be caught encoding: two segments (one per CPU: VIDFORGE_MIN_SEGMENT_S is 2 s here) that keep
        # this machine's CPUs busy for a while.
        "long": make_clip(str(root / "long.mp4"), seconds=8.0, width=640, height=360, audio=False),
        "logo": make_watermark_png(str(root / "logo.png")),
    }


def test_a_new_head_on_a_fresh_disk_carries_on_the_batch(s3_server, state_url, clips, tmp_path):  # noqa: F811
    env = {**head_env(s3_server, state_url, REVIEW_KEY), "VIDFORGE_MIN_SEGMENT_S": "2"}
    first = ServerProcess(tmp_path / "data-1", env=env).start()
    try:
        wire = Wire(first.url, tasks=True)
        short, long = upload(first, clips["short"]), upload(first, clips["long"])
        plain = {"source_asset_uri": short, "output_format": "mp4", "resolution": "720p"}
        watermark = {"image_asset_uri": upload(first, clips["logo"]), "position": "bottom_right", "opacity": 0.6}

        finished = wire.tool(RENDER, plain)["taskId"]
        done = poll_task(wire, finished, lambda t: t["status"] in TERMINAL)
        assert done["status"] == "completed" and done["result"]["isError"] is False, done
        video = download(first, finished)

        approval = wire.tool(RENDER, {**plain, "watermark": watermark})["taskId"]
        waiting = poll_task(wire, approval, lambda t: t["status"] in ("input_required", *TERMINAL))
        assert waiting["status"] == "input_required", waiting
        link = LINK.search(waiting["statusMessage"])
        assert link is not None, waiting["statusMessage"]

        # The long render's segments are queued first (it has been probed), so the renders created after it queue
        # behind them (one principal's tasks run in order) while it encodes.
        encoding = wire.tool(RENDER, {**plain, "source_asset_uri": long})["taskId"]
        poll_task(wire, encoding, lambda t: frames(t)[1] > 0, timeout=120)
        queued = wire.tool(RENDER, plain)["taskId"]
        keyed_args = {**plain, "idempotency_key": IDEMPOTENCY_KEY}
        keyed = wire.tool(RENDER, keyed_args)["taskId"]
        poll_task(wire, encoding, lambda t: frames(t)[0] > 0, timeout=120)

        batch = (encoding, queued, keyed, approval, finished)  # the kill comes right after the first is read
        before = {task_id: wire.task("tasks/get", task_id)["result"] for task_id in batch}
        encoded, total = frames(before[encoding])
        assert before[encoding]["status"] == "working" and 0 < encoded < total, before[encoding]  # mid-encode
        for task_id in (queued, keyed):
            assert before[task_id]["status"] == "working" and frames(before[task_id])[0] == 0, before[task_id]
        assert before[approval]["status"] == "input_required" and before[finished]["status"] == "completed"
        wire.close()
    finally:
        first.kill()  # the whole head: `vidforge serve`, its Ray, every worker
    assert not list(first.data_dir.rglob("registry.sqlite3*"))  # the state was never on this disk
    shutil.rmtree(first.data_dir)

    second = ServerProcess(tmp_path / "data-2", env=env).start()
    try:
        wire = Wire(second.url, tasks=True)
        for task_id, was in before.items():  # every task, as it was created
            now = wire.task("tasks/get", task_id)["result"]
            assert now["createdAt"] == was["createdAt"], (was, now)
        replay = wire.tool(RENDER, keyed_args)  # the key names the same render, not a new one
        assert replay["taskId"] == keyed, replay

        kept = wire.task("tasks/get", finished)["result"]["result"]
        assert kept["structuredContent"] == before[finished]["result"]["structuredContent"]
        assert download(second, finished) == video

        # The approval is still pending, and the link the lost head handed out decides it on this one.
        assert wire.task("tasks/get", approval)["result"]["status"] == "input_required"
        page = httpx.get(second.base + link[1], timeout=60)
        assert page.status_code == 200 and approval in page.text, page.text[:2000]
        cap = httpx.URL(link[1]).params["cap"]
        decided = httpx.post(f"{second.base}/review/{approval}", data={"cap": cap, "decision": "approve"}, timeout=60)
        assert decided.status_code == 303, decided.text[:2000]

        expected = {name: decode_all(clips[name], keep="none").frame_count for name in ("short", "long")}
        for task_id, source in ((encoding, "long"), (queued, "short"), (keyed, "short"), (approval, "short")):
            ended = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
            assert ended["status"] == "completed" and ended["result"]["isError"] is False, ended
            assert ended["result"]["structuredContent"]["watermark_applied"] is (task_id == approval)
            assert frame_count(download(second, task_id), tmp_path, task_id) == expected[source], task_id
        wire.close()
    finally:
        second.kill()
