"""The watermark review page in a real browser (headless Debian Chromium driven by Playwright) against a live
`vidforge serve`: the link comes from a real `tasks/get` status message, the person approves or rejects on the page,
and the agent sees the outcome; refused links (tampered, expired, another task's) and a cross-site POST change
nothing. On a 1200 x 900 screen the buttons are in view without scrolling, the watermark's box is outlined on the
preview where the renderer puts it, and times show in the viewer's own time zone. Saves a screenshot in the test's
tmp dir; `make docs-screenshot` (VIDFORGE_DOCS_SCREENSHOT=1) also copies it to docs/review-page.png for the README,
which a plain test run leaves as it is. Also the front page (`/`) on the same server, in the same browser."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

import httpx
import pytest

from mcp_protocol.identity import server_version
from render_kernels.compose import Watermark
from render_kernels.spec import WatermarkSpec
from serve_app.ingress.review.capability import ReviewCapability, ReviewSigner
from serve_app.launch._review_key import KEY_FILE
from tests.harness import REPO, TERMINAL, LoopbackSite, Wire, poll_task, upload, validate
from tests.media import make_clip, make_watermark_png

pytestmark = pytest.mark.ray

TOKENS = {"tok-reviewer": "reviewer"}  # also the shared server's (conftest.py)
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LINK = re.compile(r"http://127\.0\.0\.1:\d+/review/task_[A-Za-z0-9_-]+\?cap=[0-9.]+[A-Za-z0-9_-]{43}")
URL_MODE = {"elicitation": {"form": {}, "url": {}}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
SCREEN = {"width": 1200, "height": 900}  # a laptop's browser window: the buttons must be in view in it
VIEWER_ZONE = "Asia/Kolkata"  # UTC+05:30: its local hour and minute both differ from UTC's
# The outline's rectangle on the screen, as drawn (its line's centre; a bounding box would include the line's width).
OUTLINE_GEOMETRY = """() => {
    const rect = document.getElementById("watermark-outline");
    const shape = rect.getBBox(), svg = rect.ownerSVGElement.getBoundingClientRect();
    return {x: svg.x + shape.x, y: svg.y + shape.y, width: shape.width, height: shape.height};
}"""


def installed_chromium() -> Path | None:
    """/usr/bin/chromium, installed with apt-get when it is missing and this test may (root, apt-get present)."""
    if not CHROMIUM.exists() and shutil.which("apt-get") and Path("/").stat().st_uid == 0:
        subprocess.run(["apt-get", "install", "-y", "chromium", "chromium-driver"], capture_output=True, timeout=900)
    return CHROMIUM if CHROMIUM.exists() else None


@pytest.fixture(scope="module")
def browser():
    executable = installed_chromium()
    if executable is None:
        pytest.skip("no Chromium: /usr/bin/chromium is missing and `apt-get install chromium` was not possible")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(executable), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def server(shared_server):
    return shared_server


@pytest.fixture(scope="module")
def assets(server, tmp_path_factory):
    root = tmp_path_factory.mktemp("media")
    clip = make_clip(str(root / "clip.mp4"), seconds=2.0, width=320, height=180, audio=True)
    logo = make_watermark_png(str(root / "logo.png"), w=64, h=32, rgba=(255, 0, 0, 255))
    return {"clip": upload(server, clip, "tok-reviewer"), "logo": upload(server, logo, "tok-reviewer"), "png": logo}


@pytest.fixture
def wire(server) -> Iterator[Wire]:
    wire = Wire(server.url, token="tok-reviewer", tasks=True, elicitation=False)
    yield wire
    wire.close()


def awaiting_approval(wire: Wire, assets: dict[str, str]) -> tuple[str, str]:
    """A watermarked render paused for approval: (task id, the review link its `tasks/get` status message gives)."""
    args = {
        "source_asset_uri": assets["clip"],
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": assets["logo"], "position": "bottom_right", "opacity": 0.6},
    }
    task_id = wire.tool("vidforge_render_video", args)["taskId"]
    waiting = poll_task(wire, task_id, lambda t: t["status"] == "input_required")
    link = LINK.search(waiting["statusMessage"])
    assert link is not None and f"/review/{task_id}?" in link[0], waiting["statusMessage"]
    return task_id, link[0]


def status_of(wire: Wire, task_id: str) -> str:
    return wire.task("tasks/get", task_id)["result"]["status"]


def test_approve_on_the_page_and_the_render_completes_with_the_watermark(server, assets, wire, browser, tmp_path):
    task_id, link = awaiting_approval(wire, assets)
    # A request declaring URL elicitation (with form too) gets URL mode, pointing at the same link.
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": URL_MODE,
    }
    asked = wire.call("tasks/get", {"taskId": task_id, "_meta": meta}, name=task_id)["result"]
    request = asked["inputRequests"]["watermark-approval-1"]
    validate(request["params"], "core", "ElicitRequestURLParams")
    assert request["params"]["mode"] == "url" and request["params"]["url"] == link

    viewer = browser.new_context(viewport=SCREEN, timezone_id=VIEWER_ZONE, locale="en-GB")
    page = viewer.new_page()
    response = page.goto(link)
    assert response.status == 200
    headers = response.headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"] and headers["x-frame-options"] == "DENY"
    assert (headers["referrer-policy"], headers["cache-control"]) == ("no-referrer", "no-store")
    page.wait_for_load_state("load")
    sizes = page.eval_on_selector_all("img", "images => images.map(i => [i.id, i.naturalWidth, i.naturalHeight])")
    assert sorted(sizes) == [["preview", 1280, 720], ["source", 1280, 720]]  # the output resolution, both loaded
    text = page.inner_text("main")
    for shown in ("bottom right", "60%", "MP4", "720p (1280 × 720 pixels)", "2.0 s", "Time left to decide", "minutes"):
        assert shown in text, shown
    for word in ("principal", "input_required", "awaiting", "task_"):  # the wire's words, not the person's
        assert word not in page.inner_text(".panel"), word

    # Approve and Reject are in view as the page opens, without scrolling.
    assert page.evaluate("window.scrollY") == 0
    for name in ("Approve", "Reject"):
        box = page.get_by_role("button", name=name).bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= SCREEN["height"], (name, box)
        assert box["x"] >= 0 and box["x"] + box["width"] <= SCREEN["width"], (name, box)

    # The outline sits over the preview where the renderer blends the watermark in (bottom right, 12 % high).
    x, y, w, h = Watermark(WatermarkSpec(assets["png"], "bottom_right", 0.6), 1280, 720, colorspace=1).box
    image = page.locator("#preview").bounding_box()
    outline = page.evaluate(OUTLINE_GEOMETRY)
    assert image is not None
    scale = image["width"] / 1280
    expected = (x * scale, y * scale, w * scale, h * scale)
    shown_box = (outline["x"] - image["x"], outline["y"] - image["y"], outline["width"], outline["height"])
    assert all(abs(a - b) <= 0.5 for a, b in zip(shown_box, expected)), (shown_box, expected)

    # The deadline in the viewer's zone: the page's script rewrote the UTC time the server wrote.
    deadline = page.locator("#time-left time")
    at = datetime.fromisoformat(deadline.get_attribute("datetime").replace("Z", "+00:00"))
    shown_time = deadline.inner_text()
    assert at.astimezone(ZoneInfo(VIEWER_ZONE)).strftime("%H:%M") in shown_time, shown_time
    assert at.strftime("%H:%M") not in shown_time and "UTC" not in shown_time, shown_time

    page.screenshot(path=str(tmp_path / "review-page.png"), full_page=True)
    if os.environ.get("VIDFORGE_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(tmp_path / "review-page.png", REPO / "docs" / "review-page.png")

    page.set_viewport_size({"width": 390, "height": 844})  # a phone: one column, nothing wider than the screen
    assert page.evaluate("document.documentElement.scrollWidth") <= 390

    page.get_by_label("Note (optional").focus()
    page.keyboard.press("Tab")  # keyboard only: the Approve button is the next stop
    assert page.evaluate("document.activeElement.textContent") == "Approve"
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "Approved" in page.inner_text("#decision") and page.locator("form").count() == 0
    decided = datetime.fromisoformat(page.locator("#decision time").get_attribute("datetime").replace("Z", "+00:00"))
    assert decided.astimezone(ZoneInfo(VIEWER_ZONE)).strftime("%H:%M") in page.inner_text("#decision")

    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is False, done
    assert done["result"]["structuredContent"]["watermark_applied"] is True
    # The link, replayed: the page shows the decision read-only; the same decision again is a no-op, another one
    # is refused as already recorded, and nothing changes.
    assert page.goto(link).status == 200 and "Approved" in page.inner_text("#decision")
    cap = parse_qs(urlsplit(link).query)["cap"][0]
    path = urlsplit(link).path
    same = httpx.post(server.base + path, data={"cap": cap, "decision": "approve"}, follow_redirects=False)
    assert same.status_code == 303
    other = httpx.post(server.base + path, data={"cap": cap, "decision": "reject", "note": "late"})
    assert other.status_code == 409 and "approval_already_recorded" in other.text
    assert status_of(wire, task_id) == "completed" and done == poll_task(wire, task_id, lambda t: True)
    viewer.close()


def foreign_site(action: str, cap: str) -> LoopbackSite:
    """A page on another origin (another loopback port) whose form posts a decision to the review page."""
    form = (
        f'<form method="post" action="{action}"><input type="hidden" name="cap" value="{cap}">'
        '<button name="decision" value="approve" id="go">Win a prize</button></form>'
    ).encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(form)

        def log_message(self, *args: object) -> None:
            pass

    return LoopbackSite(Page)


def test_refused_links_change_nothing_and_a_rejection_with_a_note_reaches_the_agent(server, assets, wire, browser):
    task_id, link = awaiting_approval(wire, assets)
    other_id, other_link = awaiting_approval(wire, assets)
    page = browser.new_page(timezone_id=VIEWER_ZONE, locale="en-GB")
    path, cap = urlsplit(link).path, parse_qs(urlsplit(link).query)["cap"][0]
    key = (server.data_dir / KEY_FILE).read_text().strip()  # the state dir's key: craft a capability that expired
    expired = ReviewSigner(key).token(ReviewCapability(task_id, 1, int(time.time()) - 1))
    tampered = cap[:-3] + ("AAA" if not cap.endswith("AAA") else "BBB")
    refused = [
        (f"{server.base}{path}?cap={tampered}", 403, "not valid"),
        (f"{server.base}/review/{other_id}?cap={cap}", 403, "not valid"),  # this task's link on another task
        (f"{server.base}{path}?cap={expired}", 410, "expired"),
        (f"{server.base}{path}", 403, "not valid"),
    ]
    for url, status, words in refused:
        response = page.goto(url)
        assert response.status == status, url
        assert words in page.inner_text("h1") and response.headers["cache-control"] == "no-store"
        assert page.locator("form").count() == 0
    page.goto(f"{server.base}{path}?cap={expired}")  # when it stopped working, in the viewer's zone
    stopped = datetime.fromisoformat(page.locator("time").get_attribute("datetime").replace("Z", "+00:00"))
    assert stopped.astimezone(ZoneInfo(VIEWER_ZONE)).strftime("%H:%M") in page.inner_text("main")
    page.goto(f"{server.base}{path}/preview.png?cap={tampered}")  # the images need the same capability
    assert "not valid" in page.inner_text("h1")

    site = foreign_site(server.base + path, cap)  # a cross-site POST with a valid capability
    try:
        page.goto(site.origin + "/")
        with page.expect_navigation():
            page.click("#go")
        assert "another site" in page.inner_text("h1")
    finally:
        site.close()
    assert status_of(wire, task_id) == status_of(wire, other_id) == "input_required"

    # A 2025-era client reads the same link from the fallback status tool (its status_message).
    legacy = httpx.post(
        server.url,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "vidforge_get_render_status", "arguments": {"render_id": other_id}},
        },
        headers={
            "Authorization": "Bearer tok-reviewer",
            "MCP-Protocol-Version": "2025-11-25",
            "Accept": "application/json, text/event-stream",
        },
    ).json()["result"]["structuredContent"]
    assert legacy["status_message"].endswith(f"Review the preview and decide in a browser: {other_link}")
    assert legacy["watermark_preview_uri"] == f"vidforge://renders/{other_id}/watermark-preview.png"

    page.goto(link)
    page.get_by_label("Note (optional").fill("Make the logo smaller, please")
    with page.expect_navigation():
        page.get_by_role("button", name="Reject").click()
    assert "Rejected" in page.inner_text("#decision") and "Make the logo smaller" in page.inner_text("main")
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    result = done["result"]
    assert done["status"] == "completed" and result["isError"] is True
    assert result["structuredContent"]["code"] == "watermark_rejected"
    assert "Make the logo smaller, please" in result["content"][0]["text"]
    wire.tool("vidforge_cancel_render", {"render_id": other_id})
    page.close()


def test_the_front_page_says_what_this_server_is_without_a_token(server, browser):
    page = browser.new_page()
    response = page.goto(server.base + "/")
    assert response.status == 200 and response.headers["content-type"].startswith("text/html")
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert page.inner_text("#version") == server_version() and page.inner_text("#mcp-url") == server.url
    # Its stylesheet is allowed by its CSP and served: the page is styled.
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(246, 247, 249)"
    assert all(token not in page.content() for token in TOKENS)
    # The endpoints it links to: readiness answers without a token; health, like /mcp, asks for one.
    assert page.goto(server.base + "/readyz").status == 200
    assert page.goto(server.base + "/healthz").status == 401
    page.close()
