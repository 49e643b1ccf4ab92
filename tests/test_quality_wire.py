"""A finished video's quality check on the wire (mcp_protocol.quality): the verdict in the text, the report under
`_meta` and as `qc.json`, the contact sheet as an `image` block and as `contact-sheet.jpg`, on the task path and on
the status tool's, validated against the official schemas; the contract's structuredContent unchanged; another
principal reads neither. In-process (tests/fast_wire.py): the render's steps are the registry calls the supervisor
makes, with a report and a sheet as the render's mux stores them."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from mcp_protocol.quality import QC_META_KEY, QcReport
from mcp_protocol.webhook_events import events_for
from tests.fast_wire import Media, fast_wire
from tests.harness import COMPLETED_FIELDS

RENDER = "vidforge_render_video"
STATUS = "vidforge_get_render_status"
REPORT = QcReport.model_validate(
    {
        "verdict": "warn",
        "reasons": ["black for 1.0 s at 0:02.0"],
        "black": [{"start_s": 2.0, "end_s": 3.0}],
        "frozen": [],
        "silent": [],
        "loudness": {"integrated_lufs": -16.2, "range_lu": 3.1, "true_peak_dbtp": -1.5},
        "clipped_samples": 0,
        "fidelity": {"psnr_y_db": 41.25, "ssim": 0.987, "frames_compared": 6},
        "frames": {"source": 180, "output": 180},
    }
)


def sheet_jpeg(width: int = 640, height: int = 180) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (40, 90, 160)).save(out, "JPEG", quality=80)
    return out.getvalue()


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    with fast_wire(tmp_path_factory.mktemp("quality"), max_concurrent_renders=1000) as wire:
        yield wire


@pytest.fixture(scope="module")
def media(wire) -> Media:
    return wire.media


def render_args(media: Media) -> dict:
    return {"source_asset_uri": media.video, "output_format": "mp4", "resolution": "720p"}


def image_blocks(result: dict) -> list[dict]:
    return [block for block in result["content"] if block["type"] == "image"]


def check_quality_result(result: dict, render_id: str, sheet: bytes) -> None:
    """What a success with a quality check carries, besides the contract's structuredContent."""
    assert list(result["structuredContent"]) == [*COMPLETED_FIELDS]
    assert result["_meta"][QC_META_KEY] == REPORT.to_json()
    (image,) = image_blocks(result)
    assert image["mimeType"] == "image/jpeg" and base64.b64decode(image["data"]) == sheet
    assert Image.open(io.BytesIO(base64.b64decode(image["data"]))).size == (640, 180)
    links = {block["name"]: block for block in result["content"] if block["type"] == "resource_link"}
    assert links["contact-sheet.jpg"]["uri"] == f"vidforge://videos/{render_id}/contact-sheet.jpg"
    assert links["qc.json"]["uri"] == f"vidforge://videos/{render_id}/qc.json"
    assert "QC warn: black for 1.0 s at 0:02.0." in links["contact-sheet.jpg"]["description"]


def test_the_task_result_carries_the_verdict_the_report_and_the_sheet(wire, media):
    sheet = sheet_jpeg()
    task_id = wire.tool(RENDER, render_args(media), tasks=True)["taskId"]
    wire.succeed(task_id, qc=REPORT, contact_sheet=sheet)
    result = wire.task("tasks/get", task_id)["result"]["result"]
    check_quality_result(result, task_id, sheet)
    text = json.loads(result["content"][0]["text"])
    assert text["qc"] == {"verdict": "warn", "reasons": ["black for 1.0 s at 0:02.0"]}
    # The resources, read back: the report as JSON text, the sheet as the JPEG's bytes.
    report_uri = f"vidforge://videos/{task_id}/qc.json"
    read = wire.result("resources/read", {"uri": report_uri}, report_uri)["contents"][0]
    assert read["mimeType"] == "application/json" and json.loads(read["text"]) == REPORT.to_json()
    sheet_uri = f"vidforge://videos/{task_id}/contact-sheet.jpg"
    read = wire.result("resources/read", {"uri": sheet_uri}, sheet_uri)["contents"][0]
    assert read["mimeType"] == "image/jpeg" and base64.b64decode(read["blob"]) == sheet


