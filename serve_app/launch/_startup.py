"""Starting vidforge on a Ray cluster, one way for both entry points: `vidforge serve` (serve_app.launch.cli) and the
Serve application builder that `serve deploy` and a KubeRay RayService call (serve_app.launch.deployment:app).

First the settings that must not start are refused (`check_settings`), then, on the connected cluster, a bucket
must answer a Ray worker (`check_media_from_worker`: what the ingress replicas and the render tasks will see, not
only this process), then the cluster's singletons come up (`start_backend`: the registry, the render supervisor and,
when there are webhooks to deliver, the dispatcher), and once the ingress is deployed, the supervisor's warm pool is
waited for (`wait_for_warm_pool`). Both are safe to repeat: the singletons are found when they
already run, so a redeploy of the Serve config changes only the ingress.
"""

from __future__ import annotations

import asyncio

import ray

from actors.backoff import Backoff
from actors.client import RegistryApi
from actors.handle import REGISTRY_NAME
from actors.open_store import state_owned_elsewhere
from media_store.base import MediaStore
from media_store.hygiene import remove_leftovers
from media_store.opening import StorageUrlError
from serve_app._config import Config
from serve_app._handles import media_store, registry_client
from serve_app.ingress.auth import TokenFileError, check_bind_allowed, load_tokens
from serve_app.ingress.oauth import OAuthConfigError, check_oauth_settings
from serve_app.ingress.review.links import ReviewLinks
from serve_app.launch._review_key import with_review_key
from serve_app.rendering.supervisor import supervisor_client
from serve_app.webhooks.host import start_dispatcher

MEDIA_CHECK_TIMEOUT_S = 60.0  # a bucket client retries for a while before it gives up; a worker may be starting
STARTUP_RETRY_MAX_S = 1.0  # how often, at most, a starting head asks again whether its task state answers
MEDIA_CHECK_KEY = ".vidforge-check"  # written and deleted again: the store reads and writes


class MediaUnreachable(Exception):
    """The media store does not answer from a Ray worker; the message names the store and what failed."""


SETTINGS_ERRORS = (TokenFileError, OAuthConfigError, StorageUrlError, MediaUnreachable)


def check_settings(config: Config) -> MediaStore:
    """The media store the settings name, unless they must not start (one of SETTINGS_ERRORS, which says
    why): a non-loopback bind without credentials, OAuth settings that cannot work, a bad VIDFORGE_STORAGE_URL."""
    check_bind_allowed(config.host, load_tokens(config.tokens_file), config.oauth_issuer)
    if config.oauth_issuer:
        check_oauth_settings(config.oauth_issuer, config.public_url)
    return media_store(config)


def _store_answers(media: MediaStore) -> None:
    media.put_bytes(MEDIA_CHECK_KEY, b"ok")
    media.delete([MEDIA_CHECK_KEY])


# No CPU: it runs on this node (the head, where the ingress replicas and the registry live) while every CPU is busy.
_store_answers_task = ray.remote(num_cpus=0, max_retries=0)(_store_answers)


def check_media_from_worker(media: MediaStore) -> None:
    """Write and delete a key of a bucket from a Ray worker process, with the job's environment (credentials shipped
    or the node's own): MediaUnreachable, one line naming what failed, when it does not answer. A store on this
    node's disk is not checked (this process made its folders, and every process here sees them)."""
    if media.node_local:
        return
    try:
        ray.get(_store_answers_task.remote(media), timeout=MEDIA_CHECK_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        raise MediaUnreachable(
            f"the media store ({media.description}) did not answer a Ray worker within {MEDIA_CHECK_TIMEOUT_S:g} s"
        ) from None
    except ray.exceptions.RayTaskError as err:
        cause = err.cause if err.cause is not None else err
        first_line = (str(cause).strip().splitlines() or [""])[0][:300]
        raise MediaUnreachable(
            f"the media store ({media.description}) does not answer a Ray worker: {type(cause).__name__}: {first_line}"
            " (AWS_* credentials: on every node, or VIDFORGE_SHIP_STORAGE_CREDENTIALS=true)"
        ) from None


def start_backend(config: Config, media: MediaStore) -> dict[str, int]:
    """Start (or find) the TaskRegistry and the RenderSupervisor on the connected cluster, both pinned to the
    head; returns the crash leftovers removed from `media` on the way, by kind.

    Leftovers are removed only when the registry is not running yet (the first start, or the whole cluster
    restarted): a registry that is running belongs to a server whose renders and uploads may be in progress —
    `vidforge serve` restarted against a cluster it joined, or a Serve config deployed again."""
    try:
        ray.get_actor(REGISTRY_NAME, namespace=config.namespace)
        running = True
    except ValueError:
        running = False
    return asyncio.run(_start_singletons(config, media, running))


async def _start_singletons(config: Config, media: MediaStore, running: bool) -> dict[str, int]:
    registry = registry_client(config)
    settings = config.registry_settings()
    # A head of the same state already runs: the registry opens its store once it has gone (actors._store_opener).
    waiting = not running and await asyncio.to_thread(state_owned_elsewhere, settings)
    if waiting:
        print(
            f"vidforge: another head owns the task state in {settings.state_location}; waiting to take over", flush=True
        )
    await registry.start()
    await _state_answers(registry, settings.state_location, said=waiting)
    if waiting:
        print(f"vidforge: took over the task state in {settings.state_location}", flush=True)
    if running:
        removed = {}
    else:  # nothing can be in progress: what crashed writers left goes, every asset and known task's file stays
        removed = await remove_leftovers(media, registry.known_task_ids)
    # Resumes renders that were in flight when the server last stopped; its warm pool's first round goes on while
    # the ingress deploys (`wait_for_warm_pool`).
    await supervisor_client(config).resumed()
    # Delivers the webhook events pending in the registry's outbox, and every later one, apart from the requests:
    # started here when there is something to deliver, else by the first render given a destination
    # (serve_app.webhooks.host). With the review-link key: it mints the input_required event's link and derives
    # the principals' secrets.
    if await _webhooks_to_deliver(registry):
        start_dispatcher(with_review_key(config), ReviewLinks)
    return removed


def wait_for_warm_pool(config: Config) -> None:
    """Return once the render supervisor is ready (RenderSupervisor.ready: its warm pool's first round's workers
    started). Called after the ingress is deployed: the round and the replicas' start take seconds each and
    neither needs the other, and a render asked for before the round ends waits for it in the supervisor."""
    asyncio.run(supervisor_client(config).ready())


async def _state_answers(registry: RegistryApi, location: str, said: bool) -> None:
    """Wait until the registry's task state answers (its database down at start, or another head's), saying once
    why, then go on: nothing below can work without it, and nothing is lost by waiting."""
    backoff = Backoff(STARTUP_RETRY_MAX_S)
    while not (health := await registry.state_health()).available:
        if not said:
            print(f"vidforge: waiting for the task state in {location}: {health.reason}", flush=True)
            said = True
        await asyncio.sleep(backoff.next_s())


async def _webhooks_to_deliver(registry: RegistryApi) -> bool:
    """Whether the outbox holds undelivered events, or a render that has a destination may still add some."""
    if (await registry.webhook_backlog()).pending:
        return True
    return any(record.request.notify_url is not None for record in await registry.nonterminal())
