"""Where a render's files live: `<data_dir>/artifacts/<render_id>/{final.<ext>, watermark-preview.png}`.

Each appears by an atomic rename of a complete, synced file (the mux kernel's `.mux-*`, the driver's `.tmp-*`
preview); storage_hygiene removes what a crash leaves under those names."""

from __future__ import annotations

import os
import shutil

from serve_app.storage_hygiene import ARTIFACTS


def artifact_dir(data_dir: str, render_id: str) -> str:
    return os.path.join(data_dir, ARTIFACTS, render_id)


def final_path(data_dir: str, render_id: str, ext: str) -> str:
    return os.path.join(artifact_dir(data_dir, render_id), f"final.{ext}")


def preview_path(data_dir: str, render_id: str) -> str:
    return os.path.join(artifact_dir(data_dir, render_id), "watermark-preview.png")


def discard(data_dir: str, render_id: str) -> None:
    """Drop everything a render wrote (cancel, reject, failure): no partial artifact survives."""
    shutil.rmtree(artifact_dir(data_dir, render_id), ignore_errors=True)
