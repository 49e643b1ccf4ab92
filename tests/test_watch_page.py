"""The watch page of a finished video against a live `vidforge serve` (media on its data dir), in a real browser
(headless Debian Chromium driven by Playwright): the link comes from the completed render's result text, the page
plays the video in its `<video>` (its `currentTime` advances, fed with Range requests), shows the poster and the
facts, and its download button saves the very file. The result's `structuredContent` is the contract's; the poster
reads back through `resources/read`. Refused links (tampered, expired, another task's, a review link, none) open
nothing, the files included; and after all of it, no line the server or its Ray session logged holds a bearer token
or a capability. Saves a screenshot in the test's tmp dir; `make docs-screenshot` (VIDFORGE_DOCS_SCREENSHOT=1) also
copies it to docs/watch-page.png, which a plain test run leaves as it is.

Debian's Chromium plays H.264 (it is built with the proprietary codecs), so the page plays the mp4 the render made.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import tempfile
import time
from datetime import datetime
from pathlib import Path
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import httpx
import pytest
from jsonschema import Draft202012Validator
from PIL import Image

from media_store.artifacts import final_key
from serve_app._config import Config
from serve_app.ingress.review.capability import ReviewCapability, ReviewSigner
from serve_app.ingress.watch._view import size_text
from serve_app.ingress.watch.links import RESULT_ROUND, watch_signer
from serve_app.launch._review_key import KEY_FILE
from tests import test_review_page
from tests.harness import (
    COMPLETED_FIELDS,
    REPO,
    TERMINAL,
    ServerProcess,
    Wire,
    poll_task,
    upload,
    validate,
    wait_until,
)
from tests.media import make_clip

pytestmark = pytest.mark.ray

browser = test_review_page.browser  # the module's Chromium, launched as for the review page

TOKENS = {"tok-watch-5b8e2d": "viewer", "tok-other-9c1f4a": "other"}
VIEWER, OTHER = TOKENS
LINK = re.compile(r"http://127\.0\.0\.1:\d+/watch/(task_[A-Za-z0-9_-]+)\?cap=1\.[0-9]+\.[A-Za-z0-9_-]{43}")
SCREEN = {"width": 1200, "height": 900}
VIEWER_ZONE = "Asia/Kolkata"  # UTC+05:30: the page's times are rewritten into it
DEADLINE_S = 120
RENDER = {"output_format": "mp4", "resolution": "720p"}


@pytest.fixture(scope="module")
def ray_tmp():
    """A short temp root of the server's own (Ray's socket paths must stay short), to read its session's logs."""
    root = Path(tempfile.mkdtemp(prefix="vfwatch", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory, ray_tmp):
    env = {"RAY_TMPDIR": str(ray_tmp), "VIDFORGE_LOG_FORMAT": "json", "VIDFORGE_POLL_INTERVAL_MS": "500"}
    with ServerProcess(tmp_path_factory.mktemp("watch") / "data", env=env, tokens=TOKENS) as proc:
        yield proc


def rendered(server: ServerProcess, token: str, clip: str) -> tuple[str, dict]:
    """A finished render of `clip` for `token`'s principal, through the tasks extension: (task id, its result)."""
    wire = Wire(server.url, token=token, tasks=True)
    try:
        source = upload(server, clip, token)
        task_id = wire.tool("vidforge_render_video", {"source_asset_uri": source, **RENDER})["taskId"]
        done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    finally:
        wire.close()
    assert done["status"] == "completed" and done["result"]["isError"] is False, done
    return task_id, done["result"]


@pytest.fixture(scope="module")
def renders(server, tmp_path_factory):
    """The viewer's render (4 s with sound) and the other principal's (1 s)."""
    root = tmp_path_factory.mktemp("media")
    mine = rendered(server, VIEWER, make_clip(str(root / "clip.mp4"), seconds=4.0, width=640, height=360, audio=True))
    theirs = rendered(server, OTHER, make_clip(str(root / "short.mp4"), seconds=1.0, audio=False))
    return {"mine": mine, "theirs": theirs}


def watch_link(result: dict) -> str:
    link = LINK.fullmatch(json.loads(result["content"][0]["text"])["watch_url"])
    assert link is not None, result["content"][0]
    return link[0]


def test_the_result_names_the_watch_page_and_the_poster_and_keeps_the_contracts_structured_content(server, renders):
    task_id, result = renders["mine"]
    validate(result, "core", "CallToolResult")
    link = watch_link(result)
    assert f"/watch/{task_id}?" in link
    text, video, poster, *checked = result["content"]  # then the quality check's: tests/test_quality_live.py
    assert [block.get("name", block["type"]) for block in checked] == ["contact-sheet.jpg", "qc.json", "image"]
    assert set(json.loads(text["text"])) == {"status", "video_uri", "duration_seconds", "size_bytes", "watch_url", "qc"}
    assert video["type"] == "resource_link" and video["description"].endswith(
        f"; retained 7 days. Watch it in a browser: {link}"
    )
    assert poster == {
        "type": "resource_link",
        "uri": f"vidforge://videos/{task_id}/poster.jpg",
        "name": "poster.jpg",
        "description": "A frame of the rendered video, as a JPEG: a thumbnail to show before it plays.",
        "mimeType": "image/jpeg",
        "annotations": {"audience": ["user"], "priority": 0.5, "lastModified": video["annotations"]["lastModified"]},
    }
    structured = result["structuredContent"]  # the contract's seven fields, valid for the tool's outputSchema
    assert list(structured) == [*COMPLETED_FIELDS]
    assert structured["video_uri"] == video["uri"] and structured["size_bytes"] == video["size"]
    wire = Wire(server.url, token=VIEWER, tasks=True)
    try:
        (tool,) = [t for t in wire.result("tools/list")["tools"] if t["name"] == "vidforge_render_video"]
        Draft202012Validator(tool["outputSchema"]).validate(structured)

        # The poster through resources/read: a JPEG frame of the video (16:9, at most 1280 x 720); not another's.
        read = wire.result("resources/read", {"uri": poster["uri"]}, name=poster["uri"])
        (contents,) = read["contents"]
        assert contents["mimeType"] == "image/jpeg"
        image = Image.open(io.BytesIO(base64.b64decode(contents["blob"])))
        assert image.format == "JPEG" and image.size == (1280, 720)
        other_id, _ = renders["theirs"]
        foreign_uri = f"vidforge://videos/{other_id}/poster.jpg"
        foreign = wire.call("resources/read", {"uri": foreign_uri}, name=foreign_uri)
        assert foreign["error"]["data"]["machine_code"] == "resource_not_found", foreign

        # A client without the tasks extension reads the link from the status tool's message.
        fallback = Wire(server.url, token=VIEWER)
        status = fallback.tool("vidforge_get_render_status", {"render_id": task_id})["structuredContent"]
        fallback.close()
        assert status["state"] == "succeeded" and status["status_message"].endswith(f"Watch it in a browser: {link}")
    finally:
        wire.close()
    # Direct uploads need a bucket: on the data dir they are refused, naming the settings.
    refused = httpx.post(f"{server.base}/assets/uploads?size_bytes=100", headers={"Authorization": f"Bearer {VIEWER}"})
    assert refused.status_code == 404 and "VIDFORGE_STORAGE_URL" in refused.json()["error"]["details"]["reason"]


def test_the_page_plays_the_video_shows_its_facts_and_downloads_it(server, renders, browser, tmp_path):
    task_id, result = renders["mine"]
    link = watch_link(result)
    viewer = browser.new_context(viewport=SCREEN, timezone_id=VIEWER_ZONE, locale="en-GB", accept_downloads=True)
    page = viewer.new_page()
    served: list[tuple[str, int]] = []  # what the page fetched: (path, status)
    page.on("response", lambda response: served.append((urlsplit(response.url).path, response.status)))
    response = page.goto(link)
    assert response.status == 200
    headers = response.headers
    policy = headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "media-src 'self'" in policy and "default-src 'none'" in policy
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    assert (headers["referrer-policy"], headers["cache-control"]) == ("no-referrer", "no-store")

    text = page.inner_text("main")
    structured = result["structuredContent"]
    for shown in ("MP4", "720p (1280 × 720 pixels)", "4.0 s", size_text(structured["size_bytes"])):
        assert shown in text, (shown, text)
    kept = page.locator("#kept-until time")  # until when, in the viewer's zone: the result's expires_at
    assert kept.get_attribute("datetime") == structured["expires_at"]
    at = datetime.fromisoformat(structured["expires_at"].replace("Z", "+00:00"))
    assert at.astimezone(ZoneInfo(VIEWER_ZONE)).strftime("%H:%M") in kept.inner_text()

    # The poster shows before anything plays; then the video plays (muted: a page may start that without a click).
    shown_until(page, "document.getElementById('video').readyState >= 1")
    poster = page.evaluate(
        """async () => { const image = new Image(); image.src = document.getElementById('video').poster;
        await image.decode(); return [image.naturalWidth, image.naturalHeight]; }"""
    )
    assert poster == [1280, 720]
    page.evaluate("async () => { const v = document.getElementById('video'); v.muted = true; await v.play(); }")
    shown_until(page, "document.getElementById('video').currentTime > 1.0")
    playing = page.evaluate(
        "(() => { const v = document.getElementById('video'); v.pause(); return [v.videoWidth, v.videoHeight, v.duration]; })()"
    )
    assert playing[:2] == [1280, 720] and abs(playing[2] - structured["duration_seconds"]) < 0.1
    video_path = urlsplit(link).path + "/video"
    assert (video_path, 206) in served, served  # a Range request answered, as a media element asks

    page.hover("#video")  # the player's controls show, as for a person's pointer over it
    page.screenshot(path=str(tmp_path / "watch-page.png"), full_page=True, animations="disabled")  # controls shown
    if os.environ.get("VIDFORGE_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(tmp_path / "watch-page.png", REPO / "docs" / "watch-page.png")

    with page.expect_download() as downloading:
        page.click("#download")
    download = downloading.value
    assert download.suggested_filename == "final.mp4"
    saved = Path(download.path()).read_bytes()
    assert saved == (server.data_dir / final_key(task_id, "mp4")).read_bytes()
    assert len(saved) == structured["size_bytes"]

    page.set_viewport_size({"width": 390, "height": 844})  # a phone: one column, nothing wider than the screen
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    viewer.close()


def test_refused_links_open_nothing_and_no_credential_reaches_the_logs(server, renders, browser, ray_tmp):
    task_id, result = renders["mine"]
    other_id, other_result = renders["theirs"]
    link = watch_link(result)
    path, cap = urlsplit(link).path, parse_qs(urlsplit(link).query)["cap"][0]
    key = (server.data_dir / KEY_FILE).read_text().strip()  # the state dir's key: craft the links it would sign
    signer = watch_signer(Config(review_key=key))
    assert signer is not None
    expired = signer.token(ReviewCapability(task_id, RESULT_ROUND, int(time.time()) - 1))
    review_link = ReviewSigner(key).token(ReviewCapability(task_id, RESULT_ROUND, int(time.time()) + 3600))
    tampered = cap[:-3] + ("AAA" if not cap.endswith("AAA") else "BBB")
    page = browser.new_page(timezone_id=VIEWER_ZONE, locale="en-GB")
    refused = [
        (f"{path}?cap={tampered}", 403, "not valid"),
        (f"/watch/{other_id}?cap={cap}", 403, "not valid"),  # this task's link on another task's page
        (f"{path}?cap={review_link}", 403, "not valid"),  # a review link of the same task
        (path, 403, "not valid"),
        (f"{path}?cap={expired}", 410, "expired"),
    ]
    for target, status, words in refused:
        response = page.goto(server.base + target)
        assert response.status == status, target
        assert words in page.inner_text("h1") and response.headers["cache-control"] == "no-store"
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert page.locator("video").count() == 0
    stopped = datetime.fromisoformat(page.locator("time").get_attribute("datetime").replace("Z", "+00:00"))
    assert stopped.astimezone(ZoneInfo(VIEWER_ZONE)).strftime("%H:%M") in page.inner_text("main")
    page.close()
    # The files need the same capability: no byte of the video or the poster without it.
    for suffix in ("/video", "/download", "/poster.jpg"):
        for bad in (tampered, expired, review_link):
            answer = httpx.get(f"{server.base}{path}{suffix}", params={"cap": bad}, timeout=60)
            assert answer.status_code in (403, 410) and answer.headers["content-type"].startswith("text/html")
    # And the other principal's own link opens its own video, not this one.
    theirs = httpx.get(watch_link(other_result), timeout=60)
    assert theirs.status_code == 200 and other_id in theirs.text and task_id not in theirs.text

    secrets = [
        *TOKENS,
        cap,
        tampered,
        expired,
        review_link,
        parse_qs(urlsplit(watch_link(other_result)).query)["cap"][0],
    ]
    lines = log_lines(server, ray_tmp, '"render_ended"', task_id)
    leaked = [line for line in lines for secret in secrets if secret in line]
    assert not leaked, leaked


def shown_until(page, condition: str) -> None:
    """Wait until `condition` holds in the page, asked from here: Playwright's in-page waiting evaluates a string,
    which the page's Content-Security-Policy rightly forbids (no 'unsafe-eval')."""
    wait_until(lambda: page.evaluate(condition), DEADLINE_S, interval=0.1, message=condition)


def log_lines(server: ServerProcess, ray_tmp: Path, *awaited: str) -> list[str]:
    """Every line the server and its Ray session logged, once one holds all of `awaited` (Ray's workers reach their
    files a moment after the event)."""

    def read() -> list[str] | None:
        sessions = [p for p in ray_tmp.glob("ray/session_*") if not p.is_symlink()]
        files = [server.log_path, *(p for session in sessions for p in session.glob("logs/**/*") if p.is_file())]
        lines = [line for path in files for line in path.read_text(errors="replace").splitlines()]
        return lines if any(all(text in line for text in awaited) for line in lines) else None

    return wait_until(read, DEADLINE_S, interval=0.5, message=f"a log line holding {awaited}")
