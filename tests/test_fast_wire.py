"""The fast lane: the MCP wire in-process (tests/fast_wire.py: the production `/mcp` stack through
`httpx.ASGITransport`, on the production render service over the in-process TaskRegistry and a local media store) —
header rules, unknown methods, argument validation, the asset checks, the fuzz corpus, and every render state as
both task surfaces show it.

Each answer is validated against the 2026-07-28 schemas, as on the Ray path (tests/harness.py). What needs Ray,
Serve, encoding or the file routes stays in the end-to-end modules."""

from __future__ import annotations

import json
import random
import re

import pytest

from mcp_protocol.domain import ApprovalTimedOut, Failed, Unsupported
from mcp_protocol.error_codes import ErrorCode
from mcp_protocol.errors import no_asset_at, over_time_limit
from tests.fast_wire import FastWire, Media, fast_wire
from tests.fuzz_requests import check_malformed_answer, malformed_request, run_fuzz
from tests.harness import PROTOCOL, REPO, TOOL_NAMES, meta, validate

UNKNOWN = "vidforge://assets/a_" + "1" * 24  # an asset nobody uploaded (where arguments fail before the lookup)
RENDER = "vidforge_render_video"
STATUS = "vidforge_get_render_status"
APPROVE = "vidforge_approve_watermark"
CANCEL = "vidforge_cancel_render"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    with fast_wire(tmp_path_factory.mktemp("fast"), max_concurrent_renders=1000) as wire:
        yield wire


@pytest.fixture(scope="module")
def media(wire) -> Media:
    return wire.media


def render_args(media: Media, watermark: bool = False, **extra) -> dict:
    args = {"source_asset_uri": media.video, "output_format": "mp4", "resolution": "720p", **extra}
    if watermark:
        args["watermark"] = {"image_asset_uri": media.image, "position": "top_left", "opacity": 0.5}
    return args


NOWHERE = Media(UNKNOWN, "vidforge://assets/a_" + "2" * 24)


def error_of(response, status: int, code: int) -> dict:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    validate(body, "core", "JSONRPCErrorResponse")
    assert body["error"]["code"] == code, body
    return body["error"]


def send(wire: FastWire, body, headers: dict[str, str], verb: str = "POST", token: str = "tok-alice"):
    base = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": PROTOCOL,
        "Authorization": f"Bearer {token}",
    }
    content = body if isinstance(body, bytes | str) else json.dumps(body)
    merged = {name: value for name, value in {**base, **headers}.items() if value is not None}  # None: left out
    return wire.http.request(verb, "/mcp", content=content, headers=merged)


def rpc(method: str, params: dict | None = None, with_meta: bool = True, tasks: bool = False) -> dict:
    params = dict(params or {})
    if with_meta:
        params["_meta"] = meta(tasks=tasks)
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


# -- discovery ----------------------------------------------------------------------------------------------


