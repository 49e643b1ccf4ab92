"""The `/mcp` HTTP endpoint in front of the SDK's stateless session manager (streamable HTTP, 2026-07-28).

Adds what the SDK leaves to the server: POST only (GET/DELETE → 405, so no legacy standalone SSE stream
can pin a replica slot), a required `MCP-Protocol-Version` (absent → 400/-32020), handshake-era versions
refused (400/-32022: this server is modern-only), and a documented request-body limit (413).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Message, Receive, Scope, Send

from mcp_protocol.identity import PROTOCOL_VERSION

DEFAULT_MAX_BODY_BYTES = 1024 * 1024


async def send_json(send: Send, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": payload})


def jsonrpc_error(code: int, message: str, data: Any = None) -> dict[str, Any]:
    """An error answering a request whose id is unknown: 2026-07-28's `JSONRPCErrorResponse` leaves `id`
    out rather than sending JSON-RPC 2.0's `null` (its `RequestId` is a string or an integer)."""
    error: dict[str, Any] = {"code": code, "message": message}
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
        headers = [(k, v) for k, v in start["headers"] if k not in (b"content-length", b"content-type")]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({**start, "headers": headers})
        start = None
        await send({"type": "http.response.body", "body": payload})

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
    """ASGI app for `/mcp`: the transport guard, then the SDK's single-exchange handler."""

    def __init__(self, manager: StreamableHTTPSessionManager, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.manager = manager
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            # streamable-http 2026-07-28: the GET stream is gone; a modern-only server answers 405.
            await send_json(send, 405, jsonrpc_error(-32600, "Method Not Allowed: POST only"), {"Allow": "POST"})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        version = headers.get("mcp-protocol-version")
        if version is None:
            await send_json(send, 400, jsonrpc_error(-32020, "Header mismatch: MCP-Protocol-Version header is required"))
            return
        if version in HANDSHAKE_PROTOCOL_VERSIONS:
            data = {"supported": [PROTOCOL_VERSION], "requested": version}
            await send_json(send, 400, jsonrpc_error(-32022, "Unsupported protocol version", data))
            return
        declared = headers.get("content-length", "")
        try:
            if declared.isdigit() and int(declared) > self.max_body_bytes:
                raise BodyTooLarge(f"declared {declared} bytes")
            body = await read_body(receive, self.max_body_bytes)
        except BodyTooLarge:
            message = f"Request body exceeds the {self.max_body_bytes}-byte limit"
            await send_json(send, 413, jsonrpc_error(-32600, message, {"max_body_bytes": self.max_body_bytes}))
            return
        await self.manager.handle_request(scope, replay(body, receive), jsonrpc_error_bodies(send))
