"""vidforge's MCP App (`io.modelcontextprotocol/ui`, the view `ui://vidforge/render`) in a real browser host against a
live `vidforge serve` (the session's shared server).

The host is tests/clients/apps_host: the official ext-apps AppBridge and TypeScript SDK client (built by `make
clients`), on a page served from its own loopback origin. Its client talks to that origin's `/mcp`, which the test
forwards to vidforge's (`page.route`), as a real host's backend would; the bearer token stays in the host. The view runs
in a sandboxed iframe under the CSP the host builds from the resource's `_meta.ui.csp`, follows the render through the
bridge, shows the watermark preview beside the source frame, and takes the person's decision:

- approved (by keyboard), the render finishes and the view plays its stream (hls.js) and links its download; it goes
  full screen and back, and a forged link fails closed with a message and fresh links that work;
- rejected with a note, the view says so (a view that is never handed the call's result finds the render by the
  call's idempotency key);
- another principal's render id gets the contract's refusal in the view, and no media.

Saves a screenshot in the test's tmp dir; with VIDFORGE_DOCS_SCREENSHOT=1 also copies it to docs/mcp-app.png.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler

import pytest

from tests import test_review_page
from tests.harness import REPO, LoopbackSite, upload
from tests.media import make_clip, make_watermark_png

pytestmark = pytest.mark.ray

browser = test_review_page.browser  # the module's Chromium, launched as for the review page

TOKEN, OTHER = "tok-mcp-app", "tok-mcp-app-other"
TOKENS = {TOKEN: "mcp-app", OTHER: "mcp-app-other"}  # on the session's shared server (tests/conftest.py)
HOST_DIR = REPO / "tests" / "clients" / "apps_host"
RENDER = "vidforge_render_video"
APPROVE = "vidforge_approve_watermark"
SCREEN = {"width": 1100, "height": 1000}
WAIT_MS = 240_000  # a render on the loaded 2-core machine, from the call to its end
# What the host's page forwards to vidforge: the request's own headers, less the browser's (a backend sends its own).
DROPPED_HEADERS = {"host", "origin", "referer", "cookie", "content-length", "connection", "accept-encoding"}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Iterator[LoopbackSite]:
    """The host page (host.html and its built dist/host.js) on a loopback origin of its own."""
    built = HOST_DIR / "dist" / "host.js"
    if not built.exists():
        pytest.fail("tests/clients/apps_host/dist/host.js is missing: run `make clients`")
    root = tmp_path_factory.mktemp("apps-host")
    (root / "dist").mkdir()
    shutil.copyfile(HOST_DIR / "host.html", root / "host.html")
    shutil.copyfile(built, root / "dist" / "host.js")
    site = LoopbackSite(partial(_Quiet, directory=str(root)))
    yield site
    site.close()


@pytest.fixture(scope="module")
def assets(shared_server, tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("mcp-app-media")
    clip = make_clip(str(root / "clip.mp4"), seconds=2.0, width=640, height=360, audio=True)
    logo = make_watermark_png(str(root / "logo.png"), w=64, h=32, rgba=(255, 0, 0, 255))
    return {"clip": upload(shared_server, clip, TOKEN), "logo": upload(shared_server, logo, TOKEN)}


def open_host(browser, host: LoopbackSite, server, options: str = "", token: str = TOKEN):
    """A page on the host's origin whose `/mcp` goes to vidforge's: a POST (or DELETE) forwarded with the client's
    headers (its bearer token among them), a GET (the optional standalone stream) answered 405 as a host that offers
    none would. `options`: more of the host page's query (host.ts: its theme, its protocol negotiation)."""
    context = browser.new_context(viewport=SCREEN, locale="en-GB")
    page = context.new_page()
    problems: list[str] = []
    page.versions = set()  # the MCP-Protocol-Version of every request forwarded
    page.on("pageerror", lambda error: problems.append(f"pageerror: {error}"))
    # The view's console (its frame is about:srcdoc): a CSP violation or a script error there is a problem.
    page.on(
        "console",
        lambda message: (
            problems.append(f"view console: {message.text}")
            if message.type == "error" and message.location.get("url", "").startswith("about:srcdoc")
            else None
        ),
    )

    def forward(route) -> None:
        request = route.request
        if request.method == "GET":
            route.fulfill(status=405, headers={"Allow": "POST, DELETE"}, body="")
            return
        headers = {k: v for k, v in request.headers.items() if k.lower() not in DROPPED_HEADERS}
        page.versions.add(headers.get("mcp-protocol-version"))
        response = route.fetch(url=server.url, headers=headers, timeout=120_000)
        route.fulfill(response=response)

    page.route(f"{host.origin}/mcp", forward)
    page.goto(f"{host.origin}/host.html?token={token}{options}")
    page.wait_for_function("() => window.host !== undefined")
    return context, page, problems


