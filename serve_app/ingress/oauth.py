"""OAuth 2.1 resource-server mode (MCP authorization, 2026-07-28): discovery documents and JWT access tokens.

vidforge is a resource server only: an external authorization server (`VIDFORGE_OAUTH_ISSUER`) issues JWT
access tokens, and vidforge checks them locally against the issuer's published keys — no token
introspection round trip per request. Signature checking and the JWKS cache are PyJWT's (`PyJWKClient`);
this module decides which claims must hold and how the keys are found.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from serve_app._config import LOOPBACK_HOSTS, Config

PRM_PATH = "/.well-known/oauth-protected-resource"
# Only public-key algorithms: a symmetric `alg` would let anyone holding a JWKS entry mint tokens
# (the RFC 8725 §3.1 algorithm-confusion attack). PyJWT also pins each JWK to its own algorithm.
ASYMMETRIC_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
CLOCK_LEEWAY_S = 30  # RFC 7519 §4.1.4/§4.1.5 allow "some small leeway" for clock skew on exp/nbf
HTTP_TIMEOUT_S = 10
JWKS_LIFESPAN_S = 300  # a key the issuer withdraws stops verifying within this long
# An unknown `kid` refetches the JWKS (the issuer rotated keys), but at most once per this long, so
# tokens with made-up `kid`s cannot turn every request into a fetch from the issuer.
JWKS_REFETCH_COOLDOWN_S = 10.0


class OAuthConfigError(ValueError):
    pass


class InvalidToken(Exception):
    """The bearer is not an access token for this resource; the message is safe to show the caller."""


class IssuerUnavailable(Exception):
    """The issuer's metadata or keys could not be fetched: no token can be checked right now."""


def check_oauth_settings(issuer: str, public_url: str | None) -> None:
    """Refuse settings that could never work, at startup rather than on the first request.

    The issuer must be https (OAuth 2.1 §1.5; RFC 8414 §2: no query or fragment); plain http is accepted
    on a loopback host for development. The public URL must be an origin: the RFC 9728 §3.1 well-known
    path is inserted after the host, and vidforge serves it at the root.
    """
    parts = urlsplit(issuer)
    if parts.scheme != "https" and not (parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS):
        raise OAuthConfigError(f"VIDFORGE_OAUTH_ISSUER must be an https URL (http only on loopback): {issuer}")
    if parts.query or parts.fragment:
        raise OAuthConfigError(f"VIDFORGE_OAUTH_ISSUER must not have a query or fragment: {issuer}")
    if public_url is not None:
        public = urlsplit(public_url)
        if public.scheme not in ("http", "https") or not public.netloc or public.path not in ("", "/"):
            raise OAuthConfigError(f"VIDFORGE_PUBLIC_URL must be scheme://host[:port] with no path: {public_url}")


def metadata_urls(issuer: str) -> list[str]:
    """Where the issuer's metadata may live, in the order the MCP authorization spec tries them:
    RFC 8414 §3.1 (well-known segment inserted before the issuer's path, trailing `/` dropped), then
    OpenID Connect Discovery 1.0 §4 (appended to the issuer), then the RFC 8414 form of the latter."""
    parts = urlsplit(issuer)
    origin, path = f"{parts.scheme}://{parts.netloc}", parts.path.rstrip("/")
    urls = [
        f"{origin}/.well-known/oauth-authorization-server{path}",
        f"{origin}{path}/.well-known/openid-configuration",
    ]
    if path:
        urls.append(f"{origin}/.well-known/openid-configuration{path}")
    return urls


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
        return json.load(response)


def fetch_jwks_uri(issuer: str) -> str:
    """The issuer's `jwks_uri`, from the first metadata document that answers (blocking I/O).

    RFC 8414 §3.3: a document whose `issuer` differs from the configured one must not be used —
    otherwise a misconfigured or hostile host could vouch for another issuer's keys.
    """
    failures = []
    for url in metadata_urls(issuer):
        try:
            metadata = _get_json(url)
        except (OSError, ValueError) as exc:
            failures.append(f"{url}: {exc}")
            continue
        if not isinstance(metadata, dict) or metadata.get("issuer") != issuer:
            failures.append(f"{url}: `issuer` is not {issuer}")
            continue
        if not isinstance(metadata.get("jwks_uri"), str):
            failures.append(f"{url}: no `jwks_uri`")
            continue
        return str(metadata["jwks_uri"])
    raise IssuerUnavailable("; ".join(failures))


@dataclass(frozen=True)
class AccessToken:
    subject: str
    scopes: tuple[str, ...]


