"""vidforge with its media in an S3 bucket (VIDFORGE_STORAGE_URL), end to end against a real S3 REST server on
loopback (moto's standalone server): uploads stream into the bucket (limits enforced as they stream), a
watermarked render reads its sources from the bucket and writes its preview and video there, downloads and
resources/read come from the bucket, start-up removes the bucket's crash leftovers, and the retention sweep
deletes from it. The data dir holds the registry's state and nothing else."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import httpx
import pytest

from serve_app.launch._review_key import KEY_FILE
from tests.harness import TERMINAL, ServerProcess, Wire, poll_task, validate, wait_until
from tests.media import decode_all, make_clip, make_watermark_png

pytestmark = pytest.mark.ray

TOKENS = {"tok-a": "alice"}
PREFIX = "vf"
# Results and videos: long enough to check them first (~0.5 s on the idle 2-core machine, a few seconds loaded), short
# enough to see them swept: the test waits it out.
RETENTION_S = 10
DEADLINE_S = 240


def post_asset(server: ServerProcess, path: str) -> httpx.Response:
    with open(path, "rb") as fh:
        return httpx.post(
            f"{server.base}/assets",
            params={"filename": os.path.basename(path)},
            content=fh.read(),
            headers={"Authorization": "Bearer tok-a"},
            timeout=120,
        )


def media_files(data_dir) -> list[str]:
    """Every file under the data dir but the state: the registry's database and the review-link key."""
    found = []
    for folder, _, files in os.walk(data_dir):
        state = [name for name in files if name.startswith("registry.sqlite3") or name == KEY_FILE]
        found += [os.path.join(folder, name) for name in files if name not in state]
    return found


