"""Each ingress replica answers HTTP itself: uvicorn on the public port, shared by the node's replicas.

Why not Serve's HTTP proxy: on the 2-core reference machine the proxy hop cost more than everything vidforge
does for a request. Behind it every request is an HTTP parse in the proxy process, a Ray call to the replica,
and the replica's calls back to the proxy for the body and the disconnect (`benchmarks/control_plane.py` prints
the CPU per request and process: about 3 ms in the proxy and 2.5 ms in the replica for a bare `/healthz`,
against 0.25 ms for the same answer from uvicorn). Serve still owns the replicas: it starts
`VIDFORGE_REPLICAS` of them, health-checks them (`McpIngress.check_health` asks `alive`), and replaces a dead
one, which binds the port again.

Replicas on one node share the port through `SO_REUSEPORT`: the kernel spreads new connections across them,
and a replacement replica binds beside (or after) the one it replaces. Only processes of the same user can
join the group. Serve's own proxy is not started (`proxy_location: Disabled`), so nothing else holds the port.
"""

from __future__ import annotations

import asyncio
import logging
import socket

import uvicorn
from starlette.types import ASGIApp

log = logging.getLogger(__name__)

# Longer than a polling agent's usual gap, so a client that polls every few seconds keeps its connection.
KEEP_ALIVE_S = 30


def shared_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port) that other replicas of this user may bind too (SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class HttpFront:
    """uvicorn serving `app` (its lifespan included) on a shared listener, as a task of the running loop."""

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        self.host, self.port = host, port
        config = uvicorn.Config(
            app,
            lifespan="on",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=KEEP_ALIVE_S,
            # A stop must not wait on listen streams; clients re-listen (polling stays authoritative).
            timeout_graceful_shutdown=5,
        )
        self.server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Bind and serve; returns once requests are answered. Raises if the app's lifespan or the bind fails."""
        sock = shared_listener(self.host, self.port)
        self._task = asyncio.get_running_loop().create_task(self.server.serve(sockets=[sock]))
        while not self.server.started:
            if self._task.done():
                sock.close()
                self._task.result()  # the failure, raised here
                raise RuntimeError(f"the HTTP front on {self.host}:{self.port} stopped while starting")
            await asyncio.sleep(0.05)
        log.info("serving HTTP on %s:%d", self.host, self.port)

    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    def stop(self) -> None:
        """Stop accepting, finish what is in flight (bounded), then end the app's lifespan."""
        self.server.should_exit = True
