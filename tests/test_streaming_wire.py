"""The `streaming` argument of `vidforge_render_video` on the wire, in process (tests/fast_wire.py): what is refused
and how, what a finished streamed render's result says of its stream, and its files as resources only their owner
reads. A real render's stream, packaged and played, is tests/test_streaming_live.py's."""

from __future__ import annotations

import base64

import pytest

from mcp_protocol.streams import STREAM_META_KEY
from media_store.artifacts import ExpiredRender, delete_renders, final_key, stream_key
from media_store.local import LocalMediaStore
from tests.fast_wire import Media, fast_wire
from tests.harness import COMPLETED_FIELDS

RENDER = "vidforge_render_video"
STATUS = "vidforge_get_render_status"
NOWHERE = "vidforge://assets/a_" + "3" * 24
MASTER = b"#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-STREAM-INF:BANDWIDTH=1000,RESOLUTION=1280x720\n720p.m3u8\n"
SEGMENT = b"\x00\x00\x00\x18styp" + b"\x01" * 40


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    with fast_wire(tmp_path_factory.mktemp("streaming"), max_concurrent_renders=1000) as wire:
        yield wire


@pytest.fixture(scope="module")
def media(wire) -> Media:
    return wire.media


def render_args(source: str, resolution: str = "1080p", **streaming) -> dict:
    return {"source_asset_uri": source, "output_format": "mp4", "resolution": resolution, "streaming": streaming}


@pytest.mark.parametrize(
    "streaming, field, step",
    [
        ({"ladder": ["240p"]}, "streaming.ladder.0", "fix_argument_value"),
        ({"ladder": ["720p", "720p"]}, "streaming.ladder", "fix_argument_value"),
        ({"ladder": []}, "streaming.ladder", "fix_argument_value"),
        ({"segment_s": 0}, "streaming.segment_s", "fix_argument_value"),
        ({"segment_s": 60}, "streaming.segment_s", "fix_argument_value"),
        ({"ladder": ["720p"], "codec": "h265"}, "streaming.codec", "drop_unknown_argument"),
    ],
)
def test_a_bad_streaming_argument_is_refused_by_name(wire, streaming, field, step):
    result = wire.tool(RENDER, render_args(NOWHERE, **streaming))
    envelope = result["structuredContent"]
    assert result["isError"] is True and envelope["code"] == "invalid_argument"
    assert envelope["details"]["field"] == field and envelope["repair"]["next_step"] == step
    if step == "drop_unknown_argument":  # a mechanical fix: the repair is literally callable
        fixed = wire.tool(RENDER, envelope["repair"]["arguments"])
        assert fixed["structuredContent"]["code"] == "source_not_found"  # past the arguments, to the asset lookup


def test_a_rung_above_the_renders_resolution_is_refused_with_a_repair_without_it(wire):
    result = wire.tool(RENDER, render_args(NOWHERE, "720p", ladder=["4k", "720p", "360p"]))
    envelope = result["structuredContent"]
    assert result["isError"] is True and envelope["code"] == "invalid_argument"
    assert envelope["details"]["field"] == "streaming.ladder"
    assert "4k, larger than the render's resolution 720p" in envelope["details"]["reason"]
    assert envelope["repair"]["arguments"]["streaming"] == {"ladder": ["720p", "360p"]}
    fixed = wire.tool(RENDER, envelope["repair"]["arguments"])
    assert fixed["structuredContent"]["code"] == "source_not_found"  # the repair passes the arguments
    # Every rung above it: the repair asks for the default ladder, which is the rungs up to the resolution.
    alone = wire.tool(RENDER, render_args(NOWHERE, "720p", ladder=["4k"], segment_s=2))["structuredContent"]
    assert alone["repair"]["arguments"]["streaming"] == {"segment_s": 2}


