"""What vidforge leaves on disk, and how it is removed: crash leftovers at start, expired assets in the sweep.

Every file becomes visible by a rename, so a crash can only leave names that say what they are:
- `assets/.upload-*` — an upload being streamed (a file);
- `assets/.staging-<id>` — an asset being assembled (blob + meta.json), renamed to `assets/<id>` when whole;
- `assets/.deleting-<id>` — an expired asset hidden from readers, being removed;
- `assets/<id>` without a readable meta.json — written before assets were staged, or by hand;
- `artifacts/<render_id>/.mux-*`, `.tmp-*` — a mux or preview being written;
- `artifacts/<render_id>` of a task the registry no longer holds — a crash between a sweep's file and record
  deletions, or a render that never got its task.

Only the standard library: the TaskRegistry actor imports this for asset retention.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable

ASSETS = "assets"
ARTIFACTS = "artifacts"
META = "meta.json"
UPLOAD_PREFIX = ".upload-"
STAGING_PREFIX = ".staging-"
DELETING_PREFIX = ".deleting-"
WRITING_PREFIXES = (".mux-", ".tmp-")  # the render driver's and the mux kernel's in-progress names
ASSET_URI_PREFIX = "vidforge://assets/"
ASSET_ID = re.compile(r"a_[a-z0-9]{16,64}")


def remove_leftovers(data_dir: str, task_ids: Iterable[str]) -> dict[str, int]:
    """Remove what crashed writers left; keep every asset with its metadata and every file of a known task.

    Run once at `vidforge serve` start, before any render or upload can be in progress (the data dir belongs
    to one server). Returns how many entries of each kind went.
    """
    removed = {"uploads": 0, "staging": 0, "assets_without_meta": 0, "orphan_artifacts": 0, "partial_files": 0}
    assets = os.path.join(data_dir, ASSETS)
    for entry in _entries(assets):
        if entry.name.startswith(UPLOAD_PREFIX):
            kind = "uploads"
        elif entry.name.startswith((STAGING_PREFIX, DELETING_PREFIX)):
            kind = "staging"
        elif entry.is_dir() and read_meta(entry.path) is None:
            kind = "assets_without_meta"
        else:
            continue
        _remove_entry(entry)
        removed[kind] += 1
    known = set(task_ids)
    for folder in _entries(os.path.join(data_dir, ARTIFACTS)):
        if folder.name not in known or not folder.is_dir():
            _remove_entry(folder)
            removed["orphan_artifacts"] += 1
            continue
        for entry in _entries(folder.path):
            if entry.name.startswith(WRITING_PREFIXES):
                _remove_entry(entry)
                removed["partial_files"] += 1
    return removed


def read_meta(folder: str) -> dict | None:
    """An asset folder's metadata, or None when it has none (or none that parses)."""
    try:
        with open(os.path.join(folder, META), encoding="utf-8") as fh:
            meta = json.load(fh)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def assets_named(arguments: dict) -> set[str]:
    """The asset ids a render's arguments name (source and watermark image)."""
    uris = [arguments.get("source_asset_uri"), (arguments.get("watermark") or {}).get("image_asset_uri")]
    ids = {uri.removeprefix(ASSET_URI_PREFIX) for uri in uris if isinstance(uri, str)}
    return {asset_id for asset_id in ids if ASSET_ID.fullmatch(asset_id)}


def expired_assets(data_dir: str, uploaded_before_s: float, spare: set[str], limit: int) -> list[str]:
    """Up to `limit` ids of assets uploaded before `uploaded_before_s` (epoch seconds), other than `spare`."""
    found: list[str] = []
    for entry in _entries(os.path.join(data_dir, ASSETS)):
        if len(found) >= limit:
            break
        if ASSET_ID.fullmatch(entry.name) and entry.name not in spare:
            meta = read_meta(entry.path)
            if meta is not None and meta.get("created_at", float("inf")) < uploaded_before_s:
                found.append(entry.name)
    return found


def hide_assets(data_dir: str, asset_ids: Iterable[str]) -> list[str]:
    """Rename each asset out of readers' sight (a resolve then fails like an unknown id); returns the hidden."""
    hidden = []
    for asset_id in asset_ids:
        try:
            os.rename(_asset(data_dir, asset_id), _asset(data_dir, DELETING_PREFIX + asset_id))
        except FileNotFoundError:
            continue
        hidden.append(asset_id)
    return hidden


def settle_hidden(data_dir: str, restore: Iterable[str], purge: Iterable[str]) -> None:
    """Put back the hidden assets a render took meanwhile; delete the rest."""
    for asset_id in restore:
        os.rename(_asset(data_dir, DELETING_PREFIX + asset_id), _asset(data_dir, asset_id))
    for asset_id in purge:
        shutil.rmtree(_asset(data_dir, DELETING_PREFIX + asset_id), ignore_errors=True)


def _asset(data_dir: str, name: str) -> str:
    return os.path.join(data_dir, ASSETS, name)


def _entries(folder: str) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except FileNotFoundError:
        return []


def _remove_entry(entry: os.DirEntry) -> None:
    if entry.is_dir(follow_symlinks=False):
        shutil.rmtree(entry.path, ignore_errors=True)
    else:
        try:
            os.unlink(entry.path)
        except FileNotFoundError:
            pass
