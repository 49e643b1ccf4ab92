"""The web origin (RFC 6454) of a URL, compared as (scheme, host, port): what the Origin/Host guard
(serve_app/ingress/_origin.py) and the review page's same-origin check (serve_app/ingress/review/routes.py) both match."""

from __future__ import annotations

from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}

WebOrigin = tuple[str, str, int | None]


def origin_key(origin: str) -> WebOrigin | None:
    """(scheme, host, port) of an origin or URL, the port made explicit; None when it is not one."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port
