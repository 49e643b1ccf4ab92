"""Hostile HTTP requests against every vidforge route, generated with hypothesis, and what every answer must be.

Shared by the CI test (`tests/test_fuzz.py`, 2 000 requests) and the full run (`benchmarks/fuzz.py`, 10 000 and
more): the same strategies, the same checks. A request is one HTTP exchange — any method, any route (`/mcp`,
`/assets`, `/artifacts/…`, unknown paths), hostile headers (versions of every era, routing headers, auth,
Origin, session ids), and a body that is well-formed JSON-RPC with bad params, a batch array, deep nesting, a
huge string, or raw bytes. Every answer must be below HTTP 500; every JSON-RPC error body must be valid against
the 2026-07-28 schema's `JSONRPCErrorResponse`; every error on the file routes must carry the contract's
envelope with a code from the published `error_catalog`.
"""

from __future__ import annotations

import functools
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from mcp_protocol.catalog import capability_summary
from serve_app._config import Config
from tests.harness import PROTOCOL, TASKS_EXT, meta, validate, validate_response

CATALOG_CODES = {entry["code"] for entry in capability_summary(Config())["error_catalog"]}
MCP_METHODS = [
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "tasks/result",
    "tasks/list",
    "initialize",
    "notifications/initialized",
    "ping",
    "logging/setLevel",
    "prompts/list",
    "completion/complete",
]
TOOLS = [
    "vidforge_render_video",
    "vidforge_get_render_status",
    "vidforge_approve_watermark",
    "vidforge_cancel_render",
    "vidforge_get_capabilities",
    "no_such_tool",
]
VERSIONS = [PROTOCOL, "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "1900-01-01", "garbage", ""]
# Header values must be sendable at all: printable ASCII without surrounding blanks (h11 refuses the rest).
header_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80).map(str.strip)
small_text = st.text(max_size=40)


def sendable_header(value: str) -> str:
    """`value` reduced to what an HTTP/1.1 header can carry (else the HTTP server, not vidforge, refuses it)."""
    printable = "".join(ch if " " <= ch <= "~" else "?" for ch in value).strip()
    return printable[:200] or "x"


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), small_text)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(small_text, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def request_meta(draw) -> Any:
    """`_meta` in every shape: valid for either era, keys missing or mistyped, or arbitrary JSON."""
    caps: dict[str, Any] = {}
    if draw(st.booleans()):
        caps["extensions"] = {TASKS_EXT: {}}
    if draw(st.booleans()):
        caps["elicitation"] = draw(st.sampled_from([{}, {"form": {}}, {"url": {}}, None, 5]))
    valid = {
        "io.modelcontextprotocol/protocolVersion": draw(st.sampled_from(VERSIONS)),
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
    }
    shape = draw(st.sampled_from(["valid", "drop_key", "mistype", "arbitrary", "absent"]))
    if shape == "valid":
        return valid
    if shape == "drop_key":
        valid.pop(draw(st.sampled_from(sorted(valid))))
        return valid
    if shape == "mistype":
        valid[draw(st.sampled_from(sorted(valid)))] = draw(json_leaf)
        return valid
    if shape == "arbitrary":
        return draw(json_value)
    return None


# The strategies the composites below draw from, built once: a strategy built inside a draw is built (and
# validated by hypothesis) again for every example, which was most of the generation's time.
REQUEST_META = request_meta()


WATERMARK = st.one_of(
    json_value,
    st.fixed_dictionaries(
        {"image_asset_uri": small_text, "position": small_text, "opacity": st.floats(allow_nan=False)}
    ),
)


@st.composite
def tool_arguments(draw) -> Any:
    """Render arguments close to valid (so validation runs deep) or anything at all."""
    if draw(st.booleans()):
        return draw(json_value)
    arguments: dict[str, Any] = {
        "source_asset_uri": draw(
            st.sampled_from(
                ["vidforge://assets/a_0123456789abcdef0123", "vidforge://assets/../../etc/passwd", "", "x" * 300]
            )
        ),
        "output_format": draw(st.sampled_from(["mp4", "webm", "mov", "avi", "", 5])),
        "resolution": draw(st.sampled_from(["720p", "1080p", "4k", "8k", None])),
        "render_id": draw(st.sampled_from(["task_x", "", "t" * 500])),
        "approved": draw(st.sampled_from([True, False, "yes", None])),
    }
    if draw(st.booleans()):
        arguments["watermark"] = draw(WATERMARK)
    if draw(st.booleans()):
        arguments["idempotency_key"] = draw(small_text)
    return arguments


RPC_PARAMS = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.sampled_from(TOOLS), json_leaf),
        "arguments": tool_arguments(),
        "uri": st.one_of(
            st.sampled_from(
                [
                    "vidforge://capabilities",
                    "vidforge://videos/x/final.mp4",
                    "vidforge://renders/x/watermark-preview.png",
                    "file:///etc/passwd",
                ]
            ),
            json_leaf,
        ),
        "taskId": st.one_of(st.just("task_" + "0" * 26), json_leaf),
        "inputResponses": json_value,
        "notifications": st.one_of(json_value, st.fixed_dictionaries({"taskIds": json_value})),
        "protocolVersion": st.sampled_from(VERSIONS),
        "capabilities": json_value,
        "clientInfo": json_value,
    },
)


