"""Uploads that go straight to the bucket: the bytes travel from the client to the object store, not through an ingress
replica, and the server then vets the stored file exactly as it vets an upload it streamed itself.

    POST /assets/uploads?size_bytes=N[&filename=NAME]   -> 201 {upload_id, part_bytes, parts: [{part_number, url}],
                                                            expires_at, complete_url}
    PUT <each part's url>                                 (the client, to the bucket; all parts but the last part_bytes)
    POST /assets/uploads/{upload_id}/complete             -> 201 {uri, kind, size_bytes}, as POST /assets answers

Only with the media in a bucket (VIDFORGE_STORAGE_URL) and VIDFORGE_DIRECT_TRANSFERS on. Opening one checks the
declared size against VIDFORGE_MAX_ASSET_BYTES and the principal's quota; completing it assembles the parts, then
holds the file to the size limit and the quota again (a client may send more than it declared), parses it in
isolation with every media limit (serve_app.media.assets.AssetStore.add_stored), and deletes whatever it refuses.
The part URLs work for VIDFORGE_DIRECT_UPLOAD_TTL_S; an upload completed later is refused and aborted.

The upload id is a ticket: where the file goes (its asset id), the store's own upload id, the file's name, until when
it works, and a signature under the server's link key (the review page's capability scheme,
serve_app/ingress/review/capability.py, with a purpose of its own) over all of that and the principal that opened it.
So any replica completes any upload with no state kept anywhere, and a ticket completes nothing for another principal.
An upload never completed leaves only invisible parts in the bucket, which its lifecycle rule for incomplete
multipart uploads removes (docs/scaling-and-storage.md).
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import anyio

from mcp_protocol.asset_uri import AssetRef
from mcp_protocol.envelope import VidforgeError
from mcp_protocol.json_types import JSONObject
from mcp_protocol.text_limits import FREE_TEXT_MAX_CHARS
from mcp_protocol.timefmt import iso_ms
from media_store.assets import blob_key
from media_store.base import DirectTransfers, InvalidUpload
from serve_app._config import Config
from serve_app.ingress.review.capability import LinkRefused, ReviewCapability, ReviewSigner
from serve_app.media.assets import Asset, AssetStore, new_asset_id

UPLOADS_PATH = "/assets/uploads"
PURPOSE = "vidforge/direct-upload/v1"
TICKET_ROUND = 1  # the capability's round: an upload is completed once


def complete_path(upload_id: str) -> str:
    return f"{UPLOADS_PATH}/{quote(upload_id, safe='')}/complete"


@dataclass(frozen=True)
class Ticket:
    """What an upload id says: the asset id its file goes to, the store's upload id, and the file's name."""

    asset_id: str
    store_upload_id: str
    filename: str

    @property
    def key(self) -> str:
        return blob_key(self.asset_id)

    def encoded(self) -> str:
        payload = json.dumps({"asset": self.asset_id, "upload": self.store_upload_id, "filename": self.filename})
        return base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode("ascii")

    @classmethod
    def decoded(cls, encoded: str) -> Ticket | None:
        """The ticket `encoded` holds, unchecked (its signature is checked apart); None when it holds none."""
        try:
            payload = json.loads(base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)))
            fields = (payload["asset"], payload["upload"], payload["filename"])
        except (ValueError, KeyError, TypeError):
            return None
        return cls(*fields) if all(isinstance(field, str) for field in fields) else None


@dataclass(frozen=True)
class OpenedUpload:
    """What `POST /assets/uploads` answers."""

    upload_id: str
    part_bytes: int
    part_urls: list[str]
    expires_s: int
    complete_url: str

    def body(self) -> JSONObject:
        return {
            "upload_id": self.upload_id,
            "part_bytes": self.part_bytes,
            "parts": [{"part_number": n, "url": url} for n, url in enumerate(self.part_urls, start=1)],
            "expires_at": iso_ms(self.expires_s * 1000),
            "complete_url": self.complete_url,
        }


class DirectUploadsOff(Exception):
    """This server takes no direct uploads: its media are not in a bucket, or VIDFORGE_DIRECT_TRANSFERS is off."""


class UnknownUpload(Exception):
    """No upload this principal may complete: a ticket this server did not issue to it, one completed or aborted
    already, or (`expired`) one past its time, which has been aborted."""

    def __init__(self, reason: str, expired: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.expired = expired


class DirectUploads:
    """Opens and completes direct uploads for the file routes (serve_app/ingress/_http_files.py)."""

    def __init__(self, config: Config, assets: AssetStore, transfers: DirectTransfers | None) -> None:
        self.assets = assets
        self.transfers = transfers if config.direct_transfers else None
        self.signer = ReviewSigner(config.review_key, PURPOSE) if config.review_key else None
        self.lifetime_s = config.direct_upload_ttl_s
        self.base_url = config.public_base_url

    def _ready(self) -> tuple[DirectTransfers, ReviewSigner]:
        if self.transfers is None or self.signer is None:
            raise DirectUploadsOff
        return self.transfers, self.signer

    async def open(self, principal: str, filename: str, size_bytes: int) -> OpenedUpload:
        """A multipart upload of `size_bytes` bytes to a fresh asset's place; AssetTooLarge or AssetQuotaExceeded
        (AssetStore.check_room) for a declared size the server would refuse anyway."""
        transfers, signer = self._ready()
        await anyio.to_thread.run_sync(self.assets.check_room, principal, size_bytes)
        label = Path(filename).name[:FREE_TEXT_MAX_CHARS] or "upload"
        asset_id = new_asset_id()
        started = await anyio.to_thread.run_sync(
            transfers.start_upload, blob_key(asset_id), size_bytes, self.lifetime_s
        )
        encoded = Ticket(asset_id, started.upload_id, label).encoded()
        expires_s = int(time.time()) + self.lifetime_s
        cap = ReviewCapability(self._subject(principal, encoded), TICKET_ROUND, expires_s)
        upload_id = f"{encoded}.{signer.token(cap)}"
        return OpenedUpload(
            upload_id, started.part_bytes, started.part_urls, expires_s, self.base_url + complete_path(upload_id)
        )

    async def complete(self, principal: str, upload_id: str) -> Asset:
        """The uploaded file, vetted and published as the principal's asset (AssetStore.add_stored: its exceptions
        are the refusals). UnknownUpload for an id that is not this principal's open upload (one past its time is
        aborted); InvalidUpload (media_store) when the parts sent do not make a file (the upload is aborted).
        Completing the same upload again answers the asset it made."""
        transfers, signer = self._ready()
        encoded, _, token = upload_id.partition(".")
        ticket = Ticket.decoded(encoded)
        try:
            signer.verify(self._subject(principal, encoded), token if ticket is not None else None, time.time())
        except LinkRefused as refused:
            if refused.status != 410 or ticket is None:  # not signed for this principal: nothing of it is believed
                raise UnknownUpload("no upload with this id was opened by this credential") from None
            await anyio.to_thread.run_sync(transfers.abort_upload, ticket.key, ticket.store_upload_id)
            raise UnknownUpload(
                f"this upload's time ran out ({self.lifetime_s} s, VIDFORGE_DIRECT_UPLOAD_TTL_S); it was aborted",
                expired=True,
            ) from None
        assert ticket is not None  # verified
        try:
            uri = AssetRef(ticket.asset_id).uri
            return await anyio.to_thread.run_sync(self.assets.resolve, uri, principal, "upload_id")
        except VidforgeError:
            pass  # not an asset yet: complete it
        try:
            await anyio.to_thread.run_sync(transfers.complete_upload, ticket.key, ticket.store_upload_id)
        except FileNotFoundError:
            raise UnknownUpload("this upload is no longer open (refused when it was completed, or aborted)") from None
        except InvalidUpload:
            await anyio.to_thread.run_sync(transfers.abort_upload, ticket.key, ticket.store_upload_id)
            raise
        return await self.assets.add_stored(ticket.asset_id, principal, ticket.filename)

    @staticmethod
    def _subject(principal: str, encoded_ticket: str) -> str:
        """What the signature binds besides the expiry: the principal and the ticket as sent (base64url: no newline)."""
        return f"{principal}\n{encoded_ticket}"
