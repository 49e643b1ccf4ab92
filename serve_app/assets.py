"""The on-disk asset store: uploaded source videos and watermark images, owned by a principal.

Layout: `<data_dir>/assets/<asset_id>/{blob, meta.json}`. An asset is parsed before it is accepted, so a
render never starts on a file that cannot be read or is over a limit; what the parse found (`facts`) is kept
in meta.json, so a render's creation checks limits without reading the file again. An upload over HTTP is
parsed in a process of its own (serve_app.media_probe) and written without blocking the event loop.

`vidforge://assets/<id>` URIs are parsed strictly: anything that is not exactly that shape — path traversal
included — and any asset of another principal resolves to `source_not_found`, exactly like an unknown id.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from mcp_protocol.errors import no_asset_at, source_not_found
from serve_app.config import Config
from serve_app.media_limits import media_limits
from serve_app.media_probe import ParseBounds, inspect_media, parse_isolated
from serve_app.storage_hygiene import ASSET_ID, META, STAGING_PREFIX, UPLOAD_PREFIX, read_meta

ASSET_URI = re.compile(rf"^vidforge://assets/(?P<id>{ASSET_ID.pattern})$")


@dataclass(frozen=True)
class Asset:
    asset_id: str
    principal: str
    kind: str  # "video" | "image"
    path: str
    size_bytes: int
    filename: str
    facts: dict[str, Any] | None = None  # media_probe.inspect_media's findings; None if stored before they were kept

    @property
    def uri(self) -> str:
        return f"vidforge://assets/{self.asset_id}"


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
        self.parse_bounds = ParseBounds.of(config)
        self.root = Path(config.data_dir) / "assets"
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = config.max_asset_bytes
        self.max_bytes_per_principal = config.max_asset_bytes_per_principal
        self.retention_s = config.asset_retention_s
        self.limits = media_limits(config)

    def _store(self, tmp_path: str, principal: str, filename: str, facts: dict[str, Any]) -> Asset:
        """Assemble the asset (blob + meta.json, both synced) in a staging folder and rename it into place
        whole: no reader, and no crash, ever sees an asset folder without its blob or with half a meta.json.
        A crash leaves only the staging folder, which the start-up cleanup removes (storage_hygiene)."""
        asset_id = "a_" + secrets.token_hex(12)
        staging = self.root / (STAGING_PREFIX + asset_id)
        staging.mkdir()
        try:
            os.replace(tmp_path, staging / "blob")
            _sync(staging / "blob")
            name = Path(filename).name or "upload"
            size = (staging / "blob").stat().st_size
            asset = Asset(asset_id, principal, facts["kind"], str(self.root / asset_id / "blob"), size, name, facts)
            with open(staging / META, "w", encoding="utf-8") as out:
                json.dump({**asset.__dict__, "created_at": time.time()}, out)
                out.flush()
                os.fsync(out.fileno())
            os.rename(staging, self.root / asset_id)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return asset

    def _staging_file(self) -> str:
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=UPLOAD_PREFIX)
        os.close(fd)
        return tmp

    def usage(self, principal: str) -> int:
        """Bytes the principal's stored assets hold: what VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL bounds."""
        with os.scandir(self.root) as entries:
            metas = [read_meta(e.path) for e in entries if ASSET_ID.fullmatch(e.name)]
        return sum(meta.get("size_bytes", 0) for meta in metas if meta and meta.get("principal") == principal)

    def _check_quota(self, used: int, size: int) -> None:
        if used + size > self.max_bytes_per_principal:
            raise AssetQuotaExceeded(used, self.max_bytes_per_principal)

    def add_file(self, path: str, principal: str) -> Asset:
        """`vidforge assets add PATH`: copy, parse, store. Parsed in this process: it is the operator's own
        command on a file of their choosing, with no Ray cluster to isolate it in (and none needed)."""
        if os.path.getsize(path) > self.max_bytes:
            raise AssetTooLarge(f"{path} is larger than {self.max_bytes} bytes")
        self._check_quota(self.usage(principal), os.path.getsize(path))
        tmp = self._staging_file()
        try:
            shutil.copyfile(path, tmp)
            return self._store(tmp, principal, path, inspect_media(tmp, self.limits))
        finally:
            _remove(tmp)

    async def add_stream(self, chunks: AsyncIterator[bytes], principal: str, filename: str) -> Asset:
        """`POST /assets`: stream to disk (never fully in memory), refusing past the size limit; parse the
        tenant's bytes in isolation (media_probe.parse_isolated). Raises UnsupportedMedia (OverLimit past a
        limit) for media that cannot be used. File work runs in threads: nothing here blocks the event loop."""
        used = await anyio.to_thread.run_sync(self.usage, principal)
        tmp = await anyio.to_thread.run_sync(self._staging_file)
        try:
            size = 0
            async with await anyio.open_file(tmp, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise AssetTooLarge(f"upload exceeds {self.max_bytes} bytes")
                    self._check_quota(used, size)
                    await out.write(chunk)
            facts = await parse_isolated(self.parse_bounds, inspect_media, tmp, self.limits)
            return await anyio.to_thread.run_sync(self._store, tmp, principal, filename, facts)
        finally:
            await anyio.to_thread.run_sync(_remove, tmp)

    def resolve(self, uri: str, principal: str, field: str) -> Asset:
        match = ASSET_URI.match(uri) if isinstance(uri, str) else None
        if match is None:
            raise source_not_found(field, no_asset_at(uri))
        meta_path = self.root / match["id"] / "meta.json"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise source_not_found(field, no_asset_at(uri)) from None
        if meta.get("principal") != principal:
            raise source_not_found(field, no_asset_at(uri))
        return Asset(**{k: meta[k] for k in Asset.__dataclass_fields__ if k in meta})


def _sync(path: Path) -> None:
    """Flush a file's data to the disk before it becomes visible, so a power loss cannot leave it empty."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
