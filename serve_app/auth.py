"""Bearer-token credentials (`VIDFORGE_TOKENS_FILE`: a JSON object token → principal).

Without a tokens file there is one principal, `local`, and the server only binds loopback
([1.auth-model]: no credentials means no network exposure). With one, every request — MCP, asset
upload, artifact download — needs `Authorization: Bearer <token>`; anything else is a 401 carrying a
JSON-RPC error body so MCP clients can parse it.
"""

from __future__ import annotations

import hmac
import json
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_protocol.errors import VidforgeError, jsonrpc_error_data
from mcp_protocol.http import jsonrpc_error, send_json
from mcp_protocol.server import PRINCIPAL_SCOPE_KEY

LOCAL_PRINCIPAL = "local"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class TokenFileError(ValueError):
    pass


def load_tokens(path: str | None) -> dict[str, str] | None:
    if path is None:
        return None
    try:
        tokens = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TokenFileError(f"cannot read VIDFORGE_TOKENS_FILE {path}: {exc}") from exc
    if not isinstance(tokens, dict) or not tokens or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in tokens.items()
    ):
        raise TokenFileError(f"VIDFORGE_TOKENS_FILE {path} must be a non-empty JSON object of token → principal")
    return tokens


def check_bind_allowed(host: str, tokens: dict[str, str] | None) -> None:
    if tokens is None and host not in LOOPBACK_HOSTS:
        raise TokenFileError(
            f"refusing to bind {host} without credentials: set VIDFORGE_TOKENS_FILE, or bind 127.0.0.1"
        )


class BearerAuth:
    """ASGI middleware: resolve the principal for every HTTP request, or answer 401."""

    def __init__(self, app: ASGIApp, tokens: dict[str, str] | None) -> None:
        self.app = app
        self.tokens = tokens

    def principal(self, scope: Scope) -> str | None:
        if self.tokens is None:
            return LOCAL_PRINCIPAL
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return None
        for known, principal in self.tokens.items():
            # Constant-time compare so a token cannot be guessed byte by byte from timings.
            if hmac.compare_digest(known.encode(), token.strip().encode()):
                return principal
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        principal = self.principal(scope)
        if principal is None:
            error = VidforgeError(
                code="unauthorized",
                message="Unauthorized: missing or invalid bearer token.",
                field="Authorization",
                reason="Send `Authorization: Bearer <token>` with a token from the operator's tokens file.",
            )
            body = jsonrpc_error(-32600, error.message, jsonrpc_error_data(error))
            await send_json(send, 401, body, {"WWW-Authenticate": 'Bearer realm="vidforge"'})
            return
        scope[PRINCIPAL_SCOPE_KEY] = principal
        await self.app(scope, receive, send)