def test_a_streamed_renders_result_names_its_stream_and_its_files_are_its_owners(wire, media):
    task_id = wire.tool(RENDER, render_args(media.video, ladder=["360p", "1080p"], segment_s=2), tasks=True)["taskId"]
    wire.service.assets.media.put_bytes(stream_key(task_id, "master.m3u8"), MASTER)
    wire.service.assets.media.put_bytes(stream_key(task_id, "seg-0-00001.m4s"), SEGMENT)
    master_uri = f"vidforge://videos/{task_id}/stream/master.m3u8"
    unfinished = wire.call("resources/read", {"uri": master_uri}, master_uri)
    assert unfinished["error"]["data"]["machine_code"] == "resource_not_found"  # not before the render completes
    wire.succeed(task_id)
    result = wire.task("tasks/get", task_id)["result"]["result"]
    assert list(result["structuredContent"]) == [*COMPLETED_FIELDS]  # the contract's, unchanged
    dash_uri = f"vidforge://videos/{task_id}/stream/manifest.mpd"
    storyboard_uri = f"vidforge://videos/{task_id}/stream/storyboard.vtt"
    preview_uri = f"vidforge://videos/{task_id}/stream/preview.webp"
    assert result["_meta"][STREAM_META_KEY] == {
        "hls": master_uri,
        "dash": dash_uri,
        "storyboard": storyboard_uri,
        "preview": preview_uri,
        "ladder": ["1080p", "360p"],
    }
    links = {block["name"]: block for block in result["content"] if block["type"] == "resource_link"}
    assert links["master.m3u8"]["uri"] == master_uri and links["manifest.mpd"]["uri"] == dash_uri
    assert links["storyboard.vtt"]["uri"] == storyboard_uri and links["preview.webp"]["uri"] == preview_uri
    assert links["master.m3u8"]["mimeType"] == "application/vnd.apple.mpegurl"
    assert (links["storyboard.vtt"]["mimeType"], links["preview.webp"]["mimeType"]) == ("text/vtt", "image/webp")
    texts = [block["text"] for block in result["content"] if block["type"] == "text"]
    named = (
        f"Stream (1080p, 360p): HLS {master_uri}, DASH {dash_uri}; storyboard {storyboard_uri}, preview {preview_uri}."
    )
    assert named in texts
    read = wire.result("resources/read", {"uri": master_uri}, master_uri)["contents"][0]
    assert read == {"uri": master_uri, "mimeType": "application/vnd.apple.mpegurl", "text": MASTER.decode()}
    segment_uri = f"vidforge://videos/{task_id}/stream/seg-0-00001.m4s"
    read = wire.result("resources/read", {"uri": segment_uri}, segment_uri)["contents"][0]
    assert read["mimeType"] == "video/iso.segment" and base64.b64decode(read["blob"]) == SEGMENT
    for uri, token in [
        (master_uri, "tok-bob"),  # another principal's render
        (f"vidforge://videos/{task_id}/stream/gone.m4s", "tok-alice"),  # no such file
        (f"vidforge://videos/{task_id}/stream/../final.mp4", "tok-alice"),  # no path in a name
        (f"vidforge://videos/{task_id}/stream/master.m3u8\n", "tok-alice"),  # matched whole
    ]:
        refused = wire.call("resources/read", {"uri": uri}, uri, token=token)
        assert refused["error"]["data"]["machine_code"] == "resource_not_found", (uri, refused)


def test_a_render_without_streaming_names_no_stream_and_has_no_stream_files(wire, media):
    task_id = wire.tool(RENDER, {**render_args(media.video), "streaming": None} | {}, tasks=True)
    assert task_id["structuredContent"]["code"] == "invalid_argument"  # null is not an object: omit it instead
    plain = {"source_asset_uri": media.video, "output_format": "mp4", "resolution": "720p"}
    task_id = wire.tool(RENDER, plain, tasks=True)["taskId"]
    wire.succeed(task_id)
    result = wire.task("tasks/get", task_id)["result"]["result"]
    assert STREAM_META_KEY not in result.get("_meta", {})
    assert not any(block.get("name") == "master.m3u8" for block in result["content"])
    uri = f"vidforge://videos/{task_id}/stream/master.m3u8"
    assert wire.call("resources/read", {"uri": uri}, uri)["error"]["data"]["machine_code"] == "resource_not_found"


def test_the_status_tool_names_the_stream_for_clients_without_tasks(wire, media):
    render_id = wire.tool(RENDER, render_args(media.video))["structuredContent"]["render_id"]
    wire.succeed(render_id)
    status = wire.tool(STATUS, {"render_id": render_id})
    assert status["structuredContent"]["state"] == "succeeded"
    assert status["_meta"][STREAM_META_KEY]["ladder"] == ["1080p", "720p", "480p", "360p"]  # the default, to 1080p


def test_the_retention_sweep_deletes_a_streams_files_with_its_render(tmp_path):
    media = LocalMediaStore(str(tmp_path))
    media.put_bytes(final_key("task_a", "mp4"), b"video")
    for name in ("master.m3u8", "720p.m3u8", "init-0.mp4", "seg-0-00001.m4s"):
        media.put_bytes(stream_key("task_a", name), b"stream")
    media.put_bytes(stream_key("task_b", "master.m3u8"), b"another render's")
    delete_renders(media, [ExpiredRender("task_a", "mp4", streamed=True)])
    assert media.list("artifacts/task_a/") == []
    assert [found.key for found in media.list("artifacts/")] == [stream_key("task_b", "master.m3u8")]


def test_the_sweep_lists_no_stream_for_a_render_that_made_none(tmp_path):
    """On a bucket a listing is a request of its own: a render without a stream costs the sweep none."""

    class CountingStore(LocalMediaStore):
        listed: list[str] = []

        def list(self, prefix, **kwargs):
            self.listed.append(prefix)
            return super().list(prefix, **kwargs)

    media = CountingStore(str(tmp_path))
    media.put_bytes(final_key("task_c", "mp4"), b"video")
    delete_renders(media, [ExpiredRender("task_c", "mp4"), ExpiredRender("task_d", None)])
    assert media.listed == [] and media.list("artifacts/") == []
