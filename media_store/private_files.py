"""Files and folders only their owner may use: everything vidforge writes under its data and state dirs.

Media (uploads, watermark previews, finished videos), the registry's database and the review key belong to the
tenants and the operator, never to the machine's other users: files are created 0600 and folders 0700. A stricter
process umask (one that also takes owner bits away) is honoured: it applies to what is created here as to any file.
Nothing loosens a mode afterwards, and the server never widens one to serve a file (its processes are the owner).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def process_umask() -> int:
    """This process's umask, read without changing it (os.umask would set it for every thread meanwhile)."""
    status = Path("/proc/self/status").read_text()
    found = re.search(r"^Umask:\s*([0-7]+)$", status, re.M)
    assert found, "Linux reports the umask in /proc/self/status (kernel 4.7 and later)"
    return int(found.group(1), 8)


def make_private(path: str) -> None:
    """Give a file made elsewhere (an encoder's output, by `open`'s 0666 less the umask) the private mode."""
    os.chmod(path, PRIVATE_FILE_MODE & ~process_umask())


def create_private_file(path: str | Path) -> None:
    """Create `path` empty and private unless it exists (an existing file keeps its mode and content)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE))


def make_private_dirs(path: str | Path) -> None:
    """`path` and every missing folder above it, each created 0700 (`os.makedirs` gives its mode to the last one
    only). Folders that exist keep their modes: an operator's data dir is theirs to set."""
    missing = []
    folder = Path(os.path.abspath(path))
    while not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(PRIVATE_DIR_MODE)
        except FileExistsError:  # made meanwhile by another writer (or a file there: the caller's open says so)
            continue
