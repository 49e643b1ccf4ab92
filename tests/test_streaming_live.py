"""A streamed render end to end, over real HTTP against a real `vidforge serve` (the session's shared server): the
render argument asks for a ladder, the render's segment tasks encode it, its mux packages it, and an agent reads the
stream back through MCP alone: the master playlist parses (the `m3u8` library), every rung it names plays frame-exact
from the resources it links, and another principal reads none of it."""

from __future__ import annotations

import base64
import io

import av
import m3u8
import pytest
from PIL import Image

from mcp_protocol.streams import STREAM_META_KEY
from tests.harness import Wire, poll_task, upload
from tests.media import make_clip

pytestmark = pytest.mark.ray

RENDER = "vidforge_render_video"
TOKEN, OTHER = "tok-stream", "tok-stream-other"
TOKENS = {TOKEN: "streaming", OTHER: "streaming-other"}  # on the session's shared server (tests/conftest.py)
SECONDS, FPS = 4, 24


def read(wire: Wire, uri: str) -> dict:
    return wire.result("resources/read", {"uri": uri}, uri)["contents"][0]


def test_a_streamed_render_is_read_and_played_through_mcp(shared_server, tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=SECONDS, width=640, height=360, fps=FPS, gop=FPS * 2)
    wire = Wire(shared_server.url, token=TOKEN, tasks=True)
    arguments = {
        "source_asset_uri": upload(shared_server, clip, TOKEN),
        "output_format": "webm",  # the file's audio is Opus; the stream's is AAC all the same
        "resolution": "720p",
        "streaming": {"ladder": ["360p", "720p"], "segment_s": 1},
    }
    task_id = wire.tool(RENDER, arguments)["taskId"]
    done = poll_task(wire, task_id, lambda task: task["status"] in ("completed", "failed", "cancelled"))
    assert done["status"] == "completed" and done["result"]["isError"] is False, done
    stream = done["result"]["_meta"][STREAM_META_KEY]
    assert stream["ladder"] == ["720p", "360p"]
    master_text = read(wire, stream["hls"])
    assert master_text["mimeType"] == "application/vnd.apple.mpegurl"
    master = m3u8.loads(master_text["text"])
    assert [variant.stream_info.resolution for variant in master.playlists] == [(1280, 720), (640, 360)]
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
