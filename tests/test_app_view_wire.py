"""The render view (MCP Apps, `io.modelcontextprotocol/ui`) on the wire, in-process: who is shown it, the resource a
host reads, and the links its status calls carry. The view itself, in a real host and browser, is
tests/test_mcp_app_live.py."""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import httpx
import pytest
from mcp.server.apps import APP_MIME_TYPE, EXTENSION_ID

from mcp_protocol.app_view import UI_EXTENSION, VIEW_META_KEY, VIEW_MIME, VIEW_TOOLS, VIEW_URI
from mcp_protocol.http import with_handshake_extensions
from tests.fast_wire import FastWire, fast_wire
from tests.harness import meta
from tests.test_fast_wire import rpc, send

KEY = "k" * 48
BASE = "https://vf.example:8443"
STATUS = "vidforge_get_render_status"
LEGACY = "2025-11-25"


@pytest.fixture
def wire(tmp_path):
    with fast_wire(tmp_path, review_key=KEY, public_url=BASE + "/") as wire:
        yield wire


def result(wire: FastWire, method: str, params: dict | None = None, name: str | None = None, ui: bool = True):
    params = dict(params or {})
    if ui:
        params["_meta"] = meta(ui=True)
    return wire.result(method, params, name)


def legacy(wire: FastWire, method: str, params: dict | None = None) -> dict:
    """One request of a 2025-11-25 client (no per-request capabilities: the handshake's are not remembered)."""
    response = send(wire, rpc(method, params, with_meta=False), {"MCP-Protocol-Version": LEGACY})
    assert response.status_code == 200, response.text
    return response.json()["result"]


def render(wire: FastWire) -> str:
    """A render of alice's clip with her logo as its watermark (nothing renders: the test moves it along)."""
    media = wire.media
    arguments = {
        "source_asset_uri": media.video,
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": media.image, "position": "bottom_right", "opacity": 0.5},
    }
    created = wire.tool("vidforge_render_video", arguments)
    return created["structuredContent"]["render_id"]


def test_the_identifiers_are_the_extensions():
    assert (UI_EXTENSION, VIEW_MIME) == (EXTENSION_ID, APP_MIME_TYPE)


def test_a_request_without_the_extension_sees_no_view(wire):
    tools = wire.result("tools/list")["tools"]
    assert all("ui" not in tool.get("_meta", {}) for tool in tools)
    assert [r["uri"] for r in wire.result("resources/list")["resources"]] == ["vidforge://capabilities"]
    # Declared without the view's MIME type: a host that renders no HTML views.
    other = meta()
    other["io.modelcontextprotocol/clientCapabilities"]["extensions"] = {UI_EXTENSION: {"mimeTypes": ["text/x"]}}
    assert wire.result("tools/list", {"_meta": other})["tools"] == tools
    render_id = render(wire)
    status = wire.tool(STATUS, {"render_id": render_id})
    assert VIEW_META_KEY not in status.get("_meta", {})


def test_a_host_with_the_extension_finds_the_view_on_its_tools_and_reads_it(wire):
    listed = json.dumps(result(wire, "tools/list"), sort_keys=True)
    assert json.dumps(result(wire, "tools/list"), sort_keys=True) == listed  # deterministic
    tools = {tool["name"]: tool for tool in json.loads(listed)["tools"]}
    plain = {tool["name"]: tool for tool in wire.result("tools/list")["tools"]}
    for name, tool in tools.items():
        if name in VIEW_TOOLS:
            assert tool["_meta"].pop("ui") == {"resourceUri": VIEW_URI}
        assert {k: v for k, v in tool.items() if k != "_meta" or v} == plain[name]  # nothing else changes
    assert set(VIEW_TOOLS) == {"vidforge_render_video", STATUS, "vidforge_inspect_video"}
    resources = result(wire, "resources/list")["resources"]
    assert [r["uri"] for r in resources] == ["vidforge://capabilities", VIEW_URI]
    assert resources[1]["mimeType"] == VIEW_MIME
    contents = result(wire, "resources/read", {"uri": VIEW_URI}, VIEW_URI)["contents"]
    assert len(contents) == 1 and contents[0]["mimeType"] == "text/html;profile=mcp-app"
    # One origin, the server's public one, for everything the view loads.
    assert contents[0]["_meta"]["ui"]["csp"] == {"connectDomains": [BASE], "resourceDomains": [BASE]}
    html = contents[0]["text"]
    assert html.lstrip().lower().startswith("<!doctype html>")
    # Self-contained: its script and styles inline, nothing fetched to show it.
    assert not re.search(r"<script[^>]*\bsrc=", html, re.I)
    assert not re.search(r"<link[^>]*\bhref=", html, re.I)


