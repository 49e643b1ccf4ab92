"""Whether the Ray node under this ingress replica is still there: what `/healthz`, the liveness probe, reports.

A replica's process is a Ray worker its node's raylet started, and Ray hands each worker that raylet's pid
(RAY_RAYLET_PID). A process whose parent exits is handed to another parent at that moment, even while the exit is
unread, so a parent that is no longer the raylet means the raylet is gone: nothing this replica does through Ray
can work any more, while its own HTTP server would otherwise go on answering. `vidforge serve` then stops within
seconds (serve_app/launch/_ray_watch.py); `/healthz` says 503 until it has.
"""

from __future__ import annotations

import os


def raylet_gone() -> bool:
    """True once the raylet that started this process has exited; False outside a Ray worker."""
    raylet_pid = os.environ.get("RAY_RAYLET_PID", "")
    return raylet_pid.isdigit() and os.getppid() != int(raylet_pid)
