"""The server's answers read into mcp_protocol.answers' models, as `vidforge render` and its listings read them
(vidforge_client): every answer here is built by the production code on the fast lane's server (tests/fast_wire.py)
— the task surface, the status tool, the listing routes, an upload, a webhook delivery — and each parses, with the
values its JSON holds; the client's tables show them as before. End to end, through the command: tests/test_cli_render.py
and tests/test_webhooks.py."""

from __future__ import annotations

import io
import json

import httpx
import pytest
from mcp_types import ElicitRequestFormParams
from rich.console import Console
from rich.table import Table
from starlette.applications import Starlette
from starlette.routing import Mount

from mcp_protocol.answers import (
    AssetItem,
    DeliveryItem,
    ErrorEnvelope,
    ListingPage,
    RenderItem,
    RenderStatus,
    RenderSucceeded,
    UploadedAsset,
)
from mcp_protocol.domain import Failed
from mcp_protocol.error_codes import ErrorCode
from mcp_protocol.text_limits import FREE_TEXT_MAX_CHARS
from mcp_protocol.webhook_events import Delivery, DeliveryState, EventType, OutboxEvent
from serve_app.ingress._http_files import asset_created
from serve_app.ingress._listings import listing_routes
from serve_app.ingress._webhook_listing import delivery_item
from serve_app.ingress.auth import authentication
from tests.fast_wire import TOKENS, FastWire, Media, fast_wire
from tests.media import make_watermark_png
from vidforge_client._listing import assets_table, render_table, renders_table, webhooks_table
from vidforge_client.failures import ClientFailure, ExitCode, read_as
from vidforge_client.tasks import TaskState

RENDER = "vidforge_render_video"
STATUS = "vidforge_get_render_status"
T_MS = 1_785_333_731_000


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    with fast_wire(tmp_path_factory.mktemp("answers"), max_concurrent_renders=1000) as wire:
        yield wire


@pytest.fixture(scope="module")
def renders(wire) -> dict[str, str]:
    """alice's renders, one in each state a listing shows: by what they are, their ids."""
    media: Media = wire.media

    def start(watermark: bool = False) -> str:
        args = {"source_asset_uri": media.video, "output_format": "mp4", "resolution": "720p"}
        if watermark:
            args["watermark"] = {"image_asset_uri": media.image, "position": "top_left", "opacity": 0.5}
        return wire.tool(RENDER, args, tasks=True)["taskId"]

    ids = {"working": start(), "waiting": start(watermark=True), "done": start(), "failed": start(), "gone": start()}
    wire.progress(ids["working"], 10, 25, fps=30.0)
    wire.ask_approval(ids["waiting"])
    wire.succeed(ids["done"], data=b"\x00" * 100, duration_s=3.0004, used=(7.25, 4.5))
    wire.end(ids["failed"], Failed(code=ErrorCode.RENDER_FAILED, reason="RuntimeError: boom"))
    wire.task("tasks/cancel", ids["gone"])
    wire.apply_cancel(ids["gone"])
    return ids


def get(wire: FastWire, path: str) -> object:
    """GET `path` from the production listing routes, behind the bearer auth, as alice; its JSON body."""
    routes = listing_routes(wire.service, wire.config)
    app = Starlette(routes=[Mount("", routes=routes, middleware=[authentication(wire.config, TOKENS)])])

    async def fetch() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as http:
            return await http.get(path, headers={"Authorization": "Bearer tok-alice"})

    response = wire.run(fetch())  # on the registry's loop
    assert response.status_code == 200, response.text
    return response.json()


def shown(table: Table) -> str:
    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(table)
    return out.getvalue()


def test_the_renders_listing_reads_as_render_items(wire, renders):
    page = read_as(ListingPage[RenderItem], get(wire, "/renders"), "GET /renders")
    assert page.next_cursor is None
    items = {item.render_id: item for item in page.items}
    assert set(items) == set(renders.values())
    working, waiting, done = items[renders["working"]], items[renders["waiting"]], items[renders["done"]]
    failed, gone = items[renders["failed"]], items[renders["gone"]]
    assert (working.state, working.progress, working.terminal) == ("rendering", 0.4, False)
    assert working.follow_up is not None and working.follow_up.tool == STATUS
    assert waiting.state == "awaiting_watermark_approval"
    assert waiting.watermark_preview_uri == f"vidforge://renders/{waiting.render_id}/watermark-preview.png"
    assert waiting.request.watermark is not None and waiting.request.watermark.position == "top_left"
    assert (done.state, done.video_uri) == ("succeeded", f"vidforge://videos/{done.render_id}/final.mp4")
    assert (done.size_bytes, done.duration_seconds, done.watermark_applied) == (100, 3.0, False)
    assert failed.state == "failed" and failed.error is not None and failed.error.code == "render_failed"
    assert (gone.state, gone.video_uri, gone.error) == ("cancelled", None, None)
    assert done.usage is not None and (done.usage.cpu_seconds, done.usage.render_seconds) == (7.25, 4.5)
    assert all(item.usage is None for item in (working, waiting, failed, gone))  # metered once it has its video
    assert all(item.request.source_asset_uri == wire.media.video and item.created_at for item in items.values())

    table = shown(renders_table(page.items))
    assert "5 renders" in table and "40%" in table and "720p mp4 + watermark" in table
    assert done.video_uri in table and "render_failed" in table


