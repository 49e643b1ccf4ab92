"""Issue 7 items 1–2: every agent can connect — 2025-era clients on the same `/mcp`, and tasks clients
that omit `Mcp-Name` — against a real `vidforge serve` (Ray + Serve).

Clients nobody here wrote run as subprocesses in their own pinned environments (`make clients`): the
official Python SDK 1.x (2025-11-25 by default, 2025-06-18 pinned) on the contract §4 fallback path, and
FastMCP + fastmcp-tasks on the native task path. Raw httpx pins the legacy transport rules themselves. Each client
also imports its source from a link (issue 35: `vidforge_import_asset`, on its own path) and renders it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.harness import (
    PROTOCOL,
    REPO,
    TERMINAL,
    TOOL_NAMES,
    Wire,
    contact_sheet_of,
    meta,
    poll_task,
    upload,
    validate,
)
from tests.https_origin import Answer
from tests.media import decode_all, make_clip, make_watermark_png

pytestmark = pytest.mark.ray

TOKENS = {"tok-mcp1": "mcp1", "tok-fastmcp": "fastmcp", "tok-wire": "wire"}  # on the shared server (conftest.py)
CLIENTS = REPO / ".clients"
SCRIPTS = REPO / "tests" / "clients" / "python"
CLIENT_TIMEOUT_S = 600
LEGACY_VERSIONS = ["2025-11-25", "2025-06-18"]
MODERN_ONLY_KEYS = {"resultType", "ttlMs", "cacheScope"}


@pytest.fixture(scope="module")
def server(shared_server):
    return shared_server


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = tmp_path_factory.mktemp("media")
    return {
        "clip": make_clip(str(root / "clip.mp4"), seconds=2.0, width=320, height=180, audio=True),
        "logo": make_watermark_png(str(root / "logo.png"), w=64, h=32, rgba=(255, 0, 0, 255)),
    }


@pytest.fixture(scope="module")
def assets(server, media):
    return {(token, name): upload(server, media[name], token) for token in TOKENS for name in ("clip", "logo")}


def run_client(venv: str, script: str, *args: str) -> dict:
    """Run a client script in its own pinned environment; its last stdout line is the JSON report."""
    python = CLIENTS / venv / "bin" / "python"
    assert python.exists(), f"{python} missing: build it with `make {CLIENTS.name}/{venv}/.installed`"
    run = subprocess.run(
        [str(python), str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S
    )
    assert run.returncode == 0, f"{script} failed:\n{run.stderr[-6000:]}"
    return json.loads(run.stdout.strip().splitlines()[-1])


RENDER_CLIENTS = {"mcp1": ("mcp1_render.py", "tok-mcp1"), "fastmcp-tasks": ("fastmcp_tasks_render.py", "tok-fastmcp")}


def run_render_client(venv: str, server, assets, *args: str) -> dict:
    """A client's render script on the module's clip and logo, as that client's own principal."""
    script, token = RENDER_CLIENTS[venv]
    return run_client(venv, script, server.url, token, assets[(token, "clip")], assets[(token, "logo")], *args)


def modern_tools(server) -> list[dict]:
    """The tools a 2026-07-28 host that renders MCP Apps lists: what a 2025 client is shown (mcp_protocol.app_view)."""
    wire = Wire(server.url, token="tok-wire", ui=True)
    try:
        return wire.result("tools/list")["tools"]
    finally:
        wire.close()


def legacy_post(server, body, version: str | None, token="tok-wire", **headers) -> httpx.Response:
    """A POST as a 2025 client sends it: no `Mcp-Method`, and `MCP-Protocol-Version` only after initialize."""
    sent = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {token}",
        **headers,
    }
    if version is not None:
        sent["MCP-Protocol-Version"] = version
    return httpx.post(server.url, content=json.dumps(body), headers=sent, timeout=60)


