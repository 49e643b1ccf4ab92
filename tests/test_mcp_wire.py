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
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from tests.harness import PROTOCOL, REPO, ServerProcess, TOOL_NAMES, Wire, meta, validate, validate_response

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
    contract = json.loads((REPO.parent / "shared/design/000_7c3b4fd17160ea82.txt").read_text().split("```json")[4].split("```")[0])
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
    error = error_of(post(server, body, {"Mcp-Method": "tools/list", "MCP-Protocol-Version": "1900-01-01"}), 400, -32022)
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
    assert error["message"]  # a parse error says what went wrong


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


def _malformed(rng: random.Random, index: int) -> tuple[bytes, dict[str, str]]:
    methods = ["tools/list", "tools/call", "server/discover", "resources/read", "tasks/get", "tasks/update",
               "tasks/cancel", "subscriptions/listen", "initialize", "x" * rng.randint(0, 300)]
    method = rng.choice(methods)
    params: object = {"_meta": meta(tasks=rng.random() < 0.5)}
    mutation = index % 12
    if mutation == 0:
        params = rng.choice([None, [], "s", 5, {"_meta": None}, {"_meta": {"x": 1}}])
    elif mutation == 1:
        params = {**params, "name": rng.choice([None, 5, "", "vidforge_render_video", "\u0000"]),
                  "arguments": rng.choice([None, [], "x", {"source_asset_uri": {"a": []}}])}
    elif mutation == 2:
        params = {**params, "taskId": rng.choice([None, 7, "", "task_" + "a" * rng.randint(0, 500)]),
                  "inputResponses": rng.choice([None, [], {"k": None}, {"watermark-approval-1": {"action": 5}}])}
    elif mutation == 3:
        params = {**params, "uri": rng.choice([None, "", "vidforge://videos/../../etc/passwd/final.mp4",
                                              "vidforge://renders/x/watermark-preview.png", "file:///etc/passwd"])}
    elif mutation == 4:
        params = {**params, "notifications": rng.choice([None, 5, {"taskIds": "x"}, {"taskIds": [1, 2]}])}
    body: object = {"jsonrpc": rng.choice(["2.0", "1.0", None, 2]), "id": rng.choice([1, "a", None, [], {}, 1.5]),
                    "method": method, "params": params}
    raw = json.dumps(body).encode()
    if mutation == 5:
        raw = raw[: rng.randint(0, len(raw))]
    elif mutation == 6:
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
    elif mutation == 7:
        raw = json.dumps([body] * rng.randint(0, 3)).encode()
    headers = {
        "Accept": rng.choice(["application/json, text/event-stream", "application/json", "text/html", ""]),
        "Content-Type": rng.choice(["application/json", "text/plain", ""]),
        "MCP-Protocol-Version": rng.choice([PROTOCOL, PROTOCOL, "2025-06-18", "garbage", ""]),
        "Mcp-Method": rng.choice([method, "tools/list", "", "=?base64?!!?="]),
        "Mcp-Name": rng.choice(["", "vidforge_render_video", "=?base64?dGFza18x?=", "x" * 100]),
        "Authorization": "Bearer tok-alice",
    }
    if mutation == 8:
        headers.pop("MCP-Protocol-Version")
    if mutation == 9:
        headers.pop(rng.choice(["Accept", "Mcp-Method", "Mcp-Name"]))
    headers = {k: v for k, v in headers.items() if v != "" or rng.random() < 0.5}
    return raw, headers


def test_fuzz_malformed_requests(server):
    rng = random.Random(20261202)
    cases = [_malformed(rng, i) for i in range(2000)]

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
        assert response.status_code < 500, (response.status_code, response.text[:500], headers)
        if response.status_code >= 400:
            validate(response.json(), "core", "JSONRPCErrorResponse")
        elif response.status_code == 200:
            if response.headers.get("content-type", "").startswith("application/json"):
                body = response.json()
                if "error" in body:
                    validate_response("?", body)
                elif headers.get("MCP-Protocol-Version", "2025-03-26") in HANDSHAKE_PROTOCOL_VERSIONS:
                    # the 2025 route: a 2025 result, none of the 2026-07-28 additions
                    assert body["jsonrpc"] == "2.0" and "resultType" not in body["result"], body
                else:
                    validate(body, "core", "JSONRPCResultResponse")
    wire = Wire(server.url, token="tok-alice")
    assert wire.result("server/discover")["supportedVersions"] == [PROTOCOL]


def test_foreign_origin_is_refused(server):
    """streamable-http: a present, invalid Origin is answered 403 (DNS-rebinding protection on loopback)."""
    response = post(server, rpc("tools/list"), {"Mcp-Method": "tools/list", "Origin": "http://evil.example"})
    assert response.status_code == 403
    validate(response.json(), "core", "JSONRPCErrorResponse")
    ok = post(server, rpc("tools/list"), {"Mcp-Method": "tools/list", "Origin": server.base})
    assert ok.status_code == 200
