"""The quality check end to end, over real HTTP against a real `vidforge serve` (the session's shared server, with
the default thresholds): sources made with known defects at known times are rendered and inspected through MCP, and
what comes back is checked against where the defects are — each stretch once, within a frame (50 ms for audio),
whatever the render's segment cuts; a clean control passes with no reasons; the contact sheet is an `image` block
that decodes, small enough, and a resource only its owner reads. `vidforge_inspect_video` answers short videos in
the call and long ones, with the tasks extension, as a task. The kernels' own precision (cuts inside defects,
loudness against a reference BS.1770 meter, PSNR against FFmpeg's) is tests/test_qc_kernels.py's."""

from __future__ import annotations

import base64
import io
import json

import pytest
from jsonschema import Draft202012Validator
from PIL import Image

from mcp_protocol.quality import QC_META_KEY
from tests.defect_media import make_defect_clip
from tests.harness import COMPLETED_FIELDS, ServerProcess, Wire, poll_status, poll_task, upload, validate, wait_until
from tests.media import make_clip, make_watermark_png

pytestmark = pytest.mark.ray

RENDER = "vidforge_render_video"
STATUS = "vidforge_get_render_status"
INSPECT = "vidforge_inspect_video"
TOKEN, OTHER = "tok-qc", "tok-qc-other"
TOKENS = {TOKEN: "quality", OTHER: "quality-other"}  # on the session's shared server (tests/conftest.py)
FPS = 30
FRAME_S = 1 / FPS
# 12 s with a black second over the middle (where a 2-CPU server cuts the render in two), a frozen 1.5 s, 1.5 s of
# silence and a clipping second.
DEFECTS = {"black": (5.5, 6.5), "frozen": (8.0, 9.5), "silent": (2.0, 3.5)}
CLIPPING = (10.0, 11.0)


