"""The review link of a render awaiting approval: what the wire hands people wherever the preview is named.

The link is absolute, on the server's public base URL (VIDFORGE_PUBLIC_URL, else the bind address), so a URL-mode
elicitation, a status message or a chat transcript can carry it as it is. Its expiry is fixed by the round, not by
the moment it is read — the approval round's start plus VIDFORGE_REVIEW_LINK_TTL_S (which Config keeps at least the
approval window) — so every poll of one round hands out the same link and a status message does not change from
one poll to the next.
"""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import quote, urlencode

from mcp_protocol.app_view import ViewLinks
from mcp_protocol.domain import PendingApproval, TaskRecord
from serve_app._config import Config
from serve_app.ingress.review.capability import ReviewCapability, ReviewSigner

REVIEW_PATH = "/review"
CAPABILITY_PARAM = "cap"


class ReviewImage(StrEnum):
    """The review page's pictures (`/review/<task id>/<name>.png`)."""

    PREVIEW = "preview"  # the watermark preview PNG the render driver stored
    SOURCE = "source"  # the source's first frame, stored beside it


def review_path(task_id: str, suffix: str = "") -> str:
    """The path of a task's review page (`suffix`: one of its images, e.g. "/preview.png")."""
    return f"{REVIEW_PATH}/{quote(task_id, safe='')}{suffix}"


def with_capability(path: str, token: str) -> str:
    return f"{path}?{urlencode({CAPABILITY_PARAM: token})}"


class ReviewLinks:
    """Mints review links under the configured key; without one (a server not started by the launch step, such as
    the in-process fast lane) there are none, and the wire names only the vidforge:// resource, as before."""

    def __init__(self, config: Config) -> None:
        self.signer = ReviewSigner(config.review_key) if config.review_key else None
        self.base_url = config.public_base_url
        self.ttl_s = config.review_link_ttl_s

    def url(self, rec: TaskRecord) -> str | None:
        """The absolute review URL for `rec`'s outstanding approval; None when nothing awaits a decision."""
        return None if rec.pending is None else self.round_url(rec.task_id, rec.input_seq, rec.pending)

    def round_url(self, task_id: str, input_seq: int, pending: PendingApproval) -> str | None:
        """The absolute review URL for approval round `input_seq` of `task_id` (what a `render.input_required`
        webhook names: the round it was made for, whatever the record holds by the time it is delivered)."""
        token = self._token(task_id, input_seq, pending)
        return None if token is None else self.base_url + with_capability(review_path(task_id), token)

    def image_links(self, rec: TaskRecord) -> ViewLinks:
        """The review page's two pictures of `rec`'s outstanding approval, under its round's capability: what the
        render view shows beside its Approve and Reject. None of them when nothing awaits a decision."""
        token = None if rec.pending is None else self._token(rec.task_id, rec.input_seq, rec.pending)
        if token is None:
            return ViewLinks()

        def image(which: ReviewImage) -> str:
            return self.base_url + with_capability(review_path(rec.task_id, f"/{which}.png"), token)

        return ViewLinks(preview=image(ReviewImage.PREVIEW), source_frame=image(ReviewImage.SOURCE))

    def _token(self, task_id: str, input_seq: int, pending: PendingApproval) -> str | None:
        if self.signer is None:
            return None
        asked_s = pending.deadline_ms / 1000 - pending.timeout_s
        return self.signer.token(ReviewCapability(task_id, input_seq, int(asked_s + self.ttl_s)))
