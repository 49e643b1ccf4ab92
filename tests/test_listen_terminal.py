"""`subscriptions/listen` on tasks that have already ended (the fast lane: tests/fast_wire.py, no Ray).

A task terminal when the stream looks it up gets its terminal `notifications/tasks` right after the
acknowledgement; a task still live is followed until it ends; no task gets its terminal notification twice."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from mcp_protocol.domain import Failed
from mcp_protocol.error_codes import ErrorCode
from tests.fast_wire import FastWire, Media, fast_wire
from tests.harness import TERMINAL, meta, validate

RENDER = "vidforge_render_video"
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    with fast_wire(tmp_path_factory.mktemp("listen-terminal"), max_concurrent_renders=1000) as wire:
        yield wire


@pytest.fixture(scope="module")
def media(wire) -> Media:
    return wire.media


def render(wire: FastWire, media: Media) -> str:
    args = {"source_asset_uri": media.video, "output_format": "mp4", "resolution": "720p"}
    return wire.tool(RENDER, args, tasks=True)["taskId"]


def listen_body(request_id: str, task_ids: list[str]) -> dict[str, Any]:
    params = {"_meta": meta(tasks=True), "notifications": {"taskIds": task_ids}}
    return {"jsonrpc": "2.0", "id": request_id, "method": "subscriptions/listen", "params": params}


def task_notes(events: list[dict[str, Any]], request_id: str) -> list[dict[str, Any]]:
    """The stream's `notifications/tasks` params, each validated against the ext-tasks schema."""
    notes = [event for event in events if event.get("method") == "notifications/tasks"]
    for note in notes:
        validate(note, "tasks", "TaskStatusNotification")
        assert note["params"]["_meta"][SUBSCRIPTION_ID] == request_id
    return [note["params"] for note in notes]


def end_task(wire: FastWire, task_id: str, how: str) -> str:
    """Drive a render to its end the way the render supervisor does; the task's terminal status. A failed render
    is `completed` with an error result (vidforge never uses the ext-tasks `failed` status)."""
    if how == "succeeded":
        wire.succeed(task_id)
    elif how == "cancelled":
        wire.task("tasks/cancel", task_id)
        wire.apply_cancel(task_id)
    else:
        wire.end(task_id, Failed(code=ErrorCode.RENDER_FAILED, reason="RuntimeError: boom"))
    status = wire.task("tasks/get", task_id)["result"]["status"]
    assert status in TERMINAL
    return status


@pytest.mark.parametrize("how", ["succeeded", "failed", "cancelled"])
def test_listen_on_an_ended_task_sends_its_terminal_notification_once(wire, media, how):
    task_id = render(wire, media)
    status = end_task(wire, task_id, how)
    request_id = f"listen-ended-{how}"
    with wire.stream(listen_body(request_id, [task_id]), wire.headers("subscriptions/listen")) as stream:
        events = stream.rest()
    assert stream.status == 200
    assert events[0]["method"] == "notifications/subscriptions/acknowledged"
    assert events[0]["params"]["notifications"] == {"taskIds": [task_id]}
    notes = task_notes(events, request_id)
    assert [(note["taskId"], note["status"]) for note in notes] == [(task_id, status)]
    assert events[1]["method"] == "notifications/tasks"  # right after the acknowledgement
    assert "resultType" not in notes[0]
    if how != "cancelled":
        assert notes[0]["result"]["isError"] is (how == "failed")
    assert "result" in events[-1] and len(events) == 3


def test_listen_on_an_ended_and_a_live_task_sends_each_terminal_notification_once(wire, media):
    ended, live = render(wire, media), render(wire, media)
    assert end_task(wire, ended, "cancelled") == "cancelled"
    request_id = "listen-mixed"
    with wire.stream(listen_body(request_id, [ended, live]), wire.headers("subscriptions/listen")) as stream:
        events = [stream.next_event(), stream.next_event()]  # the acknowledgement, then the ended task's
        wire.progress(live, 10, 90, fps=30.0)
        wire.succeed(live)
        events += stream.rest()
    assert stream.status == 200
    assert events[0]["method"] == "notifications/subscriptions/acknowledged"
    assert events[0]["params"]["notifications"] == {"taskIds": [ended, live]}
    notes = task_notes(events, request_id)
    assert (notes[0]["taskId"], notes[0]["status"]) == (ended, "cancelled")
    terminal = Counter((note["taskId"], note["status"]) for note in notes if note["status"] in TERMINAL)
    assert terminal == {(ended, "cancelled"): 1, (live, "completed"): 1}
    assert all(note["taskId"] == live for note in notes[1:])
    assert notes[-1]["taskId"] == live and notes[-1]["result"]["isError"] is False
    assert "result" in events[-1]