def test_a_2025_client_is_shown_the_view(wire):
    hello = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "host", "version": "1"}}
    assert legacy(wire, "initialize", hello)["capabilities"]["extensions"] == {UI_EXTENSION: {}}
    tools = {tool["name"]: tool for tool in legacy(wire, "tools/list")["tools"]}
    assert all(("ui" in tools[name].get("_meta", {})) == (name in VIEW_TOOLS) for name in tools)
    assert VIEW_URI in [r["uri"] for r in legacy(wire, "resources/list")["resources"]]
    assert legacy(wire, "resources/read", {"uri": VIEW_URI})["contents"][0]["mimeType"] == VIEW_MIME


def test_the_status_names_the_views_figures_and_signed_links_as_the_render_goes(wire):
    render_id = render(wire)

    def shown() -> dict:
        return result(wire, "tools/call", {"name": STATUS, "arguments": {"render_id": render_id}}, STATUS)["_meta"][
            VIEW_META_KEY
        ]

    assert shown() == {"progress": {"phase": "queued", "percent": None, "fps": None, "eta_s": None}, "links": {}}
    wire.progress(render_id, 30, 120, fps=15.0)
    assert shown()["progress"] == {"phase": "rendering", "percent": 25, "fps": 15.0, "eta_s": 6.0}
    wire.ask_approval(render_id)
    links = shown()["links"]
    assert set(links) == {"preview", "source_frame"}
    for name, path in (("preview", "preview.png"), ("source_frame", "source.png")):
        assert links[name].startswith(f"{BASE}/review/{render_id}/{path}?cap=")
    # The preview link opens the stored preview; the source frame's too (404: this fast lane stores none).
    assert wire.http.get(urlsplit(links["preview"])._replace(scheme="", netloc="").geturl()).status_code == 200
    result(
        wire,
        "tools/call",
        {"name": "vidforge_approve_watermark", "arguments": {"render_id": render_id, "approved": True}},
        "vidforge_approve_watermark",
    )
    wire.succeed(render_id)
    finished = shown()
    assert finished["progress"]["percent"] == 100
    assert set(finished["links"]) == {"video", "download", "poster"}  # no quality check, no stream
    video = urlsplit(finished["links"]["video"])
    assert f"{video.scheme}://{video.netloc}" == BASE and video.path == f"/watch/{render_id}/video"
    ranged = wire.http.get(f"{video.path}?{video.query}", headers={"Range": "bytes=0-9"})
    assert ranged.status_code == 206 and len(ranged.content) == 10


def test_another_principals_render_gets_the_contracts_refusal_and_no_links(wire):
    render_id = render(wire)
    wire.ask_approval(render_id)
    params = {"name": STATUS, "arguments": {"render_id": render_id}, "_meta": meta(ui=True)}
    body = wire.post("tools/call", params, STATUS, token="tok-bob").json()
    refused = body["result"]
    assert refused["isError"] is True and refused["structuredContent"]["code"] == "render_not_found"
    assert VIEW_META_KEY not in refused.get("_meta", {}) and "cap=" not in json.dumps(refused)


def test_a_signed_read_passes_the_origin_guard_from_any_page_and_nothing_else_does(wire):
    render_id = render(wire)
    wire.succeed(render_id)
    link = urlsplit(
        result(wire, "tools/call", {"name": STATUS, "arguments": {"render_id": render_id}}, STATUS)["_meta"][
            VIEW_META_KEY
        ]["links"]["video"]
    )
    for origin in ("null", "https://chat.example"):  # a sandboxed view's frame, a page embedding a player
        response = wire.http.get(f"{link.path}?{link.query}", headers={"Origin": origin})
        assert response.status_code == 200, response.text
        refused = wire.http.get("/healthz", headers={"Origin": origin})
        assert refused.status_code == 403
    # The Host check still holds there.
    foreign = wire.http.get(f"{link.path}?{link.query}", headers={"Host": "evil.example"})
    assert foreign.status_code == 403
    assert isinstance(foreign, httpx.Response)


@pytest.mark.anyio
async def test_the_handshake_extensions_are_added_to_a_json_answer_only():
    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    for body in (b'{"jsonrpc":"2.0","id":1,"result":{"capabilities":{}}}', b"event: message\ndata: {}\n\n"):
        sent.clear()
        answer = with_handshake_extensions(send)
        await answer({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"1")]})
        await answer({"type": "http.response.body", "body": body})
        start, out = sent
        assert (b"content-length", str(len(out["body"])).encode()) in start["headers"]
        if body.startswith(b"{"):
            assert json.loads(out["body"])["result"]["capabilities"]["extensions"] == {UI_EXTENSION: {}}
        else:
            assert out["body"] == body  # not JSON: passed on as it is
