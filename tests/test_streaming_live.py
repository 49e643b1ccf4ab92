"""A streamed render end to end, over real HTTP against a real `vidforge serve` (the session's shared server): the
render argument asks for a ladder, the render's segment tasks encode it, its mux packages it, and

- an agent reads the stream back through MCP alone: the master playlist parses (the `m3u8` library), every rung it
  names plays frame-exact from the resources it links, and another principal reads none of it;
- a person opens the render's watch page in a real browser (headless Debian Chromium, Playwright): the page's own
  hls.js plays the stream through the signed players' link, is forced through every rung and keeps playing, and
  its scrub bar shows the storyboard's tile for a moment and seeks there; without Media Source Extensions the page
  plays the stream natively where the browser can, and the file where it cannot;
- dash.js, the DASH reference player (pinned in tests/clients/node), plays the manifest in the same browser.
"""

from __future__ import annotations

import base64
import io
import json

import av
import m3u8
import pytest
from PIL import Image

from mcp_protocol.streams import STREAM_META_KEY
from tests import test_review_page
from tests.harness import REPO, Wire, poll_task, upload
from tests.media import make_clip
from tests.test_watch_page import shown_until

pytestmark = pytest.mark.ray

browser = test_review_page.browser  # the module's Chromium, launched as for the review page

RENDER = "vidforge_render_video"
TOKEN, OTHER = "tok-stream", "tok-stream-other"
TOKENS = {TOKEN: "streaming", OTHER: "streaming-other"}  # on the session's shared server (tests/conftest.py)
SECONDS, FPS = 8, 24
LADDER = [(1280, 720), (854, 480), (640, 360)]
DASH_JS = (
    REPO / "tests" / "clients" / "node" / "node_modules" / "dashjs" / "dist" / "modern" / "umd" / "dash.all.min.js"
)
VIDEO = "document.getElementById('video')"


def read(wire: Wire, uri: str) -> dict:
    return wire.result("resources/read", {"uri": uri}, uri)["contents"][0]


@pytest.fixture(scope="module")
def streamed(shared_server, tmp_path_factory) -> dict:
    """One streamed render of an 8 s clip with sound: its finished result."""
    clip = make_clip(
        str(tmp_path_factory.mktemp("stream") / "clip.mp4"),
        seconds=SECONDS,
        width=640,
        height=360,
        fps=FPS,
        gop=FPS * 2,
    )
    wire = Wire(shared_server.url, token=TOKEN, tasks=True)
    arguments = {
        "source_asset_uri": upload(shared_server, clip, TOKEN),
        "output_format": "webm",  # the file's audio is Opus; the stream's is AAC all the same
        "resolution": "720p",
        "streaming": {"ladder": ["360p", "720p", "480p"], "segment_s": 1},
    }
    task_id = wire.tool(RENDER, arguments)["taskId"]
    done = poll_task(wire, task_id, lambda task: task["status"] in ("completed", "failed", "cancelled"))
    wire.close()
    assert done["status"] == "completed" and done["result"]["isError"] is False, done
    return done["result"]


def test_a_streamed_render_is_read_and_played_through_mcp(shared_server, streamed):
    wire = Wire(shared_server.url, token=TOKEN, tasks=True)
    stream = streamed["_meta"][STREAM_META_KEY]
    assert stream["ladder"] == ["720p", "480p", "360p"]
    master_text = read(wire, stream["hls"])
    assert master_text["mimeType"] == "application/vnd.apple.mpegurl"
    master = m3u8.loads(master_text["text"])
    assert [variant.stream_info.resolution for variant in master.playlists] == LADDER
    assert all(variant.stream_info.codecs.endswith(",mp4a.40.2") for variant in master.playlists)
    base = stream["hls"].rsplit("/", 1)[0]
    for variant in master.playlists:
        media = m3u8.loads(read(wire, f"{base}/{variant.uri}")["text"])
        assert media.playlist_type == "vod" and media.is_endlist
        body = base64.b64decode(read(wire, f"{base}/{media.segments[0].init_section.uri}")["blob"])
        for segment in media.segments:
            body += base64.b64decode(read(wire, f"{base}/{segment.uri}")["blob"])
        with av.open(io.BytesIO(body), format="mp4") as played:
            video = played.streams.video[0]
            assert (video.width, video.height) == variant.stream_info.resolution
            assert sum(1 for _ in played.decode(video)) == SECONDS * FPS
    assert read(wire, stream["dash"])["mimeType"] == "application/dash+xml"
    storyboard = read(wire, stream["storyboard"])
    assert storyboard["mimeType"] == "text/vtt" and storyboard["text"].startswith("WEBVTT")
    assert "\nstoryboard.jpg#xywh=0,0,160,90\n" in storyboard["text"]  # its tiles' sprite, beside it
    sprite = read(wire, f"{base}/storyboard.jpg")
    assert Image.open(io.BytesIO(base64.b64decode(sprite["blob"]))).format == "JPEG"
    preview = Image.open(io.BytesIO(base64.b64decode(read(wire, stream["preview"])["blob"])))
    assert preview.format == "WEBP" and preview.is_animated and preview.width == 480
    other = Wire(shared_server.url, token=OTHER)
    refused = other.call("resources/read", {"uri": stream["hls"]}, stream["hls"])
    assert refused["error"]["data"]["machine_code"] == "resource_not_found"


