"""A streamed render's stream on the wire: its resources' URIs and what its finished result says of it.

A render asked for with `streaming` delivers, beside its file, an adaptive stream: an HLS master playlist
(`master.m3u8`) and a DASH manifest (`manifest.mpd`) over one set of CMAF segments, every file a resource under
`vidforge://videos/<render_id>/stream/`, with a storyboard for scrubbing (`storyboard.vtt`, a WebVTT map of tiles
on `storyboard.jpg`) and an animated preview (`preview.webp`). The finished result links the two entry points, the
storyboard and the preview, names them in a text block and under `_meta` `com.vidforge/stream`; its
`structuredContent` stays the contract's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mcp_protocol.domain import Artifact, RenderRequest
from mcp_protocol.json_types import JSONObject, with_meta_entry
from mcp_protocol.timefmt import iso_ms

STREAM_META_KEY = "com.vidforge/stream"
MASTER_PLAYLIST = "master.m3u8"
DASH_MANIFEST = "manifest.mpd"
STORYBOARD = "storyboard.vtt"
ANIMATED_PREVIEW = "preview.webp"
# One file of a stream: a name with one dot (no path, no `..`), matched whole.
STREAM_FILE_NAME = r"[A-Za-z0-9_-]{1,64}\.(?P<ext>m3u8|mpd|mp4|m4s|vtt|jpg|webp)"
STREAM_FILE_URI = re.compile(rf"vidforge://videos/(?P<id>[A-Za-z0-9_-]{{1,128}})/stream/(?P<name>{STREAM_FILE_NAME})")


@dataclass(frozen=True)
class StreamFileKind:
    """What a kind of stream file is: its media type, and whether a resource read answers it as text."""

    mime: str
    text: bool


STREAM_FILE_KINDS = {
    "m3u8": StreamFileKind("application/vnd.apple.mpegurl", True),
    "mpd": StreamFileKind("application/dash+xml", True),
    "mp4": StreamFileKind("video/mp4", False),
    "m4s": StreamFileKind("video/iso.segment", False),
    "vtt": StreamFileKind("text/vtt", True),
    "jpg": StreamFileKind("image/jpeg", False),
    "webp": StreamFileKind("image/webp", False),
}


def stream_file_kind(name: str) -> StreamFileKind | None:
    """The kind of stream file `name` is; None when it is no stream file's name (a path, `..`, another type)."""
    matched = re.fullmatch(STREAM_FILE_NAME, name)
    return STREAM_FILE_KINDS[matched["ext"]] if matched else None


def stream_file_uri(render_id: str, name: str) -> str:
    return f"vidforge://videos/{render_id}/stream/{name}"


def with_stream(
    result: JSONObject, render_id: str, request: RenderRequest, artifact: Artifact, stream_url: str | None = None
) -> JSONObject:
    """`result` (a CallToolResult about the finished video `artifact`) with its stream, when its request asked for
    one: links to the HLS master playlist, the DASH manifest, the storyboard and the preview, a text block naming
    them, and all four under `_meta`; with `stream_url` (the signed HTTP folder of the stream, minted by the server),
    the players' links to the master playlist and the manifest too, in the text and under `_meta` (`hls_url`,
    `dash_url`)."""
    if request.streaming is None:
        return result
    content = result["content"]
    assert isinstance(content, list), "a CallToolResult's content"
    finished = iso_ms(artifact.finished_at_ms)
    hls, dash = stream_file_uri(render_id, MASTER_PLAYLIST), stream_file_uri(render_id, DASH_MANIFEST)
    storyboard, preview = stream_file_uri(render_id, STORYBOARD), stream_file_uri(render_id, ANIMATED_PREVIEW)
    rungs = ", ".join(request.streaming.rungs(request.resolution))
    played = (
        {} if stream_url is None else {"hls_url": stream_url + MASTER_PLAYLIST, "dash_url": stream_url + DASH_MANIFEST}
    )
    play = f" Play it: {played['hls_url']}" if played else ""
    blocks: list[JSONObject] = [
        {
            "type": "text",
            "text": f"Stream ({rungs}): HLS {hls}, DASH {dash}; storyboard {storyboard}, preview {preview}.{play}",
        },
        _link(
            hls, f"The HLS master playlist of the adaptive stream ({rungs}); its files are beside it.", 0.6, finished
        ),
        _link(dash, f"The DASH manifest of the same stream ({rungs}), over the same segments.", 0.5, finished),
        _link(storyboard, "The stream's storyboard: WebVTT cues of thumbnail tiles, for scrubbing.", 0.3, finished),
        _link(preview, "An animated preview of the stream's first seconds.", 0.4, finished),
    ]
    described = {
        "hls": hls,
        "dash": dash,
        "storyboard": storyboard,
        "preview": preview,
        "ladder": list(request.streaming.rungs(request.resolution)),
        **played,
    }
    return {**with_meta_entry(result, STREAM_META_KEY, described), "content": [*content, *blocks]}


def _link(uri: str, description: str, priority: float, finished: str) -> JSONObject:
    name = uri.rsplit("/", 1)[1]
    mime = STREAM_FILE_KINDS[name.rsplit(".", 1)[1]].mime
    annotations: JSONObject = {"audience": ["user"], "priority": priority, "lastModified": finished}
    return {
        "type": "resource_link",
        "uri": uri,
        "name": name,
        "description": description,
        "mimeType": mime,
        "annotations": annotations,
    }