@dataclass
class RpcBody:
    raw: bytes
    method: str  # what the body names, for routing headers that agree with it
    name: str | None  # the tool name, resource URI or taskId a coherent `Mcp-Name` carries
    version: str | None  # the `_meta` protocol version, for a coherent `MCP-Protocol-Version`


@st.composite
def rpc_body(draw) -> RpcBody:
    """A request body, hostile in its params or its framing, and what coherent routing headers would say."""
    method = draw(st.one_of(st.sampled_from(MCP_METHODS), small_text))
    params: dict[str, Any] = {}
    meta = draw(REQUEST_META)
    if meta is not None:
        params["_meta"] = meta
    params.update(draw(RPC_PARAMS))
    envelope: dict[str, Any] = {
        "jsonrpc": draw(st.sampled_from(["2.0", "2.0", "2.0", "1.0", None])),
        "method": method,
        "params": draw(st.one_of(st.just(params), st.just(params), json_value)),
    }
    if draw(st.integers(0, 9)):  # mostly requests, sometimes notifications (no id)
        envelope["id"] = draw(st.one_of(st.integers(), small_text, st.none(), st.floats(allow_nan=False)))
    kind = draw(st.sampled_from(["one", "one", "one", "batch", "deep", "huge", "bytes", "truncated"]))
    if kind == "batch":
        raw = json.dumps([envelope] * draw(st.integers(0, 4))).encode()
    elif kind == "deep":
        depth = draw(st.integers(10, 200_000))
        raw = ('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + "[" * depth + "]" * depth + "}").encode()
    elif kind == "huge":
        envelope["params"] = {**params, "arguments": {"source_asset_uri": "x" * draw(st.integers(10_000, 2_000_000))}}
        raw = json.dumps(envelope).encode()
    elif kind == "bytes":
        raw = draw(st.binary(max_size=300))
    elif kind == "truncated":
        whole = json.dumps(envelope).encode()
        raw = whole[: draw(st.integers(0, max(len(whole) - 1, 0)))]
    else:
        raw = json.dumps(envelope).encode()
    name = next((params[k] for k in ("name", "uri", "taskId") if isinstance(params.get(k), str)), None)
    version = meta.get("io.modelcontextprotocol/protocolVersion") if isinstance(meta, dict) else None
    return RpcBody(raw, method if isinstance(method, str) else "", name, version if isinstance(version, str) else None)


RPC_BODY = rpc_body()


@dataclass
class FuzzRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    query: dict[str, str] = field(default_factory=dict)

    @property
    def is_contract_route(self) -> bool:
        """A route the operator interface defines: `POST /mcp`, `POST /assets`, `GET|HEAD /artifacts/…`."""
        return self.method in CONTRACT_METHODS.get(self.route, ())

    @property
    def route(self) -> str:
        first = "/" + self.path.strip("/").split("/", 1)[0]
        return first if first in ("/mcp", "/assets", "/artifacts") and self.path != "/" else "other"


CONTRACT_METHODS = {"/mcp": ("POST",), "/assets": ("POST",), "/artifacts": ("GET", "HEAD")}


@functools.cache
def optional_headers(token: str) -> dict[str, st.SearchStrategy[str]]:
    """The headers a request may carry, each with its values (built once per token, as the strategies above)."""
    return {
        "Authorization": st.sampled_from([f"Bearer {token}"] * 4 + ["Bearer wrong", "Basic eA==", "Bearer", ""]),
        "Accept": st.sampled_from(
            ["application/json, text/event-stream", "application/json", "text/event-stream", "text/html", "*/*"]
        ),
        "Content-Type": st.sampled_from(["application/json", "text/plain", "application/octet-stream", ""]),
        "MCP-Protocol-Version": st.sampled_from(VERSIONS),
        "Mcp-Method": st.one_of(st.sampled_from(MCP_METHODS), header_text),
        "Mcp-Name": st.one_of(st.sampled_from(TOOLS + ["=?base64?dGFza18x?=", "=?base64?!!?="]), header_text),
        "Origin": st.sampled_from(["http://127.0.0.1", "http://localhost:1", "http://evil.example", "null"]),
        "Mcp-Session-Id": header_text,
        "Last-Event-ID": header_text,
        "Range": st.sampled_from(["bytes=0-10", "bytes=-5", "bytes=99999999-", "bytes=5-1", "lines=1-2", "bytes=x"]),
        "Mcp-Param-Foo": header_text,
    }


@st.composite
def fuzz_request(draw, token: str) -> FuzzRequest:
    route = draw(st.sampled_from(["/mcp"] * 6 + ["/assets", "/assets", "/artifacts", "other"]))
    headers: dict[str, str] = {}
    for name, strategy in optional_headers(token).items():
        if draw(st.integers(0, 3)) or name == "Authorization":
            headers[name] = draw(strategy)
    http_method = draw(st.sampled_from(["POST"] * 6 + ["GET", "DELETE", "PUT", "HEAD", "OPTIONS", "PATCH"]))
    query: dict[str, str] = {}
    if route == "/mcp":
        rpc = draw(RPC_BODY)
        body, path = rpc.raw, "/mcp"
    elif route == "/assets":
        body = draw(
            st.one_of(
                st.binary(max_size=2_000),
                st.sampled_from([b"", b"\x89PNG\r\n\x1a\n" + b"\0" * 64, b"\x00\x00\x00\x18ftypmp42" + b"\0" * 64]),
            )
        )
        query["filename"] = draw(st.one_of(st.sampled_from(["../../etc/passwd", "a.mp4", "", "x" * 5000]), small_text))
        path = "/assets"
    elif route == "/artifacts":
        render_id = draw(st.one_of(st.sampled_from(["task_x", "..", "%2e%2e", "a" * 300]), header_text))
        ext = draw(st.sampled_from(["mp4", "webm", "mov", "exe", ""]))
        # One path segment that the client sends as is ("." and ".." would be resolved away before sending).
        segment = render_id.replace("/", "_")
        path = f"/artifacts/{segment if segment.strip('.') else 'x'}/final.{ext}"
        body = b""
    else:
        path = "/" + draw(header_text).lstrip("/").replace("?", "").replace("#", "")
        body = draw(st.binary(max_size=100))
    if route in CONTRACT_METHODS and draw(st.booleans()):
        # Half the time the transport is right (credential, method, routing headers agreeing with the body),
        # so the hostile part gets past the front door and reaches validation, the registry and the prober.
        headers["Authorization"] = f"Bearer {token}"
        headers.pop("Origin", None)
        http_method = draw(st.sampled_from(CONTRACT_METHODS[route]))
        if route == "/mcp":
            headers.update(
                {
                    "Accept": "application/json, text/event-stream",
                    "Content-Type": "application/json",
                    "Mcp-Method": sendable_header(rpc.method),
                }
            )
            if rpc.version:
                headers["MCP-Protocol-Version"] = sendable_header(rpc.version)
            if rpc.name is not None:
                headers["Mcp-Name"] = sendable_header(rpc.name)
    return FuzzRequest(http_method, path, headers, body, query)


def _is_jsonrpc(body: Any) -> bool:
    return isinstance(body, dict) and body.get("jsonrpc") == "2.0"


def check_answer(request: FuzzRequest, response: httpx.Response, body: bytes) -> None:
    """The invariants every answer keeps; raises AssertionError naming the request."""
    where = f"{request.method} {request.path} {request.headers} body[:200]={request.body[:200]!r}"
    assert response.status_code < 500, f"HTTP {response.status_code} for {where}: {body[:500]!r}"
    if response.status_code < 400 or request.method == "HEAD" or not body:
        return
    assert response.headers.get("content-type", "").startswith("application/json"), (
        f"non-JSON error body for {where}: {response.headers.get('content-type')} {body[:300]!r}"
    )
    decoded = json.loads(body)
    if _is_jsonrpc(decoded):
        validate(decoded, "core", "JSONRPCErrorResponse")
    elif request.route in ("/assets", "/artifacts"):
        error = decoded.get("error") if isinstance(decoded, dict) else None
        assert isinstance(error, dict) and error.get("code") in CATALOG_CODES, f"not a contract envelope: {where}"


def exchange(client: httpx.Client, base_url: str, request: FuzzRequest) -> tuple[httpx.Response, bytes]:
    """Send one request. An SSE answer (a live stream) is checked by its status and closed unread."""
    with client.stream(
        request.method,
        base_url + request.path,
        headers=request.headers,
        content=request.body or None,
        params=request.query or None,
    ) as response:
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return response, b""
        return response, response.read()


def run_fuzz(base_url: str, token: str, examples: int, client: httpx.Client | None = None) -> Counter[str]:
    """Send `examples` generated requests (derandomized: the same run every time); returns answers by route
    and status class. Raises AssertionError (with hypothesis' shrunk example) on the first broken invariant.
    `client`: one to send them with (an in-process app's, in the fast lane); it stays open."""
    seen: Counter[str] = Counter()
    own = client is None
    client = client or httpx.Client(timeout=httpx.Timeout(60, connect=10))

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
    )
    @given(fuzz_request(token))
    def one(request: FuzzRequest) -> None:
        response, body = exchange(client, base_url, request)
        seen[f"{request.route} {response.status_code // 100}xx"] += 1
        check_answer(request, response, body)

    try:
        one()
    finally:
        if own:
            client.close()
    return seen


