"""`vidforge_inspect_video` before its work starts: in the catalog as a read-only, idempotent tool, and every URI it
may not read refused with the contract's envelope and nothing started. In-process (tests/fast_wire.py); the
inspections themselves run on Ray in tests/test_quality_live.py."""

from __future__ import annotations

import pytest

from mcp_protocol.catalog import tool_definitions
from mcp_protocol.errors import no_asset_at
from serve_app._config import Config
from tests.fast_wire import Media, fast_wire
from tests.harness import validate

INSPECT = "vidforge_inspect_video"
RENDER = "vidforge_render_video"


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    with fast_wire(tmp_path_factory.mktemp("inspect"), max_concurrent_renders=1000) as wire:
        yield wire


@pytest.fixture(scope="module")
def media(wire) -> Media:
    return wire.media


def refusal(result: dict) -> dict:
    """The error a tool result carries, checked against the envelope every vidforge error has."""
    assert result["isError"] is True, result
    error = result["structuredContent"]
    assert {"code", "message", "details", "temporary", "retry_after_ms", "repair", "request_id"} <= set(error)
    return error


def test_the_tool_is_listed_read_only_and_idempotent(wire):
    (tool,) = [tool for tool in wire.result("tools/list", {})["tools"] if tool["name"] == INSPECT]
    assert tool["annotations"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    assert tool["inputSchema"]["required"] == ["uri"]
    codes = {entry["code"] for entry in tool["_meta"]["com.vidforge/errors"]}
    assert {"source_not_found", "unsupported_codec", "inspect_failed", "concurrency_limit_exceeded"} <= codes
    # The texts name the configured bounds: 60 s answered in the call, a 20 s wait, a 15-minute limit by default.
    assert "up to 1 minute long" in tool["description"] and "waits up to 20 seconds" in tool["description"]
    assert "15 minutes" in str(tool["_meta"])
    validate(tool, "core", "Tool")


def test_the_catalog_states_the_configured_bounds():
    settings = Config(inspect_answer_max_s=300, inspect_wait_s=5, inspect_timeout_s=60)
    (tool,) = [tool for tool in tool_definitions(settings) if tool["name"] == INSPECT]
    assert "up to 5 minutes long" in tool["description"] and "waits up to 5 seconds" in tool["description"]


@pytest.mark.parametrize("tasks", [False, True])
def test_a_uri_it_may_not_read_is_source_not_found(wire, media, tasks):
    missing = "vidforge://assets/a_" + "9" * 24
    for uri in (missing, "https://example.com/a.mp4", "vidforge://videos/task_nothere/final.mp4"):
        error = refusal(wire.tool(INSPECT, {"uri": uri}, tasks=tasks))
        assert (error["code"], error["details"]["field"], error["temporary"]) == ("source_not_found", "uri", False)
    # Alice's asset is not Bob's: answered as if it did not exist.
    bob = refusal(wire.tool(INSPECT, {"uri": media.video}, token="tok-bob", tasks=tasks))
    assert bob["code"] == "source_not_found" and bob["details"]["reason"] == no_asset_at(media.video)


def test_another_principals_finished_video_is_source_not_found(wire, media):
    task_id = wire.tool(
        RENDER, {"source_asset_uri": media.video, "output_format": "webm", "resolution": "720p"}, tasks=True
    )["taskId"]
    wire.succeed(task_id)
    uri = f"vidforge://videos/{task_id}/final.webm"
    assert refusal(wire.tool(INSPECT, {"uri": uri}, token="tok-bob"))["code"] == "source_not_found"
    # Its owner with the wrong extension names no video either.
    assert refusal(wire.tool(INSPECT, {"uri": uri.replace(".webm", ".mp4")}))["code"] == "source_not_found"


def test_an_image_has_no_video_stream_to_inspect(wire, media):
    error = refusal(wire.tool(INSPECT, {"uri": media.image}))
    assert (error["code"], error["details"]["field"]) == ("unsupported_codec", "uri")
    assert "no video stream" in error["details"]["reason"]


def test_an_unknown_inspection_task_is_not_found(wire):
    body = wire.task("tasks/get", "inspect_" + "a" * 26)
    assert body["error"] == {"code": -32602, "message": "Failed to retrieve task: Task not found"}, body
