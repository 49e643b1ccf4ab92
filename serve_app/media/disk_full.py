"""A full disk, told from any other fault: the contract's temporary `storage_full` (mcp_protocol.errors).

ENOSPC (or EDQUOT under a filesystem quota) is a state of the server, not of the request: the same upload or
render succeeds once space is freed (retention frees it on its own), so the error is `temporary: true` with a
retry hint. The raw OSError names a server path and never reaches a client; it is logged by the caller.
"""

from __future__ import annotations

import errno

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from, is a full disk (PyAV's av.error.OSError included)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS:
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
