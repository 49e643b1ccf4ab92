"""A streamed render's players' links, in process (tests/fast_wire.py): the result names the master playlist and the
manifest under a signed folder of the watch page's capability scheme, every file of the stream is fetched through it
(the playlists' relative URIs resolve under it), any origin may fetch them, and a link that is tampered with,
another render's, expired or not a stream file's is refused as the watch page refuses. A real render's stream
played through these links in a browser is tests/test_watch_page.py's."""

from __future__ import annotations

import json
import re
import time
from urllib.parse import urljoin, urlsplit

import httpx
import pytest
from starlette.applications import Starlette

from mcp_protocol.streams import STREAM_META_KEY
from media_store.artifacts import stream_key
from serve_app.ingress.review.capability import ReviewCapability
from serve_app.ingress.review.pages import SECURITY_HEADERS, STREAM_SCRIPT_PATHS, static_route
from serve_app.ingress.watch.links import RESULT_ROUND, stream_path, watch_signer
from serve_app.ingress.watch.routes import watch_routes
from tests.fast_wire import FastWire, _LoopTransport, fast_wire
from tests.harness import REPO

RENDER = "vidforge_render_video"
KEY = "stream-links-key-" + "s" * 32
BASE = "https://vf.example"
MASTER = b"#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-STREAM-INF:BANDWIDTH=1000,RESOLUTION=640x360\n360p.m3u8\n"
MEDIA = b'#EXTM3U\n#EXT-X-MAP:URI="init-0.mp4"\n#EXTINF:2.0,\nseg-0-00001.m4s\n#EXT-X-ENDLIST\n'
SEGMENT = b"\x00\x00\x00\x18styp" + b"\x01" * 4000
STREAM = {"master.m3u8": MASTER, "360p.m3u8": MEDIA, "init-0.mp4": b"\x00" * 40, "seg-0-00001.m4s": SEGMENT}


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    with fast_wire(tmp_path_factory.mktemp("stream-links"), review_key=KEY, public_url=BASE) as wire:
        yield wire


@pytest.fixture(scope="module")
def player(wire):
    """An httpx client on the watch routes, served by the production render service on the wire's loop."""
    app = Starlette(routes=[*watch_routes(wire.config, wire.service), static_route()])
    with httpx.Client(transport=_LoopTransport(wire, app), base_url=BASE) as client:
        yield client


def streamed(wire: FastWire, streaming: dict | None = None) -> tuple[str, dict]:
    """A finished render (streamed unless `streaming` is None) with the stream's files stored: its id and result."""
    args = {"source_asset_uri": wire.media.video, "output_format": "mp4", "resolution": "720p"}
    if streaming is not None:
        args["streaming"] = streaming
    task_id = wire.tool(RENDER, args, tasks=True)["taskId"]
    for name, body in STREAM.items():
        wire.service.assets.media.put_bytes(stream_key(task_id, name), body)
    wire.succeed(task_id)
    return task_id, wire.task("tasks/get", task_id)["result"]["result"]


def test_the_result_hands_players_a_signed_folder_and_every_file_is_fetched_through_it(wire, player):
    task_id, result = streamed(wire, {"ladder": ["360p"]})
    stream = result["_meta"][STREAM_META_KEY]
    hls_url, dash_url = stream["hls_url"], stream["dash_url"]
    folder = hls_url.removesuffix("master.m3u8")
    assert folder.startswith(f"{BASE}/watch/{task_id}/stream/") and dash_url == folder + "manifest.mpd"
    assert any(f"Play it: {hls_url}" in block.get("text", "") for block in result["content"])
    status = wire.tool("vidforge_get_render_status", {"render_id": task_id})
    assert status["_meta"][STREAM_META_KEY]["hls_url"] == hls_url  # clients without tasks get it too

    master = player.get(hls_url)
    assert master.status_code == 200 and master.content == MASTER
    assert master.headers["content-type"].startswith("application/vnd.apple.mpegurl")
    assert master.headers["access-control-allow-origin"] == "*"  # a player embedded anywhere
    assert master.headers["x-content-type-options"] == SECURITY_HEADERS["X-Content-Type-Options"]
    media_url = urljoin(hls_url, "360p.m3u8")  # as a player resolves the playlist's relative URI
    assert player.get(media_url).content == MEDIA
    segment_url = urljoin(media_url, "seg-0-00001.m4s")
    assert player.get(segment_url).content == SEGMENT
    ranged = player.get(segment_url, headers={"Range": "bytes=0-7"})
    assert ranged.status_code == 206 and ranged.content == SEGMENT[:8]
    head = player.head(segment_url)
    assert head.status_code == 200 and int(head.headers["content-length"]) == len(SEGMENT)


