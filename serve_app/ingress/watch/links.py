"""The watch link of a finished render: absolute, on the server's public base URL (VIDFORGE_PUBLIC_URL, else the bind
address), so a chat transcript can carry it as it is. It works until the result's retention ends (the moment the
render finished plus VIDFORGE_RESULT_RETENTION_S), fixed by the result, so every read of one result hands out the
same link.
"""

from __future__ import annotations

from urllib.parse import quote

from mcp_protocol.app_view import ViewLinks
from mcp_protocol.domain import Succeeded, TaskRecord
from mcp_protocol.streams import MASTER_PLAYLIST
from serve_app._config import Config
from serve_app.ingress.review.capability import ReviewCapability, ReviewSigner
from serve_app.ingress.review.links import with_capability
from serve_app.ingress.review.quality import CONTACT_SHEET

WATCH_PATH = "/watch"
STREAM_PATH = "/stream"  # under a task's watch path: /watch/<task id>/stream/<capability>/<file>
PURPOSE = "vidforge/watch/v1"  # the key's review links name another purpose: neither opens the other's page
# The capability's round: a render has one result, so its watch link has one round (the token's format is the
# review page's, which names the approval round it decides).
RESULT_ROUND = 1


def watch_path(task_id: str, suffix: str = "") -> str:
    """The path of a task's watch page (`suffix`: one of its files, e.g. "/poster.jpg")."""
    return f"{WATCH_PATH}/{quote(task_id, safe='')}{suffix}"


def stream_path(task_id: str, token: str, name: str) -> str:
    """The path of file `name` of a task's stream, under the capability `token` (empty `name`: the folder, with its
    trailing `/`)."""
    return watch_path(task_id, f"{STREAM_PATH}/{quote(token, safe='')}/{name}")


def watch_signer(config: Config) -> ReviewSigner | None:
    """The signer of watch links, under the review key; None without one (no links are minted)."""
    return ReviewSigner(config.review_key, PURPOSE) if config.review_key else None


class WatchLinks:
    """Mints watch links under the configured key; without one (a server not started by the launch step, such as the
    in-process fast lane) there are none, and the wire names only the vidforge:// resources."""

    def __init__(self, config: Config) -> None:
        self.signer = watch_signer(config)
        self.base_url = config.public_base_url
        self.retention_s = config.result_retention_s

    def url(self, rec: TaskRecord) -> str | None:
        """The absolute watch URL of `rec`'s video; None when it has none (not finished, or ended in an error)."""
        token = self._token(rec)
        return None if token is None else self.base_url + with_capability(watch_path(rec.task_id), token)

    def stream_url(self, rec: TaskRecord) -> str | None:
        """The absolute URL of the folder of `rec`'s stream, ending in `/`, its capability in the path: a player
        resolves the playlists' relative URIs under it, so every file it fetches carries the capability. None when
        the render has no stream."""
        token = self._token(rec)
        if token is None or rec.request.streaming is None:
            return None
        return self.base_url + stream_path(rec.task_id, token, "")

    def file_links(self, rec: TaskRecord) -> ViewLinks:
        """The links of `rec`'s finished video that the render view loads: the watch page's files under its link's
        capability (the contact sheet only where the quality check made one; the master playlist where the render
        has a stream). None of them for a render without a video."""
        token = self._token(rec)
        if token is None:
            return ViewLinks()

        def link(name: str) -> str:
            return self.base_url + with_capability(watch_path(rec.task_id, f"/{name}"), token)

        assert isinstance(rec.end, Succeeded)  # a token is minted only for a finished video
        return ViewLinks(
            video=link("video"),
            download=link("download"),
            poster=link("poster.jpg"),
            contact_sheet=link(CONTACT_SHEET) if rec.end.artifact.qc is not None else None,
            hls=None
            if rec.request.streaming is None
            else self.base_url + stream_path(rec.task_id, token, MASTER_PLAYLIST),
        )

    def _token(self, rec: TaskRecord) -> str | None:
        """The capability of `rec`'s watch link, valid until its result's retention ends; None without one."""
        if self.signer is None or not isinstance(rec.end, Succeeded):
            return None
        expires_s = rec.end.artifact.finished_at_ms // 1000 + self.retention_s
        return self.signer.token(ReviewCapability(rec.task_id, RESULT_ROUND, expires_s))
