"""Where the client finds the server and which credential it sends: the flags, else the environment, else the default
(a `vidforge serve` on this machine).

    VIDFORGE_URL    the MCP endpoint (default http://127.0.0.1:8000/mcp; a URL without `/mcp` gets it)
    VIDFORGE_TOKEN  the bearer token, from the server's tokens file (unset: none sent, as a server without one wants)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_SERVER = "http://127.0.0.1:8000/mcp"
SERVER_VARIABLE = "VIDFORGE_URL"
TOKEN_VARIABLE = "VIDFORGE_TOKEN"
MCP_PATH = "/mcp"


class BadServerUrl(ValueError):
    pass


@dataclass(frozen=True)
class ServerAddress:
    mcp_url: str  # the MCP endpoint, http(s)://HOST:PORT[/PREFIX]/mcp
    token: str | None

    @classmethod
    def of(cls, server: str | None, token: str | None, environ: Mapping[str, str] = os.environ) -> ServerAddress:
        """The flags' values (None: not given) over the environment's; BadServerUrl for a URL that is not http(s)."""
        url = (server or environ.get(SERVER_VARIABLE) or DEFAULT_SERVER).rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BadServerUrl(f"--server {url!r} is not an http(s) URL (e.g. {DEFAULT_SERVER})")
        if not url.endswith(MCP_PATH):
            url += MCP_PATH
        return cls(url, token or environ.get(TOKEN_VARIABLE) or None)

    @property
    def base_url(self) -> str:
        """Where the plain-HTTP routes are: the MCP endpoint's URL without `/mcp`."""
        return self.mcp_url.removesuffix(MCP_PATH)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}
