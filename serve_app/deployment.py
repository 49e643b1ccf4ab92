"""The Ray Serve ingress: stateless replicas each running the Starlette app of `serve_app.app`."""

from __future__ import annotations

from ray import serve

from serve_app.app import build_app
from serve_app.auth import load_tokens
from serve_app.config import Config
from serve_app.service import RayRenderService

APP_NAME = "vidforge"


@serve.deployment(
    name="McpIngress",
    # Handlers are async and mostly wait on actors; Serve's default of 5 would queue agents behind polls.
    max_ongoing_requests=256,
    ray_actor_options={"num_cpus": 0},
)
@serve.ingress()
class McpIngress:
    def __init__(self, config_json: str) -> None:
        self.config = Config.from_json(config_json)

    def __serve_build_asgi_app__(self):
        # Built here, inside the replica: the SDK's app holds an AES-GCM key and cannot be pickled.
        tokens = load_tokens(self.config.tokens_file)
        return build_app(RayRenderService(self.config), self.config, tokens)


def deploy(config: Config, replicas: int = 1) -> None:
    serve.start(http_options={"host": config.host, "port": config.port})
    serve.run(
        McpIngress.options(num_replicas=replicas).bind(config.to_json()),
        name=APP_NAME,
        route_prefix="/",
        blocking=False,
    )