def call_in_view(page, name: str, args: dict):
    """Calls tool `name` through the host, which shows its view: (the tool's result, the view's frame)."""
    result = page.evaluate("([name, args]) => window.host.callTool(name, args)", [name, args])
    frame = page.wait_for_selector("iframe.app-frame").content_frame()
    assert frame is not None
    return result, frame


def render_in_view(page, assets: dict[str, str], **extra):
    """A render with a watermark, called through the host (`extra`: more of its arguments)."""
    args = {
        "source_asset_uri": assets["clip"],
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": assets["logo"], "position": "bottom_right", "opacity": 0.6},
        **extra,
    }
    result, frame = call_in_view(page, RENDER, args)
    assert result.get("isError") is not True, result
    return result, frame


def shown(frame, condition: str, timeout: int = WAIT_MS) -> None:
    frame.wait_for_function(condition, timeout=timeout)


def calls_of(page, name: str) -> list[dict]:
    return [entry for entry in page.evaluate("window.host.log") if entry["name"] == name]


def text_of(frame, selector: str) -> str:
    return frame.eval_on_selector(selector, "el => el.textContent")


def test_the_view_follows_a_render_to_approval_and_plays_the_video(shared_server, host, assets, browser, tmp_path):
    context, page, problems = open_host(browser, host, shared_server)
    # With a stream beside the file (one rung, the render's size): the view plays the stream.
    result, frame = render_in_view(page, assets, streaming={"ladder": ["720p"], "segment_s": 2})
    render_id = result["structuredContent"]["render_id"]
    assert page.versions & {"2025-11-25", "2025-06-18"} and "2026-07-28" not in page.versions, page.versions

    # The view asks for the status through the bridge and shows the progress until the render waits for approval.
    frame.evaluate(
        """() => { window.seenProgress = false;
        const check = () => { const panel = document.getElementById('progress-panel');
            if (!panel.hidden) window.seenProgress = true; };
        check(); new MutationObserver(check).observe(document.body, {attributes: true, subtree: true}); }"""
    )
    shown(frame, "() => !document.getElementById('approve').hidden && !document.getElementById('approval').hidden")
    shown(
        frame,
        """() => ['preview', 'source-frame'].every(id => {
            const image = document.getElementById(id); return image.complete && image.naturalWidth > 0; })""",
        timeout=30_000,
    )
    sizes = frame.eval_on_selector_all("#approval img", "images => images.map(i => [i.id, i.naturalWidth])")
    assert sorted(sizes) == [["preview", 1280], ["source-frame", 1280]], sizes
    assert "approval" in text_of(frame, "#state").lower()
    statuses = [entry for entry in calls_of(page, "vidforge_get_render_status") if "result" in entry]
    assert statuses and all(entry["arguments"] == {"render_id": render_id} for entry in statuses)
    views = [entry["result"].get("_meta", {}).get("com.vidforge/view") for entry in statuses]
    assert views[-1] is not None and set(views[-1]["links"]) >= {"preview", "source_frame"}, views[-1]

    # The token stays with the host: the view's document and the links it was handed hold none of it.
    assert TOKEN not in frame.content()
    assert TOKEN not in page.evaluate("document.querySelector('iframe.app-frame').srcdoc")

    # Keyboard only: focus the Approve button and press Enter.
    frame.focus("#approve")
    assert frame.evaluate("document.activeElement.id") == "approve"
    frame.press("#approve", "Enter")
    shown(frame, "() => document.getElementById('state').textContent.includes('Finished')")
    assert frame.evaluate("window.seenProgress") is True  # the bar showed while it rendered

    approvals = calls_of(page, APPROVE)
    assert len(approvals) == 1 and approvals[0]["arguments"] == {"render_id": render_id, "approved": True}
    answer = approvals[0]["result"]
    assert answer.get("isError") is not True and answer["structuredContent"]["approved"] is True, answer

    # The video plays from its stream (hls.js, through Media Source Extensions: a blob: source); the download link is
    # the server's; the facts are shown.
    shown(frame, "() => document.getElementById('video').readyState >= 1", timeout=30_000)
    assert frame.evaluate("document.getElementById('video').currentSrc").startswith("blob:")
    seen = calls_of(page, "vidforge_get_render_status")[-1]["result"]["_meta"]["com.vidforge/view"]
    assert seen["links"]["hls"].startswith(shared_server.base + f"/watch/{render_id}/stream/"), seen
    frame.evaluate("async () => { const v = document.getElementById('video'); v.muted = true; await v.play(); }")
    shown(frame, "() => document.getElementById('video').currentTime > 0.5", timeout=30_000)
    width, height = frame.evaluate(
        "[document.getElementById('video').videoWidth, document.getElementById('video').videoHeight]"
    )
    assert (width, height) == (1280, 720)
    download = frame.get_attribute("#download", "href")
    assert download is not None and download.startswith(shared_server.base + "/"), download
    facts = text_of(frame, "#facts")
    assert "Duration" in facts and "Watermark applied" in facts and "yes" in facts, facts
    assert frame.is_hidden("#error") and TOKEN not in frame.content()

    frame.evaluate("document.getElementById('video').pause()")

    # Full screen when the host offers it, and back.
    frame.click("#display-mode")
    page.wait_for_selector("iframe.app-frame.fullscreen")
    shown(frame, "() => document.getElementById('display-mode').textContent === 'Back to inline'", timeout=10_000)
    frame.click("#display-mode")
    page.wait_for_selector("iframe.app-frame:not(.fullscreen)")

    # A forged link fails closed: the server refuses it, and the view says so and offers fresh links, which work.
    sheet = frame.get_attribute("#contact-sheet", "src")
    frame.evaluate("src => { document.getElementById('contact-sheet').src = src; }", sheet.replace("cap=", "cap=9"))
    shown(frame, "() => !document.getElementById('error').hidden", timeout=30_000)
    assert "expired or was refused" in text_of(frame, "#error-text")
    frame.click("#retry")
    shown(frame, "() => document.getElementById('error').hidden", timeout=30_000)
    shown(frame, "() => document.getElementById('contact-sheet').naturalWidth > 0", timeout=30_000)
    problems[:] = [p for p in problems if "403" not in p]  # the forged link's own refusal, logged by the frame

    page.screenshot(path=str(tmp_path / "mcp-app.png"), full_page=True, animations="disabled")
    if os.environ.get("VIDFORGE_DOCS_SCREENSHOT") == "1":
        shutil.copyfile(tmp_path / "mcp-app.png", REPO / "docs" / "mcp-app.png")
    assert page.evaluate("window.host.errors") == [] and problems == []
    context.close()