def test_the_watch_pages_hls_js_plays_every_rung_and_scrubs_with_the_storyboard(streamed, browser):
    page = browser.new_page()
    assert page.goto(json.loads(streamed["content"][0]["text"])["watch_url"]).status == 200
    shown_until(page, "!!window.vidforgeStream && window.vidforgeStream.levels.length === 3")
    assert page.evaluate(f"{VIDEO}.dataset.player") == "hls.js"
    heights = page.evaluate("window.vidforgeStream.levels.map((level) => level.height)")
    assert sorted(heights) == sorted(height for _, height in LADDER)
    page.evaluate(
        """() => { window.buffered = []; const hls = window.vidforgeStream;
        hls.on(window.Hls.Events.FRAG_BUFFERED, (_, data) => window.buffered.push(data.frag.level)); }"""
    )
    page.evaluate(f"async () => {{ {VIDEO}.muted = true; await {VIDEO}.play(); }}")
    shown_until(page, f"{VIDEO}.currentTime > 0.3")
    for level, height in enumerate(heights):  # each rung forced in turn, from a moment of its own
        spot = 1.0 + 2 * level
        page.evaluate(f"() => {{ window.vidforgeStream.currentLevel = {level}; {VIDEO}.currentTime = {spot}; }}")
        shown_until(page, f"window.buffered.includes({level}) && {VIDEO}.videoHeight === {height}")
        shown_until(page, f"{VIDEO}.currentTime > {spot + 0.3} && !{VIDEO}.paused")  # and it keeps playing
    assert page.evaluate(f"{VIDEO}.src").startswith("blob:")  # through Media Source Extensions, not the file

    page.evaluate(f"{VIDEO}.pause()")
    page.evaluate(
        "() => { const s = document.getElementById('scrub'); s.value = '5'; s.dispatchEvent(new Event('input')); }"
    )
    hidden, image, position, at = page.evaluate(
        """(() => { const t = document.getElementById('scrub-tile');
        return [t.hidden, t.style.backgroundImage, t.style.backgroundPosition, t.dataset.at]; })()"""
    )
    assert not hidden and "/stream/" in image and "storyboard.jpg" in image and at == "5"
    assert position == "-800px 0px"  # the sixth tile of the row: the segment from 5 s
    assert abs(page.evaluate(f"{VIDEO}.currentTime") - 5) < 0.1  # and the video went there
    sprite = page.evaluate(
        """async (url) => { const image = new Image(); image.src = url; await image.decode();
        return [image.naturalWidth, image.naturalHeight]; }""",
        image.removeprefix('url("').removesuffix('")'),
    )
    assert sprite == [SECONDS * 160, 90]
    page.close()


NO_MSE = "delete window.MediaSource; delete window.ManagedMediaSource;"
NO_NATIVE_HLS = """const canPlay = HTMLMediaElement.prototype.canPlayType;
HTMLMediaElement.prototype.canPlayType = function (type) { return /mpegurl/i.test(type) ? "" : canPlay.call(this, type); };"""


@pytest.mark.parametrize(
    ("lacking", "player", "source"),
    [(NO_MSE, "native", "/stream/"), (NO_MSE + NO_NATIVE_HLS, "progressive", "/video?cap=")],
    ids=["no-mse", "no-mse-no-native-hls"],
)
def test_without_media_source_extensions_the_page_plays_natively_or_the_file(
    streamed, browser, lacking, player, source
):
    """A browser without Media Source Extensions (no hls.js) plays the stream itself where it plays HLS (this
    Chromium does), and the progressive file where it does not either."""
    context = browser.new_context()
    context.add_init_script(lacking)  # before the page's own scripts
    page = context.new_page()
    assert page.goto(json.loads(streamed["content"][0]["text"])["watch_url"]).status == 200
    shown_until(page, f"!!{VIDEO}.dataset.player")
    assert page.evaluate(f"{VIDEO}.dataset.player") == player
    page.evaluate(f"async () => {{ {VIDEO}.muted = true; await {VIDEO}.play(); }}")
    shown_until(page, f"{VIDEO}.currentTime > 1.0")
    assert source in page.evaluate(f"{VIDEO}.currentSrc")  # through the watch link's capability either way
    context.close()


def test_dash_js_plays_the_manifest(streamed, browser):
    assert DASH_JS.exists(), "dash.js is not installed: `make clients` installs it into tests/clients/node"
    # dash.js is the test's player, not the page's: it is added to the watch page (same origin as the stream), past
    # the page's script policy.
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    assert page.goto(json.loads(streamed["content"][0]["text"])["watch_url"]).status == 200
    page.add_script_tag(path=str(DASH_JS))
    page.evaluate(
        """(url) => { const video = document.createElement('video'); video.id = 'dash'; video.muted = true;
        document.body.append(video); window.dash = dashjs.MediaPlayer().create(); window.dash.initialize(video, url, true); }""",
        streamed["_meta"][STREAM_META_KEY]["dash_url"],
    )
    shown_until(page, "document.getElementById('dash').currentTime > 1.0")
    assert page.evaluate("document.getElementById('dash').videoHeight") in {height for _, height in LADDER}
    context.close()