def legacy_result(response: httpx.Response) -> dict:
    """A 2025 JSON response carrying a result with none of the 2026-07-28 additions."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "mcp-session-id" not in response.headers
    body = response.json()
    assert body["jsonrpc"] == "2.0" and "result" in body, body
    result = body["result"]
    assert not MODERN_ONLY_KEYS & set(result), result
    assert "io.modelcontextprotocol/serverInfo" not in result.get("_meta", {}), result
    return result


def error_of(response: httpx.Response, status: int, code: int) -> dict:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    validate(body, "core", "JSONRPCErrorResponse")
    assert body["error"]["code"] == code, body
    return body["error"]


def initialize(version: str, capabilities: dict | None = None) -> dict:
    params = {
        "protocolVersion": version,
        "capabilities": capabilities or {},
        "clientInfo": {"name": "raw-2025", "version": "1"},
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}


def request(method: str, params: dict | None = None, id_: int = 2) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or {}}


def render_args(assets, token: str) -> dict:
    return {
        "source_asset_uri": assets[(token, "clip")],
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": assets[(token, "logo")], "position": "bottom_right", "opacity": 0.6},
    }


# --- the 2025 transport rules, raw -------------------------------------------------------------------


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_initialize_handshake_is_stateless(server, version):
    """2025 lifecycle: the server answers the offered revision; 2025 streamable-http: a session id is a
    MAY, and this server mints none (any replica serves any request)."""
    result = legacy_result(legacy_post(server, initialize(version), version=None))
    assert result["protocolVersion"] == version
    assert result["serverInfo"]["name"] == "vidforge"
    assert "vidforge://capabilities" in result["instructions"]
    # No 2025-11-25 `tasks`; of the extensions, the render view's (MCP Apps) alone: the tasks one is 2026-07-28's.
    assert set(result["capabilities"]) == {"tools", "resources", "extensions"}
    assert result["capabilities"]["extensions"] == {"io.modelcontextprotocol/ui": {}}
    initialized = legacy_post(server, {"jsonrpc": "2.0", "method": "notifications/initialized"}, version)
    assert initialized.status_code == 202 and "mcp-session-id" not in initialized.headers
    # No session to find: a follow-up request lands on whichever replica and is served.
    tools = legacy_result(legacy_post(server, request("tools/list"), version))
    assert [t["name"] for t in tools["tools"]] == [t["name"] for t in modern_tools(server)]


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_discovery_is_the_same_surface_without_2026_fields(server, version):
    # As a 2026-07-28 host that renders MCP Apps sees it: a 2025 request is always shown the render view.
    modern = Wire(server.url, token="tok-wire", ui=True)
    try:
        for method, params in [
            ("tools/list", {}),
            ("resources/list", {}),
            ("resources/templates/list", {}),
            ("resources/read", {"uri": "vidforge://capabilities"}),
        ]:
            legacy = legacy_result(legacy_post(server, request(method, params), version))
            current = modern.result(method, params, name=params.get("uri"))
            assert legacy == {k: v for k, v in current.items() if k not in MODERN_ONLY_KEYS | {"_meta"}}, method
    finally:
        modern.close()


@pytest.mark.parametrize("verb, version", [("GET", "2025-11-25"), ("GET", "2025-06-18"), ("DELETE", "2025-11-25")])
def test_no_standalone_stream_and_no_session_to_delete(server, verb, version):
    """2025 streamable-http: GET MUST be an SSE stream or 405; DELETE MAY be 405. Both are 405 here."""
    headers = {
        "Accept": "text/event-stream",
        "MCP-Protocol-Version": version,
        "Authorization": "Bearer tok-wire",
        "Mcp-Session-Id": "never-minted",
    }
    response = httpx.request(verb, server.url, headers=headers, timeout=30)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_2026_body_on_the_2025_route_is_a_header_mismatch(server):
    """A body naming 2026-07-28 in `_meta` is never served as a 2025 request (streamable-http 2026-07-28:
    the header MUST equal the body version; absent → 400/-32020)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
    error = error_of(legacy_post(server, body, version=None), 400, -32020)
    assert error["message"] == "Header mismatch: MCP-Protocol-Version header is required"
    error = error_of(legacy_post(server, body, version="2025-11-25"), 400, -32020)
    assert "'2025-11-25'" in error["message"] and "'2026-07-28'" in error["message"]


def test_headerless_request_without_2026_envelope_is_a_2025_request(server):
    """2025-06-18 streamable-http: no `MCP-Protocol-Version` and no other way to tell → assume 2025-03-26."""
    tools = legacy_result(legacy_post(server, request("tools/list"), version=None))
    assert [tool["name"] for tool in tools["tools"]] == TOOL_NAMES


@pytest.mark.parametrize(
    "method", ["tasks/get", "tasks/update", "tasks/cancel", "subscriptions/listen", "server/discover"]
)
def test_2026_only_methods_are_unknown_on_2025(server, method):
    params = {"taskId": "task_x", "inputResponses": {}, "notifications": {}}
    response = legacy_post(server, request(method, params), "2025-11-25", **{"Mcp-Name": "task_x"})
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32601