def test_a_rejection_with_a_note_shows_in_the_view(shared_server, host, assets, browser):
    # A dark host on the 2026-07-28 wire, which declares the extension on each request (the first test's host speaks
    # the 2025 handshake), and which hands the view the call's input only, as a host running it as a task does: the
    # view looks the render up by the call's idempotency key.
    context, page, problems = open_host(browser, host, shared_server, "&theme=dark&negotiation=auto&result=withheld")
    result, frame = render_in_view(page, assets, idempotency_key=uuid.uuid4().hex)
    render_id = result["structuredContent"]["render_id"]
    shown(frame, "() => !document.getElementById('approval').hidden")
    assert frame.evaluate("document.documentElement.dataset.theme") == "dark"
    assert "2026-07-28" in page.versions, page.versions
    background = frame.evaluate("getComputedStyle(document.body).backgroundColor")
    assert sum(map(int, background[background.index("(") + 1 : background.index(")")].split(",")[:3])) < 150

    note = "Make the <b>logo</b> smaller, please"  # shown as text, never as markup
    frame.fill("#note", note)
    frame.click("#reject")
    shown(frame, "() => document.getElementById('state').textContent.includes('Rejected')")
    shown(frame, "() => document.getElementById('outcome').textContent.includes('smaller')", timeout=30_000)
    assert note in text_of(frame, "#outcome") and frame.locator("#outcome b").count() == 0
    lookups = calls_of(page, RENDER)  # the view's own call: the same render, not a new one
    assert len(lookups) == 1 and lookups[0]["result"]["structuredContent"]["render_id"] == render_id, lookups
    rejections = calls_of(page, APPROVE)
    assert len(rejections) == 1
    assert rejections[0]["arguments"] == {"render_id": render_id, "approved": False, "note": note}
    # The view follows the render to its end: the last status it read is terminal, and nothing plays.
    shown(
        frame,
        """() => { const s = document.getElementById('state').textContent;
            return s.includes('render stopped'); }""",
        timeout=WAIT_MS,
    )
    last = calls_of(page, "vidforge_get_render_status")[-1]["result"]["structuredContent"]
    assert last["terminal"] is True and last["state"] in ("cancelled", "failed"), last
    assert frame.is_hidden("#result")
    assert page.evaluate("window.host.errors") == [] and problems == []
    context.close()


def test_another_principals_render_gets_the_refusal_in_the_view_and_no_media(shared_server, host, assets, browser):
    context, page, problems = open_host(browser, host, shared_server)
    result, frame = render_in_view(page, assets)
    render_id = result["structuredContent"]["render_id"]
    shown(frame, "() => !document.getElementById('approval').hidden")
    context.close()

    context, page, problems = open_host(browser, host, shared_server, token=OTHER)
    result, frame = call_in_view(page, "vidforge_get_render_status", {"render_id": render_id})
    assert result["isError"] is True and result["structuredContent"]["code"] == "render_not_found", result
    shown(frame, "() => !document.getElementById('error').hidden", timeout=30_000)
    assert text_of(frame, "#error-text") == result["structuredContent"]["message"]  # the contract's own words
    assert frame.evaluate("[...document.querySelectorAll('img, video')].every(e => !e.getAttribute('src'))")
    assert frame.is_hidden("#approval") and frame.is_hidden("#result")
    context.close()
