"""Where a render's files live, and how they go:
`artifacts/<render_id>/{final.<ext>, poster.jpg, contact-sheet.jpg, watermark-preview.png, source-frame.png}`, and
a streamed render's stream under `artifacts/<render_id>/stream/` (its playlists, manifest and segments).

The render driver writes them (the mux through MediaStore.staged + put_file, with the poster, a frame of the finished
video, and the contact sheet of its quality check just before it; the preview and the source's first frame, which the review page shows beside it, with
put_bytes);
the supervisor discards them when a render does not complete; the registry's retention sweep deletes them
with their task. Nothing else knows this layout.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from media_store.base import MediaStore

ARTIFACTS = "artifacts"
PREVIEW_NAME = "watermark-preview.png"
SOURCE_FRAME_NAME = "source-frame.png"
POSTER_NAME = "poster.jpg"
CONTACT_SHEET_NAME = "contact-sheet.jpg"
STREAM_NAME = "stream"


def artifact_prefix(render_id: str) -> str:
    return f"{ARTIFACTS}/{render_id}/"


def final_key(render_id: str, ext: str) -> str:
    return f"{artifact_prefix(render_id)}final.{ext}"


def preview_key(render_id: str) -> str:
    return artifact_prefix(render_id) + PREVIEW_NAME


def source_frame_key(render_id: str) -> str:
    return artifact_prefix(render_id) + SOURCE_FRAME_NAME


def poster_key(render_id: str) -> str:
    return artifact_prefix(render_id) + POSTER_NAME


def contact_sheet_key(render_id: str) -> str:
    return artifact_prefix(render_id) + CONTACT_SHEET_NAME


def stream_prefix(render_id: str) -> str:
    """The key prefix of a render's stream files (without the trailing `/`: each file's key is `<prefix>/<name>`)."""
    return artifact_prefix(render_id) + STREAM_NAME


def stream_key(render_id: str, name: str) -> str:
    return f"{stream_prefix(render_id)}/{name}"


def discard(media: MediaStore, render_id: str) -> None:
    """Drop everything a render wrote (cancel, reject, failure): no partial artifact survives."""
    media.delete_prefix(artifact_prefix(render_id))


class ExpiredRender(NamedTuple):
    """A render the retention sweep deletes: its id, its video's extension (None: it completed with no video) and
    whether it made a stream."""

    render_id: str
    ext: str | None
    streamed: bool = False


def delete_renders(media: MediaStore, renders: Iterable[ExpiredRender]) -> None:
    """The retention sweep's deletion, in one batch (a request per thousand files on a bucket): each render loses its
    preview and source frame and, with an extension (it completed with a video), its video, the video's poster and
    its contact sheet; a streamed one its stream too (its files listed first: one more request each)."""
    keys = []
    for render_id, ext, streamed in renders:
        keys += [preview_key(render_id), source_frame_key(render_id)]
        if ext is not None:
            keys += [final_key(render_id, ext), poster_key(render_id), contact_sheet_key(render_id)]
        if streamed:
            keys += [found.key for found in media.list(stream_prefix(render_id) + "/")]
    media.delete(keys)
