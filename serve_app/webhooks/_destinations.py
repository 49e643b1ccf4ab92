"""Where a webhook may go: the shared address guard (serve_app/outbound/address_guard.py) judges every address, with
https only and VIDFORGE_WEBHOOK_ALLOW_HOSTS as its allow-list. A notify_url is checked at submit (refused there,
with nothing sent) and its host is resolved again and pinned at every attempt, so a name that later resolves to a
refused address (DNS rebinding) gets no request either.
"""

from __future__ import annotations

import httpx2

from serve_app.outbound.address_guard import (
    AddressGuard,
    AddressRefused,
    IPAddress,
    NameUnresolved,
    Resolver,
    system_resolver,
)

ALLOW_SETTING = "VIDFORGE_WEBHOOK_ALLOW_HOSTS"


class DestinationRefused(Exception):
    """A notify_url vidforge will not send to; `reason` names the rule (and the setting that lifts it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DestinationUnavailable(Exception):
    """The destination's name does not resolve, for now."""


class DestinationGuard:
    def __init__(self, allow_hosts: str, resolver: Resolver = system_resolver) -> None:
        self._guard = AddressGuard.of(allow_hosts, resolver)

    @staticmethod
    def target(url: str) -> httpx2.URL:
        """`url` parsed, once it passed the rules that need no resolution. Raises DestinationRefused."""
        try:
            target = httpx2.URL(url)
        except httpx2.InvalidURL:
            raise DestinationRefused("the notify_url is not a valid URL") from None
        if target.scheme != "https":
            raise DestinationRefused(f"the {target.scheme or 'missing'} scheme is refused: notify_url must be https://")
        if target.userinfo:
            raise DestinationRefused("the notify_url holds a user name or password; vidforge sends no credentials")
        if not target.raw_host:
            raise DestinationRefused("the notify_url names no host")
        return target

    async def pin(self, target: httpx2.URL) -> IPAddress:
        """Resolve the host once, check every address (the guard's `pin`), and return the first to connect to.
        Raises DestinationRefused naming the address's kind and this setting, DestinationUnavailable when the name
        does not resolve."""
        try:
            return await self._guard.pin(target.raw_host.decode("ascii"), target.port or 443)
        except AddressRefused as refused:
            raise DestinationRefused(
                f"{refused}; webhooks go to public addresses only, unless {ALLOW_SETTING} lists the host or its network"
            ) from None
        except NameUnresolved as unresolved:
            raise DestinationUnavailable(str(unresolved)) from None

    async def check(self, url: str) -> None:
        """What submit checks: the URL's rules, and every address its host resolves to now."""
        await self.pin(self.target(url))
