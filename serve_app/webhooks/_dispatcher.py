"""The delivery loop: takes due events from the outbox and POSTs each, signed, to its destination.

- Apart from request handling: it runs in a task group of its own (the process that wires it decides where), and a
  slow receiver holds only its own destination's slots: at most VIDFORGE_WEBHOOK_MAX_PER_DESTINATION attempts are in
  flight per destination (scheme, host and port), each bounded by VIDFORGE_WEBHOOK_ATTEMPT_TIMEOUT_S.
- At least once: an event stays pending until a 2xx answers it. A timeout, a connection error, a name that does not
  resolve, 408, 429 and 5xx are retried with exponential backoff and full jitter, or after the receiver's Retry-After
  (seconds or an HTTP date) when it sends one; any other answer (3xx: redirects are not followed, 4xx) and an address
  the guard refuses give up at once. An event older than VIDFORGE_WEBHOOK_MAX_AGE_S gives up too. Every outcome is
  recorded in the outbox (`vidforge webhooks list`) and counted (the WEBHOOK_* metrics of serve_app/observability/catalog.py).
- Receivers deduplicate by the event id (`id` in the body, and the Vidforge-Event-Id header): an attempt whose 2xx
  was lost, or an event two dispatchers took at once, arrives again.

No secret, body or answer of a receiver is logged: a failure is logged with the event id, the host and the reason.
"""

from __future__ import annotations

import email.utils
import logging
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import httpx2
from anyio.abc import TaskGroup

from mcp_protocol.identity import server_version
from mcp_protocol.state_outage import StateUnavailable
from mcp_protocol.timefmt import duration_text, now_ms
from mcp_protocol.webhook_events import (
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    Attempt,
    Backlog,
    Delivery,
    DeliveryState,
    OutboxEvent,
)
from serve_app.observability.catalog import (
    WEBHOOK_ATTEMPT_SECONDS,
    WEBHOOK_DELIVERIES,
    WEBHOOK_OLDEST_UNDELIVERED,
    WEBHOOK_OUTBOX_DEPTH,
)
from serve_app.outbound.transport import outbound_client, pinned_request, trusted_roots
from serve_app.webhooks._destinations import DestinationGuard, DestinationRefused, DestinationUnavailable
from serve_app.webhooks._signing import signature_header
from serve_app.webhooks.outbox import Outbox
from serve_app.webhooks.secrets import WebhookSecrets

log = logging.getLogger(__name__)

RETRIED_STATUSES = frozenset({408, 429})
MAX_AGE_SETTING = "VIDFORGE_WEBHOOK_MAX_AGE_S"
LEASE_MARGIN_S = 5.0  # beyond an attempt's time limit, before an event handed out is due again


@dataclass(frozen=True)
class Backoff:
    """The wait before attempt n+1 after n failures: `first_s` * 2^(n-1), at most `max_s`, drawn uniformly from its
    upper half (jitter: receivers that came back are not hit by every sender at once)."""

    first_s: float = 5.0
    max_s: float = 3600.0

    def delay_s(self, failures: int) -> float:
        ceiling = min(self.max_s, self.first_s * 2 ** max(0, failures - 1))
        return random.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True)
class DispatchSettings:
    max_age_s: float  # VIDFORGE_WEBHOOK_MAX_AGE_S
    attempt_timeout_s: float  # VIDFORGE_WEBHOOK_ATTEMPT_TIMEOUT_S
    max_per_destination: int  # VIDFORGE_WEBHOOK_MAX_PER_DESTINATION
    backoff: Backoff = Backoff()
    poll_s: float = 1.0  # how often the outbox is asked for due events while attempts are in flight or events due
    # The longest wait between passes when nothing is in flight or due: new events end it at once (a long poll on
    # the registry), so this only bounds how late a pass comes after something the dispatcher cannot see.
    max_idle_s: float = 30.0
    batch: int = 100  # most events taken from the outbox at once


