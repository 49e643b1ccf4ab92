"""Who this server is: name, version and the fingerprint stamped on every error.

[9.fingerprint-format]: `vidforge@<package version>+<short git sha or "dev">`, so a client caching the
surface across a multi-day render can tell which build answered.
"""

from __future__ import annotations

import functools
import os
import subprocess
from importlib import metadata
from pathlib import Path

SERVER_NAME = "vidforge"
PROTOCOL_VERSION = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"


@functools.cache
def server_version() -> str:
    try:
        return metadata.version("vidforge")
    except metadata.PackageNotFoundError:
        return "0.0.0"


@functools.cache
def build_sha() -> str:
    """Short git sha of the running tree; `VIDFORGE_GIT_SHA` wins (deployments without .git)."""
    if sha := os.environ.get("VIDFORGE_GIT_SHA"):
        return sha[:7]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=7", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        return out.stdout.strip() or "dev"
    except (OSError, subprocess.SubprocessError):
        return "dev"


def fingerprint() -> str:
    return f"{SERVER_NAME}@{server_version()}+{build_sha()}"
