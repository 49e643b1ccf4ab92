"""The Ray Serve ingress: stateless replicas each running the Starlette app of `serve_app.app`.

Bounded at every level: each replica serves at most `VIDFORGE_MAX_ONGOING_REQUESTS` at once; requests waiting
for a replica are at most `VIDFORGE_MAX_QUEUED_REQUESTS` (per Serve proxy), beyond which Serve itself answers
HTTP 503 with `Retry-After: VIDFORGE_BUSY_RETRY_AFTER_S` instead of queueing forever (Serve 2.60 sends no
`Retry-After` unless `backpressure_config.retry_after_s` is set; its body is Serve's plain-text message, sent
before any vidforge code runs). Per-principal caps on long-held requests live in `serve_app.admission`.
"""

from __future__ import annotations

from ray import serve
from ray.serve.config import BackpressureConfig
from starlette.applications import Starlette

from serve_app.admission import Admission
from serve_app.app import build_app
from serve_app.auth import load_tokens
from serve_app.config import Config
from serve_app.leases import ledger_handle
from serve_app.ray_render_service import RayRenderService

APP_NAME = "vidforge"


@serve.deployment(name="McpIngress", ray_actor_options={"num_cpus": 0})
@serve.ingress()
class McpIngress:
    def __init__(self, config_json: str) -> None:
        self.config = Config.from_json(config_json)

    def __serve_build_asgi_app__(self) -> Starlette:
        # Built here, inside the replica: the SDK's app holds an AES-GCM key and cannot be pickled.
        tokens = load_tokens(self.config.tokens_file)
        admission = Admission(ledger_handle(self.config.namespace, self.config.lease_ttl_s), self.config.lease_ttl_s)
        return build_app(RayRenderService(self.config), self.config, tokens, admission)


def deploy(config: Config) -> None:
    serve.start(http_options={"host": config.host, "port": config.port})
    ingress = McpIngress.options(  # type: ignore[attr-defined]  # @serve.deployment made it a Deployment
        num_replicas=config.replicas,
        # Handlers are async and mostly wait on actors; Serve's default of 5 would queue agents behind polls.
        max_ongoing_requests=config.max_ongoing_requests,
        max_queued_requests=config.max_queued_requests,
        backpressure_config=BackpressureConfig(status_code=503, retry_after_s=config.busy_retry_after_s),
    )
    serve.run(ingress.bind(config.to_json()), name=APP_NAME, route_prefix="/", blocking=False)
