"""Hostile and oversized media over real HTTP: a real `vidforge serve` with low limits set through env.

Every pathological file is generated here; each upload ends as a 4xx with the contract's envelope, a parser
crash, hang or memory bomb fails only its own upload, and the limits hold at upload, at create and at render
time (the render's own isolated probe, and the per-render wall-clock limit).
"""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.harness import TERMINAL, ServerProcess, Wire, poll_task, run_vidforge, upload
from tests.media import make_clip, make_watermark_png
from tests.test_pathological_media import (
    write_audio_only,
    write_blank_png,
    write_frames_at,
    write_header_only,
    write_tiny_packets,
)

pytestmark = pytest.mark.ray

FAULT = "VIDFORGE-TEST-FAULT:"
PARSE_TIMEOUT_S = 5
RENDER_TIMEOUT_S = 10
LIMITS = {
    "VIDFORGE_MAX_SOURCE_DURATION_S": "4",
    "VIDFORGE_MAX_FRAME_PIXELS": str(320 * 240),
    "VIDFORGE_MAX_FRAME_RATE": "60",
    "VIDFORGE_MAX_OUTPUT_FRAMES": "200",
    # High enough that a 16k x 16k PNG reaches the decoder, so the parse's memory limit is what stops it.
    "VIDFORGE_MAX_IMAGE_PIXELS": str(300_000_000),
    "VIDFORGE_PARSE_MEMORY_BYTES": str(256 * 1024**2),
    # What the hanging parse waits out. Every parse here takes well under a second (the memory bomb's 0.02 s, the tiny
    # packets' 0.1 s), timed from the parser's start, so none comes near it on a loaded machine.
    "VIDFORGE_PARSE_TIMEOUT_S": str(PARSE_TIMEOUT_S),
    "VIDFORGE_TEST_PARSE_FAULT_PREFIX": FAULT,
    # Far more than a 1 s render needs to reach its approval request (well under a second; a few on a loaded
    # machine), so the test sees it held there first; then what it waits out.
    "VIDFORGE_RENDER_TIMEOUT_S": str(RENDER_TIMEOUT_S),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("limits") / "data", env=LIMITS) as proc:
        yield proc


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    return tmp_path_factory.mktemp("limits-media")


def post(server, data: bytes, filename: str = "upload") -> httpx.Response:
    return httpx.post(f"{server.base}/assets", params={"filename": filename}, content=data, timeout=180)


