"""The Ray Serve ingress: stateless replicas each running the Starlette app of `serve_app.app`.

Bounded at every level: each replica serves at most `VIDFORGE_MAX_ONGOING_REQUESTS` at once; requests waiting
for a replica are at most `VIDFORGE_MAX_QUEUED_REQUESTS` (per Serve proxy), beyond which Serve itself answers
HTTP 503 with `Retry-After: VIDFORGE_BUSY_RETRY_AFTER_S` instead of queueing forever (Serve 2.60 sends no
`Retry-After` unless `backpressure_config.retry_after_s` is set; its body is Serve's plain-text message, sent
before any vidforge code runs). Per-principal caps on long-held requests live in `serve_app.admission`.

Two ways in: `vidforge serve` (serve_app.cli) calls `deploy`; `serve deploy deploy/serve.yaml` and a KubeRay
RayService (deploy/rayservice.yaml) import the application builder `app`, which starts the same backend from
Serve's build task. Either way the settings are the VIDFORGE_* variables (see serve_app.config).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict
from ray import serve
from ray.serve import Application
from ray.serve.config import BackpressureConfig
from starlette.applications import Starlette

from serve_app.admission import Admission
from serve_app.app import build_app
from serve_app.auth import load_tokens
from serve_app.config import Config
from serve_app.leases import ledger_handle
from serve_app.ray_render_service import RayRenderService
from serve_app.startup import check_settings, start_backend

logger = logging.getLogger(__name__)

APP_NAME = "vidforge"


# On the head, beside the registry and the supervisor it talks to: a worker node may go away (scale-down, a
# lost machine) with renders in flight, never with the ingress; Serve then runs its only proxy there too.
@serve.deployment(name="McpIngress", ray_actor_options={"num_cpus": 0, "resources": {"node:__internal_head__": 0.001}})
@serve.ingress()
class McpIngress:
    def __init__(self, config_json: str) -> None:
        self.config = Config.from_json(config_json)

    def __serve_build_asgi_app__(self) -> Starlette:
        # Built here, inside the replica: the SDK's app holds an AES-GCM key and cannot be pickled.
        tokens = load_tokens(self.config.tokens_file)
        admission = Admission(ledger_handle(self.config.namespace, self.config.lease_ttl_s), self.config.lease_ttl_s)
        return build_app(RayRenderService(self.config), self.config, tokens, admission)


def ingress(config: Config) -> Application:
    return McpIngress.options(  # type: ignore[attr-defined]  # @serve.deployment made it a Deployment
        num_replicas=config.replicas,
        # Handlers are async and mostly wait on actors; Serve's default of 5 would queue agents behind polls.
        max_ongoing_requests=config.max_ongoing_requests,
        max_queued_requests=config.max_queued_requests,
        backpressure_config=BackpressureConfig(status_code=503, retry_after_s=config.busy_retry_after_s),
    ).bind(config.to_json())


def deploy(config: Config) -> None:
    serve.start(http_options={"host": config.host, "port": config.port})
    serve.run(ingress(config), name=APP_NAME, route_prefix="/", blocking=False)


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
    """The application builder of a Serve config (`import_path: serve_app.deployment:app`): in Serve's build
    task, what `vidforge serve` does on the cluster it joins. A setting that must not start fails the deploy
    with the reason."""
    settings = AppArgs.model_validate(dict(args))
    config = Config.from_env(host=settings.host, port=settings.port, data_dir=settings.data_dir)
    removed = start_backend(config, check_settings(config))
    if any(removed.values()):
        logger.warning("vidforge: removed crash leftovers: %s", removed)
    return ingress(config)
