"""The key that signs review links (serve_app/ingress/review/): VIDFORGE_REVIEW_KEY, or one generated into the state dir.

Every ingress replica must sign and check with the same key, and links must keep working across restarts, so an
unset key is generated once — 256 random bits, in `<state dir>/review.key`, mode 0600 — and read from there on every
later start. The state dir is on the head node, where the launch step runs (`vidforge serve`; Serve's build task for
a Serve config), so the launch step reads the key and hands it to the replicas inside their Config: a replica on
another node never needs the state dir. Two launches racing to create it agree: the file is written aside and
linked into place, which fails for the second, which then reads the first's.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from media_store.private_files import PRIVATE_FILE_MODE, make_private_dirs
from serve_app._config import Config

KEY_FILE = "review.key"

logger = logging.getLogger(__name__)


def review_key_path(config: Config) -> Path:
    return Path(config.state_dir or config.data_dir) / KEY_FILE


def _create(path: Path) -> None:
    """Write a fresh key at `path` unless one is there already (atomic: written aside, then hard-linked in)."""
    make_private_dirs(path.parent)
    aside = path.with_name(f".{KEY_FILE}.{secrets.token_hex(8)}")
    fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
        os.link(aside, path)
    except FileExistsError:
        pass  # another launch created it first: use theirs
    finally:
        aside.unlink(missing_ok=True)


def with_review_key(config: Config) -> Config:
    """`config` with its `review_key`: as configured, else the state dir's (created on the first start)."""
    if config.review_key:
        return config
    path = review_key_path(config)
    if not path.exists():
        _create(path)
    if path.stat().st_mode & 0o077:
        logger.warning("%s is readable by other users: anyone who reads it can decide watermark approvals", path)
    return config.model_copy(update={"review_key": path.read_text(encoding="ascii").strip()})