def test_2025_tasks_capability_still_gets_the_fallback(server, assets):
    """A 2025-11-25 client declaring that revision's `tasks` (and even a task-augmented `tools/call`) gets
    contract §4's `status: "accepted"`: vidforge serves tasks only as the 2026 extension."""
    caps = {"tasks": {"requests": {"tools": {"call": {}}}, "cancel": {}, "list": {}}}
    legacy_result(legacy_post(server, initialize("2025-11-25", caps), version=None))
    # ... and even the 2026 capability key in `_meta`: only a 2026-07-28 request negotiates per request
    declared = {"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    params = {
        "name": "vidforge_render_video",
        "arguments": render_args(assets, "tok-wire"),
        "task": {"ttl": 60000},
        "_meta": declared,
    }
    result = legacy_result(legacy_post(server, request("tools/call", params), "2025-11-25"))
    assert result["isError"] is False
    accepted = result["structuredContent"]
    assert accepted["status"] == "accepted" and accepted["follow_up"]["tool"] == "vidforge_get_render_status"
    cancel = {"name": "vidforge_cancel_render", "arguments": {"render_id": accepted["render_id"]}}
    ack = legacy_result(legacy_post(server, request("tools/call", cancel, id_=3), "2025-11-25"))
    assert ack["structuredContent"]["acknowledged"] is True


# --- Mcp-Name on tasks/* (2026-07-28) ---------------------------------------------------------------


def test_mcp_name_absent_is_served_mismatched_is_refused(server, assets):
    wire = Wire(server.url, token="tok-wire", tasks=True)
    try:
        task_id = wire.tool("vidforge_render_video", render_args(assets, "tok-wire"))["taskId"]

        def post(method: str, name: str | None, **params) -> httpx.Response:
            headers = wire.headers(method, name)
            body = {
                "jsonrpc": "2.0",
                "id": 9,
                "method": method,
                "params": {"taskId": task_id, **params, "_meta": meta(tasks=True)},
            }
            return httpx.post(server.url, json=body, headers=headers, timeout=60)

        absent = post("tasks/get", None)
        assert absent.status_code == 200, absent.text
        validate(absent.json()["result"], "tasks", "GetTaskResult")
        assert absent.json()["result"]["taskId"] == task_id
        error = error_of(post("tasks/get", "task_other"), 400, -32020)
        assert "task_other" in error["message"]
        error_of(post("tasks/update", "task_other", inputResponses={}), 400, -32020)
        error_of(post("tasks/cancel", "task_other"), 400, -32020)
        cancelled = post("tasks/cancel", None)
        assert cancelled.status_code == 200 and cancelled.json()["result"]["resultType"] == "complete"
        final = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
        assert final["status"] == "cancelled", final
    finally:
        wire.close()


# --- real clients ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", LEGACY_VERSIONS)
def test_mcp1_client_renders_through_the_fallback(server, assets, tmp_path, version):
    video = tmp_path / "final.mp4"
    pin = [] if version == "2025-11-25" else ["--protocol-version", version]  # 2025-11-25: mcp 1.30's default
    report = run_render_client("mcp1", server, assets, "approve", str(video), *pin)

    assert report["initialize"]["protocolVersion"] == version
    posts = report["wire"]
    assert posts[0]["method"] == "initialize" and posts[0]["mcp_protocol_version"] is None
    assert {p["mcp_protocol_version"] for p in posts[1:]} == {version}
    assert not report["response_session_ids"] and not any(p["mcp_session_id"] for p in posts)
    assert all(p["http"] == "POST" for p in posts)
    assert report["tools"] == modern_tools(server)
    assert report["capabilities"]["server"]["name"] == "vidforge"
    assert "no_tasks" in report["capabilities"]["negotiated_capabilities"]["fallbacks"]

    accepted = report["accepted"]
    assert accepted["status"] == "accepted" and accepted["state"] in ("queued", "rendering")
    assert report["awaiting"]["follow_up"]["tool"] == "vidforge_approve_watermark"
    assert report["approve"]["approved"] is True and report["approve"]["replayed"] is False
    final = report["final"]
    assert final["state"] == "succeeded" and final["terminal"] is True and final["watermark_applied"] is True
    # Issue 37: the caller's metadata comes back unchanged, in the status and under vidforge's `_meta` key.
    assert final["metadata"] == {"order_id": "o-1842"}
    assert report["accepted_meta"]["com.vidforge/metadata"] == {"order_id": "o-1842"}
    assert report["video_mime"] == "video/mp4"
    contact_sheet_of(report["final_images"])  # the quality check's sheet, as this SDK hands image blocks over
    assert video.stat().st_size == final["size_bytes"]
    decoded = decode_all(str(video), keep="none")
    assert decoded.video_codec == "h264" and (decoded.width, decoded.height) == (1280, 720)
    assert decoded.frame_count == 60 and decoded.audio_codec == "aac"


