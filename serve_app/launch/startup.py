"""Starting vidforge on a Ray cluster, one way for both entry points: `vidforge serve` (serve_app.launch.cli) and the
Serve application builder that `serve deploy` and a KubeRay RayService call (serve_app.launch.deployment:app).

First the settings that must not start are refused (`check_settings`), then, on the connected cluster, the
cluster's singletons come up (`start_backend`). Both are safe to repeat: the registry and the supervisor are
found when they already run, so a redeploy of the Serve config changes only the ingress.
"""

from __future__ import annotations

import ray

from actors.handle import REGISTRY_NAME
from media_store import MediaStore, StorageUrlError
from media_store.hygiene import remove_leftovers
from serve_app.config import Config
from serve_app.handles import media_store, registry_handle
from serve_app.ingress.auth import TokenFileError, check_bind_allowed, load_tokens
from serve_app.ingress.oauth import OAuthConfigError, check_oauth_settings
from serve_app.rendering.supervisor import supervisor_handle

SETTINGS_ERRORS = (TokenFileError, OAuthConfigError, StorageUrlError)


def check_settings(config: Config) -> MediaStore:
    """The media store the settings name, unless they must not start (one of SETTINGS_ERRORS, which says
    why): a non-loopback bind without credentials, OAuth settings that cannot work, a bad VIDFORGE_STORAGE_URL."""
    check_bind_allowed(config.host, load_tokens(config.tokens_file), config.oauth_issuer)
    if config.oauth_issuer:
        check_oauth_settings(config.oauth_issuer, config.public_url)
    return media_store(config)


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
    registry = registry_handle(config)
    ray.get(registry.start.remote())
    if running:
        removed = {}
    else:  # nothing can be in progress: what crashed writers left goes, every asset and known task's file stays
        removed = remove_leftovers(media, ray.get(registry.task_ids.remote()))
    # Resumes renders that were in flight when the server last stopped, before accepting new ones.
    ray.get(supervisor_handle(config).ready.remote())
    return removed
