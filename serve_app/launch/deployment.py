"""The Ray Serve deployment of the ingress: stateless replicas, each answering HTTP itself.

Each `McpIngress` replica builds the Starlette app of `serve_app.ingress.app` and serves it with uvicorn on the public
host and port (serve_app/ingress/front.py: replicas on a node share the port; Serve's own HTTP proxy is not started,
since its hop cost more per request than vidforge's whole answer). Serve keeps `VIDFORGE_REPLICAS` of them
running, health-checks each one's HTTP front, and replaces a dead one.

Bounded at every level: each replica runs at most `VIDFORGE_MAX_ONGOING_REQUESTS` requests at once, with at most
`VIDFORGE_MAX_QUEUED_REQUESTS` more waiting, beyond which it answers HTTP 503 with `Retry-After:
VIDFORGE_BUSY_RETRY_AFTER_S` at once (serve_app/ingress/_request_slots.py). Per-principal caps on long-held requests live
in `serve_app.ingress.admission`.

Two ways in: `vidforge serve` (serve_app.launch.cli) calls `deploy`; `serve deploy deploy/serve.yaml` and a KubeRay
RayService (deploy/rayservice.yaml) import the application builder `app`, which starts the same backend from
Serve's build task. Either way the settings are the VIDFORGE_* variables (see serve_app._config).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict
from ray import serve
from ray.serve import Application

from serve_app._config import Config
from serve_app.ingress.admission import Admission
from serve_app.ingress.auth import load_tokens
from serve_app.ingress.front import HttpFront
from serve_app.ingress.leases import ledger_client
from serve_app.ingress.ray_render_service import RayRenderService
from serve_app.launch._metrics_endpoint import start_metrics_endpoint
from serve_app.launch._port_check import BIND_ERRORS, PortUnavailable
from serve_app.launch._review_key import with_review_key
from serve_app.launch._startup import check_media_from_worker, check_settings, start_backend, wait_for_warm_pool
from serve_app.observability.process import observe_process

logger = logging.getLogger(__name__)

APP_NAME = "vidforge"


# On the head, beside the registry and the supervisor it talks to: a worker node may go away (scale-down, a
# lost machine) with renders in flight, never with the ingress, whose address clients hold.
@serve.deployment(name="McpIngress", ray_actor_options={"num_cpus": 0, "resources": {"node:__internal_head__": 0.001}})
class McpIngress:
    async def __init__(self, config_json: str) -> None:  # type: ignore[misc]  # Serve awaits an async constructor
        # The app, and the MCP SDK under it, are imported in the replica that serves them: `vidforge serve` imports
        # this module only to deploy it, and stays up for the server's life (0.4 CPU-s and their memory saved).
        from serve_app.ingress.app import build_app

        config = Config.from_json(config_json)
        observe_process(config)
        # Built here, inside the replica: the SDK's app holds an AES-GCM key and cannot be pickled.
        tokens = load_tokens(config.tokens_file)
        admission = Admission(ledger_client(config.namespace, config.lease_ttl_s), config.lease_ttl_s)
        app = build_app(RayRenderService(config), config, tokens, admission)
        self.front = HttpFront(app, config.host, config.port, config.header_timeout_s)
        try:
            await self.front.start()
        except OSError as err:  # the port taken since `vidforge serve` checked it, or on the head of a joined cluster
            if err.errno not in BIND_ERRORS:
                raise
            raise PortUnavailable(config.host, config.port, err) from None

    def check_health(self) -> None:
        """Serve's periodic health check: a replica whose HTTP front has stopped is replaced."""
        if not self.front.alive():
            raise RuntimeError("the ingress replica's HTTP front has stopped")

    def __del__(self) -> None:
        # Serve calls this on a graceful stop; a constructor that failed has no front to stop.
        if (front := getattr(self, "front", None)) is not None:
            front.stop()


def ingress(config: Config) -> Application:
    """The replicas, each handed the settings with the review-link key (read, or created, on this head node)."""
    settings = with_review_key(config).to_json()
    return McpIngress.options(num_replicas=config.replicas).bind(settings)  # type: ignore[attr-defined]


def deploy(config: Config) -> None:
    """Run the ingress; PortUnavailable (its one line) when the replicas could not listen on the port."""
    # No Serve proxy: the replicas answer HTTP on config.host:config.port themselves (serve_app/ingress/front.py).
    serve.start(proxy_location="Disabled")
    try:
        serve.run(ingress(config), name=APP_NAME, route_prefix=None, blocking=False)
    except RuntimeError:  # Serve's "Deploying application vidforge failed"; the replicas' own error is in the status
        failed = serve.status().applications.get(APP_NAME)
        messages = "\n".join(d.message for d in failed.deployments.values()) if failed else ""
        if (refusal := PortUnavailable.from_status(config.host, config.port, messages)) is not None:
            raise refusal from None
        raise


class AppArgs(BaseModel):
    """The `args` of vidforge's application in a Serve config: the settings `vidforge serve` takes as flags
    (None: their defaults). host and port are those of the config's `http_options` (the URLs vidforge gives
    out and its Host/Origin checks go by them); every other setting is a VIDFORGE_* variable of the
    application's `runtime_env`, with absolute paths."""

    model_config = ConfigDict(extra="forbid")

    host: str | None = None
    port: int | None = None
    data_dir: str | None = None


def app(args: Mapping[str, object]) -> Application:
    """The application builder of a Serve config (`import_path: serve_app.launch.deployment:app`): in Serve's build
    task, what `vidforge serve` does on the cluster it joins. A setting that must not start fails the deploy
    with the reason."""
    settings = AppArgs.model_validate(dict(args))
    config = Config.from_env(host=settings.host, port=settings.port, data_dir=settings.data_dir)
    media = check_settings(config)
    check_media_from_worker(media)
    if (metrics_url := start_metrics_endpoint(config)) is not None:  # before the registry and supervisor report
        logger.info("vidforge metrics: %s (Prometheus; series vidforge_*)", metrics_url)
    removed = start_backend(config, media)
    if any(removed.values()):
        logger.warning("vidforge: removed crash leftovers: %s", removed)
    # Serve deploys the replicas only once this returns, so the pool is waited for first (`/readyz` would say so).
    wait_for_warm_pool(config)
    return ingress(config)
