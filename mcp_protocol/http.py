"""The `/mcp` HTTP endpoint in front of the SDK's stateless session manager, for both protocol eras.

The SDK's manager routes by `MCP-Protocol-Version`: a 2026-07-28 header goes to its stateless modern
handler; no header, or a handshake-era one (2025-11-25, 2025-06-18, ...), goes to its 2025 streamable-HTTP
handler, stateless here (`initialize` answered inline, no `Mcp-Session-Id` minted). This guard adds what
the SDK leaves to the server:

- POST only. GET/DELETE → 405 on both eras: 2026-07-28 removed the GET stream; 2025-06-18/2025-11-25 let a
  server without a standalone SSE stream answer GET 405, and DELETE 405 when it has no session to end. (The
  SDK's stateless legacy handler would hold a GET stream open forever — a leaked replica slot.)
- A body that carries the 2026-07-28 `_meta` protocol version is a 2026-era request whatever its header
  says: without `MCP-Protocol-Version`, or with a handshake-era one, it is 400/-32020 (header mismatch),
  never served as a 2025 request.
- A documented request-body limit (413).
- The extensions a handshake-era client can use, in its `initialize` answer's capabilities (`HANDSHAKE_EXTENSIONS`):
  the SDK answers `initialize` through that revision's schema, which has no `extensions`, so it is added here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING

import pydantic_core
from mcp_types import PROTOCOL_VERSION_META_KEY
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Message, Receive, Scope, Send

from mcp_protocol.app_view import UI_EXTENSION
from mcp_protocol.json_types import JSONObject, JSONValue

if TYPE_CHECKING:  # the SDK is loaded by the ingress that builds the manager; the refusals here need none of it
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# The render view, which a 2025 host finds through the tools' `_meta.ui` (mcp_protocol.app_view). Not the tasks
# extension: its methods are 2026-07-28 ones.
HANDSHAKE_EXTENSIONS: JSONObject = {UI_EXTENSION: {}}


async def send_json(send: Send, status: int, body: JSONValue, headers: dict[str, str] | None = None) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


def jsonrpc_error(code: int, message: str, data: JSONValue = None) -> JSONObject:
    """An error answering a request whose id is unknown: 2026-07-28's `JSONRPCErrorResponse` leaves `id`
    out rather than sending JSON-RPC 2.0's `null` (its `RequestId` is a string or an integer)."""
    error: JSONObject = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "error": error}


