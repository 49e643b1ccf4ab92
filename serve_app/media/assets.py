"""The asset store: uploaded source videos and watermark images, owned by a principal.

Kept in the media store (media_store.assets has the layout: `assets/<asset_id>/{blob, meta.json}`). An asset is
parsed before it is accepted, so a render never starts on a file that cannot be read or is over a limit; what
the parse found (`facts`, serve_app.media._media_facts) is kept in meta.json, so a render's creation checks limits
without reading the file again, and the render plans its segments from it (`source_info`) instead of probing the
file a second time; facts in an older layout are migrated as they are read. An upload over HTTP is streamed into
the store as it arrives (a local file or a multipart upload, never whole in memory) and parsed from there in a
process of its own (serve_app.media.media_probe).

`vidforge://assets/<id>` URIs are parsed strictly, whole (mcp_protocol.asset_uri): anything that is not exactly that
shape — a trailing newline or space, another case, percent-encoding, path traversal — and any asset of another
principal resolves to `source_not_found`, exactly like an unknown id.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, fields
from pathlib import Path

import anyio

from mcp_protocol.asset_uri import AssetRef
from mcp_protocol.errors import no_asset_at, source_not_found
from mcp_protocol.text_limits import FREE_TEXT_MAX_CHARS
from media_store.assets import ASSETS, AssetIndex, blob_key, meta_key, read_meta
from render_kernels.media_io import Media
from render_kernels.source_info import SourceInfo
from serve_app._config import Config
from serve_app._handles import media_store
from serve_app.media._media_facts import MediaFacts
from serve_app.media.media_limits import media_limits
from serve_app.media.media_probe import ParseBounds, inspect_media, parse_isolated


@dataclass(frozen=True)
class Asset:
    asset_id: str
    principal: str
    kind: str  # "video" | "image"
    size_bytes: int
    filename: str
    facts: MediaFacts | None = None  # what the upload's parse found; None if stored before facts were kept

    @property
    def uri(self) -> str:
        return AssetRef(self.asset_id).uri


class AssetTooLarge(Exception):
    pass


class AssetQuotaExceeded(Exception):
    """The upload would take its principal past VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL. Checked against the
    stored assets as the bytes arrive; uploads of one principal running at the same time are not summed."""

    def __init__(self, used: int, limit: int) -> None:
        super().__init__(used, limit)
        self.used = used
        self.limit = limit

    def __str__(self) -> str:
        return (
            f"the principal's assets hold {self.used} bytes; the limit is {self.limit} "
            "(VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL)"
        )


class AssetStore:
    def __init__(self, config: Config) -> None:
        self.media = media_store(config)
        self.index = AssetIndex(self.media)
        self.parse_bounds = ParseBounds.of(config)
        self.max_bytes = config.max_asset_bytes
        self.max_bytes_per_principal = config.max_asset_bytes_per_principal
        self.retention_s = config.asset_retention_s
        self.limits = media_limits(config)

    def media_of(self, asset: Asset) -> Media:
        """What the render kernels read for the asset."""
        return self.media.media(blob_key(asset.asset_id))

    def source_info(self, asset: Asset) -> SourceInfo | None:
        """What the upload's parse found in a video asset (keyframes included), for the file where it is now; None
        for an asset stored before all of today's facts were kept (before the display matrix, pixel aspect and
        field order were, such a record would render a phone video sideways): the render probes it again."""
        return asset.facts.source_info(self.media_of(asset)) if asset.facts else None

    def usage(self, principal: str) -> int:
        """Bytes the principal's stored assets hold: what VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL bounds."""
        return self.index.usage(principal)

    def check_room(self, principal: str, size: int) -> None:
        """Whether an asset of `size` bytes may be stored for `principal`: AssetTooLarge past VIDFORGE_MAX_ASSET_BYTES,
        AssetQuotaExceeded past the principal's quota."""
        if size > self.max_bytes:
            raise AssetTooLarge(f"upload exceeds {self.max_bytes} bytes")
        self._check_quota(self.usage(principal), size)

    def _check_quota(self, used: int, size: int) -> None:
        if used + size > self.max_bytes_per_principal:
            raise AssetQuotaExceeded(used, self.max_bytes_per_principal)

    def _publish(
        self, asset_id: str, principal: str, filename: str, size: int, found: SourceInfo | tuple[int, int]
    ) -> Asset:
        """Write the metadata, the asset's last object: from here on it exists (media_store.assets). `found` is what
        the parse found (media_probe.inspect_media), kept as the asset's facts. The filename is only a label: kept up
        to the free-text bound (mcp_protocol.text_limits), cut rather than refused."""
        facts = MediaFacts.of_video(found) if isinstance(found, SourceInfo) else MediaFacts.of_image(*found)
        label = Path(filename).name[:FREE_TEXT_MAX_CHARS] or "upload"
        asset = Asset(asset_id, principal, facts.kind, size, label, facts)
        meta = {f.name: getattr(asset, f.name) for f in fields(asset)} | {"facts": facts.model_dump(mode="json")}
        self.media.put_bytes(meta_key(asset_id), json.dumps({**meta, "created_at": time.time()}).encode())
        return asset

    def _drop(self, asset_id: str) -> None:
        self.media.delete_prefix(f"{ASSETS}/{asset_id}/")

    def add_file(self, path: str, principal: str) -> Asset:
        """`vidforge assets add PATH`: copy, parse, store. Parsed in this process: it is the operator's own
        command on a file of their choosing, with no Ray cluster to isolate it in (and none needed)."""
        size = os.path.getsize(path)
        if size > self.max_bytes:
            raise AssetTooLarge(f"{path} is larger than {self.max_bytes} bytes")
        self._check_quota(self.usage(principal), size)
        asset_id = new_asset_id()
        try:
            size = self.media.put_file(path, blob_key(asset_id))
            found = inspect_media(self.media.media(blob_key(asset_id)), self.limits)
            return self._publish(asset_id, principal, path, size, found)
        except BaseException:
            self._drop(asset_id)
            raise

    async def add_stream(self, chunks: AsyncIterator[bytes], principal: str, filename: str) -> Asset:
        """`POST /assets`: stream into the store, refusing past the size limit and the quota as the bytes
        arrive; parse the tenant's bytes in isolation (media_probe.parse_isolated). Raises UnsupportedMedia
        (OverLimit past a limit) for media that cannot be used. Nothing here blocks the event loop, and an
        upload that ends in any way but success leaves nothing behind."""
        used = await anyio.to_thread.run_sync(self.usage, principal)
        asset_id = new_asset_id()

        async def limited() -> AsyncIterator[bytes]:
            size = 0
            async for chunk in chunks:
                size += len(chunk)
                if size > self.max_bytes:
                    raise AssetTooLarge(f"upload exceeds {self.max_bytes} bytes")
                self._check_quota(used, size)
                yield chunk

        async with self._dropped_unless_published(asset_id):
            size = await self.media.write_stream(blob_key(asset_id), limited())
            return await self._vetted(asset_id, principal, filename, size)

    async def add_stored(self, asset_id: str, principal: str, filename: str) -> Asset:
        """A direct upload's file, which its client wrote to the store under `blob_key(asset_id)` itself (POST
        /assets/uploads/…/complete): held to the same size limit, quota and isolated parse as a streamed upload, and
        deleted unless it passes. FileNotFoundError when there is no such file."""
        async with self._dropped_unless_published(asset_id):
            size = await anyio.to_thread.run_sync(self.media.size, blob_key(asset_id))
            if size is None:
                raise FileNotFoundError(blob_key(asset_id))
            await anyio.to_thread.run_sync(self.check_room, principal, size)
            return await self._vetted(asset_id, principal, filename, size)

    async def _vetted(self, asset_id: str, principal: str, filename: str, size: int) -> Asset:
        """Parse the stored file in isolation (media_probe.parse_isolated) and publish it as an asset."""
        found = await parse_isolated(
            self.parse_bounds, inspect_media, self.media.media(blob_key(asset_id)), self.limits
        )
        return await anyio.to_thread.run_sync(self._publish, asset_id, principal, filename, size, found)

    @contextlib.asynccontextmanager
    async def _dropped_unless_published(self, asset_id: str) -> AsyncIterator[None]:
        """Whatever ends the block but success (a refusal, a fault, the client going away) deletes the asset's files."""
        try:
            yield
        except BaseException:
            with anyio.CancelScope(shield=True):  # also when the client went away
                await anyio.to_thread.run_sync(self._drop, asset_id)
            raise

    def resolve(self, uri: str, principal: str, field: str) -> Asset:
        ref = AssetRef.parse(uri)
        if ref is None:
            raise source_not_found(field, no_asset_at(uri))
        meta = read_meta(self.media, ref.asset_id)
        if meta is None or meta.get("principal") != principal:
            raise source_not_found(field, no_asset_at(uri))
        stored = {k: meta[k] for k in Asset.__dataclass_fields__ if k in meta}
        return Asset(**{**stored, "facts": MediaFacts.stored(meta.get("facts"))})


def new_asset_id() -> str:
    """A fresh, unguessable asset id (also where a direct upload's file goes before it is an asset)."""
    return "a_" + secrets.token_hex(12)
