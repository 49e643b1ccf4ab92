"""Origin and Host checks on every route, in every credential mode: one ASGI middleware in front of the app.

A browser page on another site can send requests to a loopback vidforge: directly (`Origin` names the page's
site) or by DNS rebinding (its own host name resolved to 127.0.0.1, so `Host` names the attacker's site). With
no credentials configured the page would act as the local principal — upload assets, read renders. So:

- a present `Origin` must be one this server answers to: its own (`VIDFORGE_PUBLIC_URL`, else the bind
  address), any loopback origin on a loopback bind (local tools such as MCP Inspector run on other ports), and
  those the operator lists in `VIDFORGE_ALLOWED_ORIGINS`. Agents and CLIs send no `Origin` and are unaffected;
- `Host` must name this server: the loopback names on a loopback bind, the bind address on any other concrete
  bind, the host of `VIDFORGE_PUBLIC_URL`, and `VIDFORGE_ALLOWED_HOSTS`. A wildcard bind (0.0.0.0, ::) answers
  to names it cannot know, so there `Host` is checked only once the operator lists `VIDFORGE_ALLOWED_HOSTS`
  (such a bind always has credentials, the other defence against rebinding).

Two exceptions, on paths where a signed link's capability, not the caller's origin, is the credential:
- `Origin: null` (an opaque origin) passes on the review page's paths (serve_app/ingress/review/). A browser sends it
  for the page's own form POST, the page being served with `Referrer-Policy: no-referrer`; the page itself refuses a
  POST whose `Referer` names another site.
- any `Origin` passes on the watch page's paths (serve_app/ingress/watch/), which only read: a player embedded
  elsewhere fetches a stream's files from there (hls.js sends its page's origin, a sandboxed frame such as an MCP
  App's view `null`), and the link grants the same to whoever holds it, wherever it is used.

Both run before authentication and routing, so `/mcp`, `/assets`, `/artifacts/…`, `/healthz` and the OAuth
metadata are covered alike; a refusal is 403 with the contract's envelope on the route's carrier.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_protocol import http_refusals
from mcp_protocol.envelope import VidforgeError
from serve_app._config import LOOPBACK_HOSTS, Config
from serve_app.ingress._refusals import refusal
from serve_app.ingress._web_origin import DEFAULT_PORTS, WebOrigin, origin_key
from serve_app.ingress.review.links import REVIEW_PATH
from serve_app.ingress.watch.links import WATCH_PATH
from serve_app.observability.catalog import REFUSALS

WILDCARD_BINDS = ("0.0.0.0", "::")
OPAQUE_ORIGIN = "null"


def _split_list(raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _host_name(host: str) -> str | None:
    """The name in a `Host` header (port and IPv6 brackets removed); None when malformed."""
    try:
        return urlsplit(f"//{host.strip()}").hostname
    except ValueError:
        return None


@dataclass(frozen=True)
class OriginPolicy:
    """Which `Origin` and `Host` values this server answers to (see the module docstring)."""

    origins: frozenset[WebOrigin]
    any_port_hosts: frozenset[str]  # origins on these hosts match at any port (loopback binds)
    hosts: frozenset[str] | None  # None: Host is not checked (wildcard bind, no VIDFORGE_ALLOWED_HOSTS)

    @classmethod
    def from_config(cls, config: Config) -> OriginPolicy:
        named = [config.public_base_url, *_split_list(config.allowed_origins)]
        origins = {key for key in map(origin_key, named) if key is not None}
        hosts = {h.lower() for h in _split_list(config.allowed_hosts)}
        if config.public_url:
            hosts.add(urlsplit(config.public_url).hostname or "")
        loopback = config.host in LOOPBACK_HOSTS
        if loopback or config.host in WILDCARD_BINDS:
            hosts.update(LOOPBACK_HOSTS)
        else:
            hosts.add(config.host.lower())
        unchecked = config.host in WILDCARD_BINDS and not config.allowed_hosts.strip()
        return cls(
            origins=frozenset(origins),
            any_port_hosts=frozenset(LOOPBACK_HOSTS if loopback else ()),
            hosts=None if unchecked else frozenset(hosts - {""}),
        )

    def origin_allowed(self, origin: str) -> bool:
        key = origin_key(origin)
        if key is None:
            return False
        return key in self.origins or (key[0] in DEFAULT_PORTS and key[1] in self.any_port_hosts)

    def host_allowed(self, host: str) -> bool:
        return self.hosts is None or _host_name(host) in self.hosts


class OriginGuard:
    """ASGI middleware: 403 for a foreign `Origin` or `Host` on any HTTP route, before anything else runs."""

    def __init__(self, app: ASGIApp, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error = self.check(Headers(scope=scope), scope["path"])
            if error is not None:
                REFUSALS.inc(limit="origin")
                await refusal(scope, 403, error)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def check(self, headers: Headers, path: str = "") -> VidforgeError | None:
        origin, host = headers.get("origin"), headers.get("host")
        opaque_on_review = origin == OPAQUE_ORIGIN and path.startswith(REVIEW_PATH + "/")
        signed_read = opaque_on_review or path.startswith(WATCH_PATH + "/")
        if origin is not None and not signed_read and not self.policy.origin_allowed(origin):
            return http_refusals.origin_not_allowed()
        if host is not None and not self.policy.host_allowed(host):
            return http_refusals.host_not_allowed()
        return None