def test_the_status_tool_carries_them_for_clients_without_tasks(wire, media):
    sheet = sheet_jpeg()
    render_id = wire.tool(RENDER, render_args(media))["structuredContent"]["render_id"]
    wire.succeed(render_id, qc=REPORT, contact_sheet=sheet)
    status = wire.tool(STATUS, {"render_id": render_id})
    assert status["structuredContent"]["state"] == "succeeded"
    assert status["structuredContent"]["status_message"].endswith("QC warn: black for 1.0 s at 0:02.0.")
    assert status["_meta"][QC_META_KEY] == REPORT.to_json()
    (image,) = image_blocks(status)
    assert base64.b64decode(image["data"]) == sheet


def test_another_principal_reads_neither_the_report_nor_the_sheet(wire, media):
    task_id = wire.tool(RENDER, render_args(media), tasks=True)["taskId"]
    wire.succeed(task_id, qc=REPORT, contact_sheet=sheet_jpeg())
    for name in ("qc.json", "contact-sheet.jpg"):
        uri = f"vidforge://videos/{task_id}/{name}"
        body = wire.call("resources/read", {"uri": uri}, uri, token="tok-bob")
        assert body["error"]["data"]["machine_code"] == "resource_not_found", body


def test_a_video_without_a_check_answers_as_before(wire, media):
    task_id = wire.tool(RENDER, render_args(media), tasks=True)["taskId"]
    wire.succeed(task_id)
    result = wire.task("tasks/get", task_id)["result"]["result"]
    assert "_meta" not in result and not image_blocks(result)
    assert [block["name"] for block in result["content"] if block["type"] == "resource_link"] == [
        "final.mp4",
        "poster.jpg",
    ]
    assert "qc" not in json.loads(result["content"][0]["text"])
    uri = f"vidforge://videos/{task_id}/qc.json"
    assert wire.call("resources/read", {"uri": uri}, uri)["error"]["data"]["machine_code"] == "resource_not_found"


def test_a_sheet_gone_from_the_store_leaves_its_link(wire, media):
    task_id = wire.tool(RENDER, render_args(media), tasks=True)["taskId"]
    wire.succeed(task_id, qc=REPORT)  # the report kept, the sheet never stored
    result = wire.task("tasks/get", task_id)["result"]["result"]
    assert result["_meta"][QC_META_KEY] == REPORT.to_json() and not image_blocks(result)
    assert "contact-sheet.jpg" in {block.get("name") for block in result["content"]}


def test_a_completed_event_carries_the_report(wire, media):
    """The webhook `render.completed` body (mcp_protocol.webhook_events, written in the completing commit) carries
    the report; a render without one carries none. (The `GET /renders` item: tests/test_quality_surfaces.py.)"""
    task_id = wire.tool(RENDER, render_args(media), tasks=True)["taskId"]
    checked = wire.succeed(task_id, qc=REPORT, contact_sheet=sheet_jpeg())
    assert checked is not None
    to_receiver = checked.model_copy(
        update={"request": checked.request.model_copy(update={"notify_url": "https://r.example/h"})}
    )
    (event,) = events_for(None, to_receiver, retention_s=3600)
    body = json.loads(event.body)
    assert body["type"] == "render.completed" and body["qc"] == REPORT.to_json()
    plain = wire.succeed(wire.tool(RENDER, render_args(media), tasks=True)["taskId"])
    assert plain is not None
    to_receiver = plain.model_copy(
        update={"request": plain.request.model_copy(update={"notify_url": "https://r.example/h"})}
    )
    (event,) = events_for(None, to_receiver, retention_s=3600)
    assert "qc" not in json.loads(event.body)