def test_discovery_is_the_contract(wire):
    discover = wire.result("server/discover")
    assert discover["capabilities"] == {
        "tools": {"listChanged": True},
        "resources": {},
        # The tasks extension the contract names, and the render view's (MCP Apps, issue 48).
        "extensions": {"io.modelcontextprotocol/tasks": {}, "io.modelcontextprotocol/ui": {}},
    }
    assert (discover["ttlMs"], discover["cacheScope"], discover["supportedVersions"]) == (
        3_600_000,
        "private",
        [PROTOCOL],
    )
    assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "vidforge"
    tools = wire.result("tools/list")["tools"]
    assert [tool["name"] for tool in tools] == TOOL_NAMES
    contract = json.loads(
        (REPO.parent / "shared/design/000_7c3b4fd17160ea82.txt").read_text().split("```json")[4].split("```")[0]
    )
    # The contract's render tool, word for word, but for one paragraph its description gains: what each
    # resolution means for a portrait, square or anamorphic source (issue 19), which the contract leaves open.
    served = tools[0]["description"].split("\n\n")
    added = [paragraph for paragraph in served if paragraph not in contract["description"].split("\n\n")]
    assert [p for p in served if p not in added] == contract["description"].split("\n\n")
    assert len(added) == 1 and added[0].startswith("Resolution: names the short side")
    # Optional arguments added to the contract's inputSchema: the caller's metadata and webhook URL (issue 37), and a
    # stream beside the file (issue 47); the rest is its own.
    served_input = tools[0]["inputSchema"]
    added_arguments = ("metadata", "notify_url", "streaming")
    assert set(served_input["properties"]) - set(contract["inputSchema"]["properties"]) == set(added_arguments)
    contract_properties = {k: v for k, v in served_input["properties"].items() if k not in added_arguments}
    assert {**served_input, "properties": contract_properties} == contract["inputSchema"]
    assert {**tools[0], "description": contract["description"], "inputSchema": contract["inputSchema"]} == contract
    for tool in tools:
        assert tool["inputSchema"]["additionalProperties"] is False and tool["outputSchema"]["type"] == "object"
        assert set(tool["annotations"]) == {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
    for method, params in [
        ("tools/list", {}),
        ("resources/list", {}),
        ("resources/templates/list", {}),
        ("resources/read", {"uri": "vidforge://capabilities"}),
    ]:
        result = wire.result(method, params, params.get("uri"))
        assert result["resultType"] == "complete" and "io.modelcontextprotocol/serverInfo" in result["_meta"]
        assert isinstance(result["ttlMs"], int) and result["cacheScope"] == "private"
    summary = wire.tool("vidforge_get_capabilities", {})["structuredContent"]
    assert summary["server"]["fingerprint"].startswith("vidforge@1.0.0+")
    codes = {entry["code"] for entry in summary["error_catalog"]}
    assert {entry["code"] for entry in tools[0]["_meta"]["com.vidforge/errors"]} <= codes
    assert {"approval_already_recorded", "task_expired", "invalid_argument"} <= codes
    read = wire.result("resources/read", {"uri": "vidforge://capabilities"}, "vidforge://capabilities")
    assert json.loads(read["contents"][0]["text"]) == summary


# -- transport and header rules -------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["GET", "DELETE", "PUT"])
def test_non_post_is_405(wire, verb):
    response = send(wire, b"", {}, verb=verb)
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    validate(response.json(), "core", "JSONRPCErrorResponse")


def test_header_rules(wire):
    error_of(send(wire, rpc("tools/list", with_meta=False), {"Mcp-Method": "tools/list"}), 400, -32602)
    no_version = {"Mcp-Method": "tools/list", "MCP-Protocol-Version": None}
    assert "required" in error_of(send(wire, rpc("tools/list"), no_version), 400, -32020)["message"]
    error_of(send(wire, rpc("tools/list"), {"Mcp-Method": "resources/list"}), 400, -32020)
    error_of(
        send(wire, rpc("tools/list"), {"Mcp-Method": "tools/list", "MCP-Protocol-Version": "2025-06-18"}), 400, -32020
    )
    call = rpc("tools/call", {"name": "vidforge_get_capabilities", "arguments": {}})
    error_of(send(wire, call, {"Mcp-Method": "tools/call", "Mcp-Name": "other"}), 400, -32020)
    task = rpc("tasks/get", {"taskId": "task_abc"}, tasks=True)
    error_of(send(wire, task, {"Mcp-Method": "tasks/get", "Mcp-Name": "task_other"}), 400, -32020)
    body = rpc("tools/list")
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "1900-01-01"
    error = error_of(send(wire, body, {"Mcp-Method": "tools/list", "MCP-Protocol-Version": "1900-01-01"}), 400, -32022)
    assert error["data"] == {"supported": [PROTOCOL], "requested": "1900-01-01"}


@pytest.mark.parametrize("method", ["tasks/result", "tasks/list", "initialize", "ping", "logging/setLevel", "nope"])
def test_unknown_methods_are_404(wire, method):
    error_of(send(wire, rpc(method), {"Mcp-Method": method}), 404, -32601)


def test_parse_errors_batches_and_the_body_limit(wire):
    response = send(wire, b"{not json", {"Mcp-Method": "tools/list"})
    assert error_of(response, 400, -32700)["message"] == "Parse error" and "id" not in response.json()
    error_of(send(wire, [rpc("tools/list")], {"Mcp-Method": "tools/list"}), 400, -32600)
    error_of(send(wire, {"jsonrpc": "2.0", "id": 1, "result": {}}, {}), 400, -32600)
    big = rpc("tools/call", {"name": "vidforge_get_capabilities", "arguments": {"pad": "x" * (2 * 1024 * 1024)}})
    response = send(wire, big, {"Mcp-Method": "tools/call", "Mcp-Name": "vidforge_get_capabilities"})
    assert response.status_code == 413 and response.json()["error"]["data"] == {"max_body_bytes": 1024 * 1024}
    assert "limit" in response.json()["error"]["message"]


def test_credentials_and_origin(wire):
    refused = send(wire, rpc("tools/list"), {"Mcp-Method": "tools/list"}, token="wrong")
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer ")
    assert error_of(refused, 401, -32600)["data"]["machine_code"] == "unauthorized"
    foreign = send(wire, rpc("tools/list"), {"Mcp-Method": "tools/list", "Origin": "http://evil.example"})
    assert error_of(foreign, 403, -32600)["data"]["machine_code"] == "origin_not_allowed"
    assert send(wire, rpc("tools/list"), {"Mcp-Method": "tools/list", "Origin": "http://127.0.0.1:8000"}).is_success


# -- tool calls -------------------------------------------------------------------------------------------


def test_unknown_tool_is_a_jsonrpc_error(wire):
    body = wire.call("tools/call", {"name": "nope", "arguments": {}}, name="nope")
    assert body["error"]["code"] == -32602 and body["error"]["data"]["machine_code"] == "unknown_tool"
    assert body["error"]["data"]["repair"]["tool"] == "vidforge_get_capabilities"


@pytest.mark.parametrize(
    "tool, arguments, field, step",
    [
        (
            RENDER,
            {"source_asset_uri": 5, "output_format": "mp4", "resolution": "720p"},
            "source_asset_uri",
            "fix_argument_value",
        ),
        (RENDER, render_args(NOWHERE, output_format="avi"), "output_format", "fix_argument_value"),
        (RENDER, {"source_asset_uri": UNKNOWN, "output_format": "mp4"}, "resolution", "supply_missing_argument"),
        (RENDER, {"output_format": "mp4"}, "source_asset_uri", "supply_missing_argument"),
        (RENDER, render_args(NOWHERE, fps=60), "fps", "drop_unknown_argument"),
        (
            RENDER,
            render_args(NOWHERE, watermark=True) | {"watermark": {"image_asset_uri": NOWHERE.image, "opacity": 2}},
            "watermark.opacity",
            "fix_argument_value",
        ),
        (
            RENDER,
            render_args(NOWHERE) | {"watermark": {"image_asset_uri": NOWHERE.image, "size": 3}},
            "watermark.size",
            "drop_unknown_argument",
        ),
        (STATUS, {}, "render_id", "supply_missing_argument"),
        (APPROVE, {"render_id": "task_x"}, "approved", "supply_missing_argument"),
    ],
)
def test_argument_validation_is_a_tool_error_with_a_callable_repair(wire, tool, arguments, field, step):
    result = wire.tool(tool, arguments)
    envelope = result["structuredContent"]
    assert result["isError"] is True and envelope["code"] == "invalid_argument"
    assert envelope["details"]["field"] == field and envelope["repair"]["next_step"] == step
    assert envelope["repair"]["tool"] == tool and envelope["temporary"] is False
    assert envelope["fingerprint"].startswith("vidforge@") and result["content"][0]["type"] == "text"
    if step == "drop_unknown_argument":  # a mechanical fix: the repair is literally callable
        fixed = wire.tool(tool, envelope["repair"]["arguments"])
        assert fixed["structuredContent"]["code"] == "source_not_found"  # past the arguments, to the asset lookup


def test_assets_are_checked_before_a_task_exists(wire, media):
    active = wire.run(wire.registry.count_active("alice"))
    missing = "vidforge://assets/a_" + "9" * 24
    error = wire.tool(RENDER, render_args(media, source_asset_uri=missing))["structuredContent"]
    assert (error["code"], error["details"]["field"]) == ("source_not_found", "source_asset_uri")
    assert error["details"]["reason"] == no_asset_at(missing)
    error = wire.tool(RENDER, render_args(media, source_asset_uri=media.image))["structuredContent"]
    assert (error["code"], error["details"]["field"]) == ("unsupported_codec", "source_asset_uri")
    assert error["details"]["reason"] == "the source asset is a still image, not a video"
    logo_a_video = render_args(media, watermark=True) | {"watermark": {"image_asset_uri": media.video}}
    error = wire.tool(RENDER, logo_a_video)["structuredContent"]
    assert (error["code"], error["details"]["field"]) == ("unsupported_codec", "watermark.image_asset_uri")
    bob = wire.tool(RENDER, render_args(media), token="tok-bob")["structuredContent"]
    assert bob["code"] == "source_not_found"  # alice's asset is not bob's
    assert wire.run(wire.registry.count_active("alice")) == active  # no task was created for any of them


def test_media_over_a_limit_is_refused_from_the_facts_stored_at_upload(tmp_path):
    """A limit lowered since the upload refuses the render before a task exists, naming the limit (the production
    check of the stored facts: no file is read again)."""
    with fast_wire(tmp_path) as wire:
        media = wire.media  # a 2 s clip, within the limits of its upload
    with fast_wire(tmp_path, max_source_duration_s=1) as wire:  # the server restarted with a lower limit
        error = wire.tool(RENDER, render_args(media))["structuredContent"]
        assert (error["code"], error["details"]["field"]) == ("media_limit_exceeded", "source_asset_uri")
        assert "VIDFORGE_MAX_SOURCE_DURATION_S" in error["details"]["reason"]
        assert wire.run(wire.registry.count_active("alice")) == 0


# -- the fallback surface (no tasks extension) --------------------------------------------------------------


def test_fallback_render_from_accepted_to_succeeded(wire, media):
    accepted = wire.tool(RENDER, render_args(media))["structuredContent"]
    render_id = accepted["render_id"]
    assert (accepted["status"], accepted["state"], accepted["poll_after_ms"]) == ("accepted", "queued", 500)
    assert ISO.match(accepted["expires_at"]) and accepted["follow_up"]["tool"] == STATUS
    wire.progress(render_id, 30, 90, fps=45.0)
    working = wire.tool(STATUS, {"render_id": render_id})["structuredContent"]
    assert (working["state"], working["terminal"], working["progress"]) == ("rendering", False, 0.3333)
    assert working["status_message"].startswith("Rendering: 33% (frame 30/90), encoding at 45.0 fps")
    wire.succeed(render_id, data=b"\x00" * 100, duration_s=3.0004)
    done = wire.tool(STATUS, {"render_id": render_id})["structuredContent"]
    assert (done["state"], done["terminal"], done["poll_after_ms"], done["progress"]) == ("succeeded", True, 0, 1.0)
    assert done["video_uri"] == f"vidforge://videos/{render_id}/final.mp4"
    assert (done["duration_seconds"], done["size_bytes"], done["watermark_applied"]) == (3.0, 100, False)
    assert done["terminal_states"] == ["succeeded", "failed", "cancelled"] and "follow_up" not in done
    video = wire.result("resources/read", {"uri": done["video_uri"]}, done["video_uri"])["contents"][0]
    assert video["mimeType"] == "video/mp4" and video["blob"] == "AAAA" * 33 + "AA=="
    assert wire.tool(APPROVE, {"render_id": render_id, "approved": True})["structuredContent"]["code"] == (
        "approval_not_pending"
    )


def test_fallback_approval_rejection_and_replays(wire, media):
    render_id = wire.tool(RENDER, render_args(media, watermark=True, idempotency_key="fb-1"))["structuredContent"][
        "render_id"
    ]
    wire.ask_approval(render_id)
    waiting = wire.tool(STATUS, {"render_id": render_id})["structuredContent"]
    assert waiting["state"] == "awaiting_watermark_approval"
    assert waiting["status_message"].startswith("Waiting for watermark approval; times out ")
    assert waiting["watermark_preview_uri"] == f"vidforge://renders/{render_id}/watermark-preview.png"
    assert waiting["follow_up"]["tool"] == APPROVE
    rejected = wire.tool(APPROVE, {"render_id": render_id, "approved": False, "note": "smaller"})["structuredContent"]
    assert (rejected["state"], rejected["replayed"]) == ("failed", False)
    status = wire.tool(STATUS, {"render_id": render_id})["structuredContent"]
    assert status["state"] == "failed" and status["error"]["code"] == "watermark_rejected"
    assert status["error"]["details"]["reason"] == "User note: 'smaller'."
    assert status["error"]["repair"]["arguments"] == render_args(media, watermark=True)  # the original call, no key
    again = wire.tool(APPROVE, {"render_id": render_id, "approved": False})["structuredContent"]
    assert again["replayed"] is True
    conflict = wire.tool(APPROVE, {"render_id": render_id, "approved": True})["structuredContent"]
    assert conflict["code"] == "approval_already_recorded"
    replay = wire.tool(RENDER, render_args(media, watermark=True, idempotency_key="fb-1"))  # answers what it ended with
    assert replay["isError"] is True and replay["structuredContent"] == status["error"]
    other = wire.tool(RENDER, render_args(media, idempotency_key="fb-1"))["structuredContent"]
    assert other["code"] == "idempotency_conflict" and other["repair"]["arguments"] == {"render_id": render_id}


def test_fallback_cancel_and_its_replay(wire, media):
    render_id = wire.tool(RENDER, render_args(media, idempotency_key="fb-cancel"))["structuredContent"]["render_id"]
    cancelled = wire.tool(CANCEL, {"render_id": render_id})["structuredContent"]
    assert (cancelled["acknowledged"], cancelled["state"]) == (True, "cancelling")
    wire.apply_cancel(render_id)  # the supervisor's part
    assert wire.tool(STATUS, {"render_id": render_id})["structuredContent"]["state"] == "cancelled"
    assert wire.tool(CANCEL, {"render_id": render_id})["structuredContent"]["state"] == "cancelled"
    replay = wire.tool(RENDER, render_args(media, idempotency_key="fb-cancel"))["structuredContent"]
    assert replay["code"] == "render_cancelled" and "24 hours" in replay["details"]["reason"]
    assert replay["repair"]["arguments"] == render_args(media)
    for tool in (STATUS, CANCEL):
        foreign = wire.tool(tool, {"render_id": render_id}, token="tok-bob")["structuredContent"]
        assert foreign["code"] == "render_not_found" and "7-day retention" in foreign["details"]["reason"]


@pytest.mark.parametrize(
    "end, code, temporary",
    [
        (
            Unsupported(code=ErrorCode.MEDIA_LIMIT_EXCEEDED, field="source_asset_uri", reason="too long"),
            "media_limit_exceeded",
            False,
        ),
        (
            Unsupported(code=ErrorCode.SOURCE_NOT_FOUND, field="source_asset_uri", reason=no_asset_at(UNKNOWN)),
            "source_not_found",
            False,
        ),
        (
            Unsupported(code=ErrorCode.UNSUPPORTED_CODEC, field="source_asset_uri", reason="no video stream"),
            "unsupported_codec",
            False,
        ),
        (Failed(code=ErrorCode.RENDER_FAILED, reason="RuntimeError: boom"), "render_failed", True),
        (Failed(code=ErrorCode.RENDER_TIMEOUT, reason=over_time_limit(30)), "render_timeout", False),
        (Failed(code=ErrorCode.STORAGE_FULL, reason="full"), "storage_full", True),
        (ApprovalTimedOut(timeout_s=90), "watermark_approval_timeout", False),
    ],
)
def test_every_failed_end_reads_the_same_on_both_surfaces(wire, media, end, code, temporary):
    task_id = wire.tool(RENDER, render_args(media), tasks=True)["taskId"]
    wire.end(task_id, end)
    task = wire.task("tasks/get", task_id)["result"]
    status = wire.tool(STATUS, {"render_id": task_id})["structuredContent"]
    assert task["status"] == "completed" and task["result"]["isError"] is True
    envelope = task["result"]["structuredContent"]
    assert envelope == status["error"]  # one stored end, one envelope, request_id included
    assert (envelope["code"], envelope["temporary"], envelope["request_id"]) == (code, temporary, end.request_id)
    assert status["state"] == "failed" and status["terminal"] is True
    assert wire.task("tasks/get", task_id)["result"] == task  # built again on each read, identically


# -- the task surface ---------------------------------------------------------------------------------------


def test_task_path_with_form_elicitation(wire, media):
    created = wire.tool(RENDER, render_args(media, watermark=True), tasks=True, elicitation=True)
    task_id = created["taskId"]
    assert (created["resultType"], created["status"], created["pollIntervalMs"]) == ("task", "working", 500)
    wire.ask_approval(task_id)
    waiting = wire.task("tasks/get", task_id, elicitation=True)["result"]
    assert (waiting["status"], waiting["pollIntervalMs"]) == ("input_required", 1500)
    ((key, request),) = waiting["inputRequests"].items()
    assert key == "watermark-approval-1" and request["params"]["mode"] == "form"
    assert "(top_left, opacity 0.5)" in request["params"]["message"]
    assert waiting["statusMessage"].endswith("Unanswered approvals time out after 30 minutes.")
    without_form = wire.task("tasks/get", task_id)["result"]
    assert without_form["inputRequests"] == {} and f"render_id: '{task_id}'" in without_form["statusMessage"]
    preview_uri = f"vidforge://renders/{task_id}/watermark-preview.png"
    assert wire.result("resources/read", {"uri": preview_uri}, preview_uri)["contents"][0]["mimeType"] == "image/png"
    stray = {"watermark-approval-9": {"action": "accept", "content": {"approved": False}}}
    assert wire.task("tasks/update", task_id, params={"inputResponses": stray})["result"]["resultType"] == "complete"
    assert wire.task("tasks/get", task_id)["result"]["status"] == "input_required"  # ignored: not outstanding
    accept = {key: {"action": "accept", "content": {"approved": True}}}
    wire.task("tasks/update", task_id, params={"inputResponses": accept})
    resumed = wire.task("tasks/get", task_id)["result"]
    assert (resumed["status"], resumed["pollIntervalMs"]) == ("working", 500)
    wire.succeed(task_id)
    done = wire.task("tasks/get", task_id)["result"]
    assert done["status"] == "completed" and done["statusMessage"] == "Render complete."
    result = done["result"]
    assert result["isError"] is False and result["structuredContent"]["watermark_applied"] is True
    link = result["content"][1]
    assert link["type"] == "resource_link" and link["description"].endswith("with approved watermark; retained 7 days.")


def test_task_cancel_decline_and_foreign_ids(wire, media):
    task_id = wire.tool(RENDER, render_args(media, watermark=True), tasks=True)["taskId"]
    wire.ask_approval(task_id)
    declined = {"watermark-approval-1": {"action": "decline"}}
    wire.task("tasks/update", task_id, params={"inputResponses": declined})
    done = wire.task("tasks/get", task_id)["result"]["result"]
    assert done["structuredContent"]["code"] == "watermark_rejected"
    assert done["content"][0]["text"].startswith("User rejected the watermark ('User declined the approval form.')")
    other = wire.tool(RENDER, render_args(media), tasks=True)["taskId"]
    wire.task("tasks/cancel", other)
    wire.apply_cancel(other)
    assert wire.task("tasks/get", other)["result"]["status"] == "cancelled"
    for method in ("tasks/get", "tasks/cancel"):
        foreign = wire.task(method, task_id, token="tok-bob")["error"]
        assert foreign == {"code": -32602, "message": "Failed to retrieve task: Task not found"}
    missing_capability = wire.call("tasks/get", {"taskId": task_id}, task_id)["error"]
    assert missing_capability["code"] == -32021


def test_subscriptions_listen_streams_each_change_then_the_result(wire, media):
    task_id = wire.tool(RENDER, render_args(media), tasks=True)["taskId"]
    params = {"_meta": meta(tasks=True), "notifications": {"taskIds": [task_id, "task_unknown"]}}
    body = {"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": params}
    with wire.stream(body, wire.headers("subscriptions/listen")) as stream:
        # The acknowledgement follows the stream's look-up of its tasks: each change from here on is one to send.
        events = [stream.next_event()]
        wire.progress(task_id, 10, 90, fps=30.0)
        wire.succeed(task_id)
        events += stream.rest()
    assert stream.status == 200
    assert events[0]["method"] == "notifications/subscriptions/acknowledged"
    assert events[0]["params"]["notifications"] == {"taskIds": [task_id]}
    tasks = [event["params"] for event in events if event.get("method") == "notifications/tasks"]
    assert tasks[-1]["status"] == "completed" and tasks[-1]["result"]["isError"] is False
    assert tasks[0]["status"] == "working" and tasks[0]["statusMessage"].startswith("Rendering: 11% (frame 10/90)")
    assert all(task["_meta"] == events[0]["params"]["_meta"] for task in tasks)  # the subscription id
    assert "result" in events[-1]


# -- configured limits -------------------------------------------------------------------------------------


def test_configured_limits_and_durations(tmp_path):
    with fast_wire(
        tmp_path,
        max_concurrent_renders=1,
        task_ttl_ms=1,
        max_inline_resource_bytes=10,
        max_listen_task_ids=2,
        result_retention_s=2 * 86_400,
        approval_timeout_s=90,
    ) as wire:
        media = wire.media
        task_id = wire.tool(RENDER, render_args(media), tasks=True)["taskId"]
        quota = wire.tool(RENDER, render_args(media))["structuredContent"]
        assert (quota["code"], quota["temporary"], quota["retry_after_ms"]) == ("render_quota_exceeded", True, 1000)
        expired = wire.task("tasks/get", task_id)["error"]
        assert (expired["code"], expired["message"]) == (-32602, "Unknown or expired task.")
        assert expired["data"]["machine_code"] == "task_expired" and expired["data"]["details"]["value"] == task_id
        assert expired["data"]["human_message"].endswith("remain reachable for 2 days.")
        wire.succeed(task_id)
        uri = f"vidforge://videos/{task_id}/final.mp4"
        too_large = wire.call("resources/read", {"uri": uri}, uri)["error"]
        assert too_large["data"]["machine_code"] == "resource_too_large" and too_large["data"]["uri"] == uri
        listen = {"_meta": meta(tasks=True), "notifications": {"taskIds": ["a", "b", "c"]}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": listen}
        too_many = error_of(send(wire, body, {"Mcp-Method": "subscriptions/listen"}), 400, -32602)
        assert too_many["data"]["machine_code"] == "too_many_task_ids"
        summary = wire.tool("vidforge_get_capabilities", {})["structuredContent"]
        assert summary["negotiated_capabilities"]["fallbacks"]["approval_never_arrives"].startswith("after 1.5 minutes")


# -- hostile input ---------------------------------------------------------------------------------------------


def test_malformed_requests_get_contract_shaped_answers(wire):
    rng = random.Random(20261202)
    for index in range(2000):  # the corpus tests/test_mcp_wire.py sends a real server
        raw, headers = malformed_request(rng, index)
        check_malformed_answer(wire.http.post("/mcp", content=raw, headers=headers), headers)


def test_generated_requests_never_get_a_5xx(wire):
    seen = run_fuzz("http://127.0.0.1:8000", "tok-alice", 1000, client=wire.http)
    assert sum(seen.values()) >= 1000
    assert wire.result("server/discover")["supportedVersions"] == [PROTOCOL]  # still answering


# -- the contract's eval fixtures -------------------------------------------------------------------------


def test_forced_error_per_tool_carries_the_full_envelope(wire, media):
    keys = {"code", "message", "details", "temporary", "retry_after_ms", "repair", "request_id", "fingerprint"}
    forced = {
        RENDER: render_args(media, source_asset_uri="vidforge://assets/a_" + "0" * 24),
        STATUS: {"render_id": "task_missing"},
        APPROVE: {"render_id": "task_missing", "approved": True},
        CANCEL: {"render_id": "task_missing"},
        "vidforge_get_capabilities": {"unexpected": 1},
    }
    for name, arguments in forced.items():
        response = wire.post("tools/call", {"name": name, "arguments": arguments}, name)
        result = response.json()["result"]
        assert response.status_code == 200 and result["isError"] is True, name
        assert set(result["structuredContent"]) == keys and result["content"][0]["type"] == "text", name
        assert result["structuredContent"]["repair"]["arguments"] is not None, name
    assert wire.task("tasks/get", "task_missing")["error"]["code"] == -32602


def test_discovery_stays_under_the_documented_size_budget(wire):
    assert len(wire.post("tools/list").content) < 24 * 1024  # docs/design.md: the serialized tools/list
