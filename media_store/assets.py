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
from media_store.base import MediaStore, StoredObject

ASSETS = "assets"
META = "meta.json"
BLOB = "blob"
EXPIRY_PAGE = 1000  # objects (about half as many assets) the retention sweep lists per pass: one request of a bucket


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
    """Stored assets' metadata, re-read only for the meta.json files written since the last look (a GET each
    would be thousands of requests on a bucket): `metas` lists every asset, `expired` one page of them per call."""

    def __init__(self, media: MediaStore) -> None:
        self.media = media
        self._seen: dict[str, tuple[str, dict[str, Any] | None]] = {}  # key -> (version, metadata)
        self._expiry_cursor: str | None = None  # the last key the retention sweep's walk has listed

    def metas(self) -> dict[str, dict[str, Any]]:
        """asset id -> metadata, for every asset that has readable metadata."""
        return self._read(self.media.list(f"{ASSETS}/"), after=None, through=None)

    def _read(self, listed: list[StoredObject], after: str | None, through: str | None) -> dict[str, dict[str, Any]]:
        """asset id -> metadata of the assets in `listed`: every object whose key sorts after `after` through
        `through` (None: from the first, to the last). Reads only new or changed meta.json files, and forgets
        those of that range no longer listed."""
        current = {}
        for found in listed:
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
        self._seen = {
            key: seen
            for key, seen in self._seen.items()
            if not ((after is None or key > after) and (through is None or key <= through))
        } | current
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
        """Up to `limit` ids of assets uploaded before `uploaded_before_s` (epoch seconds), other than `spare`, among
        one page of the store's assets.

        Each call lists at most `EXPIRY_PAGE` objects after where the last call stopped (from the first again after
        the last page) and reads only the metadata files of that page that are new or changed: a sweep pass costs
        one page, however many assets are stored, and an expired asset is found within one round of the walk
        (about 2 x assets / EXPIRY_PAGE passes) after its retention ends."""
        after = self._expiry_cursor
        page = self.media.list(f"{ASSETS}/", start_after=after, limit=EXPIRY_PAGE)
        self._expiry_cursor = page[-1].key if len(page) == EXPIRY_PAGE else None
        found = [
            asset_id
            for asset_id, meta in self._read(page, after=after, through=self._expiry_cursor).items()
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
