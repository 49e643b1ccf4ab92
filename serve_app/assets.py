"""The on-disk asset store: uploaded source videos and watermark images, owned by a principal.

Layout: `<data_dir>/assets/<asset_id>/{blob, meta.json}`. An asset is probed before it is accepted, so a
render never starts on a file that cannot be read. `vidforge://assets/<id>` URIs are parsed strictly:
anything that is not exactly that shape — path traversal included — and any asset of another principal
resolves to `source_not_found`, exactly like an unknown id.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

from mcp_protocol.errors import VidforgeError, repair
from render_kernels import UnsupportedMedia, image_size, probe, probe_image
from serve_app.config import Config

ASSET_URI = re.compile(r"^vidforge://assets/(?P<id>a_[a-z0-9]{16,64})$")


@dataclass(frozen=True)
class Asset:
    asset_id: str
    principal: str
    kind: str  # "video" | "image"
    path: str
    size_bytes: int
    filename: str

    @property
    def uri(self) -> str:
        return f"vidforge://assets/{self.asset_id}"


class AssetTooLarge(Exception):
    pass


def _kind_of(path: str, max_image_pixels: int) -> str:
    """"image" or "video", after a full probe; UnsupportedMedia (with the reason) for anything else.

    A still image is recognised from its header first and held to VIDFORGE_MAX_IMAGE_PIXELS before any
    decoder runs: a few-MB PNG can declare 16k x 16k pixels, and decoding it costs a gigabyte.
    """
    size = image_size(path)
    if size is None:
        probe(path)
        return "video"
    width, height = size
    if width * height > max_image_pixels:
        raise UnsupportedMedia(
            f"image is {width}x{height} = {width * height} pixels, over the {max_image_pixels}-pixel limit "
            "(VIDFORGE_MAX_IMAGE_PIXELS)"
        )
    probe_image(path)
    return "image"


def source_not_found(field: str, uri: str) -> VidforgeError:
    return VidforgeError(
        code="source_not_found",
        message="The asset URI resolves to no asset this credential can read.",
        field=field,
        reason=f"No asset at {uri!r} for this credential (unknown id, another credential's asset, or not a "
        "vidforge://assets/<id> URI).",
        repair=repair(
            "upload_asset",
            None,
            {},
            "Upload the file with POST /assets (or `vidforge assets add PATH`) and pass the returned "
            "vidforge://assets/<id> URI.",
        ),
    )


class AssetStore:
    def __init__(self, config: Config) -> None:
        self.root = Path(config.data_dir) / "assets"
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_bytes = config.max_asset_bytes
        self.max_image_pixels = config.max_image_pixels

    def _admit(self, tmp_path: str, principal: str, filename: str) -> Asset:
        kind = _kind_of(tmp_path, self.max_image_pixels)
        asset_id = "a_" + secrets.token_hex(12)
        folder = self.root / asset_id
        folder.mkdir()
        blob = folder / "blob"
        shutil.move(tmp_path, blob)
        asset = Asset(asset_id, principal, kind, str(blob), blob.stat().st_size, Path(filename).name or "upload")
        meta = {**asset.__dict__, "created_at": time.time()}
        (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
        return asset

    def add_file(self, path: str, principal: str) -> Asset:
        """`vidforge assets add PATH`: copy, probe, store."""
        if os.path.getsize(path) > self.max_bytes:
            raise AssetTooLarge(f"{path} is larger than {self.max_bytes} bytes")
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        os.close(fd)
        shutil.copyfile(path, tmp)
        try:
            return self._admit(tmp, principal, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    async def add_stream(self, chunks: AsyncIterator[bytes], principal: str, filename: str) -> Asset:
        """`POST /assets`: stream to disk (never fully in memory), refusing past the size limit."""
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > self.max_bytes:
                        raise AssetTooLarge(f"upload exceeds {self.max_bytes} bytes")
                    out.write(chunk)
            return self._admit(tmp, principal, filename)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def resolve(self, uri: str, principal: str, field: str) -> Asset:
        match = ASSET_URI.match(uri) if isinstance(uri, str) else None
        if match is None:
            raise source_not_found(field, uri)
        meta_path = self.root / match["id"] / "meta.json"
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise source_not_found(field, uri) from None
        if meta.get("principal") != principal:
            raise source_not_found(field, uri)
        return Asset(**{k: meta[k] for k in Asset.__dataclass_fields__})


def unsupported_source(field: str, reason: str) -> VidforgeError:
    return VidforgeError(
        code="unsupported_codec",
        message="The asset cannot be rendered.",
        field=field,
        reason=reason,
        repair=repair(
            "upload_supported_asset",
            None,
            {},
            "Upload an H.264/HEVC/VP8/VP9/AV1/MPEG-4 video (mp4, mov, webm, mkv) as the source and a PNG or JPEG "
            "image as the watermark.",
        ),
    )
