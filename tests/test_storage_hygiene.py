"""Storage never only grows (issue 8, item 7): asset retention and per-principal quota, start-up removal of crash
leftovers, a full disk as a clear temporary error with nothing half-written kept, and a retention sweep that
deletes in bounded batches while the registry keeps answering. The start-up cleanup and the retention and quota
checks share one server (alice's seeded data dir; carol's and dave's uploads), started on the seeded data dir.

The full disk is real: the server runs in its own user and mount namespace (`unshare`, no privileges needed)
with small tmpfs filesystems mounted over its assets and artifacts folders, inside this test's temp dir. They
exist only in that namespace and vanish with it; their size caps the memory they can take. Every writer then
meets the kernel's own ENOSPC, from Python and from libav alike; RLIMIT_FSIZE would give EFBIG (and SIGXFSZ)
instead, and a seam raising OSError would not exercise the writers at all.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from actors.task_registry import TaskRegistry
from mcp_protocol.domain import Artifact, RenderRequest, Succeeded
from serve_app._config import Config
from serve_app.media.assets import Asset, AssetStore
from tests.harness import ServerProcess, Wire, poll_task, wait_until
from tests.media import make_clip, make_watermark_png

pytestmark = pytest.mark.slow  # `vidforge serve` processes, a full disk

DAY_S = 86_400
TOKENS = {"tok-a": "alice", "tok-c": "carol", "tok-d": "dave"}
RENDER = {"output_format": "mp4", "resolution": "720p"}
DEADLINE_S = 240


def post_asset(server: ServerProcess, data: bytes, token: str, filename: str) -> httpx.Response:
    return httpx.post(
        f"{server.base}/assets",
        params={"filename": filename},
        content=data,
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    )


def asset_folder(server: ServerProcess, uri: str):
    return server.data_dir / "assets" / uri.removeprefix("vidforge://assets/")


def backdate(folder, seconds: float) -> None:
    """Make an asset look uploaded `seconds` earlier, in its own metadata (what retention reads)."""
    meta_path = folder / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["created_at"] -= seconds
    meta_path.write_text(json.dumps(meta))


def create_render(wire: Wire, arguments: dict) -> str:
    result = wire.tool("vidforge_render_video", arguments)
    assert result["resultType"] == "task", result
    return result["taskId"]


def task_status(wire: Wire, task_id: str) -> dict:
    body = wire.task("tasks/get", task_id)
    assert "result" in body, body
    return body["result"]


def tool_outcome(wire: Wire, task_id: str) -> dict:
    """The fallback status tool's view of a render: `state`, and the envelope as `error` when it failed."""
    return wire.tool("vidforge_get_render_status", {"render_id": task_id})["structuredContent"]


# -- start-up cleanup, retention and quota: one server ----------------------------------------------------------

SEEDED_BATCH, SEEDED_OLD = 25, 70  # the sweep's batch; alice's expired renders in the data dir before the start


@dataclass
class Seeded:
    """What the data dir held before the server started: alice's expired renders and her recent one, an asset of
    hers, crash leftovers, and the files that must stay."""

    data_dir: Path
    old_ids: list[str]
    recent_id: str
    stored: Asset
    leftovers: list[Path]
    kept: list[Path]


@pytest.fixture(scope="module")
def retention_media(tmp_path_factory) -> dict[str, str]:
    media = tmp_path_factory.mktemp("retention-media")
    return {
        "clip": make_clip(str(media / "clip.mp4"), seconds=2),
        "logo": make_watermark_png(str(media / "logo.png")),
        "spare": make_watermark_png(str(media / "spare.png"), rgba=(0, 0, 255, 255)),
    }


def asset_quota(media: dict[str, str]) -> int:
    """Room for the three uploads and half a clip more: a second clip does not fit while the first is stored."""
    sizes = {name: os.path.getsize(path) for name, path in media.items()}
    return sum(sizes.values()) + sizes["clip"] // 2


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Seeded:
    root = tmp_path_factory.mktemp("seeded")
    data_dir = root / "data"
    assets, artifacts = data_dir / "assets", data_dir / "artifacts"
    old_ids, recent_id = asyncio.run(seed_registry(data_dir, SEEDED_OLD))
    clip = make_clip(str(root / "clip.mp4"), seconds=1)
    stored = AssetStore(Config.from_env(data_dir=str(data_dir))).add_file(clip, "alice")

    leftovers = [
        assets / ".upload-k3j2h1",  # an upload the crash cut off
        assets / ".staging-a_1111111111111111aaaaaaaa" / "blob",  # an asset being assembled
        assets / ".deleting-a_2222222222222222bbbbbbbb" / "blob",  # an expired asset being removed
        assets / "a_3333333333333333cccccccc" / "blob",  # an asset folder without meta.json
        artifacts / "task_nosuchtask0000000000000" / "final.mp4",  # a render the registry does not hold
        artifacts / "task_nosuchtask0000000000000" / "watermark-preview.png",
        artifacts / recent_id / ".mux-x1y2z3" / "final.mp4",  # a mux the crash cut off
        artifacts / recent_id / ".tmp-q9w8e7",  # a preview being written
    ]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"partial")
    kept = [
        assets / stored.asset_id / "blob",
        assets / stored.asset_id / "meta.json",
        artifacts / recent_id / "final.mp4",
    ]
    return Seeded(data_dir, old_ids, recent_id, stored, leftovers, kept)