def granted_scopes(claims: dict[str, Any]) -> tuple[str, ...]:
    """RFC 9068 §2.2.3 / RFC 8693 §4.2: `scope` is a space-separated string; some issuers send `scp` as a list."""
    scope = claims.get("scope", claims.get("scp", ""))
    return tuple(scope.split()) if isinstance(scope, str) else tuple(s for s in scope if isinstance(s, str))


# Fixed texts per failure: PyJWT's messages can echo token content (a `kid`), which [6.offending-value]
# keeps out of error bodies.
_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "The access token has expired (exp); obtain a new one."),
    (jwt.ImmatureSignatureError, "The access token is not valid yet (nbf)."),
    (jwt.InvalidAudienceError, "The access token was issued for another resource (aud)."),
    (jwt.InvalidIssuerError, "The access token was issued by another authorization server (iss)."),
    (jwt.MissingRequiredClaimError, "The access token lacks a required claim (exp, iss, aud, sub)."),
    (jwt.PyJWKClientError, "The access token is not signed by a key the issuer publishes."),
)


class JwtVerifier:
    """Checks JWT access tokens for one resource (RFC 9068 §4; MCP authorization: token audience validation).

    Blocking (metadata and JWKS fetches use urllib): call `verify` off the event loop. The issuer's
    metadata is read on first use, not at startup, so vidforge starts while the issuer is down and
    recovers when it returns; a failed read is retried after `JWKS_REFETCH_COOLDOWN_S`.
    """

    def __init__(self, issuer: str, audience: str, refetch_cooldown_s: float = JWKS_REFETCH_COOLDOWN_S) -> None:
        self.issuer = issuer
        self.audience = audience
        self.refetch_cooldown_s = refetch_cooldown_s
        self._keys: jwt.PyJWKClient | None = None
        self._discovery_failed: tuple[float, IssuerUnavailable] | None = None
        self._lock = threading.Lock()

    def _key_client(self) -> jwt.PyJWKClient:
        with self._lock:
            if self._keys is None:
                if self._discovery_failed and time.monotonic() - self._discovery_failed[0] < self.refetch_cooldown_s:
                    raise self._discovery_failed[1]
                try:
                    jwks_uri = fetch_jwks_uri(self.issuer)
                except IssuerUnavailable as exc:
                    self._discovery_failed = (time.monotonic(), exc)
                    raise
                # PyJWKClient: the JWKS is cached for `lifespan`; a `kid` not in it forces one refetch,
                # unless the last fetch was under `cooldown_duration` ago (its rate limit).
                self._keys = jwt.PyJWKClient(
                    jwks_uri,
                    lifespan=JWKS_LIFESPAN_S,
                    cooldown_duration=self.refetch_cooldown_s,
                    timeout=HTTP_TIMEOUT_S,
                )
            return self._keys

    def verify(self, token: str) -> AccessToken:
        keys = self._key_client()
        try:
            signing_key = keys.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                signing_key,
                algorithms=ASYMMETRIC_ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                leeway=CLOCK_LEEWAY_S,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWKClientConnectionError as exc:
            raise IssuerUnavailable(str(exc)) from exc
        except jwt.PyJWTError as exc:
            reason = next((text for kind, text in _REASONS if isinstance(exc, kind)), None)
            raise InvalidToken(reason or "The access token is malformed or its signature does not verify.") from exc
        if not isinstance(claims["sub"], str) or not claims["sub"]:
            raise InvalidToken("The access token's subject (sub) is empty.")
        return AccessToken(subject=claims["sub"], scopes=granted_scopes(claims))


def resource_metadata_url(resource: str) -> str:
    """RFC 9728 §3.1: the well-known segment goes between the host and the resource's path."""
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{PRM_PATH}{parts.path.rstrip('/')}"


def protected_resource_routes(config: Config) -> list[Route]:
    """RFC 9728 §3.2 Protected Resource Metadata for `/mcp` in OAuth mode, served without authentication.

    The same document answers at the root well-known path as well: MCP clients fall back to it, and
    it must still name `/mcp` as the resource, since a token minted for the origin would carry the
    wrong audience.
    """
    if config.oauth_issuer is None:
        return []
    document: dict[str, Any] = {
        "resource": config.resource,
        "authorization_servers": [config.oauth_issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": "vidforge",
    }
    if config.required_scopes:
        document["scopes_supported"] = list(config.required_scopes)

    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse(document)

    return [
        Route(PRM_PATH + urlsplit(config.resource).path, metadata, methods=["GET"]),
        Route(PRM_PATH, metadata, methods=["GET"]),
    ]