def test_a_render_without_a_stream_has_no_players_links(wire):
    _, result = streamed(wire)
    assert STREAM_META_KEY not in result.get("_meta", {})


def test_links_that_are_not_this_streams_are_refused_as_the_watch_page_refuses(wire, player):
    task_id, result = streamed(wire, {})
    hls_url = result["_meta"][STREAM_META_KEY]["hls_url"]
    cap = urlsplit(hls_url).path.split("/")[-2]
    _, other = streamed(wire, {})
    other_cap = urlsplit(other["_meta"][STREAM_META_KEY]["hls_url"]).path.split("/")[-2]
    tampered = cap[:-2] + ("AA" if not cap.endswith("AA") else "BB")
    for token in (tampered, other_cap, "none"):  # tampered, another render's, not a capability
        refused = player.get(stream_path(task_id, token, "master.m3u8"))
        assert refused.status_code == 403 and refused.headers["content-type"].startswith("text/html"), token
    signer = watch_signer(wire.config)
    assert signer is not None
    expired = signer.token(ReviewCapability(task_id, RESULT_ROUND, int(time.time()) - 60))
    assert player.get(stream_path(task_id, expired, "master.m3u8")).status_code == 410
    # Names that are no file of the stream: another type, a file that is not there, the folder's parent.
    for name in ("final.mp4.bak", "gone.m4s", "..%2Ffinal.mp4"):
        assert player.get(stream_path(task_id, cap, "") + name).status_code == 404, name


def test_the_watch_page_of_a_streamed_video_plays_the_stream_and_falls_back_to_the_file(wire, player):
    task_id, result = streamed(wire, {"ladder": ["360p"]})
    watch = urlsplit(json.loads(result["content"][0]["text"])["watch_url"])
    page = player.get(f"{watch.path}?{watch.query}")
    assert page.status_code == 200, page.text
    folder = urlsplit(result["_meta"][STREAM_META_KEY]["hls_url"]).path.removesuffix("master.m3u8")
    (video,) = re.findall(r"<video [^>]*>", page.text)
    assert f'data-hls="{folder}master.m3u8"' in video  # hls.js plays this
    assert f'src="/watch/{task_id}/video?cap=' in video  # the file, where the browser plays neither
    assert f'<track kind="metadata" label="Storyboard" src="{folder}storyboard.vtt">' in page.text
    scripts = re.findall(r'<script src="([^"]+)" defer>', page.text)
    assert scripts[-2:] == list(STREAM_SCRIPT_PATHS)  # hls.js before the page's own
    for path in scripts:
        served = player.get(path)
        assert served.status_code == 200 and served.headers["content-type"].startswith("text/javascript"), path
    policy = dict(part.split(" ", 1) for part in page.headers["content-security-policy"].split("; "))
    assert policy["media-src"] == "'self' blob:" and policy["connect-src"] == "'self'"  # MSE, and the fetches
    assert policy["script-src"] == "'self'" and policy["default-src"] == "'none'"
    # A video without a stream: the page as before, without the player's scripts.
    _, plain = streamed(wire)
    watch = urlsplit(json.loads(plain["content"][0]["text"])["watch_url"])
    page = player.get(f"{watch.path}?{watch.query}")
    assert "data-hls" not in page.text and "hls.min.js" not in page.text


def test_the_shipped_player_is_the_pinned_hls_js():
    """`make player` copies hls.js from web/node_modules, as web/package-lock.json pins it."""
    lock = json.loads((REPO / "web" / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/hls.js"]["version"]
    shipped = (REPO / "serve_app" / "ingress" / "review" / "static" / "hls.min.js").read_text()
    assert f'"{pinned}"' in shipped
