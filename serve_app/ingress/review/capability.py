"""The review link's credential: an unguessable, expiring capability for one task's one approval round.

A token is `<round>.<expires>.<signature>`: the approval round it decides (the record's `input_seq`), when it stops
working (epoch seconds), and HMAC-SHA256 under the server's review key over (purpose, task id, round, expiry),
base64url without padding. The task id is not in the token but in the URL path, and inside the MAC: a token moved
to another task's page, or with its round or expiry edited, fails the signature check. Nothing else is reachable
with it — no asset, no artifact, no other task.

Refusals are `LinkRefused` with the HTTP status the page answers: 403 for a token that is not one this server
issued for this task (tampered, another task's, missing), 410 for one it issued that no longer works (expired).
The signature is checked before the expiry is believed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass

PURPOSE = "vidforge/watermark-review/v1"  # domain separation: what this MAC is; the key's other links name theirs
# Matched whole (`fullmatch`: a `$` would also match before a final newline).
_TOKEN = re.compile(r"(?P<round>[1-9][0-9]{0,8})\.(?P<expires>[0-9]{1,12})\.(?P<signature>[A-Za-z0-9_-]{43})")


@dataclass(frozen=True)
class ReviewCapability:
    """What a valid token grants: reviewing approval round `round` of `task_id` until `expires_s`."""

    task_id: str
    round: int
    expires_s: int


class LinkRefused(Exception):
    """The review page refuses the link: `status` (403 or 410), a short `title`, a `reason` a person can act on, and
    for an expired link when it stopped working (`ended_s`, epoch seconds; the page shows it in the viewer's zone)."""

    def __init__(self, status: int, title: str, reason: str, ended_s: int | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.title = title
        self.reason = reason
        self.ended_s = ended_s


def not_valid_for_this_render() -> LinkRefused:
    """403: whatever is wrong with the token (edited, another task's, absent) is not told apart."""
    return LinkRefused(
        403,
        "This review link is not valid",
        "The link is not one this server issued for this render. Open the link exactly as the agent gave it.",
    )


class ReviewSigner:
    """Mints and checks tokens under one key (VIDFORGE_REVIEW_KEY, or the state dir's generated key), for one
    `purpose`: the review page's by default; other links signed with the key (the watch page's) name their own, so
    that a token minted for one never opens another."""

    def __init__(self, key: str, purpose: str = PURPOSE) -> None:
        self._key = key.encode("utf-8")
        self._purpose = purpose

    def _signature(self, cap: ReviewCapability) -> str:
        message = f"{self._purpose}\n{cap.task_id}\n{cap.round}\n{cap.expires_s}".encode()
        digest = hmac.new(self._key, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")

    def token(self, cap: ReviewCapability) -> str:
        return f"{cap.round}.{cap.expires_s}.{self._signature(cap)}"

    def verify(self, task_id: str, token: str | None, now_s: float) -> ReviewCapability:
        """The capability `token` grants on `task_id`'s page; LinkRefused 403 unless this server signed exactly it,
        410 once it has expired."""
        match = _TOKEN.fullmatch(token or "")
        if match is None:
            raise not_valid_for_this_render()
        cap = ReviewCapability(task_id, int(match["round"]), int(match["expires"]))
        # Constant-time compare: a signature cannot be found byte by byte from response times.
        if not hmac.compare_digest(self._signature(cap), match["signature"]):
            raise not_valid_for_this_render()
        if now_s >= cap.expires_s:
            raise LinkRefused(
                410,
                "This review link has expired",
                "Ask the agent for the render's current status: if it still waits for your decision, the status "
                "carries a fresh link.",
                ended_s=cap.expires_s,
            )
        return cap
