"""The address guard: where vidforge may connect when a caller names the host (an import's link, a webhook's
notify_url). The host is the tenant's choice, and the server connecting to it sits inside the operator's network, so
the guard stands between the two (server-side request forgery):

- every address a host name resolves to must be public: loopback, private, link-local (where cloud metadata
  services answer), shared (carrier-grade NAT), multicast, unspecified and the other reserved ranges are refused,
  `ipaddress`'s `is_global` and the explicit checks below together, an IPv4 address inside an IPv6 one (mapped,
  NAT64, 6to4) judged as itself. A host that resolves to any refused address is refused whole;
- the name is resolved once per connection and the connection goes to that very address (`pin`: the caller
  connects to it, with the name kept for TLS and the Host header: serve_app.outbound.transport.pinned_request), so a
  second resolution cannot swap in another (DNS rebinding);
- an allow-list, each caller's own setting (comma-separated host names and CIDRs: VIDFORGE_IMPORT_ALLOW_HOSTS,
  VIDFORGE_WEBHOOK_ALLOW_HOSTS), lets chosen hosts or networks past, for an operator whose media server or receiver is
  on the inside.

The rules of a URL (its scheme, credentials) are each caller's own, and so are the words of a refusal: the guard
raises `AddressRefused` and `NameUnresolved`, which the import (serve_app.importing._web_fetch) and the webhooks
(serve_app.webhooks._destinations) turn into their own errors. Resolution goes through `resolver`, the system's by
default: the one seam the tests use to make a name resolve to chosen addresses.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import anyio

IPAddress = IPv4Address | IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]

CLOUD_METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2")
)
SHARED_ADDRESS_SPACE = IPv4Network("100.64.0.0/10")  # RFC 6598, carrier-grade NAT: not global, not "private"
NAT64 = IPv6Network("64:ff9b::/96")  # RFC 6052: the last 32 bits are the IPv4 address reached


async def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives `host` (getaddrinfo, in a worker thread)."""
    return [info[4][0] for info in await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _judged(ip: IPAddress) -> list[IPAddress]:
    """The addresses that decide about `ip`: an IPv4 address carried inside an IPv6 one is what a connection to it
    reaches, so it is judged as itself (the mapped and NAT64 forms alone; 6to4 beside its outer address)."""
    if isinstance(ip, IPv4Address):
        return [ip]
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip in NAT64:
        return [IPv4Address(int(ip) & 0xFFFFFFFF)]
    if ip.sixtofour is not None:
        return [ip, ip.sixtofour]
    return [ip]


def _kind(ip: IPAddress) -> str | None:
    """What kind of non-public address `ip` is; None for a public one."""
    if ip in CLOUD_METADATA:
        return "cloud metadata"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip.is_unspecified:
        return "unspecified"
    if isinstance(ip, IPv4Address) and ip in SHARED_ADDRESS_SPACE:
        return "shared (carrier-grade NAT)"
    if ip.is_private:
        return "private"
    if ip.is_reserved or not ip.is_global:  # is_global alone passes multicast, 6to4 and the IPv6 reserved blocks
        return "reserved"
    return None


def refused_kind(ip: IPAddress) -> str | None:
    """The kind of non-public address `ip` reaches (see `_judged`); None when every judged address is public."""
    return next((kind for judged in _judged(ip) if (kind := _kind(judged)) is not None), None)


def _literal(host: str) -> IPAddress | None:
    """The address `host` is, when it is one rather than a name."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])  # an IPv6 scope (fe80::1%eth0) names no other address
    except ValueError:
        return None


class AddressRefused(Exception):
    """The guard refuses a connection to `ip` for `host`: an address of `kind` (loopback, private, ...) that the
    allow-list does not name. Its text starts the sentence each caller ends with its own rule and setting."""

    def __init__(self, host: str, ip: IPAddress, kind: str) -> None:
        super().__init__(host, ip, kind)
        self.host = host
        self.ip = ip
        self.kind = kind

    def __str__(self) -> str:
        where = f"{self.host} is" if _literal(self.host) == self.ip else f"{self.host} resolves to {self.ip},"
        return f"{where} a {self.kind} address"


class NameUnresolved(Exception):
    """The host's name does not resolve (for now: the same name may resolve later)."""

    def __init__(self, host: str) -> None:
        super().__init__(f"{host} does not resolve")
        self.host = host


@dataclass(frozen=True)
class AddressGuard:
    networks: tuple[IPv4Network | IPv6Network, ...] = ()
    hosts: frozenset[str] = frozenset()
    resolver: Resolver = field(default=system_resolver, compare=False)

    @classmethod
    def of(cls, allow_hosts: str, resolver: Resolver = system_resolver) -> AddressGuard:
        """From an allow-list setting: each entry a network (CIDR, or one address) or a host name."""
        networks: list[IPv4Network | IPv6Network] = []
        hosts: set[str] = set()
        for entry in (part.strip() for part in allow_hosts.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(tuple(networks), frozenset(hosts), resolver)

    def _listed_host(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def _listed_address(self, ip: IPAddress) -> bool:
        return any(candidate in network for candidate in {ip, *_judged(ip)} for network in self.networks)

    def listed(self, host: str) -> bool:
        """Whether the allow-list names `host`, by its name or, for an address, by a network holding it."""
        literal = _literal(host)
        return self._listed_host(host) or (literal is not None and self._listed_address(literal))

    def refusal(self, host: str, ip: IPAddress) -> AddressRefused | None:
        """Why the guard refuses a connection to `ip` for `host`; None when it allows it."""
        if self._listed_host(host) or self._listed_address(ip):
            return None
        kind = refused_kind(ip)
        return None if kind is None else AddressRefused(host, ip, kind)

    async def pin(self, host: str, port: int) -> IPAddress:
        """Resolve `host` once, check every address, and return the one to connect to (the first). Raises
        AddressRefused when any address is refused, NameUnresolved when the name does not resolve."""
        literal = _literal(host)
        if literal is not None:
            addresses = [literal]
        else:
            try:
                found = await self.resolver(host, port)
            except OSError:
                raise NameUnresolved(host) from None
            addresses = list(dict.fromkeys(ip for text in found if (ip := _literal(text)) is not None))
            if not addresses:
                raise NameUnresolved(host)
        for ip in addresses:
            if (refused := self.refusal(host, ip)) is not None:
                raise refused
        return addresses[0]
