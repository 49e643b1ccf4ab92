"""Issue 8 item 6: Origin and Host are checked on every route, in every credential mode, over real HTTP against a
real `vidforge serve` — a browser page on another origin (or a DNS-rebound host name) can neither upload to nor
read from a loopback vidforge. Plus the policy for public binds, which the harness (loopback only) cannot start."""

from __future__ import annotations

import httpx
import pytest

from serve_app._config import Config
from serve_app.ingress._origin import OriginPolicy
from tests.harness import SHARED_ALLOWED_ORIGIN as ALLOWED
from tests.harness import Wire, free_port, meta, validate
from tests.media import make_clip

TOKEN = "tok-origin"
TOKENS = {TOKEN: "origin"}  # on the session's shared server, which lists ALLOWED (tests/conftest.py)
EVIL_ORIGIN = "http://evil.example"
EVIL_HOST = "evil.example"


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("origin-media") / "clip.mp4"
    return make_clip(str(path), seconds=1.0, width=160, height=90, audio=False)


@pytest.fixture(scope="module")
def loopback(open_server):
    return open_server


@pytest.fixture(scope="module")
def tokens_server(shared_server):
    return shared_server


def send(server, route: str, headers: dict[str, str], clip: str | None = None) -> httpx.Response:
    """One request to `route` ("mcp", "assets", "artifacts", "healthz") with the given extra headers."""
    if route == "mcp":
        wire = Wire(server.url, token=headers.pop("_token", None))
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}}
        return httpx.post(server.url, json=body, headers={**wire.headers("tools/list"), **headers}, timeout=60)
    token = headers.pop("_token", None)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if route == "assets":
        with open(clip, "rb") as fh:
            return httpx.post(f"{server.base}/assets", content=fh.read(), headers=headers, timeout=60)
    if route == "artifacts":
        return httpx.get(f"{server.base}/artifacts/task_missing/final.mp4", headers=headers, timeout=60)
    return httpx.get(f"{server.base}/healthz", headers=headers, timeout=60)


def assert_refused(route: str, response: httpx.Response, code: str) -> None:
    """403 with the contract's envelope on the route's carrier."""
    assert response.status_code == 403, (route, response.status_code, response.text)
    body = response.json()
    if route == "mcp":
        validate(body, "core", "JSONRPCErrorResponse")
        envelope = body["error"]["data"]
        assert envelope["machine_code"] == code, body
    else:
        envelope = body["error"]
        assert envelope["code"] == code, body
    assert envelope["temporary"] is False and envelope["details"]["field"] in ("Origin", "Host")


ROUTES = ["mcp", "assets", "artifacts", "healthz"]


@pytest.mark.ray
@pytest.mark.parametrize("route", ROUTES)
def test_loopback_refuses_a_foreign_origin_and_host_on_every_route(loopback, clip, route):
    assert_refused(route, send(loopback, route, {"Origin": EVIL_ORIGIN}, clip), "origin_not_allowed")
    assert_refused(route, send(loopback, route, {"Origin": "null"}, clip), "origin_not_allowed")
    assert_refused(route, send(loopback, route, {"Host": f"{EVIL_HOST}:{loopback.port}"}, clip), "host_not_allowed")


@pytest.mark.ray
def test_loopback_serves_its_own_and_local_origins(loopback, clip):
    for origin in (None, loopback.base, f"http://localhost:{free_port()}"):
        headers = {"Origin": origin} if origin else {}
        assert send(loopback, "assets", dict(headers), clip).status_code == 201, origin
        assert send(loopback, "mcp", dict(headers)).status_code == 200, origin
        # The route itself answers (404: no such render), not the guard.
        assert send(loopback, "artifacts", dict(headers)).status_code == 404, origin
    assert send(loopback, "healthz", {"Host": f"localhost:{loopback.port}"}).status_code == 200


@pytest.mark.ray
@pytest.mark.parametrize("route", ROUTES)
def test_tokens_mode_refuses_a_foreign_origin_even_with_a_valid_token(tokens_server, clip, route):
    refused = send(tokens_server, route, {"Origin": EVIL_ORIGIN, "_token": TOKEN}, clip)
    assert_refused(route, refused, "origin_not_allowed")
    refused = send(tokens_server, route, {"Host": EVIL_HOST, "_token": TOKEN}, clip)
    assert_refused(route, refused, "host_not_allowed")


@pytest.mark.ray
def test_tokens_mode_serves_an_operator_allowed_origin_and_still_authenticates(tokens_server, clip):
    assert send(tokens_server, "assets", {"Origin": ALLOWED, "_token": TOKEN}, clip).status_code == 201
    assert send(tokens_server, "mcp", {"Origin": ALLOWED, "_token": TOKEN}).status_code == 200
    assert send(tokens_server, "assets", {"Origin": ALLOWED}, clip).status_code == 401


def test_public_bind_policy():
    """Non-loopback binds: only the server's own origin and the operator's list; loopback origins are foreign."""
    concrete = OriginPolicy.from_config(Config(host="10.1.2.3", port=8000, allowed_origins=f"{ALLOWED}, "))
    assert concrete.origin_allowed("http://10.1.2.3:8000") and concrete.origin_allowed(ALLOWED)
    assert not concrete.origin_allowed("http://localhost:8000") and not concrete.origin_allowed(EVIL_ORIGIN)
    assert concrete.host_allowed("10.1.2.3:8000") and not concrete.host_allowed(f"{EVIL_HOST}:8000")

    proxied = OriginPolicy.from_config(Config(host="0.0.0.0", port=8000, public_url="https://vf.example.com/"))
    assert proxied.origin_allowed("https://vf.example.com") and proxied.origin_allowed("https://vf.example.com:443")
    assert not proxied.origin_allowed("http://vf.example.com") and not proxied.origin_allowed("http://127.0.0.1:8000")
    # A wildcard bind answers to names it cannot know: Host is checked once the operator lists them.
    assert proxied.host_allowed(EVIL_HOST)
    listed = OriginPolicy.from_config(Config(host="0.0.0.0", port=8000, allowed_hosts="vf.internal"))
    assert listed.host_allowed("vf.internal:8000") and listed.host_allowed("127.0.0.1:8000")
    assert not listed.host_allowed(EVIL_HOST)
