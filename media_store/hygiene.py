"""What crashed writers leave in the media store, removed once at `vidforge serve` start.

Every object appears whole (media_store.base), so a crash can only leave:
- under `assets/`: anything that is not an asset with its meta.json — a blob whose upload or parse was cut
  off, an expired asset hidden for deletion, and (in a local directory) a `.tmp-*` file or folder, or the
  `.upload-*` / `.staging-*` / `.deleting-*` names of data dirs written before assets were staged this way;
- under `artifacts/<render_id>/`: a `.tmp-*` / `.mux-*` file or folder of a preview or mux being written
  (local directory only), or every file of a render the registry does not hold (a crash between a sweep's
  file and record deletions, or a render that never got its task).
A bucket also keeps the parts of a multipart upload that a killed process never aborted, invisible to
readers: the bucket's lifecycle rule for incomplete multipart uploads removes those.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable

from mcp_protocol.asset_uri import ASSET_ID
from media_store.artifacts import ARTIFACTS
from media_store.assets import ASSETS, META
from media_store.base import MediaStore

WRITING_PREFIXES = (".tmp-", ".mux-")  # the stores' and the mux kernel's in-progress names
KNOWN_IDS_BATCH = 10_000  # render ids asked about in one `known_task_ids` call


async def remove_leftovers(
    media: MediaStore, known_task_ids: Callable[[list[str]], Awaitable[set[str]]]
) -> dict[str, int]:
    """Remove what crashed writers left; keep every asset with its metadata and every file of a known task.

    Run before any render or upload can be in progress (the store belongs to one server). ``known_task_ids`` says
    which of the render ids found are tasks the registry holds (asked a batch at a time: the registry's history
    may be a million tasks, which it never sends whole). Returns how many leftovers of each kind went.
    """
    removed = {"incomplete_assets": 0, "orphan_artifacts": 0, "partial_files": 0}
    assets: dict[str, list[str]] = defaultdict(list)
    for found in media.list(f"{ASSETS}/"):
        assets[found.key.split("/")[1]].append(found.key)
    for name, keys in assets.items():
        if not (ASSET_ID.fullmatch(name) and f"{ASSETS}/{name}/{META}" in keys):
            media.delete(keys)
            removed["incomplete_assets"] += 1
    renders: dict[str, list[str]] = defaultdict(list)
    for found in media.list(f"{ARTIFACTS}/"):
        renders[found.key.split("/")[1]].append(found.key)
    render_ids = list(renders)
    known: set[str] = set()
    for start in range(0, len(render_ids), KNOWN_IDS_BATCH):
        known |= await known_task_ids(render_ids[start : start + KNOWN_IDS_BATCH])
    for render_id, keys in renders.items():
        if render_id not in known:
            media.delete(keys)
            removed["orphan_artifacts"] += 1
            continue
        partial = [key for key in keys if _entry_in_render_folder(key).startswith(WRITING_PREFIXES)]
        media.delete(partial)
        removed["partial_files"] += len(partial)
    return removed


def _entry_in_render_folder(key: str) -> str:
    """The name directly under `artifacts/<render_id>/` that `key` lies in (or is)."""
    parts = key.split("/")
    return parts[2] if len(parts) > 2 else ""
