"""Issue 2: the MCP 2026-07-28 wire, the discovery surface and credentials — over real HTTP against a real
`vidforge serve` (Ray + Serve), with the official SDK client for happy paths and raw httpx for the rest."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fuzz_requests import check_malformed_answer, malformed_request
from tests.harness import PROTOCOL, REPO, TOOL_NAMES, ServerProcess, Wire, meta, validate

pytestmark = pytest.mark.ray

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProcess(tmp_path_factory.mktemp("wire") / "data", tokens=TOKENS).start()
    yield proc
    proc.stop()


@pytest.fixture
def wire(server):
    client = Wire(server.url, token="tok-alice")
    yield client
    client.close()


def sdk_client(server, token="tok-alice") -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(server.url, http_client=http), mode=PROTOCOL, cache=None)


def test_sdk_client_happy_paths(server):
    async def scenario():
        async with sdk_client(server) as client:
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == TOOL_NAMES
            caps = await client.call_tool("vidforge_get_capabilities", {})
            assert caps.is_error is False
            assert caps.structured_content["server"]["name"] == "vidforge"
            resources = await client.list_resources()
            assert [str(r.uri) for r in resources.resources] == ["vidforge://capabilities"]
            templates = await client.list_resource_templates()
            assert {t.uri_template for t in templates.resource_templates} == {
                "vidforge://videos/{render_id}/final.{ext}",
                "vidforge://renders/{render_id}/watermark-preview.png",
            }
            read = await client.read_resource("vidforge://capabilities")
            summary = json.loads(read.contents[0].text)
            assert summary == caps.structured_content

    asyncio.run(scenario())


def test_discover_is_exactly_the_contract(wire):
    result = wire.result("server/discover")
    assert result["capabilities"] == {
        "tools": {"listChanged": True},
        "resources": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }
    assert result["ttlMs"] == 3600000 and result["cacheScope"] == "private"
    assert result["supportedVersions"] == [PROTOCOL]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "vidforge"


def test_cacheable_results_carry_hints(wire):
    for method, params in [
        ("tools/list", {}),
        ("resources/list", {}),
        ("resources/templates/list", {}),
        ("resources/read", {"uri": "vidforge://capabilities"}),
    ]:
        name = params.get("uri")
        result = wire.result(method, params, name=name)
        assert result["resultType"] == "complete"
        assert isinstance(result["ttlMs"], int) and result["cacheScope"] in ("public", "private")
        assert "io.modelcontextprotocol/serverInfo" in result["_meta"]


def test_tools_contract(wire):
    contract = json.loads(
        (REPO.parent / "shared/design/000_7c3b4fd17160ea82.txt").read_text().split("```json")[4].split("```")[0]
    )
    tools = wire.result("tools/list")["tools"]
    assert [t["name"] for t in tools] == TOOL_NAMES
    render = tools[0]
    assert render == contract, "vidforge_render_video must be exactly the contract's definition"
    for tool in tools:
        assert tool["inputSchema"]["additionalProperties"] is False
        assert tool["outputSchema"]["type"] == "object"
        assert set(tool["annotations"]) == {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
    caps = wire.tool("vidforge_get_capabilities", {})["structuredContent"]
    assert caps["server"]["fingerprint"].startswith("vidforge@1.0.0+")
    codes = {e["code"] for e in caps["error_catalog"]}
    assert {e["code"] for e in render["_meta"]["com.vidforge/errors"]} <= codes
    assert {"approval_already_recorded", "task_expired", "invalid_argument"} <= codes


def test_tools_list_is_byte_identical_across_calls_and_restarts(tmp_path):
    proc = ServerProcess(tmp_path / "data").start()
    try:
        wire = Wire(proc.url)

        def raw() -> bytes:
            wire._id = 0  # the same request id each time, so the whole response can be compared
            return wire.request("tools/list").content

        first, second = raw(), raw()
        assert first == second
        proc.restart()
        wire.url = proc.url
        assert raw() == first
        proc.restart()
        wire.url = proc.url
        assert raw() == first
        assert proc.stop() == 0, "vidforge serve must stop cleanly on SIGTERM"
        assert "vidforge: shutting down" in proc.log_path.read_text()
    finally:
        proc.stop()


def post(server, body, headers=None, token="tok-alice", method="POST"):
    base = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": PROTOCOL,
        "Authorization": f"Bearer {token}",
    }
    base.update(headers or {})
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.request(method, server.url, content=content, headers=base, timeout=60)


def rpc(method, params=None, id_=1, with_meta=True):
    params = dict(params or {})
    if with_meta:
        params["_meta"] = meta()
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def error_of(response, status, code):
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    validate(body, "core", "JSONRPCErrorResponse")
    assert body["error"]["code"] == code, body
    return body["error"]


@pytest.mark.parametrize("verb", ["GET", "DELETE", "PUT"])
def test_non_post_is_405(server, verb):
    response = httpx.request(verb, server.url, headers={"Authorization": "Bearer tok-alice"}, timeout=30)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_missing_meta_is_invalid_params(server):
    error_of(post(server, rpc("tools/list", with_meta=False), {"Mcp-Method": "tools/list"}), 400, -32602)


def test_header_rules(server):
    # a 2026-07-28 body (its `_meta` names the version) without MCP-Protocol-Version; a body that names no
    # version is a 2025-era request (tests/test_legacy_clients.py)
    response = httpx.post(
        server.url,
        json=rpc("tools/list"),
        headers={"Accept": "application/json, text/event-stream", "Authorization": "Bearer tok-alice"},
    )
    error_of(response, 400, -32020)
    # Mcp-Method disagrees with the body
    error_of(post(server, rpc("tools/list"), {"Mcp-Method": "resources/list"}), 400, -32020)
    # MCP-Protocol-Version disagrees with _meta
    body = rpc("tools/list")
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
    error_of(post(server, body, {"Mcp-Method": "tools/list", "MCP-Protocol-Version": "2099-01-01"}), 400, -32020)
    # Mcp-Name disagrees with the tool name
    call = rpc("tools/call", {"name": "vidforge_get_capabilities", "arguments": {}})
    error_of(post(server, call, {"Mcp-Method": "tools/call", "Mcp-Name": "other"}), 400, -32020)
    # Mcp-Name must equal taskId on tasks/* (the SDK does not check it; vidforge does)
    task = rpc("tasks/get", {"taskId": "task_abc"})
    task["params"]["_meta"] = meta(tasks=True)
    error_of(post(server, task, {"Mcp-Method": "tasks/get", "Mcp-Name": "task_other"}), 400, -32020)


def test_unsupported_version(server):
    body = rpc("tools/list")
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "1900-01-01"
    error = error_of(
        post(server, body, {"Mcp-Method": "tools/list", "MCP-Protocol-Version": "1900-01-01"}), 400, -32022
    )
    assert error["data"] == {"supported": [PROTOCOL], "requested": "1900-01-01"}


@pytest.mark.parametrize("method", ["tasks/result", "tasks/list", "initialize", "ping", "logging/setLevel", "nope"])
def test_unknown_methods_are_404(server, method):
    error_of(post(server, rpc(method), {"Mcp-Method": method}), 404, -32601)


def test_parse_error_and_batches(server):
    response = post(server, b"{not json", {"Mcp-Method": "tools/list"})
    error = error_of(response, 400, -32700)
    assert "id" not in response.json()  # 2026-07-28: an unknown id is omitted
    error_of(post(server, [rpc("tools/list")], {"Mcp-Method": "tools/list"}), 400, -32600)
    error_of(post(server, {"jsonrpc": "2.0", "id": 1, "result": {}}, {}), 400, -32600)
    assert error["message"] == "Parse error"


def test_body_over_limit_is_refused(server):
    big = rpc("tools/call", {"name": "vidforge_get_capabilities", "arguments": {"pad": "x" * (2 * 1024 * 1024)}})
    response = post(server, big, {"Mcp-Method": "tools/call", "Mcp-Name": "vidforge_get_capabilities"})
    assert response.status_code == 413
    assert "limit" in response.json()["error"]["message"]


def test_unknown_tool_is_jsonrpc_error(wire):
    body = wire.call("tools/call", {"name": "nope", "arguments": {}}, name="nope")
    assert body["error"]["code"] == -32602
    assert body["error"]["data"]["machine_code"] == "unknown_tool"


@pytest.mark.parametrize(
    "arguments, field",
    [
        ({"source_asset_uri": 5, "output_format": "mp4", "resolution": "720p"}, "source_asset_uri"),
        ({"source_asset_uri": "vidforge://assets/a_x", "output_format": "avi", "resolution": "720p"}, "output_format"),
        ({"source_asset_uri": "vidforge://assets/a_x", "output_format": "mp4"}, "resolution"),
        ({"source_asset_uri": "vidforge://assets/a_x", "output_format": "mp4", "resolution": "720p", "fps": 60}, "fps"),
        (
            {
                "source_asset_uri": "vidforge://assets/a_x",
                "output_format": "mp4",
                "resolution": "720p",
                "watermark": {"image_asset_uri": "vidforge://assets/a_y", "opacity": 2},
            },
            "watermark.opacity",
        ),
    ],
)
def test_argument_validation_is_a_tool_error(wire, arguments, field):
    result = wire.tool("vidforge_render_video", arguments)
    assert result["isError"] is True
    envelope = result["structuredContent"]
    assert envelope["code"] == "invalid_argument"
    assert envelope["details"]["field"] == field
    assert envelope["repair"]["tool"] == "vidforge_render_video"
    assert isinstance(envelope["repair"]["arguments"], dict)
    assert envelope["fingerprint"].startswith("vidforge@")
    assert result["content"][0]["type"] == "text"
    if field == "fps":  # a mechanical fix: the repair is literally callable
        assert "fps" not in envelope["repair"]["arguments"]


def test_credentials(server):
    error_of(post(server, rpc("tools/list"), {"Mcp-Method": "tools/list"}, token="wrong"), 401, -32600)
    response = httpx.post(server.url, json=rpc("tools/list"), headers={"MCP-Protocol-Version": PROTOCOL})
    assert response.status_code == 401
    assert response.json()["error"]["data"]["machine_code"] == "unauthorized"
    assert httpx.get(f"{server.base}/artifacts/task_x/final.mp4").status_code == 401


def test_refuses_non_loopback_bind_without_tokens(tmp_path):
    env = {"VIDFORGE_DATA_DIR": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-m", "serve_app.cli", "serve", "--host", "0.0.0.0"],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "VIDFORGE_TOKENS_FILE" in run.stderr


def test_fuzz_malformed_requests(server):
    rng = random.Random(20261202)
    cases = [malformed_request(rng, i) for i in range(2000)]

    async def run():
        limits = httpx.Limits(max_connections=8)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            semaphore = asyncio.Semaphore(8)

            async def one(raw, headers):
                async with semaphore:
                    response = await client.post(server.url, content=raw, headers=headers)
                    return response, headers

            return await asyncio.gather(*(one(raw, headers) for raw, headers in cases))

    for response, headers in asyncio.run(run()):
        check_malformed_answer(response, headers)
    wire = Wire(server.url, token="tok-alice")
    assert wire.result("server/discover")["supportedVersions"] == [PROTOCOL]


def test_foreign_origin_is_refused(server):
    """streamable-http: a present, invalid Origin is answered 403 (DNS-rebinding protection on loopback)."""
    response = post(server, rpc("tools/list"), {"Mcp-Method": "tools/list", "Origin": "http://evil.example"})
    assert response.status_code == 403
    validate(response.json(), "core", "JSONRPCErrorResponse")
    ok = post(server, rpc("tools/list"), {"Mcp-Method": "tools/list", "Origin": server.base})
    assert ok.status_code == 200
