"""Issue 7: `examples/render_with_sdk.py`, run as a user runs it (a subprocess, flags, the server and token from the
environment) against a live `vidforge serve` with a tokens file; the downloaded video is checked with PyAV, and the
task it ran is checked on the wire. Issue 35: `examples/import_and_render.py`, the same way, from links the session's
HTTPS media origin serves, with the person's approval given on the review page it prints."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.harness import RENDER_DEADLINE_S, REPO, Wire, free_port, upload, wait_until
from tests.https_origin import Answer
from tests.media import decode_all, make_clip, make_watermark_png

pytestmark = pytest.mark.ray

TOKEN = "tok-example"
TOKENS = {TOKEN: "user"}  # on the session's shared server (tests/conftest.py)
EXAMPLE = "examples/render_with_sdk.py"


@pytest.fixture(scope="module")
def server(shared_server):
    return shared_server


def run_example(url: str, token: str, *args: str, stdin=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    env = {**os.environ, "VIDFORGE_URL": url, "VIDFORGE_TOKEN": token}
    return subprocess.run(
        [sys.executable, EXAMPLE, *args],
        cwd=REPO,
        env=env,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=RENDER_DEADLINE_S,
    )


def test_render_with_sdk_example(server, tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=2.0, width=320, height=180, audio=True)
    logo = make_watermark_png(str(tmp_path / "logo.png"), w=64, h=32, rgba=(255, 0, 0, 255))
    out = tmp_path / "out.mp4"
    done = run_example(server.url, TOKEN, clip, "--watermark", logo, "-o", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    # the task path: the script polled tasks/get through input_required (the approval) to completed
    (task_id,) = set(re.findall(r"task (task_\w+): ", done.stderr))
    statuses = re.findall(rf"task {task_id}: (\w+)", done.stderr)
    assert "input_required" in statuses and statuses[-1] == "completed", done.stderr
    assert statuses.index("input_required") < len(statuses) - 1
    assert "watermark-preview.png" in done.stderr  # the approval question was shown
    assert f"vidforge://videos/{task_id}/final.mp4 -> {out}" in done.stdout
    # the downloaded file: what was asked for, every frame of the source
    video, source = decode_all(str(out)), decode_all(clip)
    assert video.video_codec == "h264" and video.audio_codec == "aac"
    assert (video.width, video.height) == (1280, 720)
    assert video.frame_count == source.frame_count
    # the server's view of the same task: completed with the watermark the script approved
    wire = Wire(server.url, token=TOKEN, tasks=True)
    task = wire.task("tasks/get", task_id)["result"]
    wire.close()
    assert task["status"] == "completed"
    result = task["result"]["structuredContent"]
    assert result["watermark_applied"] is True and result["size_bytes"] == out.stat().st_size


def test_render_with_sdk_example_wrong_token(server, tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=1.0, width=160, height=90, audio=False)
    logo = make_watermark_png(str(tmp_path / "logo.png"))
    refused = run_example(server.url, "wrong", clip, "--watermark", logo, "-o", str(tmp_path / "out.mp4"))
    assert refused.returncode != 0 and "401" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert not (tmp_path / "out.mp4").exists()
    assert upload(server, clip, TOKEN).startswith("vidforge://assets/")  # the same upload with the right token works


def test_render_with_sdk_example_human_rejects(server, tmp_path):
    """On a terminal the script asks; answering "n" rejects the watermark and the render ends without a video."""
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=1.0, width=160, height=90, audio=False)
    logo = make_watermark_png(str(tmp_path / "logo.png"))
    controller, terminal = pty.openpty()
    os.write(controller, b"n\n")  # typed ahead; read when the question comes
    try:
        rejected = run_example(
            server.url, TOKEN, clip, "--watermark", logo, "-o", str(tmp_path / "out.mp4"), stdin=terminal
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert "Approve the watermark? [Y/n]" in rejected.stdout, rejected.stdout
    assert rejected.returncode != 0 and "render failed" in rejected.stderr, rejected.stderr
    assert "watermark_rejected" in rejected.stderr
    assert not (tmp_path / "out.mp4").exists()


def test_render_with_sdk_example_server_not_running(tmp_path):
    """No server: one line that says what to do, no traceback."""
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=0.5, width=64, height=36, audio=False)
    url = f"http://127.0.0.1:{free_port()}/mcp"
    refused = run_example(url, TOKEN, clip, "-o", str(tmp_path / "out.mp4"))
    assert refused.returncode != 0
    assert refused.stderr.strip() == (
        f"vidforge: cannot reach {url}: is `vidforge serve` running? (start it with `make serve`, or pass --server)"
    )


# -- examples/import_and_render.py: from a link to a finished video over MCP alone (issue 35) ---------------------

IMPORT_EXAMPLE = "examples/import_and_render.py"


def approve_on_the_review_page(url: str) -> None:
    """What the person does with the printed link: the review page's form, submitted in their browser."""
    cap = parse_qs(urlsplit(url).query)["cap"][0]
    decided = httpx.post(url.split("?")[0], data={"cap": cap, "decision": "approve"}, timeout=60)
    assert decided.status_code == 303, decided.text


def test_import_and_render_example_over_mcp_alone(server, media_origin, tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=2.0, width=320, height=180, audio=True)
    logo = make_watermark_png(str(tmp_path / "logo.png"), w=64, h=32, rgba=(255, 0, 0, 255))
    media_origin.answers["/example/clip.mp4"] = Answer(body=Path(clip).read_bytes())
    media_origin.answers["/example/logo.png"] = Answer(body=Path(logo).read_bytes())
    link, logo_link = media_origin.url("/example/clip.mp4"), media_origin.url("/example/logo.png")
    env = {**os.environ, "VIDFORGE_URL": server.url, "VIDFORGE_TOKEN": TOKEN}
    example = subprocess.Popen(
        [sys.executable, IMPORT_EXAMPLE, link, "--watermark", logo_link],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    progress: list[str] = []
    reader = threading.Thread(target=lambda: progress.extend(example.stderr), daemon=True)
    reader.start()
    try:

        def review_link() -> str | None:
            asked = [line for line in list(progress) if line.startswith("Review the watermark")]
            assert example.poll() is None or asked, "".join(progress)
            return asked[0].rsplit(": ", 1)[1].strip() if asked else None

        approve_on_the_review_page(wait_until(review_link, RENDER_DEADLINE_S, message="the review link"))
        printed = example.stdout.read()
        assert example.wait(timeout=RENDER_DEADLINE_S) == 0, printed + "".join(progress)
    finally:
        example.kill()
        reader.join(timeout=10)
    log = "".join(progress)
    imports = re.findall(r"task (import_\w+): completed", log)
    assert len(set(imports)) == 2, log  # the video's link and the watermark's, each a task of its own
    (render_id,) = set(re.findall(r"task (task_\w+): ", log))
    assert f"vidforge://videos/{render_id}/final.mp4" in printed, printed
    wire = Wire(server.url, token=TOKEN, tasks=True)
    task = wire.task("tasks/get", render_id)["result"]
    wire.close()
    assert task["status"] == "completed" and task["result"]["structuredContent"]["watermark_applied"] is True
    headers = {"Authorization": f"Bearer {TOKEN}"}
    video = tmp_path / "final.mp4"
    download = httpx.get(f"{server.base}/artifacts/{render_id}/final.mp4", headers=headers, timeout=60)
    video.write_bytes(download.raise_for_status().content)
    decoded = decode_all(str(video), keep="none")
    assert (decoded.width, decoded.height, decoded.frame_count) == (
        1280,
        720,
        decode_all(clip, keep="none").frame_count,
    )
