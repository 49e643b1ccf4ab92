"""Where uploaded assets live: `assets/<asset_id>/{blob, meta.json}`.

An asset exists once its meta.json does: the blob is written first (streamed), parsed, and only then the
metadata, which is what every reader looks up (resolve, quota, retention). So an upload cut off at any point
is invisible, and an asset folder without meta.json is a leftover (media_store.hygiene). The retention sweep
hides an expired asset by deleting its meta.json, checks again that no render took it meanwhile, and then
deletes the rest (or puts the metadata back).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from mcp_protocol.asset_uri import ASSET_ID
from media_store.base import MediaStore

ASSETS = "assets"
META = "meta.json"
BLOB = "blob"


def blob_key(asset_id: str) -> str:
    return f"{ASSETS}/{asset_id}/{BLOB}"


def meta_key(asset_id: str) -> str:
    return f"{ASSETS}/{asset_id}/{META}"


def parse_meta(raw: bytes) -> dict[str, Any] | None:
    """An asset's metadata, or None when it does not parse."""
    try:
        meta = json.loads(raw)
    except ValueError:
        return None
    return meta if isinstance(meta, dict) else None


def read_meta(media: MediaStore, asset_id: str) -> dict[str, Any] | None:
    try:
        return parse_meta(media.get_bytes(meta_key(asset_id)))
    except FileNotFoundError:
        return None


class AssetIndex:
    """Every stored asset's metadata, re-read only for the meta.json files written since the last look: one
    listing per call, however many assets (a GET each would be thousands of requests on a bucket)."""

    def __init__(self, media: MediaStore) -> None:
        self.media = media
        self._seen: dict[str, tuple[str, dict[str, Any] | None]] = {}  # key -> (version, metadata)

    def metas(self) -> dict[str, dict[str, Any]]:
        """asset id -> metadata, for every asset that has readable metadata."""
        current = {}
        for found in self.media.list(f"{ASSETS}/"):
            parts = found.key.split("/")
            if len(parts) != 3 or parts[2] != META or not ASSET_ID.fullmatch(parts[1]):
                continue
            version, meta = self._seen.get(found.key, (None, None))
            if version != found.version:
                try:
                    meta = parse_meta(self.media.get_bytes(found.key))
                except FileNotFoundError:  # deleted since listed
                    continue
            current[found.key] = (found.version, meta)
        self._seen = current
        return {key.split("/")[1]: meta for key, (_, meta) in current.items() if meta is not None}

    def usage(self, principal: str) -> int:
        """Bytes the principal's stored assets hold: what VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL bounds."""
        return sum(meta.get("size_bytes", 0) for meta in self.metas().values() if meta.get("principal") == principal)

    def owned(self, principal: str, limit: int, before: tuple[float, str] | None = None) -> list[dict[str, Any]]:
        """Up to `limit` of the principal's assets' metadata, newest first (upload time, then id); with `before`
        (the (created_at, asset_id) of a previous page's last asset), those after it in that order. The layout keeps
        no per-principal index, so this filters the listing `metas` keeps (only new metadata files are read)."""
        found = sorted(
            (
                (meta.get("created_at", 0.0), asset_id, meta)
                for asset_id, meta in self.metas().items()
                if meta.get("principal") == principal
            ),
            key=lambda item: (item[0], item[1]),
            reverse=True,
        )
        return [meta for created_at, asset_id, meta in found if before is None or (created_at, asset_id) < before][
            :limit
        ]

    def expired(self, uploaded_before_s: float, spare: set[str], limit: int) -> list[str]:
        """Up to `limit` ids of assets uploaded before `uploaded_before_s` (epoch seconds), other than `spare`."""
        found = [
            asset_id
            for asset_id, meta in self.metas().items()
            if asset_id not in spare and meta.get("created_at", float("inf")) < uploaded_before_s
        ]
        return found[:limit]


def hide_assets(media: MediaStore, asset_ids: Iterable[str]) -> dict[str, bytes]:
    """Take each asset out of readers' sight (a resolve then fails like an unknown id) by deleting its
    metadata; returns the metadata of those hidden, to put back with `settle_hidden`."""
    hidden = {}
    for asset_id in asset_ids:
        try:
            hidden[asset_id] = media.get_bytes(meta_key(asset_id))
        except FileNotFoundError:
            continue
        media.delete([meta_key(asset_id)])
    return hidden


def settle_hidden(media: MediaStore, restore: dict[str, bytes], purge: Iterable[str]) -> None:
    """Put back the hidden assets a render took meanwhile; delete the rest."""
    for asset_id, meta in restore.items():
        media.put_bytes(meta_key(asset_id), meta)
    for asset_id in purge:
        media.delete_prefix(f"{ASSETS}/{asset_id}/")