@pytest.fixture(scope="module")
def server(seeded, retention_media):
    """One server for the start-up cleanup test and the retention test (a start costs 15-30 s on a loaded
    machine), in that order: started on the seeded data dir (alice's, as `tok-a`), in batches of SEEDED_BATCH, with
    carol's and dave's (`tok-c`, `tok-d`) asset retention of an hour and quota (`asset_quota`)."""
    env = {
        "VIDFORGE_SWEEP_BATCH": str(SEEDED_BATCH),
        "VIDFORGE_SWEEP_INTERVAL_S": "0.5",
        "VIDFORGE_ASSET_RETENTION_S": "3600",
        "VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL": str(asset_quota(retention_media)),
    }
    with ServerProcess(seeded.data_dir, env=env, tokens=TOKENS) as proc:
        yield proc


async def seed_registry(data_dir, old: int) -> tuple[list[str], str]:
    """`old` completed renders 30 days past, each with its video on disk, and one finished a minute ago."""
    now = time.time()
    clock = {"now": now - 30 * DAY_S}
    registry = TaskRegistry(
        Config(data_dir=str(data_dir), sweep_interval_s=3600).registry_settings(), lambda: clock["now"]
    )
    request = RenderRequest(source_asset_uri="vidforge://assets/a_" + "0" * 24, **RENDER)

    async def completed() -> str:
        task_id = (await registry.create("alice", request)).task.task_id
        video = data_dir / "artifacts" / task_id / "final.mp4"
        video.parent.mkdir(parents=True)
        video.write_bytes(b"\x00" * 64)
        artifact = Artifact(ext="mp4", size_bytes=64, duration_s=1.0, finished_at_ms=int(clock["now"] * 1000))
        await registry.finish(task_id, Succeeded(artifact=artifact))
        return task_id

    old_ids = [await completed() for _ in range(old)]
    clock["now"] = now - 60
    return old_ids, await completed()


