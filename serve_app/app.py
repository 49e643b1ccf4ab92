"""The Starlette application a Serve replica runs: `/mcp`, `/assets`, `/artifacts`, `/healthz`, and in OAuth
mode the RFC 9728 metadata under `/.well-known/oauth-protected-resource`.

Built inside the replica (the SDK's app holds an AES-GCM key and cannot be pickled), from a
`RenderService` and the operator `Config`. The metadata routes sit outside the authenticated mount: a
client reads them precisely because it has no token yet (MCP authorization: resource metadata discovery).
"""

from __future__ import annotations

import contextlib
from urllib.parse import urlsplit

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route

from mcp_protocol.http import McpEndpoint
from mcp_protocol.server import VidforgeServer
from serve_app.auth import authentication
from serve_app.config import LOOPBACK_HOSTS, Config
from serve_app.http_errors import EXCEPTION_HANDLERS
from serve_app.http_files import ArtifactDownload, AssetUpload
from serve_app.oauth import protected_resource_routes


def transport_security(config: Config) -> TransportSecuritySettings | None:
    """DNS-rebinding protection on loopback binds (streamable-http: validate Origin, 403 when invalid).

    A loopback bind behind a reverse proxy also answers to the host of `VIDFORGE_PUBLIC_URL`.
    """
    if config.host not in LOOPBACK_HOSTS:
        return None
    hosts = ["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    if config.public_url:
        public = urlsplit(config.public_url)
        hosts.append(public.netloc)
        origins.append(f"{public.scheme}://{public.netloc}")
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


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

    protected = [
        Route("/mcp", McpEndpoint(manager, config.max_mcp_body_bytes)),
        Route("/assets", AssetUpload(service), methods=["POST"]),
        Route("/artifacts/{render_id}/final.{ext}", ArtifactDownload(service), methods=["GET", "HEAD"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    authenticated = Mount("", routes=protected, middleware=[authentication(config, tokens)])
    return Starlette(
        routes=[*protected_resource_routes(config), authenticated],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
