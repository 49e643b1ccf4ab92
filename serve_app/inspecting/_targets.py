"""Which file an inspection reads: a URI a caller sent, checked to be theirs, in the replica that took the call."""

from __future__ import annotations

from dataclasses import dataclass

from mcp_protocol import errors
from mcp_protocol.asset_uri import AssetRef
from mcp_protocol.catalog import VIDEO_URI
from mcp_protocol.domain import Artifact
from mcp_protocol.envelope import VidforgeError
from media_store.artifacts import final_key
from render_kernels.media_io import Media
from render_kernels.source_info import SourceInfo
from serve_app.media.assets import AssetStore

FIELD = "uri"  # the tool's one argument, as its errors name it


@dataclass(frozen=True)
class InspectTarget:
    """A video to inspect: its URI (as the caller named it), the file, the facts found at upload (None: a finished
    video, probed by the inspection), and its length (which decides between an answer and a task)."""

    uri: str
    source: Media
    info: SourceInfo | None
    duration_s: float


def nothing_at(uri: str) -> VidforgeError:
    return errors.source_not_found(FIELD, f"{uri} names no video asset or finished video this credential can read")


def asset_target(assets: AssetStore, principal: str, uri: str) -> InspectTarget:
    """A video asset of `principal`'s (source_not_found for any other; unsupported_codec for an image)."""
    asset = assets.resolve(uri, principal, FIELD)
    video = asset.facts.video if asset.facts is not None else None
    if asset.kind != "video" or video is None:
        raise errors.unsupported_codec(FIELD, "the asset is an image: it has no video stream to inspect")
    return InspectTarget(uri, assets.media_of(asset), assets.source_info(asset), video.duration_s)


def video_target(assets: AssetStore, uri: str, render_id: str, ext: str, artifact: Artifact | None) -> InspectTarget:
    """A finished video, given its render's artifact as its owner sees it (None: not theirs, or not finished)."""
    if artifact is None or artifact.ext != ext:
        raise nothing_at(uri)
    return InspectTarget(uri, assets.media.media(final_key(render_id, ext)), None, artifact.duration_s)


def video_uri_parts(uri: str) -> tuple[str, str] | None:
    """(render id, extension) of a finished video's URI; None for any other."""
    match = VIDEO_URI.fullmatch(uri)
    return (match["id"], match["ext"]) if match else None


def is_asset_uri(uri: str) -> bool:
    return AssetRef.parse(uri) is not None