def test_mcp1_client_cancels_through_the_fallback(server, assets, tmp_path):
    report = run_render_client(
        "mcp1", server, assets, "cancel", str(tmp_path / "unused.mp4"), "--protocol-version", "2025-06-18"
    )
    assert report["initialize"]["protocolVersion"] == "2025-06-18"
    assert report["cancel"]["acknowledged"] is True and report["cancel"]["state"] in ("cancelling", "cancelled")
    assert report["final"]["state"] == "cancelled" and report["final"]["terminal"] is True
    assert not (tmp_path / "unused.mp4").exists()


@pytest.mark.parametrize("decision", ["approve", "reject"])
def test_fastmcp_tasks_client_drives_the_native_task(server, assets, decision):
    report = run_render_client("fastmcp-tasks", server, assets, decision)

    assert report["created"]["resultType"] == "task" and report["created"]["status"] == "working"
    task_id = report["created"]["taskId"]
    # The SDK declares both elicitation modes, so the approval is asked in URL mode, at the review page.
    (elicitation,) = report["elicitations"]
    assert elicitation["mode"] == "url" and elicitation["url"].startswith(f"{server.base}/review/task_")
    task_posts = [p for p in report["wire"] if p["method"] in ("tasks/get", "tasks/update")]
    assert {p["method"] for p in task_posts} == {"tasks/get", "tasks/update"}
    assert all(p["mcp_name"] is None for p in task_posts), "the client omits Mcp-Name; the server serves it"
    assert {p["mcp_protocol_version"] for p in report["wire"]} == {PROTOCOL}
    final = report["final"]
    assert final["taskId"] == task_id and final["status"] == "completed"
    if decision == "approve":
        assert report["is_error"] is False
        assert report["structured_content"]["status"] == "completed"
        assert report["structured_content"]["watermark_applied"] is True
    else:
        assert report["is_error"] is True
        assert report["structured_content"]["code"] == "watermark_rejected"
        assert "top left" in report["structured_content"]["details"]["reason"]


# --- importing by URL (issue 35): the same clients, with the source given as a link -------------------------


@pytest.fixture(scope="module")
def import_url(media_origin, media) -> str:
    """The module's clip, served over HTTPS by the session's media origin (tests/conftest.py)."""
    media_origin.answers["/legacy-clients/clip.mp4"] = Answer(body=Path(media["clip"]).read_bytes())
    return media_origin.url("/legacy-clients/clip.mp4")


def check_imported(imported: dict, uploaded: str) -> None:
    assert imported["status"] == "completed" and imported["kind"] == "video", imported
    assert imported["asset_uri"].startswith("vidforge://assets/") and imported["asset_uri"] != uploaded
    assert (imported["width"], imported["height"], imported["filename"]) == (320, 180, "clip.mp4")
    assert imported["follow_up"]["tool"] == "vidforge_render_video"


def test_mcp1_client_imports_a_url_and_renders_it(server, assets, import_url, tmp_path):
    """Without tasks, the import call answers once the import has ended; its asset renders on the fallback path."""
    video = tmp_path / "final.mp4"
    report = run_render_client("mcp1", server, assets, "approve", str(video), "--import-url", import_url)
    check_imported(report["imported"], assets[("tok-mcp1", "clip")])
    assert [p["method"] for p in report["wire"]].count("tools/call") >= 3  # import, render, status polls, approve
    final = report["final"]
    assert final["state"] == "succeeded" and final["watermark_applied"] is True
    decoded = decode_all(str(video), keep="none")
    assert (decoded.width, decoded.height, decoded.frame_count) == (1280, 720, 60)


def test_fastmcp_tasks_client_imports_a_url_as_a_task_and_renders_it(server, assets, import_url):
    report = run_render_client("fastmcp-tasks", server, assets, "approve", "--import-url", import_url)
    created = report["import_created"]
    assert created["resultType"] == "task" and created["taskId"].startswith("import_")
    check_imported(report["imported"], assets[("tok-fastmcp", "clip")])
    assert report["is_error"] is False and report["structured_content"]["status"] == "completed"
    assert report["final"]["status"] == "completed"
