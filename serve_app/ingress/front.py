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

uvicorn waits for a request's headers as long as the client takes (its keep-alive timeout covers only the silence
between requests); the front adds the header deadline (serve_app/ingress/_deadlines.py) to uvicorn's httptools
protocol: `HeaderDeadlineProtocol`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any, ClassVar

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from serve_app.ingress._deadlines import CLOSE, Deadline, header_timeout_error
from serve_app.ingress._refusals import error_response
from serve_app.observability.catalog import REFUSALS

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


class HeaderDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline on each request's headers: `header_timeout_s` from the request's
    first byte, or for a connection's first request from the connection's opening. A request that misses it is
    answered 408 (the file routes' carrier: its route may not be known yet) and its connection closed; a connection
    that sent nothing is closed without an answer."""

    header_timeout_s: ClassVar[float]

    @classmethod
    def with_timeout(cls, timeout_s: float) -> type[HeaderDeadlineProtocol]:
        return type(cls.__name__, (cls,), {"header_timeout_s": timeout_s})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._request_begun = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._request_begun = True
        if self._header_deadline is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        self._request_begun = False
        super().on_headers_complete()

    def _arm(self) -> None:
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined request stalls behind one still answered: that answer ends, then the connection.
            self.cycle.keep_alive = False
            return
        if self._request_begun:
            REFUSALS.inc(limit=Deadline.HEADER)
            self.transport.write(self._timeout_response())
        self.transport.close()

    def _timeout_response(self) -> bytes:
        response = error_response(408, header_timeout_error(self.header_timeout_s), CLOSE)
        headers = [*self.server_state.default_headers, *response.raw_headers]
        return b"".join(
            [STATUS_LINE[408], *(name + b": " + value + b"\r\n" for name, value in headers), b"\r\n", response.body]
        )


class HttpFront:
    """uvicorn serving `app` (its lifespan included) on a shared listener, as a task of the running loop."""

    def __init__(self, app: ASGIApp, host: str, port: int, header_timeout_s: float) -> None:
        self.host, self.port = host, port
        config = uvicorn.Config(
            app,
            http=HeaderDeadlineProtocol.with_timeout(header_timeout_s),
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