def malformed_request(rng: random.Random, index: int) -> tuple[bytes, dict[str, str]]:
    """One of twelve kinds of broken `/mcp` request (bad params, broken framing, wrong or missing headers), as
    body and headers; `index` picks the kind. Seeded: the same corpus on every run."""
    methods = [
        "tools/list",
        "tools/call",
        "server/discover",
        "resources/read",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "subscriptions/listen",
        "initialize",
        "x" * rng.randint(0, 300),
    ]
    method = rng.choice(methods)
    params: object = {"_meta": meta(tasks=rng.random() < 0.5)}
    mutation = index % 12
    if mutation == 0:
        params = rng.choice([None, [], "s", 5, {"_meta": None}, {"_meta": {"x": 1}}])
    elif mutation == 1:
        params = {
            **params,
            "name": rng.choice([None, 5, "", "vidforge_render_video", "\u0000"]),
            "arguments": rng.choice([None, [], "x", {"source_asset_uri": {"a": []}}]),
        }
    elif mutation == 2:
        params = {
            **params,
            "taskId": rng.choice([None, 7, "", "task_" + "a" * rng.randint(0, 500)]),
            "inputResponses": rng.choice([None, [], {"k": None}, {"watermark-approval-1": {"action": 5}}]),
        }
    elif mutation == 3:
        params = {
            **params,
            "uri": rng.choice(
                [
                    None,
                    "",
                    "vidforge://videos/../../etc/passwd/final.mp4",
                    "vidforge://renders/x/watermark-preview.png",
                    "file:///etc/passwd",
                ]
            ),
        }
    elif mutation == 4:
        params = {**params, "notifications": rng.choice([None, 5, {"taskIds": "x"}, {"taskIds": [1, 2]}])}
    body: object = {
        "jsonrpc": rng.choice(["2.0", "1.0", None, 2]),
        "id": rng.choice([1, "a", None, [], {}, 1.5]),
        "method": method,
        "params": params,
    }
    raw = json.dumps(body).encode()
    if mutation == 5:
        raw = raw[: rng.randint(0, len(raw))]
    elif mutation == 6:
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
    elif mutation == 7:
        raw = json.dumps([body] * rng.randint(0, 3)).encode()
    headers = {
        "Accept": rng.choice(["application/json, text/event-stream", "application/json", "text/html", ""]),
        "Content-Type": rng.choice(["application/json", "text/plain", ""]),
        "MCP-Protocol-Version": rng.choice([PROTOCOL, PROTOCOL, "2025-06-18", "garbage", ""]),
        "Mcp-Method": rng.choice([method, "tools/list", "", "=?base64?!!?="]),
        "Mcp-Name": rng.choice(["", "vidforge_render_video", "=?base64?dGFza18x?=", "x" * 100]),
        "Authorization": "Bearer tok-alice",
    }
    if mutation == 8:
        headers.pop("MCP-Protocol-Version")
    if mutation == 9:
        headers.pop(rng.choice(["Accept", "Mcp-Method", "Mcp-Name"]))
    headers = {k: v for k, v in headers.items() if v != "" or rng.random() < 0.5}
    return raw, headers


def check_malformed_answer(response: httpx.Response, headers: dict[str, str]) -> None:
    """What a `malformed_request` must get: no 5xx, a schema-valid JSON-RPC error, or a result of its era."""
    assert response.status_code < 500, (response.status_code, response.text[:500], headers)
    if response.status_code >= 400:
        validate(response.json(), "core", "JSONRPCErrorResponse")
    elif response.status_code == 200 and response.headers.get("content-type", "").startswith("application/json"):
        body = response.json()
        if "error" in body:
            validate_response("?", body)
        elif headers.get("MCP-Protocol-Version", "2025-03-26") in HANDSHAKE_PROTOCOL_VERSIONS:
            # the 2025 route: a 2025 result, none of the 2026-07-28 additions
            assert body["jsonrpc"] == "2.0" and "resultType" not in body["result"], body
        else:
            validate(body, "core", "JSONRPCResultResponse")
