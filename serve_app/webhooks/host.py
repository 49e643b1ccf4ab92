"""Where the dispatcher runs: a detached actor of its own on the head, apart from request handling and renders.

Not in an ingress replica (a slow receiver must never hold a request's event loop, and replicas come and go with
the traffic) nor in the render supervisor (its death would stop deliveries, and its event loop drives renders).
Detached and restarted forever like the registry and the supervisor (`actors.handle.singleton_actor_options`), it
outlives the process that started it; a restarted one (the actor's process killed, the whole server restarted)
finds the pending events in the registry's durable outbox and goes on: an attempt cut short is due again when its
lease ends.

Started when there is something to deliver, not with every server: each Python process of Ray's wakes 100 times a
second (~0.006 CPU-s per second at rest), CPU that renders then do not get. Only a render with a destination (its
caller's notify_url or its principal's default) has events, so the dispatcher starts when a replica settles the
first such render's destination, before the task exists (`DeliveryStart`), and when `vidforge serve` starts with
events pending or a render with a destination still running (`start_backend`). Once started it stays.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

import ray

from actors.actor_calls import ActorCall, ActorClient
from actors.handle import singleton_actor_options
from mcp_protocol.domain import PendingApproval
from mcp_protocol.webhook_events import OutboxEvent
from serve_app._config import Config
from serve_app._handles import registry_client
from serve_app.observability.process import observe_process
from serve_app.webhooks._destinations import DestinationGuard
from serve_app.webhooks._dispatcher import Dispatcher, DispatchSettings
from serve_app.webhooks.registry_outbox import RegistryOutbox
from serve_app.webhooks.secrets import WebhookSecrets

DISPATCHER_NAME = "vidforge-webhook-dispatcher"


class RoundLinks(Protocol):
    """Mints the review link of one approval round (serve_app.ingress.review.links.ReviewLinks)."""

    def round_url(self, task_id: str, input_seq: int, pending: PendingApproval) -> str | None: ...


def dispatcher_for(config: Config, links: RoundLinks) -> Dispatcher:
    """The dispatcher the settings describe, on the cluster's TaskRegistry's outbox."""
    settings = DispatchSettings(
        config.webhook_max_age_s, config.webhook_attempt_timeout_s, config.webhook_max_per_destination
    )

    def review_link(event: OutboxEvent) -> str | None:
        review = event.review
        return None if review is None else links.round_url(event.task_id, review.input_seq, review.pending)

    return Dispatcher(
        RegistryOutbox(registry_client(config)),
        WebhookSecrets(config.webhook_secrets_file, config.review_key),
        DestinationGuard(config.webhook_allow_hosts),
        settings,
        review_link=review_link,
    )


class WebhookDispatcher:
    """The dispatcher's actor: delivers from its start (Ray runs an async actor's constructor on its event loop) for
    its lifetime. `review_links` (the review page's minter, passed in: it lives in a higher room) is made here from
    the settings, so its key travels inside the settings and nowhere else."""

    def __init__(self, config_json: str, review_links: Callable[[Config], RoundLinks]) -> None:
        config = Config.from_json(config_json)
        observe_process(config)
        self._delivering = asyncio.ensure_future(dispatcher_for(config, review_links(config)).run())

    async def ready(self) -> bool:
        """True while it delivers (its loop never ends but by cancellation)."""
        return not self._delivering.done()


class DispatcherApi(Protocol):
    """What a caller may ask of the dispatcher's actor."""

    async def ready(self) -> bool: ...


_IN_PROCESS: type[DispatcherApi] = WebhookDispatcher  # mypy checks the actor's signatures against the protocol


class DispatcherClient(ActorClient):
    """The cluster's webhook dispatcher actor, as a `DispatcherApi`."""

    ready = ActorCall(DispatcherApi.ready)


def start_dispatcher(config: Config, review_links: Callable[[Config], RoundLinks]) -> DispatcherClient:
    """Start the cluster's webhook dispatcher (per namespace) unless it runs; it starts delivering on its own, so
    nothing need wait for it (its client's `ready` says whether it delivers)."""
    options = singleton_actor_options(DISPATCHER_NAME, config.namespace)
    handle = ray.remote(WebhookDispatcher).options(**options).remote(config.to_json(), review_links)
    return DispatcherClient(handle, "webhook dispatcher")


class DeliveryStart:
    """`start_dispatcher`, once per process: called each time a render is given a destination (a lookup of the
    actor by name costs a round trip to Ray's GCS), it asks only the first time; the dispatcher, once started,
    is restarted by Ray whenever it is lost."""

    def __init__(self, config: Config, review_links: Callable[[Config], RoundLinks]) -> None:
        self._config = config
        self._review_links = review_links
        self._asked = False

    def __call__(self) -> None:
        if not self._asked:
            start_dispatcher(self._config, self._review_links)
            self._asked = True
