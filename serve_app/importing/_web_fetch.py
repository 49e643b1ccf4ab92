"""The https fetch of an import: one GET per hop, each on a connection of its own to the address the guard pinned.

Per hop: the URL passes the link's rules (https only, plain http only to a host VIDFORGE_IMPORT_ALLOW_HOSTS lists; no
credentials), its host is resolved once and every address checked (the shared address guard,
serve_app.outbound.address_guard, with VIDFORGE_IMPORT_ALLOW_HOSTS as its allow-list), and the request goes to the
first address itself — the URL's host swapped for it, the name kept as the Host header and as the TLS server name (SNI
and certificate check), so nothing resolves the name a second time. A redirect is another hop, through the same
checks; past VIDFORGE_IMPORT_MAX_REDIRECTS the import is refused. No connection is reused across hops (one verified for
one name never carries another's request), no proxy from the environment is used (a proxy would resolve the name
itself, past the guard), and the body is read raw, as sent (`Accept-Encoding: identity`; nothing is decompressed). A declared length past the asset limit is
refused before the body is read; the store counts the bytes as they arrive (serve_app.media.assets.AssetStore).

What a failure says is this module's own words: the rule broken, the host, the HTTP status code. The remote's
headers and body never reach an error or a log line.

Its connections close when the import is cancelled mid-handshake (serve_app.outbound.transport).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import unquote

import httpx2

from mcp_protocol.identity import server_version
from serve_app.importing._failures import ImportRefused, ImportUnavailable
from serve_app.media.assets import AssetTooLarge
from serve_app.outbound.address_guard import AddressGuard, AddressRefused, IPAddress, NameUnresolved
from serve_app.outbound.transport import outbound_client, pinned_request, trusted_roots

ALLOW_SETTING = "VIDFORGE_IMPORT_ALLOW_HOSTS"
REDIRECTS = frozenset({301, 302, 303, 307, 308})
RETRYABLE_CLIENT_ERRORS = frozenset({408, 425, 429})  # a 4xx that says "later", not "no"


@dataclass(frozen=True)
class FetchLimits:
    max_bytes: int  # VIDFORGE_MAX_ASSET_BYTES
    max_redirects: int  # VIDFORGE_IMPORT_MAX_REDIRECTS


def label_of(url: str) -> str:
    """The asset's label: the link's last path segment (the caller's own words, not the remote's)."""
    try:
        name = PurePosixPath(unquote(httpx2.URL(url).path)).name
    except httpx2.InvalidURL:
        name = ""
    return name or "import"


def check_link(guard: AddressGuard, scheme: str, host: str, has_userinfo: bool) -> None:
    """The rules a link must pass before anything is resolved. Raises ImportRefused."""
    if has_userinfo:
        raise ImportRefused("the link holds a user name or password; vidforge does not send credentials")
    if scheme == "https":
        return
    if scheme == "http" and guard.listed(host):
        return
    if scheme == "http":
        raise ImportRefused(f"plain http is refused for {host}: only https, unless {ALLOW_SETTING} lists the host")
    raise ImportRefused(f"the {scheme or 'missing'} scheme is not importable: use an https:// link")


def refusal_reason(refused: AddressRefused) -> str:
    """The guard's refusal, in the import's words (the rule, and the setting that lifts it)."""
    return f"{refused}; imports connect to public addresses only, unless {ALLOW_SETTING} lists the host or its network"


async def pin(guard: AddressGuard, host: str, port: int) -> IPAddress:
    """The address to connect to for `host`, once the guard allowed every one it resolves to. Raises ImportRefused
    when one is refused, ImportUnavailable when the name does not resolve."""
    try:
        return await guard.pin(host, port)
    except AddressRefused as refused:
        raise ImportRefused(refusal_reason(refused)) from None
    except NameUnresolved as unresolved:
        raise ImportUnavailable(str(unresolved)) from None


def web_target(url: str | httpx2.URL, guard: AddressGuard) -> httpx2.URL:
    """`url` parsed, once it passed the link's rules (scheme, no credentials). Raises ImportRefused."""
    try:
        target = httpx2.URL(url)
    except httpx2.InvalidURL:
        raise ImportRefused("the link is not a valid URL") from None
    if target.scheme in ("http", "https") and not target.raw_host:
        raise ImportRefused("the link names no host")
    check_link(guard, target.scheme, target.raw_host.decode("ascii"), bool(target.userinfo))
    return target


def _tls_unverified(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


@contextmanager
def _network_failures(host: str) -> Iterator[None]:
    """httpx's transport errors as ImportUnavailable, in words of this module's own (their text is not shown)."""
    try:
        yield
    except httpx2.ConnectError as exc:
        if _tls_unverified(exc):
            raise ImportUnavailable(f"the TLS certificate of {host} could not be verified") from None
        raise ImportUnavailable(f"could not connect to {host}") from None
    except httpx2.RemoteProtocolError:
        raise ImportUnavailable(f"{host} answered with a malformed HTTP response") from None
    except httpx2.TransportError:
        raise ImportUnavailable(f"the connection to {host} broke off") from None


class WebFetch:
    def __init__(self, guard: AddressGuard, limits: FetchLimits, roots: ssl.SSLContext | None = None) -> None:
        self.guard = guard
        self.limits = limits
        self.roots = roots or trusted_roots()

    async def chunks(self, url: str) -> AsyncGenerator[bytes, None]:
        """The file's bytes as they arrive, after every hop passed the guard. Raises ImportRefused,
        ImportUnavailable, AssetTooLarge (a declared length past the limit)."""
        target = web_target(url, self.guard)
        # The whole transfer is bounded by its caller (VIDFORGE_IMPORT_TIMEOUT_S: the import desk).
        headers = {"User-Agent": f"vidforge/{server_version()}", "Accept-Encoding": "identity"}
        async with outbound_client(self.roots, headers) as client:
            for hop in range(self.limits.max_redirects + 1):
                host = target.raw_host.decode("ascii")
                pinned = await pin(self.guard, host, target.port or (443 if target.scheme == "https" else 80))
                request = pinned_request(client, "GET", target, pinned)
                with _network_failures(host):
                    response = await client.send(request, stream=True)
                try:
                    if response.status_code in REDIRECTS:
                        target = self._next_hop(target, response, hop)
                        continue
                    self._check_answer(host, response)
                    with _network_failures(host):
                        async for chunk in response.aiter_raw():
                            yield chunk
                    return
                finally:
                    await response.aclose()

    def _next_hop(self, target: httpx2.URL, response: httpx2.Response, hop: int) -> httpx2.URL:
        host = target.raw_host.decode("ascii")
        if hop == self.limits.max_redirects:
            raise ImportRefused(
                f"the link redirects more than {self.limits.max_redirects} times (VIDFORGE_IMPORT_MAX_REDIRECTS)"
            )
        location = response.headers.get("location")
        if not location:
            raise ImportUnavailable(f"{host} answered HTTP {response.status_code} without saying where to")
        try:
            return web_target(target.join(location), self.guard)
        except httpx2.InvalidURL:
            raise ImportUnavailable(f"{host} redirected to a link that is not a valid URL") from None

    def _check_answer(self, host: str, response: httpx2.Response) -> None:
        status = response.status_code
        if 400 <= status < 500 and status not in RETRYABLE_CLIENT_ERRORS:
            raise ImportRefused(f"{host} answered HTTP {status}: it does not serve the file at this link")
        if status != 200:
            raise ImportUnavailable(f"{host} answered HTTP {status} instead of the file")
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limits.max_bytes:
            raise AssetTooLarge("the length the remote declares is past the limit")