def test_one_render_reads_as_a_render_item_and_its_table_shows_it(wire, renders):
    render_id = renders["done"]
    item = read_as(RenderItem, get(wire, f"/renders/{render_id}"), f"GET /renders/{render_id}")
    table = shown(render_table(item))
    assert render_id in table and "succeeded" in table and "100%" in table and "Render complete." in table
    assert f"vidforge://videos/{render_id}/final.mp4" in table
    assert "render time" in table and "4.5 s" in table and "CPU time" in table and "7.2 s" in table


def test_the_status_tool_reads_as_a_render_status(wire, renders):
    for render_id in renders.values():
        status = RenderStatus.model_validate(wire.tool(STATUS, {"render_id": render_id})["structuredContent"])
        assert status.render_id == render_id and status.terminal_states == ["succeeded", "failed", "cancelled"]


def test_the_task_surface_reads_as_typed_task_states(wire, renders):
    done = TaskState.model_validate(wire.task("tasks/get", renders["done"])["result"])
    assert done.status == "completed" and done.result is not None and not done.result.is_error
    video = RenderSucceeded.model_validate(done.result.structured_content)
    assert (video.video_uri, video.size_bytes, video.duration_seconds) == (
        f"vidforge://videos/{renders['done']}/final.mp4",
        100,
        3.0,
    )

    failed = TaskState.model_validate(wire.task("tasks/get", renders["failed"])["result"])
    assert failed.result is not None and failed.result.is_error
    envelope = ErrorEnvelope.in_body({"error": failed.result.structured_content})
    assert envelope is not None and envelope.code == "render_failed" and envelope.request_id

    waiting = TaskState.model_validate(wire.task("tasks/get", renders["waiting"], elicitation=True)["result"])
    assert waiting.input_requests is not None
    ((key, request),) = waiting.input_requests.items()
    assert isinstance(request.elicitation(), ElicitRequestFormParams) and "top_left" in request.elicitation().message

    # A JSON-RPC error carries the envelope in its `data`, renamed: a note past the limit refuses the update.
    note = {"action": "accept", "content": {"approved": False, "note": "x" * (FREE_TEXT_MAX_CHARS + 1)}}
    refused = wire.task("tasks/update", renders["waiting"], params={"inputResponses": {key: note}})
    envelope = ErrorEnvelope.in_body(refused)
    assert envelope is not None and envelope.code == "invalid_argument"
    assert (
        envelope.details.field == f"inputResponses.{key}.content.note" and str(FREE_TEXT_MAX_CHARS) in envelope.text()
    )


def test_the_assets_listing_and_an_upload_read_as_their_models(wire, tmp_path):
    assert wire.media  # alice's first two uploads
    upload = wire.service.assets.add_file(make_watermark_png(str(tmp_path / "logo.png")), "alice")
    created = UploadedAsset.model_validate(json.loads(asset_created(upload).body))
    assert (created.uri, created.kind, created.size_bytes) == (upload.uri, "image", upload.size_bytes)

    page = read_as(ListingPage[AssetItem], get(wire, "/assets?limit=2"), "GET /assets")
    assert [item.uri for item in page.items][0] == upload.uri and page.next_cursor is not None  # newest first
    assert page.items[0].filename == "logo.png" and page.items[0].size_bytes == upload.size_bytes
    table = shown(assets_table(page.items))
    assert "2 assets" in table and upload.uri in table and "logo.png" in table and "image" in table


def test_a_webhook_delivery_reads_as_a_delivery_item():
    event = OutboxEvent(
        event_id="evt_1",
        type=EventType.FAILED,
        task_id="task_w",
        principal="alice",
        url="https://hooks.example/in",
        created_at_ms=T_MS,
        body="{}",
    )
    pending = Delivery(
        event=event, attempts=2, next_attempt_at_ms=T_MS + 60_000, last_error="the receiver answered 503"
    )
    items = [DeliveryItem.model_validate(delivery_item(pending))]
    assert (items[0].type, items[0].state, items[0].attempts) == ("render.failed", "pending", 2)
    assert items[0].next_attempt_at == "2026-07-29T14:03:11Z"
    gave_up = delivery_item(pending.model_copy(update={"state": DeliveryState.GAVE_UP}))
    items.append(DeliveryItem.model_validate(gave_up))
    assert items[1].next_attempt_at is None
    table = shown(webhooks_table(items))
    assert "2 webhooks" in table and "render.failed" in table and "gave_up" in table and "answered 503" in table


def test_an_answer_of_another_shape_is_one_line_and_exit_code_3():
    with pytest.raises(ClientFailure) as refused:
        read_as(ListingPage[AssetItem], {"items": [{"uri": 7}], "next_cursor": None}, "GET /assets")
    assert refused.value.exit_code is ExitCode.SERVER
    assert refused.value.message.startswith("the server's answer to GET /assets is not one this client reads (items.0.")
    assert "\n" not in refused.value.message
