"""Issue 8 item 5: an idempotency key means one request. Over real HTTP against a real `vidforge serve`:
the same key with the same validated arguments returns the same task (however the arguments are spelled),
with other arguments an `idempotency_conflict` naming the original task on both the task path and the
fallback path, and a replay answers before any asset check (the asset may be gone since)."""

from __future__ import annotations

import pytest

from tests.harness import Wire, poll_task, upload
from tests.media import make_clip, make_watermark_png

pytestmark = pytest.mark.ray

RENDER = "vidforge_render_video"
TOKEN = "tok-idem"
TOKENS = {TOKEN: "idem"}  # on the session's shared server (tests/conftest.py): keys are per principal


def test_idempotency_key_replays_one_request_and_refuses_another(shared_server, tmp_path):
    server = shared_server
    # Tiny frames but many of them: still rendering when the fallback replay below asks for it.
    clip = make_clip(str(tmp_path / "long.mp4"), seconds=120.0, width=160, height=90)
    source = upload(server, clip, TOKEN)
    logo = upload(server, make_watermark_png(str(tmp_path / "logo.png")), TOKEN)
    tasks, fallback = Wire(server.url, token=TOKEN, tasks=True), Wire(server.url, token=TOKEN)
    first = None
    try:
        args = {
            "idempotency_key": "launch-1",
            "source_asset_uri": source,
            "output_format": "mp4",
            "resolution": "720p",
            "watermark": {"image_asset_uri": logo},
        }
        first = tasks.tool(RENDER, args)["taskId"]
        poll_task(tasks, first, lambda t: "Rendering" in t["statusMessage"] or t["status"] != "working")

        # The same request, spelled differently: keys reordered, the server's defaults written out.
        same = {
            "watermark": {"opacity": 1.0, "position": "bottom_right", "image_asset_uri": logo},
            "resolution": "720p",
            "output_format": "mp4",
            "source_asset_uri": source,
            "idempotency_key": "launch-1",
        }
        assert tasks.tool(RENDER, same)["taskId"] == first

        for wire in (tasks, fallback):
            for other in ({**args, "resolution": "1080p"}, {k: v for k, v in args.items() if k != "watermark"}):
                result = wire.tool(RENDER, other)
                assert result["isError"] is True, result
                error = result["structuredContent"]
                assert error["code"] == "idempotency_conflict" and error["temporary"] is False
                assert error["details"]["field"] == "idempotency_key" and first in error["details"]["reason"]
                assert error["repair"]["tool"] == "vidforge_get_render_status"
                assert error["repair"]["arguments"] == {"render_id": first}

        # The source is gone for new renders (its metadata removed, as deletion or retention would); the
        # render in flight keeps the file it opened. A replay still answers with the task, on both paths.
        (server.data_dir / "assets" / source.rsplit("/", 1)[1] / "meta.json").unlink()
        fresh = tasks.tool(RENDER, {**args, "idempotency_key": "launch-2"})
        assert fresh["isError"] is True and fresh["structuredContent"]["code"] == "source_not_found"
        assert tasks.tool(RENDER, args)["taskId"] == first
        assert fallback.tool(RENDER, args)["structuredContent"]["render_id"] == first

        catalog = tasks.tool("vidforge_get_capabilities", {})["structuredContent"]["error_catalog"]
        assert {"code": "idempotency_conflict", "temporary": False} in [
            {"code": e["code"], "temporary": e["temporary"]} for e in catalog
        ]
    finally:
        if first is not None:  # the shared server goes on serving other modules: stop this long render
            tasks.task("tasks/cancel", first)
        tasks.close()
        fallback.close()