def retry_after_s(value: str | None, now_s: float) -> float | None:
    """A Retry-After header's wait in seconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now_s)


@dataclass(frozen=True)
class _Outcome:
    state: DeliveryState
    error: str | None = None
    wait_s: float | None = None  # the receiver's Retry-After


def destination_of(url: str) -> str:
    """The key the per-destination bound counts by: scheme, host and port."""
    target = httpx2.URL(url)
    return f"{target.scheme}://{target.host}:{target.port or 443}"


class Dispatcher:
    def __init__(
        self,
        outbox: Outbox,
        secrets: WebhookSecrets,
        guard: DestinationGuard,
        settings: DispatchSettings,
        *,
        review_link: Callable[[OutboxEvent], str | None] = lambda event: None,
        roots: ssl.SSLContext | None = None,
    ) -> None:
        self._outbox = outbox
        self._secrets = secrets
        self._guard = guard
        self._settings = settings
        self._review_link = review_link
        self._roots = roots or trusted_roots()
        self._in_flight: set[str] = set()
        self._per_destination: dict[str, int] = {}  # attempts in flight, by destination_of(url)

    async def run(self) -> None:
        """Deliver until cancelled. Between passes, wait for new events (the outbox's long poll) for as long as
        `idle_wait_s` allows: at rest one registry call per `max_idle_s` instead of two a second. A pass or wait
        that fails (the registry restarting) is logged and tried again after a poll: the outbox holds every event
        meanwhile, and the task state out of reach is waited out the same way, said once."""
        seen: str | None = None
        waiting = False  # for the task state: said once an outage, not once a poll
        async with anyio.create_task_group() as group:
            while True:
                try:
                    backlog = await self.dispatch_due(group)
                    waiting = False
                    seen = await self._outbox.added_since(seen, self.idle_wait_s(backlog, now_ms()))
                except StateUnavailable as unavailable:
                    if not waiting:
                        log.warning("webhook dispatch waits for the task state: %s", unavailable.reason)
                        waiting = True
                    await anyio.sleep(self._settings.poll_s)
                except Exception:
                    log.exception("webhook dispatch pass failed; retrying")
                    await anyio.sleep(self._settings.poll_s)

    def idle_wait_s(self, backlog: Backlog, at_ms: int) -> float:
        """How long to wait for new events before the next pass: `poll_s` while an attempt is in flight (its end may
        free a destination, or schedule a retry); else until the soonest pending event is due, between `poll_s`
        and `max_idle_s`."""
        settings = self._settings
        if self._in_flight:
            return settings.poll_s
        if backlog.next_due_at_ms is None:
            return settings.max_idle_s
        return min(settings.max_idle_s, max(settings.poll_s, (backlog.next_due_at_ms - at_ms) / 1000))

    async def dispatch_due(self, group: TaskGroup) -> Backlog:
        """Start an attempt for each due event whose destination has a free slot; returns the backlog after it.

        The outbox holds what it hands out for a lease (an attempt's time and then some): an event this pass leaves
        (its destination busy) comes back after the lease, behind the rest, so the events of a slow destination
        never fill every batch; an event whose dispatcher died mid-attempt is due again when its lease ends."""
        now = now_ms()
        lease_ms = int((self._settings.attempt_timeout_s + 2 * self._settings.poll_s + LEASE_MARGIN_S) * 1000)
        for delivery in await self._outbox.due(now, self._settings.batch, now + lease_ms):
            event_id, destination = delivery.event.event_id, destination_of(delivery.event.url)
            busy = self._per_destination.get(destination, 0)
            if event_id in self._in_flight or busy >= self._settings.max_per_destination:
                continue
            self._in_flight.add(event_id)
            self._per_destination[destination] = busy + 1
            group.start_soon(self._deliver, delivery, destination)
        backlog = await self._outbox.backlog()
        WEBHOOK_OUTBOX_DEPTH.set(backlog.pending)
        oldest = backlog.oldest_created_at_ms
        WEBHOOK_OLDEST_UNDELIVERED.set(0.0 if oldest is None else max(0.0, (now - oldest) / 1000))
        return backlog

    async def _deliver(self, delivery: Delivery, destination: str) -> None:
        try:
            await self._attempt_and_record(delivery)
        except Exception:  # its outcome not recorded (the registry restarting): due again when its lease ends
            log.exception("webhook %s: recording the attempt failed", delivery.event.event_id)
        finally:
            self._in_flight.discard(delivery.event.event_id)
            self._per_destination[destination] -= 1

    async def _attempt_and_record(self, delivery: Delivery) -> None:
        event = delivery.event
        deadline_ms = event.created_at_ms + int(self._settings.max_age_s * 1000)
        too_old = f"older than {MAX_AGE_SETTING} ({duration_text(self._settings.max_age_s)}); last error: "
        if now_ms() >= deadline_ms:  # due long ago (the server was down): no attempt this late
            outcome = _Outcome(DeliveryState.GAVE_UP, too_old + str(delivery.last_error))
        else:
            started = time.monotonic()
            outcome = await self._attempt(event)
            WEBHOOK_ATTEMPT_SECONDS.observe(time.monotonic() - started)
        attempted_ms = now_ms()
        state, error, next_ms = outcome.state, outcome.error, attempted_ms
        if state is DeliveryState.PENDING:
            wait_s = (
                outcome.wait_s if outcome.wait_s is not None else self._settings.backoff.delay_s(delivery.attempts + 1)
            )
            next_ms = attempted_ms + int(wait_s * 1000)
            if next_ms >= deadline_ms:
                state, error = DeliveryState.GAVE_UP, too_old + str(error)
        WEBHOOK_DELIVERIES.inc(outcome="retried" if state is DeliveryState.PENDING else state.value)
        if state is not DeliveryState.DELIVERED:
            level = logging.WARNING if state is DeliveryState.GAVE_UP else logging.INFO
            log.log(
                level, "webhook %s to %s not delivered (%s): %s", event.event_id, _host(event.url), state.value, error
            )
        await self._outbox.record_attempt(
            event.event_id, Attempt(state=state, at_ms=attempted_ms, next_attempt_at_ms=next_ms, error=error)
        )

    async def _attempt(self, event: OutboxEvent) -> _Outcome:
        """One POST, within the attempt timeout."""
        try:
            with anyio.fail_after(self._settings.attempt_timeout_s):
                return await self._post(event)
        except TimeoutError:
            return _Outcome(DeliveryState.PENDING, f"no answer within {self._settings.attempt_timeout_s:g} s")
        except DestinationRefused as refused:
            return _Outcome(DeliveryState.GAVE_UP, refused.reason)
        except DestinationUnavailable as unavailable:
            return _Outcome(DeliveryState.PENDING, str(unavailable))
        except httpx2.TransportError as exc:
            return _Outcome(DeliveryState.PENDING, f"connection failed ({type(exc).__name__})")

    async def _post(self, event: OutboxEvent) -> _Outcome:
        secrets = self._secrets.secrets_of(event.principal)
        if not secrets:  # a server without a review-link key, and a principal the secrets file does not name
            return _Outcome(
                DeliveryState.PENDING, "no signing secret for the principal (VIDFORGE_WEBHOOK_SECRETS_FILE)"
            )
        target = self._guard.target(event.url)
        pinned = await self._guard.pin(target)
        body = event.payload(self._review_link(event))
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"vidforge/{server_version()}",
            EVENT_ID_HEADER: event.event_id,
            SIGNATURE_HEADER: signature_header(secrets, timestamp, body),
        }
        async with outbound_client(self._roots) as client:
            response = await client.send(pinned_request(client, "POST", target, pinned, headers, body))
        status = response.status_code
        if 200 <= status < 300:
            return _Outcome(DeliveryState.DELIVERED)
        if status in RETRIED_STATUSES or status >= 500:
            wait_s = retry_after_s(response.headers.get("retry-after"), time.time())
            return _Outcome(DeliveryState.PENDING, f"the receiver answered {status}", wait_s)
        return _Outcome(DeliveryState.GAVE_UP, f"the receiver answered {status}, which is not retried")


def _host(url: str) -> str:
    try:
        return httpx2.URL(url).host
    except httpx2.InvalidURL:
        return "?"
