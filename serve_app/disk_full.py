"""A full disk as the contract's temporary `storage_full` error, for uploads and for renders.

ENOSPC (or EDQUOT under a filesystem quota) is a state of the server, not of the request: the same upload or
render succeeds once space is freed (retention frees it on its own), so the error is `temporary: true` with a
retry hint. The raw OSError names a server path and never reaches a client; it is logged by the caller.
"""

from __future__ import annotations

import errno
from typing import Any

from mcp_protocol.errors import VidforgeError, repair
from mcp_protocol.results import rerender_repair

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
RETRY_AFTER_MS = 60_000  # a hint, not a limit: about the time for an operator's cleanup or a sweep to free space
REASON = "The server's storage is full; nothing of this request was kept."


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from, is a full disk (PyAV's av.error.OSError included)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def upload_storage_full() -> VidforgeError:
    return VidforgeError(
        code="storage_full",
        message="The server has no room for this upload right now.",
        field="body",
        reason=REASON,
        temporary=True,
        retry_after_ms=RETRY_AFTER_MS,
        repair=repair("retry_after_delay", None, {}, "Upload the file again after retry_after_ms."),
    )


def render_storage_full(arguments: dict[str, Any]) -> VidforgeError:
    return VidforgeError(
        code="storage_full",
        message="The server ran out of storage while writing the video.",
        field=None,
        reason=REASON,
        temporary=True,
        retry_after_ms=RETRY_AFTER_MS,
        repair=rerender_repair(arguments, "retry_after_delay", "Re-call after retry_after_ms: a new render starts."),
    )
