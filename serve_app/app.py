"""The Starlette application a Serve replica runs: `/mcp`, `/assets`, `/artifacts`, `/healthz`.

Built inside the replica (the SDK's app holds an AES-GCM key and cannot be pickled), from a
`RenderService` and the operator `Config`.
"""

from __future__ import annotations

import contextlib

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mcp_protocol.http import McpEndpoint
from mcp_protocol.server import VidforgeServer
from serve_app.auth import LOOPBACK_HOSTS, BearerAuth
from serve_app.config import Config
from serve_app.http_files import ArtifactDownload, AssetUpload


def transport_security(config: Config) -> TransportSecuritySettings | None:
    """DNS-rebinding protection on loopback binds (streamable-http: validate Origin, 403 when invalid)."""
    if config.host not in LOOPBACK_HOSTS:
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


def build_app(service, config: Config, tokens: dict[str, str] | None) -> Starlette:
    mcp = VidforgeServer(service)
    manager = StreamableHTTPSessionManager(
        app=mcp.server, json_response=True, stateless=True, security_settings=transport_security(config)
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        async with manager.run():
            yield

    routes = [
        Route("/mcp", McpEndpoint(manager, config.max_mcp_body_bytes)),
        Route("/assets", AssetUpload(service), methods=["POST"]),
        Route("/artifacts/{render_id}/final.{ext}", ArtifactDownload(service), methods=["GET", "HEAD"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    return Starlette(routes=routes, middleware=[Middleware(BearerAuth, tokens=tokens)], lifespan=lifespan)