@pytest.fixture(scope="module")
def defect_source(shared_server, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("qc") / "defects.mp4"
    make_defect_clip(str(path), seconds=12, fps=FPS, clipping=CLIPPING, **DEFECTS)
    return upload(shared_server, str(path), TOKEN)


def sheet_of(result: dict) -> Image.Image:
    """The result's contact sheet: one JPEG `image` block, at most 1280 px wide and 150 KB."""
    (block,) = [block for block in result["content"] if block["type"] == "image"]
    assert block["mimeType"] == "image/jpeg"
    data = base64.b64decode(block["data"])
    assert len(data) <= 150_000
    sheet = Image.open(io.BytesIO(data))
    assert sheet.format == "JPEG" and sheet.width <= 1280
    return sheet


def check_defects(report: dict) -> None:
    for kind, (start, end) in DEFECTS.items():
        tolerance = 0.05 if kind == "silent" else FRAME_S + 1e-3
        (found,) = report[kind]  # one stretch, whatever the segment cuts
        assert abs(found["start_s"] - start) <= tolerance and abs(found["end_s"] - end) <= tolerance, (kind, found)
    assert report["clipped_samples"] > 0 and report["loudness"]["true_peak_dbtp"] > 0
    assert report["verdict"] == "warn"
    assert "black for 1.0 s at 0:05.5" in report["reasons"]
    assert any("dBTP: clips" in reason for reason in report["reasons"])


def test_a_render_reports_each_defect_once_with_its_sheet(shared_server, defect_source):
    wire = Wire(shared_server.url, token=TOKEN, tasks=True)
    args = {"source_asset_uri": defect_source, "output_format": "mp4", "resolution": "720p"}
    task_id = wire.tool(RENDER, args)["taskId"]
    result = poll_task(wire, task_id, lambda task: task["status"] == "completed")["result"]
    validate(result, "core", "CallToolResult")
    report = result["_meta"][QC_META_KEY]
    check_defects(report)
    assert report["frames"] == {"source": 360, "output": 360}
    assert report["fidelity"] is None  # VIDFORGE_QC_FIDELITY is off by default (measured: tests/test_render_driver.py)
    assert json.loads(result["content"][0]["text"])["qc"] == {"verdict": "warn", "reasons": report["reasons"]}
    sheet = sheet_of(result)
    # The contract's structuredContent is as it was.
    assert list(result["structuredContent"]) == [*COMPLETED_FIELDS]
    # Both resources read back, for their owner only.
    for name, check in (("qc.json", "text"), ("contact-sheet.jpg", "blob")):
        uri = f"vidforge://videos/{task_id}/{name}"
        (contents,) = wire.result("resources/read", {"uri": uri}, uri)["contents"]
        if check == "text":
            assert json.loads(contents["text"]) == report
        else:
            assert Image.open(io.BytesIO(base64.b64decode(contents["blob"]))).size == sheet.size
        foreign = Wire(shared_server.url, token=OTHER, tasks=True).call("resources/read", {"uri": uri}, uri)
        assert foreign["error"]["data"]["machine_code"] == "resource_not_found", foreign


def test_a_clean_control_passes_and_the_status_tool_carries_it(shared_server, tmp_path):
    clean = upload(shared_server, make_defect_clip(str(tmp_path / "clean.mp4"), seconds=4, fps=FPS), TOKEN)
    wire = Wire(shared_server.url, token=TOKEN)  # no tasks extension: the fallback path
    args = {"source_asset_uri": clean, "output_format": "webm", "resolution": "720p"}
    render_id = wire.tool(RENDER, args)["structuredContent"]["render_id"]
    poll_status(wire, render_id, lambda status: status["terminal"])
    status = wire.tool(STATUS, {"render_id": render_id})
    assert status["structuredContent"]["state"] == "succeeded"
    report = status["_meta"][QC_META_KEY]
    assert (report["verdict"], report["reasons"]) == ("pass", [])
    assert report["black"] == report["frozen"] == report["silent"] == [] and report["clipped_samples"] == 0
    assert "QC pass." in status["structuredContent"]["status_message"]
    sheet_of(status)


def test_inspect_answers_a_short_asset_and_a_finished_video_in_the_call(shared_server, defect_source, tmp_path):
    wire = Wire(shared_server.url, token=TOKEN, tasks=True)
    inspected = wire.tool(INSPECT, {"uri": defect_source})
    assert inspected["isError"] is False, inspected
    validate(inspected, "core", "CallToolResult")
    answer = inspected["structuredContent"]
    assert answer["status"] == "completed" and answer["uri"] == defect_source
    facts = answer["facts"]
    assert (facts["display_width"], facts["display_height"], facts["rotation"]) == (320, 180, 0)
    assert facts["frame_count"] == 360 and facts["audio"]["channels"] == 2
    check_defects(answer["qc"])
    assert answer["qc"]["fidelity"] is None
    sheet_of(inspected)
    # The same URI again is the same inspection, answered from the desk.
    assert wire.tool(INSPECT, {"uri": defect_source})["structuredContent"] == answer

    clip = upload(shared_server, make_clip(str(tmp_path / "plain.mp4"), seconds=2), TOKEN)
    task_id = wire.tool(RENDER, {"source_asset_uri": clip, "output_format": "mp4", "resolution": "720p"})["taskId"]
    video = poll_task(wire, task_id, lambda t: t["status"] == "completed")["result"]["structuredContent"]["video_uri"]
    of_video = wire.tool(INSPECT, {"uri": video})["structuredContent"]
    assert of_video["facts"]["display_height"] == 720 and of_video["qc"]["fidelity"] is None
    # Another principal reads neither; an image has no video to inspect.
    other = Wire(shared_server.url, token=OTHER)
    assert other.tool(INSPECT, {"uri": video})["structuredContent"]["code"] == "source_not_found"
    logo = upload(shared_server, make_watermark_png(str(tmp_path / "logo.png")), TOKEN)
    assert wire.tool(INSPECT, {"uri": logo})["structuredContent"]["code"] == "unsupported_codec"


def test_inspect_of_a_long_video_is_a_task_with_the_extension(shared_server, tmp_path):
    # Past the 60 s answered in the call by default: tiny frames, so the inspection itself is quick.
    long_clip = make_clip(str(tmp_path / "long.mp4"), seconds=61, width=160, height=90, fps=10, gop=50)
    source = upload(shared_server, long_clip, TOKEN)
    wire = Wire(shared_server.url, token=TOKEN, tasks=True)
    created = wire.tool(INSPECT, {"uri": source})
    assert created["resultType"] == "task" and created["taskId"].startswith("inspect_")
    done = poll_task(wire, created["taskId"], lambda task: task["status"] == "completed")
    assert done["result"]["structuredContent"]["facts"]["frame_count"] == 610
    sheet_of(done["result"])


def test_inspect_without_tasks_answers_accepted_then_the_result(tmp_path):
    """A caller without the tasks extension whose inspection outlasts the call's wait (a server of its own, with a
    short VIDFORGE_INSPECT_WAIT_S) gets `accepted` and a follow_up to call again; calling again finds the same
    inspection, and once it has ended, answers it."""
    env = {"VIDFORGE_INSPECT_WAIT_S": "0.2"}
    with ServerProcess(tmp_path / "data", env=env, tokens={TOKEN: "quality"}) as server:
        # 900 small frames: an inspection still far longer than the 0.2 s wait (a task to start, every frame read).
        clip = make_clip(str(tmp_path / "clip.mp4"), seconds=30, width=160, height=90)
        source = upload(server, clip, TOKEN)
        wire = Wire(server.url, token=TOKEN)  # no tasks extension
        (tool,) = [tool for tool in wire.result("tools/list")["tools"] if tool["name"] == INSPECT]
        first = wire.tool(INSPECT, {"uri": source})
        accepted = first["structuredContent"]
        Draft202012Validator(tool["outputSchema"]).validate(accepted)
        assert accepted["status"] == "accepted" and accepted["poll_after_ms"] >= 0
        assert accepted["follow_up"] == {"next_step": "poll_inspection", "tool": INSPECT, "arguments": {"uri": source}}
        answers: list[dict] = []

        def inspected() -> bool:
            answers.append(wire.tool(INSPECT, accepted["follow_up"]["arguments"])["structuredContent"])
            return answers[-1]["status"] == "completed"

        wait_until(inspected, 120, interval=0.5, message="the inspection to end")
        Draft202012Validator(tool["outputSchema"]).validate(answers[-1])
        assert answers[-1]["facts"]["frame_count"] == 900 and answers[-1]["qc"]["verdict"] in ("pass", "warn")