def jsonrpc_error_bodies(send: Send) -> Send:
    """Give every error the SDK answers a JSON-RPC body in the 2026-07-28 schema's shape.

    The SDK writes `"id": null` on parse errors and invalid envelopes (the schema leaves an unknown id
    out), and plain-text or empty bodies for transport refusals (bad Content-Type 400, 406, 421). Error
    responses are small and sent as one body message, so they are buffered and rewritten.
    """
    start: Message | None = None

    async def _send(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start" and message["status"] >= 400:
            start = message
            return
        if message["type"] != "http.response.body" or start is None:
            await send(message)
            return
        if message.get("more_body"):
            raise RuntimeError("streamed error bodies are not expected")
        body = message.get("body", b"")
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and "jsonrpc" in decoded:
            if "id" in decoded and decoded["id"] is None:
                del decoded["id"]
        else:
            reason = body.decode("utf-8", "replace").strip() or HTTPStatus(start["status"]).phrase
            decoded = jsonrpc_error(-32600, reason)
        payload = json.dumps(decoded, separators=(",", ":")).encode()
        await send_buffered(send, start, payload, b"application/json")
        start = None

    return _send


async def send_buffered(send: Send, start: Message, body: bytes, content_type: bytes | None = None) -> None:
    """Send a held-back response start with `body` as its one body, its Content-Length (and, when given, its
    Content-Type) set for it."""
    replaced = (b"content-length", b"content-type") if content_type is not None else (b"content-length",)
    headers = [(k, v) for k, v in start["headers"] if k not in replaced]
    if content_type is not None:
        headers.append((b"content-type", content_type))
    headers.append((b"content-length", str(len(body)).encode()))
    await send({**start, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def with_handshake_extensions(send: Send) -> Send:
    """Add HANDSHAKE_EXTENSIONS to the capabilities of the `initialize` answer `send` carries (one JSON body, the
    manager answering in JSON); any other answer passes as it is."""
    start: Message | None = None

    async def _send(message: Message) -> None:
        nonlocal start
        if message["type"] == "http.response.start" and message["status"] == 200:
            start = message
            return
        if message["type"] != "http.response.body" or start is None or message.get("more_body"):
            if start is not None:
                await send(start)
                start = None
            await send(message)
            return
        body = message.get("body", b"")
        try:
            decoded = json.loads(body)
        except ValueError:  # not the JSON answer this expects: passed on as it is
            decoded = None
        result = decoded.get("result") if isinstance(decoded, dict) else None
        if isinstance(result, dict) and isinstance(result.get("capabilities"), dict):
            result["capabilities"]["extensions"] = HANDSHAKE_EXTENSIONS
            body = json.dumps(decoded, separators=(",", ":")).encode()
        await send_buffered(send, start, body)
        start = None

    return _send


class BodyTooLarge(Exception):
    pass


async def read_body(receive: Receive, limit: int) -> bytes:
    """Read the request body, refusing as soon as it passes `limit` (never buffers more)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BodyTooLarge("client disconnected")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"body exceeds {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields the buffered body once, then defers to the real channel (disconnects)."""
    sent = False

    async def _receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return _receive


class McpEndpoint:
    """ASGI app for `/mcp`: the transport guard, then the SDK's era-routing session manager."""

    def __init__(
        self,
        manager: StreamableHTTPSessionManager,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        on_too_large: Callable[[], None] | None = None,
    ) -> None:
        self.manager = manager
        self.max_body_bytes = max_body_bytes
        self.on_too_large = on_too_large  # told of each body refused at the limit (the server counts them)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await send_json(send, 405, jsonrpc_error(-32600, "Method Not Allowed: POST only"), {"Allow": "POST"})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        declared = headers.get("content-length", "")
        try:
            if declared.isdigit() and int(declared) > self.max_body_bytes:
                raise BodyTooLarge(f"declared {declared} bytes")
            body = await read_body(receive, self.max_body_bytes)
        except BodyTooLarge:
            if self.on_too_large is not None:
                self.on_too_large()
            message = f"Request body exceeds the {self.max_body_bytes}-byte limit"
            await send_json(send, 413, jsonrpc_error(-32600, message, {"max_body_bytes": self.max_body_bytes}))
            return
        version = headers.get("mcp-protocol-version")
        answer = jsonrpc_error_bodies(send)
        if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
            request = parsed_message(body)
            if (mismatch := modern_envelope_mismatch(version, request)) is not None:
                await send_json(send, 400, jsonrpc_error(-32020, mismatch))
                return
            if isinstance(request, dict) and request.get("method") == "initialize":
                answer = with_handshake_extensions(answer)
        await self.manager.handle_request(scope, replay(body, receive), answer)


def parsed_message(body: bytes) -> object:
    """A request body as JSON, by the SDK's own parser (bounded nesting); None for anything unparseable, which is
    left to the SDK's own framing errors."""
    try:
        return pydantic_core.from_json(body)
    except ValueError:
        return None


def modern_envelope_mismatch(header_version: str | None, message: object) -> str | None:
    """The -32020 message for a 2026-era body on the 2025 route, or None when the body is not one.

    2026-07-28 streamable-http: `MCP-Protocol-Version` MUST equal `_meta[io.modelcontextprotocol/protocolVersion]`,
    and a request without the header is 400/-32020 unless the server treats it as 2025-03-26. A body that
    names its version in `_meta` has told us it is not a 2025 request, so it is refused rather than served
    on the handshake-era path (where its per-request capabilities would mean nothing). `message`: the body as
    `parsed_message` reads it.
    """
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or PROTOCOL_VERSION_META_KEY not in meta:
        return None
    if header_version is None:
        return "Header mismatch: MCP-Protocol-Version header is required"
    return (
        f"Header mismatch: MCP-Protocol-Version header value {header_version!r} does not match "
        f"body value {meta[PROTOCOL_VERSION_META_KEY]!r}"
    )
