"""The transport of vidforge's requests to hosts its callers name: an import's fetch (serve_app.importing._web_fetch)
and a webhook's POST (serve_app.webhooks._dispatcher).

`outbound_client` is the one client both use: no proxy from the environment (a proxy would resolve the name itself,
past the address guard), no redirect followed (a redirect is another hop, through the guard again, or none), no
connection reused, no timeout of its own (each caller bounds the whole request). `pinned_request` sends a request to
the address the guard pinned (serve_app.outbound.address_guard), the name kept for TLS and the Host header.

Both are bounded by a cancel (the import's time limit or its cancel; the attempt timeout), which may come while the
remote host stalls its TLS handshake. httpcore closes a connection whose handshake fails with an error, not one that
is cancelled: the socket then stayed open, registered in the event loop, for as long as the host kept the
connection, so a host that never finishes a handshake could use up the process's file descriptors one request at a
time (the import desk's, or the dispatcher's, which every tenant's deliveries share). Here a cancelled handshake
closes its connection before the cancel goes on.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore2
import httpx2

from serve_app.outbound.address_guard import IPAddress


def trusted_roots() -> ssl.SSLContext:
    """The certificate authorities outbound requests trust: the system's, or the bundle SSL_CERT_FILE / SSL_CERT_DIR
    name."""
    return httpcore2.default_ssl_context()


class _ClosedOnCancel(httpcore2.AsyncNetworkStream):
    """A connection whose TLS handshake, if cancelled, closes it before the cancel goes on; otherwise httpcore's."""

    def __init__(self, stream: httpcore2.AsyncNetworkStream) -> None:
        self._stream = stream

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.AsyncNetworkStream:
        try:
            return await self._stream.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:  # a cancel, which httpcore lets through with the socket open
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
            raise

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _CancelClosesTls(httpcore2.AsyncNetworkBackend):
    """httpcore's asyncio backend (anyio's), its connections `_ClosedOnCancel`."""

    def __init__(self) -> None:
        self._backend = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        return _ClosedOnCancel(await self._backend.connect_tcp(host, port, timeout, local_address, socket_options))

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class OutboundTransport(httpx2.AsyncHTTPTransport):
    """httpx's transport, on a pool of `_CancelClosesTls` connections with no keep-alive (none is reused: one
    verified for one name never carries another's request). httpx takes no network backend, so the pool it made is
    made again with one."""

    def __init__(self, roots: ssl.SSLContext) -> None:
        super().__init__(verify=roots, trust_env=False)
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=roots, max_keepalive_connections=0, network_backend=_CancelClosesTls()
        )


def outbound_client(roots: ssl.SSLContext, headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    """A client for requests to a host a caller named (see the module's docstring); `headers` go with each."""
    return httpx2.AsyncClient(
        transport=OutboundTransport(roots), trust_env=False, follow_redirects=False, timeout=None, headers=headers
    )


def pinned_request(
    client: httpx2.AsyncClient,
    method: str,
    target: httpx2.URL,
    pinned: IPAddress,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
) -> httpx2.Request:
    """A request for `target` that goes to `pinned`, the address the guard checked: the URL's host swapped for it,
    the name kept as the Host header and as the TLS server name (SNI and the certificate check), so nothing
    resolves the name a second time."""
    return client.build_request(
        method,
        target.copy_with(host=str(pinned)),
        content=content,
        headers={"Host": target.netloc.decode("ascii"), **(headers or {})},
        extensions={"sni_hostname": target.raw_host.decode("ascii")},
    )
