"""Issue 4: the task lifecycle end to end — tasks extension, watermark approval, fallback tools,
idempotency, quotas, isolation, assets/artifacts, notifications and recovery — over real HTTP against a
real `vidforge serve`, plus the contract's eval fixtures cold start and first repair. (The other two need no render
and no Ray: the fast lane checks them on the production `/mcp` stack, in tests/test_fast_wire.py,
`test_forced_error_per_tool_carries_the_full_envelope` and `test_discovery_stays_under_the_documented_size_budget`.)"""

from __future__ import annotations

import base64
import json
import os

import httpx
import pytest

from tests.harness import (
    PROTOCOL,
    RENDER_DEADLINE_S,
    TERMINAL,
    ServerProcess,
    Wire,
    poll_status,
    poll_task,
    upload,
    validate,
    wait_until,
)
from tests.media import decode_all, make_clip, make_watermark_png

pytestmark = pytest.mark.ray

TOKENS = {"tok-alice": "alice", "tok-bob": "bob", "tok-carol": "carol"}  # also the shared server's (conftest.py)
LONG_CLIP_S = 60
LONG_FRAMES = LONG_CLIP_S * 30  # make_clip's 30 fps
# short_server's approval window, and its task TTL (from creation), which the expiry test waits out: it covers the
# preview (~1.3 s on the idle 2-core machine, a few seconds loaded) and the approval window before the approval times
# out, and the other test's unwatermarked render (~2 s), whose tasks/get must answer until it has completed.
APPROVAL_TIMEOUT_S = 3
TASK_TTL_MS = 15_000


@pytest.fixture(scope="module")
def server(shared_server):
    return shared_server


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = tmp_path_factory.mktemp("media")
    return {
        "clip": make_clip(str(root / "clip.mp4"), seconds=3.0, width=320, height=180, audio=True),
        # A minute of tiny frames: cheap to make, 1 800 frames of 720p to encode (~15 s on the idle 2-core machine),
        # so a render of it is still encoding long after the cancel tests catch it mid-way, within a second of its
        # first frame (no race with completion).
        "long": make_clip(str(root / "long.mp4"), seconds=LONG_CLIP_S, width=160, height=90, audio=True),
        "logo": make_watermark_png(str(root / "logo.png"), w=64, h=32, rgba=(255, 0, 0, 255)),
        "text": str(_write(root / "notes.txt", b"not an image")),
    }


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def assets(server, media):
    return {
        (who, name): upload(server, media[name], token)
        for who, token in (("alice", "tok-alice"), ("bob", "tok-bob"), ("carol", "tok-carol"))
        for name in ("clip", "long", "logo")
    }


def client(server, token="tok-alice", tasks=True, elicitation=True) -> Wire:
    return Wire(server.url, token=token, tasks=tasks, elicitation=elicitation)


def render_args(assets, who="alice", source="clip", watermark=True, fmt="mp4", **extra):
    args = {"source_asset_uri": assets[(who, source)], "output_format": fmt, "resolution": "720p", **extra}
    if watermark:
        args["watermark"] = {"image_asset_uri": assets[(who, "logo")], "position": "bottom_right", "opacity": 0.6}
    return args