def test_render_with_media_in_a_bucket(s3_server, tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=2.5, width=320, height=180, audio=True)
    logo = make_watermark_png(str(tmp_path / "logo.png"), w=64, h=32, rgba=(255, 0, 0, 255))
    sizes = {path: os.path.getsize(path) for path in (clip, logo)}
    # Leftovers of a crashed server: an upload cut off before its metadata, a render the registry never held.
    orphan_blob = f"{PREFIX}/assets/a_{'1' * 24}/blob"
    orphan_video = f"{PREFIX}/artifacts/task_nosuchtask0000000000000/final.mp4"
    s3_server.put(orphan_blob, b"partial upload")
    s3_server.put(orphan_video, b"orphan video")
    env = {
        **s3_server.env,
        "VIDFORGE_STORAGE_URL": f"s3://{s3_server.bucket}/{PREFIX}",
        "VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL": str(sum(sizes.values()) + sizes[clip] // 2),
        "VIDFORGE_RESULT_RETENTION_S": str(RETENTION_S),
        "VIDFORGE_SWEEP_INTERVAL_S": "0.5",
        "VIDFORGE_POLL_INTERVAL_MS": "500",
        # The bytes through the server, from the bucket (downloads as redirects: tests/test_direct_transfers.py).
        "VIDFORGE_DIRECT_TRANSFERS": "off",
    }
    data_dir = tmp_path / "data"
    server = ServerProcess(data_dir, env=env, tokens=TOKENS).start()
    try:
        assert orphan_blob not in s3_server.object_keys() and orphan_video not in s3_server.object_keys()

        uploaded = {}
        for path in (clip, logo):
            response = post_asset(server, path)
            assert response.status_code == 201, response.text
            uploaded[path] = response.json()["uri"].removeprefix("vidforge://assets/")
            stored = s3_server.object_keys(f"{PREFIX}/assets/{uploaded[path]}/")
            assert stored == [f"{PREFIX}/assets/{uploaded[path]}/blob", f"{PREFIX}/assets/{uploaded[path]}/meta.json"]
            assert s3_server.get(stored[0]) == Path(path).read_bytes()
        refused = post_asset(server, clip)  # past the quota halfway through the stream
        assert refused.status_code == 413 and refused.json()["error"]["code"] == "asset_quota_exceeded"
        assert len(s3_server.object_keys(f"{PREFIX}/assets/")) == 4 and s3_server.open_multipart_uploads() == []

        wire = Wire(server.url, token="tok-a", tasks=True, elicitation=True)
        arguments = {
            "source_asset_uri": f"vidforge://assets/{uploaded[clip]}",
            "output_format": "mp4",
            "resolution": "720p",
            "watermark": {
                "image_asset_uri": f"vidforge://assets/{uploaded[logo]}",
                "position": "bottom_right",
                "opacity": 0.6,
            },
        }
        created = wire.tool("vidforge_render_video", arguments)
        task_id = created["taskId"]
        waiting = poll_task(wire, task_id, lambda t: t["status"] in ("input_required", *TERMINAL))
        assert waiting["status"] == "input_required", waiting
        preview_uri = f"vidforge://renders/{task_id}/watermark-preview.png"
        preview = wire.result("resources/read", {"uri": preview_uri}, name=preview_uri)
        preview_key = f"{PREFIX}/artifacts/{task_id}/watermark-preview.png"
        assert base64.b64decode(preview["contents"][0]["blob"]) == s3_server.get(preview_key)
        ((key, _),) = waiting["inputRequests"].items()
        wire.task("tasks/update", task_id, inputResponses={key: {"action": "accept", "content": {"approved": True}}})
        done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
        assert done["status"] == "completed" and done["result"]["isError"] is False, done
        validate(done["result"], "core", "CallToolResult")

        video_key = f"{PREFIX}/artifacts/{task_id}/final.mp4"
        source_frame_key = f"{PREFIX}/artifacts/{task_id}/source-frame.png"  # the review page's source frame
        poster_key = f"{PREFIX}/artifacts/{task_id}/poster.jpg"  # the watch page's poster
        sheet_key = f"{PREFIX}/artifacts/{task_id}/contact-sheet.jpg"  # the quality check's contact sheet
        stored = [sheet_key, video_key, poster_key, source_frame_key, preview_key]
        assert s3_server.object_keys(f"{PREFIX}/artifacts/") == stored
        video = s3_server.get(video_key)
        assert media_files(data_dir) == []  # the data dir holds the registry's state only
        (tmp_path / "final.mp4").write_bytes(video)
        decoded = decode_all(str(tmp_path / "final.mp4"))
        assert decoded.frame_count == 75 and (decoded.width, decoded.height) == (1280, 720)
        assert done["result"]["structuredContent"]["size_bytes"] == len(video)

        url = f"{server.base}/artifacts/{task_id}/final.mp4"
        auth = {"Authorization": "Bearer tok-a"}
        full = httpx.get(url, headers=auth, timeout=60)
        assert full.status_code == 200 and full.content == video
        assert full.headers["content-type"] == "video/mp4" and full.headers["accept-ranges"] == "bytes"
        ranged = httpx.get(url, headers={**auth, "Range": "bytes=1000-1999"}, timeout=60)
        assert ranged.status_code == 206 and ranged.content == video[1000:2000]
        assert ranged.headers["content-range"] == f"bytes 1000-1999/{len(video)}"
        tail = httpx.get(url, headers={**auth, "Range": "bytes=-100"}, timeout=60)
        assert tail.status_code == 206 and tail.content == video[-100:]
        beyond = httpx.get(url, headers={**auth, "Range": f"bytes={len(video)}-"}, timeout=60)
        assert beyond.status_code == 416 and beyond.headers["content-range"] == f"bytes */{len(video)}"
        assert httpx.get(url, timeout=60).status_code == 401  # the bearer check comes first

        video_uri = f"vidforge://videos/{task_id}/final.mp4"
        read = wire.result("resources/read", {"uri": video_uri}, name=video_uri)
        assert base64.b64decode(read["contents"][0]["blob"]) == video

        # Retention: the finished render goes with its files once its time is up; an asset past its own
        # retention (backdated in its metadata, as the sweep reads it) goes from the bucket too.
        meta_key = f"{PREFIX}/assets/{uploaded[logo]}/meta.json"
        meta = json.loads(s3_server.get(meta_key))
        meta["created_at"] -= 30 * 86_400
        s3_server.put(meta_key, json.dumps(meta).encode())
        wait_until(
            lambda: not s3_server.object_keys(f"{PREFIX}/assets/{uploaded[logo]}/"),
            DEADLINE_S,
            message="the expired asset to leave the bucket",
        )
        assert s3_server.object_keys(f"{PREFIX}/assets/{uploaded[clip]}/")  # not expired
        wait_until(
            lambda: not s3_server.object_keys(f"{PREFIX}/artifacts/"),
            DEADLINE_S,
            message="the expired render's files to leave the bucket",
        )
        assert "result" not in wire.task("tasks/get", task_id)  # the record went with them
        assert httpx.get(url, headers=auth, timeout=60).status_code == 404
        assert media_files(data_dir) == []
    finally:
        server.kill()