def refusal(server, response: httpx.Response, status: int, code: str) -> str:
    """Check the contract envelope of a refused upload; returns details.reason."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["temporary"] is False and error["retry_after_ms"] is None
    assert error["request_id"].startswith("req_") and error["fingerprint"].startswith("vidforge@")
    assert error["details"]["field"] == "body" and error["repair"]["next_step"]
    assert str(server.data_dir) not in response.text and ".upload-" not in response.text  # no server paths
    return error["details"]["reason"]


def truncated(media, name: str) -> bytes:
    data = open(make_clip(str(media / name), seconds=2, audio=False), "rb").read()
    return data[: len(data) // 2]


UNREADABLE = {  # name -> (bytes, a phrase of the reason)
    "truncated.mp4": (lambda media: truncated(media, "whole.mp4"), "cannot"),
    "zero_duration.mp4": (lambda media: open(write_header_only(str(media / "empty.mp4")), "rb").read(), "no video"),
    "audio_only.m4a": (lambda media: open(write_audio_only(str(media / "a.m4a")), "rb").read(), "no video stream"),
    "empty.mp4": (lambda media: b"", "file is empty"),
}


@pytest.mark.parametrize("name", UNREADABLE)
def test_unreadable_uploads_are_415_unsupported_codec(server, media, name):
    make, phrase = UNREADABLE[name]
    assert phrase in refusal(server, post(server, make(media), name), 415, "unsupported_codec")


OVER_LIMIT = {  # name -> (file maker, the reason expected, as a regular expression)
    "tiny_packets.mp4": (
        lambda media: write_tiny_packets(str(media / "tiny.mp4"), 1_000_000),
        r"more than 200 frames, over the 200-frame limit \(VIDFORGE_MAX_OUTPUT_FRAMES\)",
    ),
    "hours_apart.mp4": (  # a frame rate that rounds to zero; the duration limit stops the probe first
        lambda media: write_frames_at(str(media / "slow.mp4"), [0, 3 * 3600 * 1000]),
        r"duration is at least 10800 s, over the 4 s limit \(VIDFORGE_MAX_SOURCE_DURATION_S\)",
    ),
    "long.mp4": (  # stopped while reading, at the first packet (in decode order) past 4 s
        lambda media: make_clip(str(media / "long.mp4"), seconds=5, fps=30, audio=False),
        r"duration is at least 4\.\d+ s, over the 4 s limit \(VIDFORGE_MAX_SOURCE_DURATION_S\)",
    ),
    "big.mp4": (
        lambda media: make_clip(str(media / "big.mp4"), seconds=1, width=640, height=360, audio=False),
        r"frames are 640x360 = 230400 pixels, over the 76800-pixel limit \(VIDFORGE_MAX_FRAME_PIXELS\)",
    ),
    "fast.mp4": (
        lambda media: make_clip(str(media / "fast.mp4"), seconds=1, fps=120, audio=False),
        r"frame rate 120 fps is over the 60 fps limit \(VIDFORGE_MAX_FRAME_RATE\)",
    ),
}


@pytest.mark.parametrize("name", OVER_LIMIT)
def test_uploads_over_a_limit_are_422_naming_the_setting_and_value(server, media, name):
    make, reason = OVER_LIMIT[name]
    data = open(make(media), "rb").read()
    assert re.fullmatch(reason, refusal(server, post(server, data, name), 422, "media_limit_exceeded"))


def test_memory_bomb_fails_only_its_own_upload(server, media):
    bomb = open(write_blank_png(str(media / "bomb.png"), 16_000, 16_000), "rb").read()  # ~1 MB, 1 GiB decoded
    reason = refusal(server, post(server, bomb, "bomb.png"), 422, "media_limit_exceeded")
    assert reason == f"reading the file needed more than {256 * 1024**2} bytes of memory (VIDFORGE_PARSE_MEMORY_BYTES)"
    assert upload(server, make_watermark_png(str(media / "logo.png"))).startswith("vidforge://assets/a_")


def test_parser_crash_and_hang_fail_only_their_own_upload(server, media):
    crash = refusal(server, post(server, FAULT.encode() + b"abort"), 415, "unsupported_codec")
    assert crash == "the media parser crashed reading this file"
    hang = refusal(server, post(server, FAULT.encode() + b"hang"), 422, "media_limit_exceeded")
    assert hang == f"reading the file took longer than {PARSE_TIMEOUT_S} s (VIDFORGE_PARSE_TIMEOUT_S)"
    # The server, and parsing for everyone else, go on as before.
    assert Wire(server.url).result("tools/list")["tools"]
    assert upload(server, make_clip(str(media / "fine.mp4"), seconds=1, audio=False)).startswith("vidforge://")


def add_with_cli(server, path: str, **env: str) -> str:
    """`vidforge assets add` into the server's data dir, under other (higher) limits than the server's."""
    done = run_vidforge("assets", "add", path, "--data-dir", str(server.data_dir), env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def render_args(source: str) -> dict:
    return {"source_asset_uri": source, "output_format": "mp4", "resolution": "720p"}


def test_limits_are_refused_at_create_from_the_stored_facts(server, media):
    long_clip = make_clip(str(media / "long-cli.mp4"), seconds=5, fps=30, audio=False)
    uri = add_with_cli(server, long_clip, VIDFORGE_MAX_SOURCE_DURATION_S="60")  # accepted under the CLI's limit
    result = Wire(server.url).tool("vidforge_render_video", render_args(uri))
    assert result["isError"] is True
    error = result["structuredContent"]
    assert error["code"] == "media_limit_exceeded" and error["temporary"] is False
    assert error["details"] == {
        "field": "source_asset_uri",
        "reason": "duration 5 s is over the 4 s limit (VIDFORGE_MAX_SOURCE_DURATION_S)",
    }
    # The CLI holds an operator's own uploads to the limits in force for it.
    refused = run_vidforge("assets", "add", long_clip, "--data-dir", str(server.data_dir), env=LIMITS)
    assert refused.returncode == 2
    assert "over the 4 s limit (VIDFORGE_MAX_SOURCE_DURATION_S)" in refused.stderr


def small_clip(media, name: str) -> str:
    return make_clip(str(media / name), seconds=1, width=320, height=180, fps=30, audio=False)


def test_a_render_held_past_the_time_limit_ends_as_render_timeout_without_files(server, media):
    source = upload(server, small_clip(media, "held.mp4"))
    logo = upload(server, make_watermark_png(str(media / "held-logo.png")))
    wire = Wire(server.url, tasks=True)
    task_id = wire.tool("vidforge_render_video", {**render_args(source), "watermark": {"image_asset_uri": logo}})[
        "taskId"
    ]
    held = poll_task(wire, task_id, lambda t: t["status"] in ("input_required", *TERMINAL))
    assert held["status"] == "input_required", held  # waiting on an approval nobody gives
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is True, done
    error = done["result"]["structuredContent"]
    assert error["code"] == "render_timeout" and error["temporary"] is False and error["retry_after_ms"] is None
    assert error["details"] == {
        "field": None,
        "reason": f"the render took longer than the {RENDER_TIMEOUT_S} s limit (VIDFORGE_RENDER_TIMEOUT_S)",
    }
    assert not (server.data_dir / "artifacts" / task_id).exists()  # the preview went with the render


@pytest.mark.parametrize(
    "kept, reason",
    [
        # The render plans from the upload's facts: its segment tasks are the first to read the file again.
        (True, "cannot open: invalid data found when processing input"),
        # An asset stored before they were kept: the render's own probe parses the file, and crashes its parser.
        (False, "the media parser crashed reading this file"),
    ],
)
def test_a_source_spoiled_after_its_upload_ends_as_a_contract_error(server, media, kept, reason):
    source = upload(server, small_clip(media, f"spoiled-{kept}.mp4"))
    folder = server.data_dir / "assets" / source.rsplit("/", 1)[1]
    if not kept:
        meta = json.loads((folder / "meta.json").read_text())
        meta["facts"]["video"]["plan"] = None  # as an older asset's facts are read (serve_app.media._media_facts)
        (folder / "meta.json").write_text(json.dumps(meta))
    (folder / "blob").write_bytes(FAULT.encode() + b"abort")  # the stored file goes bad after its upload was checked
    wire = Wire(server.url, tasks=True)
    task_id = wire.tool("vidforge_render_video", render_args(source))["taskId"]
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is True, done  # an answer, not a crash
    error = done["result"]["structuredContent"]
    assert error["code"] == "unsupported_codec" and error["temporary"] is False
    assert error["details"] == {"field": "source_asset_uri", "reason": reason}
    assert str(server.data_dir) not in json.dumps(error)
    assert not (server.data_dir / "artifacts" / task_id).exists()
