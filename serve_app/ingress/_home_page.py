"""`GET /`: what this server is, for a person who opens its address in a browser — its name and version, the MCP
endpoint to point a client at, how that client proves who it is (which credential mode, never a credential), the
health and readiness endpoints, and where the documentation is.

Served without authentication (the person has no token yet, and the page holds nothing that needs one: no
secret, no task data) and outside admission, like `/readyz`; the Origin/Host guard covers it as every route. It
carries the review page's browser hardening headers and stylesheet (serve_app/ingress/review/pages.py). The
documentation is named as files of the source tree (README.md, docs/), not as links: the server does not serve it,
and the page must not send the reader to another site.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from mcp_protocol.identity import PROTOCOL_VERSION, SERVER_NAME, TASKS_EXTENSION, server_version
from serve_app._config import Config
from serve_app.ingress.oauth import resource_metadata_url
from serve_app.ingress.review.pages import html_page

HOME_PATH = "/"
TEMPLATES = "serve_app.ingress"  # templates/home.html
READYZ_PATH = "/readyz"
HEALTHZ_PATH = "/healthz"


class CredentialMode(StrEnum):
    """How a client proves who it is (serve_app/ingress/auth.py): the page says which, and what to send."""

    NONE = "none"  # no credentials configured: the server binds loopback only
    TOKENS = "tokens"  # VIDFORGE_TOKENS_FILE
    OAUTH = "oauth"  # VIDFORGE_OAUTH_ISSUER (a tokens file beside it still works)

    @classmethod
    def of(cls, config: Config) -> CredentialMode:
        if config.oauth_issuer:
            return cls.OAUTH
        return cls.TOKENS if config.tokens_file else cls.NONE


@dataclass(frozen=True)
class HomeFacts:
    """What the page shows, all of it from the configuration and the installed package."""

    name: str
    version: str
    protocol_version: str
    tasks_extension: str
    mcp_url: str
    credentials: CredentialMode
    oauth_metadata_url: str

    @classmethod
    def of(cls, config: Config) -> HomeFacts:
        return cls(
            name=SERVER_NAME,
            version=server_version(),
            protocol_version=PROTOCOL_VERSION,
            tasks_extension=TASKS_EXTENSION,
            mcp_url=config.resource,
            credentials=CredentialMode.of(config),
            oauth_metadata_url=resource_metadata_url(config.resource),
        )


def home_routes(config: Config) -> list[Route]:
    """`GET /` (HEAD too); the facts are fixed for the process, so they are read once."""
    facts = HomeFacts.of(config)

    async def home(request: Request) -> Response:
        return html_page("home.html", package=TEMPLATES, facts=facts, readyz=READYZ_PATH, healthz=HEALTHZ_PATH)

    return [Route(HOME_PATH, home, methods=["GET"])]
