"""Who is calling: Starlette's `AuthenticationMiddleware` with one bearer backend for every protected route.

Three credential modes ([1.cred-modes]):
- none configured: one principal, `local`, and the server only binds loopback ([1.auth-model]: no
  credentials means no network exposure);
- `VIDFORGE_TOKENS_FILE`: a JSON object static token → principal, for headless agents and CI;
- `VIDFORGE_OAUTH_ISSUER`: OAuth 2.1 resource-server mode (MCP authorization, 2026-07-28); the principal
  is the access token's `sub`. Beside a tokens file, a bearer matching the file wins; any other is a JWT.

The backend puts a `Principal` on `scope["user"]` (Starlette's `BaseUser`: `identity` is the principal
name). A refused request gets a contract-shaped body — a JSON-RPC error whose `data` is the vidforge
envelope, so MCP clients can parse it — and the RFC 6750 §3 `WWW-Authenticate` challenge, which in OAuth
mode names the RFC 9728 metadata URL so clients can find the authorization server.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
from pathlib import Path

import anyio.to_thread
from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError, BaseUser
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response

from mcp_protocol import errors, http_refusals
from mcp_protocol.envelope import jsonrpc_error_data
from mcp_protocol.http import jsonrpc_error
from serve_app._config import LOOPBACK_HOSTS, Config
from serve_app.ingress.oauth import InvalidToken, IssuerUnavailable, JwtVerifier, resource_metadata_url

LOCAL_PRINCIPAL = "local"

log = logging.getLogger(__name__)


class TokenFileError(ValueError):
    pass


def load_tokens(path: str | None) -> dict[str, str] | None:
    if path is None:
        return None
    try:
        tokens = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenFileError(f"cannot read VIDFORGE_TOKENS_FILE {path}: {exc}") from exc
    if (
        not isinstance(tokens, dict)
        or not tokens
        or not all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in tokens.items())
    ):
        raise TokenFileError(f"VIDFORGE_TOKENS_FILE {path} must be a non-empty JSON object of token → principal")
    return tokens


def check_bind_allowed(host: str, tokens: dict[str, str] | None, oauth_issuer: str | None) -> None:
    """[1.auth-model]: a non-loopback bind needs credentials — a tokens file, OAuth, or both."""
    if tokens is None and oauth_issuer is None and host not in LOOPBACK_HOSTS:
        raise TokenFileError(
            f"refusing to bind {host} without credentials: set VIDFORGE_TOKENS_FILE or VIDFORGE_OAUTH_ISSUER,"
            " or bind 127.0.0.1"
        )


class Principal(BaseUser):
    """`scope["user"]`: the principal that owns tasks and assets, and the scopes its credential grants."""

    def __init__(self, name: str, scopes: tuple[str, ...] = ()) -> None:
        self.name = name
        self.scopes = scopes

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def display_name(self) -> str:
        return self.name

    @property
    def identity(self) -> str:
        return self.name


class AuthFailure(AuthenticationError):
    """A refusal: HTTP status, the RFC 6750 §3.1 `error` code (None when no credentials were sent, as
    §3.1 asks), and a reason safe to show the caller."""

    def __init__(self, status: int, reason: str, error: str | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.error = error


def bearer_token(conn: HTTPConnection) -> str | None:
    """RFC 6750 §2.1: the header method only (PRM `bearer_methods_supported: ["header"]`)."""
    scheme, _, token = conn.headers.get("authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


class BearerBackend(AuthenticationBackend):
    """Resolves the bearer to a `Principal` (tokens file first, then OAuth) and enforces required scopes.

    Static tokens are operator-issued full-access keys: they are granted every required scope.
    JWT checks may fetch the issuer's keys, so they run in a worker thread, never on the event loop.
    """

    def __init__(
        self, tokens: dict[str, str] | None, verifier: JwtVerifier | None, required_scopes: tuple[str, ...] = ()
    ) -> None:
        self.tokens = tokens
        self.verifier = verifier
        self.required_scopes = required_scopes

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, Principal]:
        if self.tokens is None and self.verifier is None:
            return AuthCredentials(), Principal(LOCAL_PRINCIPAL)
        principal = await self.principal(bearer_token(conn))
        missing = [scope for scope in self.required_scopes if scope not in principal.scopes]
        if missing:
            reason = f"The access token lacks the scope(s) {' '.join(missing)} this server requires."
            raise AuthFailure(403, reason, "insufficient_scope")
        return AuthCredentials(list(principal.scopes)), principal

    async def principal(self, token: str | None) -> Principal:
        if token is None:
            raise AuthFailure(401, "No bearer token was sent.")
        for known, name in (self.tokens or {}).items():
            # Constant-time compare so a token cannot be guessed byte by byte from timings.
            if hmac.compare_digest(known.encode(), token.encode()):
                return Principal(name, self.required_scopes)
        if self.verifier is None:
            raise AuthFailure(401, "The bearer token is not in the operator's tokens file.", "invalid_token")
        try:
            access = await anyio.to_thread.run_sync(self.verifier.verify, token)
        except InvalidToken as exc:
            raise AuthFailure(401, str(exc), "invalid_token") from exc
        except IssuerUnavailable as exc:
            log.warning("cannot check access tokens: issuer %s unavailable: %s", self.verifier.issuer, exc)
            raise AuthFailure(503, "The authorization server's signing keys cannot be fetched right now.") from exc
        return Principal(access.subject, access.scopes)

    def challenge(self, failure: AuthFailure) -> str:
        """RFC 6750 §3 `WWW-Authenticate`; in OAuth mode with RFC 9728 §5.1 `resource_metadata`."""
        params = []
        if failure.error:
            params += [f'error="{failure.error}"', f'error_description="{failure.reason}"']
        if self.verifier is None:
            params.append('realm="vidforge"')
        else:
            params.append(f'resource_metadata="{resource_metadata_url(self.verifier.audience)}"')
        if self.required_scopes:
            params.append(f'scope="{" ".join(self.required_scopes)}"')
        return "Bearer " + ", ".join(params)

    def how_to_authenticate(self) -> str:
        if self.verifier is None:
            return "Send `Authorization: Bearer <token>` with a token from the operator's tokens file."
        how = (
            f"Send `Authorization: Bearer <access token>` issued by {self.verifier.issuer} for resource "
            f"{self.verifier.audience}"
        )
        if self.required_scopes:
            how += f" with scope {' '.join(self.required_scopes)}"
        return f"{how} (discovery: {resource_metadata_url(self.verifier.audience)})."

    def on_error(self, conn: HTTPConnection, exc: AuthenticationError) -> Response:
        """The `AuthenticationMiddleware` error handler: contract-shaped 401, 403 or 503."""
        assert isinstance(exc, AuthFailure), exc
        if exc.status == 503:
            assert self.verifier is not None  # only a JWT check waits on the issuer
            # The verifier retries the issuer once its cooldown has passed; sooner would get the same answer.
            retry_after_s = math.ceil(self.verifier.refetch_cooldown_s)
            error = errors.internal_error(
                "Temporarily unable to check credentials.", "Authorization", exc.reason, retry_after_s * 1000
            )
            headers = {"Retry-After": str(retry_after_s)}
        else:
            refused = http_refusals.insufficient_scope if exc.status == 403 else http_refusals.unauthorized
            error = refused(f"{exc.reason} {self.how_to_authenticate()}")
            headers = {"WWW-Authenticate": self.challenge(exc)}
        body = jsonrpc_error(error.jsonrpc_code, error.message, jsonrpc_error_data(error))
        return JSONResponse(body, status_code=exc.status, headers=headers)


def bearer_backend(config: Config, tokens: dict[str, str] | None) -> BearerBackend:
    """The configured backend (a replica's door, serve_app/ingress/_callers.py, shares its app's one)."""
    verifier = JwtVerifier(config.oauth_issuer, config.resource) if config.oauth_issuer else None
    return BearerBackend(tokens, verifier, config.required_scopes)


def authentication(config: Config, tokens: dict[str, str] | None) -> Middleware:
    """The configured middleware: `AuthenticationMiddleware` with a `BearerBackend` and its error handler."""
    backend = bearer_backend(config, tokens)
    return Middleware(AuthenticationMiddleware, backend=backend, on_error=backend.on_error)