def test_start_removes_crash_leftovers_and_the_sweep_deletes_in_batches_while_tasks_get_answers(server, seeded):
    assets, artifacts = seeded.data_dir / "assets", seeded.data_dir / "artifacts"
    old_ids, recent_id, stored, batch = seeded.old_ids, seeded.recent_id, seeded.stored, SEEDED_BATCH
    for path in seeded.leftovers:
        assert not path.exists(), path
    assert not (artifacts / "task_nosuchtask0000000000000").exists()
    assert not (assets / "a_3333333333333333cccccccc").exists()
    for path in seeded.kept:
        assert path.exists(), path

    wire = Wire(server.url, token="tok-a", tasks=True)
    answers = 0

    def swept() -> bool:
        nonlocal answers
        assert task_status(wire, recent_id)["status"] == "completed"  # every poll is answered
        answers += 1
        return not any((artifacts / task_id).exists() for task_id in old_ids)

    wait_until(swept, DEADLINE_S, interval=0.05, message="the expired renders to be swept")
    assert answers >= 1
    for task_id in old_ids[:: batch // 2]:
        assert "result" not in wire.task("tasks/get", task_id)  # the records went with the files
    download = httpx.get(f"{server.base}/artifacts/{recent_id}/final.mp4", headers={"Authorization": "Bearer tok-a"})
    assert download.status_code == 200 and download.content == b"\x00" * 64
    assert (assets / stored.asset_id / "meta.json").exists()


def test_retention_spares_assets_in_use_and_the_quota_refuses_until_a_deletion_frees_room(server, retention_media):
    clip, logo, spare = retention_media["clip"], retention_media["logo"], retention_media["spare"]
    quota = asset_quota(retention_media)
    # So the second clip stays refused after `spare` alone is deleted:
    assert os.path.getsize(clip) // 2 > os.path.getsize(spare)
    uris = {}
    for path in (clip, logo, spare):
        response = post_asset(server, open(path, "rb").read(), "tok-c", os.path.basename(path))
        assert response.status_code == 201, response.text
        uris[path] = response.json()["uri"]

    refused = post_asset(server, open(clip, "rb").read(), "tok-c", "again.mp4")
    assert refused.status_code == 413, refused.text
    error = refused.json()["error"]
    assert error["code"] == "asset_quota_exceeded" and error["temporary"] is False
    assert "VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL" in error["details"]["reason"]
    assert str(quota) in error["details"]["reason"]
    daves = post_asset(server, open(clip, "rb").read(), "tok-d", "clip.mp4")  # the quota is per principal
    assert daves.status_code == 201, daves.text

    wire = Wire(server.url, token="tok-c", tasks=True)
    watermark = {"image_asset_uri": uris[logo], "position": "bottom_right", "opacity": 0.5}
    task_id = create_render(wire, {"source_asset_uri": uris[clip], **RENDER, "watermark": watermark})
    poll_task(wire, task_id, lambda t: t["status"] == "input_required")  # holds both assets, indefinitely

    for path in (clip, logo, spare):  # all of carol's assets are now two hours past their retention
        backdate(asset_folder(server, uris[path]), 2 * 3600 + 3600)
    wait_until(lambda: not asset_folder(server, uris[spare]).exists(), DEADLINE_S, message="spare deleted")
    # The pass that deleted `spare` saw the other two expired as well: a render awaiting approval uses them.
    assert (asset_folder(server, uris[clip]) / "blob").exists()
    assert (asset_folder(server, uris[logo]) / "blob").exists()
    assert asset_folder(server, daves.json()["uri"]).exists()  # not past retention
    assert post_asset(server, open(clip, "rb").read(), "tok-c", "again.mp4").status_code == 413

    wire.task("tasks/cancel", task_id)
    poll_task(wire, task_id, lambda t: t["status"] == "cancelled")
    wait_until(lambda: not asset_folder(server, uris[clip]).exists(), DEADLINE_S, message="clip deleted")
    wait_until(lambda: not asset_folder(server, uris[logo]).exists(), DEADLINE_S, message="logo deleted")
    accepted = post_asset(server, open(clip, "rb").read(), "tok-c", "again.mp4")
    assert accepted.status_code == 201, accepted.text


@pytest.mark.anyio
async def test_a_sweep_pass_deletes_at_most_one_batch_and_the_registry_answers_during_it(tmp_path):
    data_dir = tmp_path / "data"
    old_ids, recent_id = await seed_registry(data_dir, 25)
    registry = TaskRegistry(Config(data_dir=str(data_dir), sweep_interval_s=3600, sweep_batch=10).registry_settings())
    deleted = []
    backlog = True
    while backlog:
        sweeping = asyncio.create_task(registry.sweep())
        await asyncio.sleep(0)  # the pass runs up to its first file work, in a thread
        assert not sweeping.done()
        assert (await registry.get("alice", recent_id)).status == "completed"  # answered meanwhile
        report = await sweeping
        deleted.append(report.tasks_deleted)
        backlog = report.backlog
        assert backlog == (report.tasks_deleted == 10)
    assert deleted == [10, 10, 5]
    assert not any((data_dir / "artifacts" / task_id).exists() for task_id in old_ids)
    assert (data_dir / "artifacts" / recent_id / "final.mp4").exists()


# -- a full disk ------------------------------------------------------------------------------------------------


def _on_small_disks(server: ServerProcess, sizes: dict[str, str]) -> None:
    """Run the server in its own user + mount namespace with a tmpfs of the given size on each data subfolder."""
    mounts = []
    for folder, size in sizes.items():
        (server.data_dir / folder).mkdir(parents=True, exist_ok=True)
        mounts.append(f"mount -t tmpfs -o size={size} tmpfs {server.data_dir / folder}")
    script = " && ".join(mounts) + ' && exec "$@"'
    server.prefix = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "vidforge"]


def _files_in_namespace(server: ServerProcess, folder: str) -> list[str]:
    """What the server itself sees under `folder` (its tmpfs is visible only inside its namespace)."""
    out = subprocess.run(
        [
            "nsenter",
            "-t",
            str(server.proc.pid),
            "-U",
            "-m",
            "--preserve-credentials",
            "find",
            str(server.data_dir / folder),
            "-mindepth",
            "1",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.split()


def test_a_full_disk_is_a_clear_temporary_error_and_leaves_nothing_half_written(tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=2)
    assert os.path.getsize(clip) < 200 * 1024
    server = ServerProcess(tmp_path / "data", tokens=TOKENS)
    _on_small_disks(server, {"assets": "256k", "artifacts": "4k"})
    server.start()
    try:
        refused = post_asset(server, os.urandom(512 * 1024), "tok-a", "big.mp4")
        assert refused.status_code == 507, refused.text
        error = refused.json()["error"]
        assert error["code"] == "storage_full" and error["temporary"] is True and error["retry_after_ms"] > 0
        assert int(refused.headers["Retry-After"]) > 0
        assert str(server.data_dir) not in refused.text
        assert _files_in_namespace(server, "assets") == []  # the partial upload is gone, nothing is visible
        stored = post_asset(server, open(clip, "rb").read(), "tok-a", "clip.mp4")  # so the room came back
        assert stored.status_code == 201, stored.text

        wire = Wire(server.url, token="tok-a", tasks=True)
        task_id = create_render(wire, {"source_asset_uri": stored.json()["uri"], **RENDER})
        poll_task(wire, task_id, lambda t: t["status"] in ("completed", "failed", "cancelled"))
        outcome = tool_outcome(wire, task_id)
        assert outcome["state"] == "failed", outcome
        assert outcome["error"]["code"] == "storage_full" and outcome["error"]["temporary"] is True, outcome
        assert str(server.data_dir) not in json.dumps(outcome)
        assert _files_in_namespace(server, "artifacts") == []  # no half-written video, no staging folder
    finally:
        server.kill()
