"""Issue 2: the MCP 2026-07-28 wire, the discovery surface and credentials — over real HTTP against a real
`vidforge serve` (Ray + Serve), with the official SDK client for happy paths and raw httpx for the rest.

Each wire rule (discovery and the tools contract, cache hints, header rules, versions, unknown methods, parse
errors, the body limit, argument validation, the malformed-request corpus, foreign origins) is checked one by
one in process by the fast lane (tests/test_fast_wire.py, the production `/mcp` stack); here
`test_the_wire_through_a_real_server` checks that a real server (its Serve replicas answering HTTP) answers a sample
of them alike, and the rest is what only a real server has: the SDK client, restarts, credentials, the CLI."""

from __future__ import annotations

import json

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.harness import PROTOCOL, TOOL_NAMES, Wire, meta, run_vidforge, validate

pytestmark = pytest.mark.ray

TOKENS = {"tok-wire-alice": "wire-alice"}  # on the session's shared server (tests/conftest.py)
ALICE = "tok-wire-alice"


@pytest.fixture(scope="module")
def server(shared_server):
    return shared_server


def sdk_client(server, token=ALICE) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return Client(streamable_http_client(server.url, http_client=http), mode=PROTOCOL, cache=None)


@pytest.mark.anyio
async def test_sdk_client_happy_paths(server):
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


def test_tools_list_is_byte_identical_across_calls_and_restarts(open_server):
    """On the session's unauthenticated server (tests/conftest.py), which this test restarts: a clean stop on
    SIGTERM, then a fresh Ray instance and a fresh Serve app on the same data dir and port (the modules after
    this one get the restarted server; a start costs 15-30 s, so no server of its own)."""
    wire = Wire(open_server.url)

    def raw() -> bytes:
        wire._id = 0  # the same request id each time, so the whole response can be compared
        return wire.request("tools/list").content

    first, second = raw(), raw()
    assert first == second
    assert open_server.stop() == 0, "vidforge serve must stop cleanly on SIGTERM"
    assert "vidforge: shutting down" in open_server.log_path.read_text()
    open_server.start()  # a fresh Ray instance, a fresh Serve app: the same bytes
    assert raw() == first


def post(server, body, headers=None, token=ALICE, method="POST"):
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


def test_the_wire_through_a_real_server(server):
    """A sample of the fast lane's wire rules, answered alike by a real server (uvicorn in its Serve replica)."""
    wire = Wire(server.url, token=ALICE)
    try:
        discover = wire.result("server/discover")  # schema-validated, as every Wire answer
        assert discover["supportedVersions"] == [PROTOCOL]
        assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "vidforge"
        assert [tool["name"] for tool in wire.result("tools/list")["tools"]] == TOOL_NAMES
        invalid = wire.tool("vidforge_render_video", {"source_asset_uri": 5, "output_format": "mp4"})
        assert invalid["isError"] is True and invalid["structuredContent"]["code"] == "invalid_argument"
    finally:
        wire.close()
    response = httpx.get(server.url, headers={"Authorization": f"Bearer {ALICE}"}, timeout=30)
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    error_of(post(server, rpc("tools/list"), {"Mcp-Method": "resources/list"}), 400, -32020)
    error_of(post(server, rpc("tasks/list"), {"Mcp-Method": "tasks/list"}), 404, -32601)
    parse = post(server, b"{not json", {"Mcp-Method": "tools/list"})
    assert error_of(parse, 400, -32700)["message"] == "Parse error" and "id" not in parse.json()
    big = rpc("tools/call", {"name": "vidforge_get_capabilities", "arguments": {"pad": "x" * (2 * 1024 * 1024)}})
    too_big = post(server, big, {"Mcp-Method": "tools/call", "Mcp-Name": "vidforge_get_capabilities"})
    assert too_big.status_code == 413 and "limit" in too_big.json()["error"]["message"]
    foreign = post(server, rpc("tools/list"), {"Mcp-Method": "tools/list", "Origin": "http://evil.example"})
    assert error_of(foreign, 403, -32600)["data"]["machine_code"] == "origin_not_allowed"


def test_credentials(server):
    error_of(post(server, rpc("tools/list"), {"Mcp-Method": "tools/list"}, token="wrong"), 401, -32600)
    response = httpx.post(server.url, json=rpc("tools/list"), headers={"MCP-Protocol-Version": PROTOCOL})
    assert response.status_code == 401
    assert response.json()["error"]["data"]["machine_code"] == "unauthorized"
    assert httpx.get(f"{server.base}/artifacts/task_x/final.mp4").status_code == 401


def test_refuses_non_loopback_bind_without_tokens(tmp_path):
    env = {"VIDFORGE_DATA_DIR": str(tmp_path)}
    run = run_vidforge("serve", "--host", "0.0.0.0", env=env, timeout=60)
    assert run.returncode == 2
    assert "VIDFORGE_TOKENS_FILE" in run.stderr