def assert_watermarked_video(path: str, fmt: str, expect_frames: int, watermark: bool):
    decoded = decode_all(path, keep="rgb")
    assert decoded.video_codec == ("vp9" if fmt == "webm" else "h264")
    assert (decoded.width, decoded.height) == (1280, 720)
    assert decoded.frame_count == expect_frames
    assert decoded.audio_codec == ("opus" if fmt == "webm" else "aac")
    frame = decoded.frames[len(decoded.frames) // 2].astype(int)
    corner = frame[-100:, -200:]  # bottom_right
    red_excess = corner[..., 0] - (corner[..., 1] + corner[..., 2]) / 2
    opposite = frame[:100, :200]
    opposite_excess = opposite[..., 0] - (opposite[..., 1] + opposite[..., 2]) / 2
    if watermark:
        assert (red_excess > 60).sum() > 500, "watermark pixels missing in the bottom-right corner"
    assert (opposite_excess > 150).sum() < 50, "watermark pixels found where none was requested"


def test_task_path_with_elicitation_approve(server, assets, media, tmp_path):
    wire = client(server)
    args = render_args(assets)
    created = wire.tool("vidforge_render_video", args)
    assert created["resultType"] == "task" and created["status"] == "working"
    task_id = created["taskId"]
    assert task_id.startswith("task_") and len(task_id) >= 26
    immediately = wire.task("tasks/get", task_id)["result"]  # durable before the create answer
    assert immediately["taskId"] == task_id
    waiting = poll_task(wire, task_id, lambda t: t["status"] == "input_required")
    assert waiting["pollIntervalMs"] == 1500  # ×3 while awaiting approval
    ((key, request),) = waiting["inputRequests"].items()
    assert key == "watermark-approval-1"
    assert request["method"] == "elicitation/create" and request["params"]["mode"] == "form"
    assert f"vidforge://renders/{task_id}/watermark-preview.png" in waiting["statusMessage"]
    preview = wire.result(
        "resources/read",
        {"uri": f"vidforge://renders/{task_id}/watermark-preview.png"},
        name=f"vidforge://renders/{task_id}/watermark-preview.png",
    )
    assert base64.b64decode(preview["contents"][0]["blob"]).startswith(b"\x89PNG")
    # responses to keys that are not outstanding are ignored (ext-tasks SHOULD), with the same empty ack
    stray = wire.task(
        "tasks/update",
        task_id,
        inputResponses={"watermark-approval-9": {"action": "accept", "content": {"approved": False}}},
    )
    assert stray["result"]["resultType"] == "complete"
    assert wire.task("tasks/get", task_id)["result"]["status"] == "input_required"
    ack = wire.task("tasks/update", task_id, inputResponses={key: {"action": "accept", "content": {"approved": True}}})
    assert ack["result"]["resultType"] == "complete"
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed"
    result = done["result"]
    assert result["isError"] is False
    validate(result, "core", "CallToolResult")
    link = result["content"][1]
    assert link["type"] == "resource_link" and link["mimeType"] == "video/mp4"
    structured = result["structuredContent"]
    assert structured["video_uri"] == f"vidforge://videos/{task_id}/final.mp4" == link["uri"]
    assert structured["watermark_applied"] is True and structured["resolution"] == "720p"
    # resources/read inlines it (under the inline limit) and the HTTP download serves ranges
    read = wire.result("resources/read", {"uri": link["uri"]}, name=link["uri"])
    blob = base64.b64decode(read["contents"][0]["blob"])
    assert len(blob) == structured["size_bytes"]
    url = f"{server.base}/artifacts/{task_id}/final.mp4"
    headers = {"Authorization": "Bearer tok-alice"}
    assert httpx.get(url, headers=headers).content == blob
    ranged = httpx.get(url, headers={**headers, "Range": "bytes=0-99"})
    assert ranged.status_code == 206 and ranged.content == blob[:100]
    out = tmp_path / "final.mp4"
    out.write_bytes(blob)
    assert_watermarked_video(str(out), "mp4", decode_all(media["clip"]).frame_count, watermark=True)
    assert abs(structured["duration_seconds"] - 3.0) < 0.1
    # the task stays answerable and terminal never changes
    assert wire.task("tasks/cancel", task_id)["result"] == {"resultType": "complete", "_meta": ack["result"]["_meta"]}
    assert wire.task("tasks/get", task_id)["result"]["status"] == "completed"


def test_reject_then_first_repair(server, assets):
    wire = client(server)
    args = render_args(assets, idempotency_key="reject-then-repair")
    task_id = wire.tool("vidforge_render_video", args)["taskId"]
    waiting = poll_task(wire, task_id, lambda t: t["status"] == "input_required")
    key = next(iter(waiting["inputRequests"]))
    wire.task(
        "tasks/update",
        task_id,
        inputResponses={key: {"action": "accept", "content": {"approved": False, "note": "logo too large"}}},
    )
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is True
    envelope = done["result"]["structuredContent"]
    assert envelope["code"] == "watermark_rejected"
    assert "logo too large" in envelope["details"]["reason"]
    # without tasks, replaying the key answers what the render ended with
    replay = client(server, tasks=False).tool("vidforge_render_video", args)
    assert replay["isError"] is True and replay["structuredContent"]["code"] == "watermark_rejected"
    repair = envelope["repair"]
    assert repair["tool"] == "vidforge_render_video"
    assert repair["arguments"] == {k: v for k, v in args.items() if k != "idempotency_key"}
    # first repair: the repair arguments, re-called in one hop, start a render that succeeds
    again = wire.tool(repair["tool"], repair["arguments"])
    assert again["resultType"] == "task" and again["taskId"] != task_id
    poll_task(wire, again["taskId"], lambda t: t["status"] == "input_required")
    wire.tool("vidforge_approve_watermark", {"render_id": again["taskId"], "approved": True})
    final = poll_task(wire, again["taskId"], lambda t: t["status"] in TERMINAL)
    assert final["status"] == "completed" and final["result"]["isError"] is False


def test_task_path_without_elicitation_approves_with_tool(server, assets):
    wire = client(server, elicitation=False)
    task_id = wire.tool("vidforge_render_video", render_args(assets, fmt="webm"))["taskId"]
    waiting = poll_task(wire, task_id, lambda t: t["status"] == "input_required")
    assert waiting["inputRequests"] == {}  # no ElicitRequest the request did not declare
    assert "vidforge_approve_watermark" in waiting["statusMessage"] and task_id in waiting["statusMessage"]
    approved = wire.tool("vidforge_approve_watermark", {"render_id": task_id, "approved": True})
    assert approved["isError"] is False
    replay = wire.tool("vidforge_approve_watermark", {"render_id": task_id, "approved": True})
    assert replay["isError"] is False
    conflict = wire.tool("vidforge_approve_watermark", {"render_id": task_id, "approved": False})
    assert conflict["isError"] is True  # a decision cannot be changed, whatever the render is doing now
    assert conflict["structuredContent"]["code"] == "approval_already_recorded"
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["structuredContent"]["video_uri"].endswith(".webm")


def test_fallback_without_tasks_to_completion(server, assets, media, tmp_path):
    wire = client(server, tasks=False, elicitation=False)
    accepted = wire.tool("vidforge_render_video", render_args(assets, fmt="mov"))
    assert accepted["resultType"] == "complete" and accepted["isError"] is False
    sc = accepted["structuredContent"]
    assert sc["status"] == "accepted" and sc["state"] in ("queued", "rendering")
    assert sc["follow_up"] == {
        "next_step": "poll_render_status",
        "tool": "vidforge_get_render_status",
        "arguments": {"render_id": sc["render_id"]},
    }
    render_id = sc["render_id"]
    # without the extension the task methods are off limits (-32021), the tools are not
    error = wire.task("tasks/get", render_id)["error"]
    assert error["code"] == -32021
    assert error["data"]["requiredCapabilities"] == {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    waiting = poll_status(wire, render_id, lambda s: s["state"] == "awaiting_watermark_approval")
    assert waiting["follow_up"]["tool"] == "vidforge_approve_watermark"
    assert waiting["watermark_preview_uri"] == f"vidforge://renders/{render_id}/watermark-preview.png"
    assert waiting["terminal"] is False and waiting["terminal_states"] == ["succeeded", "failed", "cancelled"]
    wire.tool(**{"name": waiting["follow_up"]["tool"], "arguments": waiting["follow_up"]["arguments"]})
    done = poll_status(wire, render_id, lambda s: s["terminal"])
    assert done["state"] == "succeeded" and done["progress"] == 1.0
    assert done["video_uri"] == f"vidforge://videos/{render_id}/final.mov"
    response = httpx.get(
        f"{server.base}/artifacts/{render_id}/final.mov", headers={"Authorization": "Bearer tok-alice"}
    )
    out = tmp_path / "final.mov"
    out.write_bytes(response.content)
    assert_watermarked_video(str(out), "mov", decode_all(media["clip"]).frame_count, watermark=True)


def test_cancel_during_rendering_and_during_approval(server, assets):
    wire = client(server)
    running = wire.tool("vidforge_render_video", render_args(assets, source="long", watermark=False))["taskId"]
    mid_way = poll_task(
        wire, running, lambda t: t["status"] == "working" and "(frame " in t["statusMessage"], timeout=120
    )
    # caught while encoding, not at the end
    assert f"(frame {LONG_FRAMES}/{LONG_FRAMES})" not in mid_way["statusMessage"]
    assert wire.task("tasks/cancel", running)["result"]["resultType"] == "complete"
    assert poll_task(wire, running, lambda t: t["status"] in TERMINAL)["status"] == "cancelled"
    assert not os.path.exists(server.data_dir / "artifacts" / running)
    paused = wire.tool("vidforge_render_video", render_args(assets))["taskId"]
    poll_task(wire, paused, lambda t: t["status"] == "input_required")
    cancel = wire.tool("vidforge_cancel_render", {"render_id": paused})["structuredContent"]
    assert cancel["acknowledged"] is True and cancel["state"] == "cancelling"
    assert poll_task(wire, paused, lambda t: t["status"] in TERMINAL)["status"] == "cancelled"
    status = wire.tool("vidforge_get_render_status", {"render_id": paused})["structuredContent"]
    assert status["state"] == "cancelled" and status["terminal"] is True
    again = wire.tool("vidforge_cancel_render", {"render_id": paused})["structuredContent"]
    assert again == {**again, "acknowledged": True, "state": "cancelled"}


def test_idempotent_replay_and_principal_scoping(server, assets):
    alice = client(server)
    args = render_args(assets, watermark=True, idempotency_key="launch-2026-12-02")
    first = alice.tool("vidforge_render_video", args)["taskId"]
    assert alice.tool("vidforge_render_video", args)["taskId"] == first
    fallback = client(server, tasks=False).tool("vidforge_render_video", args)["structuredContent"]
    assert fallback["render_id"] == first
    bob = client(server, token="tok-bob")
    bob_args = render_args(assets, who="bob", watermark=True, idempotency_key="launch-2026-12-02")
    assert bob.tool("vidforge_render_video", bob_args)["taskId"] != first
    # bob sees alice's task exactly like an unknown one, on every surface
    foreign, unknown = bob.task("tasks/get", first)["error"], bob.task("tasks/get", "task_" + "z" * 27)["error"]
    assert foreign == unknown and foreign["code"] == -32602
    assert (
        bob.tool("vidforge_get_render_status", {"render_id": first})["structuredContent"]["code"] == "render_not_found"
    )
    assert bob.tool("vidforge_cancel_render", {"render_id": first})["structuredContent"]["code"] == "render_not_found"
    stolen = render_args(assets, who="bob", watermark=False, source_asset_uri=assets[("alice", "clip")])
    assert bob.tool("vidforge_render_video", stolen)["structuredContent"]["code"] == "source_not_found"
    for uri in ("vidforge://assets/../../registry.sqlite3", "vidforge://assets/a_../../x", "file:///etc/passwd"):
        traversal = bob.tool("vidforge_render_video", {**stolen, "source_asset_uri": uri})["structuredContent"]
        assert traversal["code"] == "source_not_found"
    alice.task("tasks/cancel", first)
    assert poll_task(alice, first, lambda t: t["status"] in TERMINAL)["status"] == "cancelled"
    replay = client(server, tasks=False).tool("vidforge_render_video", args)
    assert replay["isError"] is True and replay["structuredContent"]["code"] == "render_cancelled"
    assert "idempotency_key" not in replay["structuredContent"]["repair"]["arguments"]


def test_bad_sources_end_in_contract_errors(server, assets, media):
    wire = client(server)
    logo_as_source = render_args(assets, watermark=False, source_asset_uri=assets[("alice", "logo")])
    err = wire.tool("vidforge_render_video", logo_as_source)["structuredContent"]
    assert err["code"] == "unsupported_codec" and err["details"]["field"] == "source_asset_uri"
    clip_as_watermark = render_args(assets)
    clip_as_watermark["watermark"]["image_asset_uri"] = assets[("alice", "clip")]
    err = wire.tool("vidforge_render_video", clip_as_watermark)["structuredContent"]
    assert err["code"] == "unsupported_codec" and err["details"]["field"] == "watermark.image_asset_uri"
    for data in (b"", os.urandom(4096)):
        response = httpx.post(
            f"{server.base}/assets", content=data, headers={"Authorization": "Bearer tok-alice"}, timeout=120
        )  # the isolated parse starts a worker: seconds on a loaded machine
        assert response.status_code == 415
        assert response.json()["error"]["code"] == "unsupported_codec"


def read_sse(response: httpx.Response):
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield json.loads(line[len("data: ") :])


def test_subscriptions_listen_notifies_status_changes(server, assets):
    wire = client(server)
    task_id = wire.tool("vidforge_render_video", render_args(assets))["taskId"]
    params = {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        },
        "notifications": {"taskIds": [task_id, "task_unknown"]},
    }
    body = {"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": params}
    seen = []
    with httpx.Client(timeout=RENDER_DEADLINE_S) as http:
        with http.stream("POST", server.url, json=body, headers=wire.headers("subscriptions/listen")) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            for message in read_sse(response):
                seen.append(message)
                if message.get("method") == "notifications/tasks" and message["params"]["status"] == "input_required":
                    wire.tool("vidforge_approve_watermark", {"render_id": task_id, "approved": True})
                if "result" in message:
                    break
    ack = seen[0]
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"] == {"taskIds": [task_id]}
    assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
    notes = [m for m in seen if m.get("method") == "notifications/tasks"]
    for note in notes:
        validate(note, "tasks", "TaskStatusNotification")
        assert note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"
    statuses = [n["params"]["status"] for n in notes]
    assert "input_required" in statuses and statuses[-1] == "completed"
    assert seen[-1]["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"


def test_cold_start_with_only_discovery(server, assets):
    """Eval fixture: discover → list → render → poll, using only what discovery says."""
    wire = client(server, elicitation=False)
    discovered = wire.result("server/discover")
    assert "io.modelcontextprotocol/tasks" in discovered["capabilities"]["extensions"]
    tools = {t["name"]: t for t in wire.result("tools/list")["tools"]}
    render = tools["vidforge_render_video"]
    required = render["inputSchema"]["required"]
    args = {k: render_args(assets, watermark=False)[k] for k in required}
    created = wire.tool(render["name"], args)
    done = poll_task(wire, created["taskId"], lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is False
    assert done["result"]["structuredContent"]["watermark_applied"] is False


@pytest.fixture(scope="module")
def short_server(tmp_path_factory):
    env = {
        "VIDFORGE_POLL_INTERVAL_MS": "500",
        "VIDFORGE_APPROVAL_TIMEOUT_S": str(APPROVAL_TIMEOUT_S),
        "VIDFORGE_TASK_TTL_MS": str(TASK_TTL_MS),
        "VIDFORGE_MAX_CONCURRENT_RENDERS": "1",
        "VIDFORGE_SWEEP_INTERVAL_S": "0.5",
        "VIDFORGE_MAX_INLINE_RESOURCE_BYTES": "1000",
        "VIDFORGE_MAX_ASSET_BYTES": "3000000",
    }
    with ServerProcess(tmp_path_factory.mktemp("short") / "data", env=env, tokens=TOKENS) as proc:
        yield proc


def test_approval_timeout_quota_and_task_expiry(short_server, media):
    clip, logo = upload(short_server, media["clip"], "tok-alice"), upload(short_server, media["logo"], "tok-alice")
    wire = client(short_server)
    args = {
        "source_asset_uri": clip,
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": logo},
    }
    task_id = wire.tool("vidforge_render_video", args)["taskId"]
    # quota: one concurrent render per principal on this server
    over = wire.tool("vidforge_render_video", args)
    assert over["isError"] is True
    quota = over["structuredContent"]
    assert quota["code"] == "render_quota_exceeded" and quota["temporary"] is True
    assert quota["retry_after_ms"] >= 1000
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL, timeout=120)
    assert done["status"] == "completed" and done["result"]["structuredContent"]["code"] == "watermark_approval_timeout"
    assert done["result"]["structuredContent"]["repair"]["arguments"]["watermark"]["position"] == "bottom_right"

    # after ttlMs: task_expired on tasks/*, while the status tool keeps answering
    def expired():
        body = wire.task("tasks/get", task_id)
        return body if "error" in body else None

    error = wait_until(expired, 120, message="task expiry")["error"]
    assert error["code"] == -32602
    data = error["data"]
    assert data["machine_code"] == "task_expired" and data["details"]["value"] == task_id
    assert data["repair"] == {
        "next_step": "check_render_status",
        "tool": "vidforge_get_render_status",
        "arguments": {"render_id": task_id},
        "alternative": f"If the render completed, read vidforge://videos/{task_id}/final.mp4 directly.",
    }
    status = wire.tool("vidforge_get_render_status", {"render_id": task_id})["structuredContent"]
    assert status["state"] == "failed" and status["error"]["code"] == "watermark_approval_timeout"


def test_limits_isolation_and_download_fallback(short_server, media):
    clip = upload(short_server, media["clip"], "tok-alice")
    too_big = httpx.post(
        f"{short_server.base}/assets",
        content=os.urandom(3_500_000),
        headers={"Authorization": "Bearer tok-alice"},
        timeout=120,
    )
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "asset_too_large"
    wire = client(short_server)
    task_id = wire.tool(
        "vidforge_render_video", {"source_asset_uri": clip, "output_format": "mp4", "resolution": "720p"}
    )["taskId"]
    assert poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)["status"] == "completed"
    uri = f"vidforge://videos/{task_id}/final.mp4"
    error = wire.call("resources/read", {"uri": uri}, name=uri)["error"]
    assert error["code"] == -32602 and error["data"]["machine_code"] == "resource_too_large"
    assert f"/artifacts/{task_id}/final.mp4" in error["data"]["repair"]["alternative"]
    bob = client(short_server, token="tok-bob")
    foreign = bob.call("resources/read", {"uri": uri}, name=uri)["error"]
    assert foreign["code"] == -32602 and foreign["data"]["machine_code"] == "resource_not_found"
    url = f"{short_server.base}/artifacts/{task_id}/final.mp4"
    assert httpx.get(url, headers={"Authorization": "Bearer tok-bob"}).status_code == 404
    assert httpx.get(url, headers={"Authorization": "Bearer tok-alice"}).status_code == 200
    # the capability summary states this operator's TTL and approval window, not the defaults
    caps = wire.tool("vidforge_get_capabilities", {})["structuredContent"]
    assert caps["task_semantics"]["task_ttl_ms"] == TASK_TTL_MS
    assert f"{APPROVAL_TIMEOUT_S} seconds" in caps["negotiated_capabilities"]["fallbacks"]["approval_never_arrives"]
    # subscribing to tasks needs the extension on that request
    listen = client(short_server, tasks=False).call("subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
    assert listen["error"]["code"] == -32021
