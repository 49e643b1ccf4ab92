"""Deadlines at the door: a client too slow to send its request is answered 408, and its request slot is freed.

uvicorn waits for a request's headers and body as long as its client takes, and a request holds one of the
replica's slots (serve_app/ingress/_request_slots.py) while the app reads its body: a dozen clients that each send
one byte and stall would hold them all for good. So, as nginx's `client_header_timeout` / `client_body_timeout`,
Go's `ReadHeaderTimeout` and Apache's mod_reqtimeout `MinRate` do:

- headers: a request's headers must arrive within VIDFORGE_HEADER_TIMEOUT_S of its first byte (a new connection's,
  of its opening). uvicorn has no such deadline, and no app sees a request before its headers are in, so the HTTP
  front enforces it (serve_app/ingress/front.py);
- body (`BodyDeadline`, ASGI middleware): each wait of the app for the next part of the body lasts at most
  VIDFORGE_BODY_TIMEOUT_S, and all of its waits together at most VIDFORGE_BODY_TIMEOUT_S + the bytes received so
  far / VIDFORGE_BODY_MIN_BYTES_PER_S, so a body that trickles in a byte now and then misses it too. Only time
  the app spends waiting on the client counts: an app slow to read (a store writing an upload) costs the client
  nothing, and neither does a request's wait for a slot.

A request that misses one is answered 408 with `Connection: close`, the contract's envelope on the route's carrier
(`internal_error`, temporary: the same request sent at a normal pace succeeds), and counted in
`vidforge_refusals_total{limit="header_timeout"}` or `{limit="body_timeout"}`. In the app, a missed body deadline is an exception (`BodyTooSlow`) raised where the app
waits for the body: the app unwinds as it does for a client that went away (Starlette's `ClientDisconnect`), its
cleanup running (a partial upload is discarded) and its slot and leases returned, before the 408 goes out.
"""

from __future__ import annotations

from enum import StrEnum

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_protocol import errors
from mcp_protocol.envelope import VidforgeError
from serve_app._config import Config
from serve_app.ingress._refusals import refusal
from serve_app.observability.catalog import REFUSALS

RETRY_AT_ONCE_MS = 1000  # a hint only: the same request, sent at a normal pace, is served
CLOSE = {"Connection": "close"}  # the rest of a late request is not worth reading


class Deadline(StrEnum):
    """Which deadline a request missed: its `limit` label in vidforge_refusals_total."""

    HEADER = "header_timeout"
    BODY = "body_timeout"


def header_timeout_error(timeout_s: float) -> VidforgeError:
    return errors.internal_error(
        "Request timeout: the request's headers arrived too slowly.",
        "headers",
        f"The request's headers did not arrive within {timeout_s:g} s of its first byte (VIDFORGE_HEADER_TIMEOUT_S).",
        RETRY_AT_ONCE_MS,
    )


def body_timeout_error(reason: str) -> VidforgeError:
    return errors.internal_error(
        "Request timeout: the request body arrived too slowly.", "body", reason, RETRY_AT_ONCE_MS
    )


class BodyTooSlow(Exception):
    """Raised to the app where it waited for a body past its deadline."""


class BodyClock:
    """A request's `receive`, each wait for its body bounded by the body deadlines; `missed` says why one ran out
    (None: none did)."""

    def __init__(self, receive: Receive, timeout_s: float, min_bytes_per_s: int) -> None:
        self._receive = receive
        self.timeout_s = timeout_s
        self.min_bytes_per_s = min_bytes_per_s
        self.received = 0  # body bytes so far
        self.waited_s = 0.0  # time the app has spent waiting for them
        self.complete = False  # the whole body is in: later receives only wait for a disconnect
        self.missed: str | None = None  # the reason the request missed its deadline

    def allowance(self) -> tuple[float, str]:
        """How long the next wait may last, and the reason given if it runs out."""
        idle = (
            self.timeout_s,
            f"No part of the request body arrived for {self.timeout_s:g} s (VIDFORGE_BODY_TIMEOUT_S).",
        )
        if not self.min_bytes_per_s:
            return idle
        left = self.timeout_s + self.received / self.min_bytes_per_s - self.waited_s
        if left >= self.timeout_s:
            return idle
        return left, (
            f"The request body arrived slower than {self.min_bytes_per_s} bytes/s after its first "
            f"{self.timeout_s:g} s (VIDFORGE_BODY_MIN_BYTES_PER_S, VIDFORGE_BODY_TIMEOUT_S)."
        )

    async def receive(self) -> Message:
        if self.complete:
            return await self._receive()
        allowance_s, reason = self.allowance()
        started = anyio.current_time()
        # Data already buffered is returned even past the deadline: it is there, the client is not late with it.
        with anyio.move_on_after(allowance_s) as wait:
            message = await self._receive()
        self.waited_s += anyio.current_time() - started
        if wait.cancelled_caught:
            self.missed = reason
            raise BodyTooSlow(reason)
        self.received += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.complete = True
        return message


class BodyDeadline:
    """ASGI middleware: runs each HTTP request with a `BodyClock` and answers a missed body deadline with 408."""

    def __init__(self, app: ASGIApp, config: Config) -> None:
        self.app = app
        self.timeout_s = config.body_timeout_s
        self.min_bytes_per_s = config.body_min_bytes_per_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        responded = False

        async def send_tracked(message: Message) -> None:
            nonlocal responded
            responded = responded or message["type"] == "http.response.start"
            await send(message)

        clock = BodyClock(receive, self.timeout_s, self.min_bytes_per_s)
        try:
            await self.app(scope, clock.receive, send_tracked)
        except Exception:
            if clock.missed is None:
                raise
            # The miss, let through as it was raised or as an error of the app's own that it led to.
        if clock.missed is None:
            return
        REFUSALS.inc(limit=Deadline.BODY)
        if not responded:  # else uvicorn closes the connection of the unfinished response
            await refusal(scope, 408, body_timeout_error(clock.missed), CLOSE)(scope, receive, send)
