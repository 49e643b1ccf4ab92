"""The Starlette application each ingress replica serves (serve_app/ingress/front.py): `/mcp`, `/assets` (and direct
uploads to a bucket under `/assets/uploads`: serve_app/ingress/_direct_uploads.py), `/artifacts`, `/healthz`,
`/readyz`, the caller's own assets and renders (`GET /assets`, `GET /renders`: serve_app/ingress/_listings.py) and
webhook deliveries (`GET /webhooks`: serve_app/ingress/_webhook_listing.py), the
watermark review page under `/review`, the finished video's watch page under `/watch`, and in OAuth mode the RFC 9728
metadata under `/.well-known/oauth-protected-resource`.

Built inside the replica (the SDK's app holds an AES-GCM key and cannot be pickled), from a
`RenderService` and the operator `Config`. The metadata routes sit outside the authenticated mount: a
client reads them precisely because it has no token yet (MCP authorization: resource metadata discovery). So do
the review and watch routes: a person opens them in a browser that holds no bearer token, and the signed capability
in the link is their credential (serve_app/ingress/review/, serve_app/ingress/watch/). And `/readyz`, which an
orchestrator's probe asks without a token (serve_app/ingress/_readiness.py), and `/`, the page that says what this
server is (serve_app/ingress/_home_page.py).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount, Route

from mcp_protocol.http import McpEndpoint
from mcp_protocol.server import VidforgeServer
from serve_app._config import Config
from serve_app.importing.desk import DeskClient
from serve_app.importing.service import DeskImports
from serve_app.ingress._callers import Callers
from serve_app.ingress._deadlines import BodyDeadline
from serve_app.ingress._direct_uploads import UPLOADS_PATH
from serve_app.ingress._home_page import home_routes
from serve_app.ingress._http_errors import EXCEPTION_HANDLERS
from serve_app.ingress._http_files import ArtifactDownload, AssetUpload, DirectUploadComplete, DirectUploadOpen
from serve_app.ingress._listings import listing_routes
from serve_app.ingress._origin import OriginGuard, OriginPolicy
from serve_app.ingress._ray_node import raylet_gone
from serve_app.ingress._readiness import Readiness
from serve_app.ingress._request_context import RequestContext
from serve_app.ingress._request_slots import RequestSlots
from serve_app.ingress._webhook_listing import webhook_routes
from serve_app.ingress.admission import Admission, AdmissionGuard
from serve_app.ingress.auth import bearer_backend
from serve_app.ingress.oauth import protected_resource_routes
from serve_app.ingress.review.routes import review_routes
from serve_app.ingress.watch.routes import watch_routes
from serve_app.inspecting.desk import InspectDeskClient
from serve_app.inspecting.service import DeskInspections
from serve_app.observability.catalog import REFUSALS
from serve_app.webhooks.registry_outbox import RegistryOutbox

if TYPE_CHECKING:
    from serve_app.ingress.ray_render_service import RayRenderService


async def healthz(request: Request) -> JSONResponse:
    if raylet_gone():  # the process answers, but the Ray under it has died (serve_app/ingress/_ray_node.py)
        return JSONResponse({"status": "unhealthy", "reason": "this node's Ray raylet has exited"}, status_code=503)
    return JSONResponse({"status": "ok"})


def whole_paths(routes: Sequence[BaseRoute]) -> None:
    """Make each of `routes` match a request's whole path. Starlette ends a route's pattern with `$`, which also
    matches before a final newline: `POST /assets%0A` reached the upload route while the guards that compare the path
    itself (admission's caps, the request context) passed it by, an upload past its cap. `\\Z` ends at the end."""
    for route in routes:
        if isinstance(route, Route | Mount):
            route.path_regex = re.compile(route.path_regex.pattern.removesuffix("$") + r"\Z")
        if isinstance(route, Mount):
            whole_paths(route.routes)


def build_app(
    service: RayRenderService, config: Config, tokens: dict[str, str] | None, admission: Admission
) -> Starlette:
    """The replica's app: `/mcp` on `service` (the MCP server), the file routes, and their guards."""
    imports = DeskImports(config, DeskClient(config))  # imports by URL
    inspections = DeskInspections(config, InspectDeskClient(config), service.registry, service.assets)
    mcp = VidforgeServer(service, config, imports, inspections)
    manager = StreamableHTTPSessionManager(app=mcp.server, json_response=True, stateless=True)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run(), admission.heartbeats(), service.records.following():
            yield

    protected = [
        Route("/mcp", McpEndpoint(manager, config.max_mcp_body_bytes, lambda: REFUSALS.inc(limit="body_size"))),
        Route("/assets", AssetUpload(service), methods=["POST"]),
        Route(UPLOADS_PATH, DirectUploadOpen(service), methods=["POST"]),
        Route(UPLOADS_PATH + "/{upload_id}/complete", DirectUploadComplete(service), methods=["POST"]),
        Route("/artifacts/{render_id}/final.{ext}", ArtifactDownload(service), methods=["GET", "HEAD"]),
        Route("/healthz", healthz, methods=["GET"]),
        *listing_routes(service, config),
        *webhook_routes(RegistryOutbox(service.registry), config),
    ]
    # After authentication (both need the principal): the log context and request timing, then admission (per principal).
    callers = Callers(bearer_backend(config, tokens), config)
    guards = [
        callers.authentication(),  # the credential as the door checked it (serve_app/ingress/_callers.py)
        Middleware(RequestContext),
        Middleware(AdmissionGuard, admission=admission, config=config),
    ]
    authenticated = Mount("", routes=protected, middleware=guards)
    app = Starlette(
        routes=[
            *protected_resource_routes(config),
            *home_routes(config),
            *review_routes(config, service),
            *watch_routes(config, service),
            Route("/readyz", Readiness(service.registry, service.assets.media, service.supervisor), methods=["GET"]),
            authenticated,
        ],
        # The body deadline first (a request that misses it leaves its slot), the replica's request bound by caller,
        # then Origin/Host on every route (the SDK's own check covers only /mcp, and only when asked).
        middleware=[
            Middleware(BodyDeadline, config=config),
            Middleware(RequestSlots, config=config, callers=callers),
            Middleware(OriginGuard, policy=OriginPolicy.from_config(config)),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )
    whole_paths(app.routes)
    return app
