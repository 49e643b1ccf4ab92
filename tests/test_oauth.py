"""Issue 7 item 4: OAuth 2.1 resource-server mode (MCP authorization, 2026-07-28).

A real authorization server's discovery side runs here on loopback — RFC 8414 metadata and a JWKS over
HTTP, its RSA and EC keys generated with `cryptography` — and tokens are minted against it. The verifier
and the authentication middleware are checked in-process first; then a real `vidforge serve` with
`VIDFORGE_OAUTH_ISSUER` pointing at the issuer is checked over HTTP.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from serve_app._config import Config
from serve_app.ingress.auth import authentication
from serve_app.ingress.oauth import (
    InvalidToken,
    IssuerUnavailable,
    JwtVerifier,
    fetch_jwks_uri,
    metadata_urls,
    resource_metadata_url,
)
from tests.harness import (
    PROTOCOL,
    TERMINAL,
    ServerProcess,
    Wire,
    free_port,
    poll_task,
    upload,
    validate,
    wait_until,
)
from tests.media import make_clip

SCOPE = "vidforge:render"
RSA_ALG, EC_ALG = "RS256", "ES256"


class Issuer:
    """The discovery side of an OAuth authorization server, over real HTTP on loopback.

    `metadata_path` is where its metadata answers (RFC 8414 or OpenID Connect); `publish` decides which
    keys the JWKS lists, and `jwks_fetches` counts how often a resource server fetched it.
    """

    def __init__(self, metadata_path: str = "/.well-known/oauth-authorization-server") -> None:
        self.keys: dict[str, tuple[object, str]] = {}  # kid → (private key, alg)
        self.published: list[str] = []
        self.signing_kid: str | None = None
        self.jwks_fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == metadata_path:
                    body = {"issuer": issuer.issuer_id, "jwks_uri": f"{issuer.url}/jwks"}
                elif self.path == "/jwks":
                    issuer.jwks_fetches += 1
                    body = issuer.jwks()
                else:
                    self.send_error(404)
                    return
                payload = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.issuer_id = self.url  # what its metadata claims to be (RFC 8414 `issuer`)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def new_key(self, kind: str = "rsa", publish: bool = True) -> str:
        kid = f"{kind}-{secrets.token_hex(4)}"
        if kind == "rsa":
            self.keys[kid] = (rsa.generate_private_key(public_exponent=65537, key_size=2048), RSA_ALG)
        else:
            self.keys[kid] = (ec.generate_private_key(ec.SECP256R1()), EC_ALG)
        if publish:
            self.published.append(kid)
        return kid

    def jwks(self) -> dict:
        keys = []
        for kid in self.published:
            private, alg = self.keys[kid]
            algorithm = jwt.algorithms.RSAAlgorithm if alg == RSA_ALG else jwt.algorithms.ECAlgorithm
            jwk = algorithm.to_jwk(private.public_key(), as_dict=True)
            keys.append({**jwk, "kid": kid, "alg": alg, "use": "sig"})
        return {"keys": keys}

    def token(self, audience: str, sub: str = "alice", scope: str = SCOPE, kid: str | None = None, **claims) -> str:
        kid = kid or self.signing_kid
        private, alg = self.keys[kid]
        now = int(time.time())
        payload = {"iss": self.url, "sub": sub, "aud": audience, "iat": now, "exp": now + 600, "scope": scope, **claims}
        payload = {k: v for k, v in payload.items() if v is not None}  # None: leave the claim out
        return jwt.encode(payload, private, algorithm=alg, headers={"kid": kid})

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture(scope="module")
def issuer():
    server = Issuer()
    server.signing_kid = server.new_key("rsa")
    server.new_key("ec")
    yield server
    server.close()


def unused_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


# ---------------------------------------------------------------- in-process: discovery and the verifier

RESOURCE = "http://127.0.0.1:8123/mcp"


def test_metadata_locations_follow_rfc8414_then_openid_connect():
    assert metadata_urls("https://as.example.com") == [
        "https://as.example.com/.well-known/oauth-authorization-server",
        "https://as.example.com/.well-known/openid-configuration",
    ]
    assert metadata_urls("https://as.example.com/tenant1/") == [
        "https://as.example.com/.well-known/oauth-authorization-server/tenant1",
        "https://as.example.com/tenant1/.well-known/openid-configuration",
        "https://as.example.com/.well-known/openid-configuration/tenant1",
    ]
    assert resource_metadata_url("https://vidforge.example.com/mcp") == (
        "https://vidforge.example.com/.well-known/oauth-protected-resource/mcp"
    )


def test_jwks_uri_from_rfc8414_or_openid_configuration(issuer):
    assert fetch_jwks_uri(issuer.url) == f"{issuer.url}/jwks"
    oidc = Issuer(metadata_path="/.well-known/openid-configuration")
    try:
        assert fetch_jwks_uri(oidc.url) == f"{oidc.url}/jwks"
        # RFC 8414 §3.3: metadata naming another issuer is not used.
        oidc.issuer_id = "https://elsewhere.example.com"
        with pytest.raises(IssuerUnavailable, match="`issuer` is not"):
            fetch_jwks_uri(oidc.url)
    finally:
        oidc.close()
    with pytest.raises(IssuerUnavailable):
        fetch_jwks_uri(unused_url())


def test_verifier_checks_signature_time_issuer_audience_and_subject(issuer):
    verifier = JwtVerifier(issuer.url, RESOURCE)
    access = verifier.verify(issuer.token(RESOURCE, sub="alice", scope=f"{SCOPE} extra"))
    assert (access.subject, access.scopes) == ("alice", (SCOPE, "extra"))
    ec_kid = next(kid for kid in issuer.published if kid.startswith("ec"))
    # An audience list naming this resource, an EC key, and scopes as an `scp` list.
    access = verifier.verify(issuer.token([RESOURCE, "https://other"], sub="bob", kid=ec_kid, scope=None, scp=[SCOPE]))
    assert (access.subject, access.scopes) == ("bob", (SCOPE,))
    now = int(time.time())
    unpublished = issuer.new_key("rsa", publish=False)
    rsa_private = issuer.keys[issuer.signing_kid][0]
    public_pem = rsa_private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    refused = {
        "expired": (issuer.token(RESOURCE, exp=now - 300, iat=now - 900), "expired"),
        "not yet valid": (issuer.token(RESOURCE, nbf=now + 300), "not valid yet"),
        "other audience": (issuer.token("http://127.0.0.1:9999/mcp"), "another resource"),
        "other issuer": (issuer.token(RESOURCE, iss="https://evil.example.com"), "another authorization server"),
        "unknown key": (issuer.token(RESOURCE, kid=unpublished), "not signed by a key"),
        "no subject": (issuer.token(RESOURCE, sub=None), "lacks a required claim"),
        "no expiry": (issuer.token(RESOURCE, exp=None), "lacks a required claim"),
        # RFC 8725 §3.1: an HMAC "signed" with the public key must not verify as the RSA key's token.
        "alg confusion": (_hs256(public_pem, issuer, now), "malformed"),
        "garbage": ("not-a-jwt", "malformed"),
    }
    for name, (token, reason) in refused.items():
        try:
            verifier.verify(token)
        except InvalidToken as exc:
            assert reason in str(exc), (name, str(exc))
        else:
            pytest.fail(f"{name} token was accepted")


def _hs256(secret: bytes, issuer: Issuer, now: int) -> str:
    """A token whose header says HS256 and whose MAC key is the RSA public key (built by hand: PyJWT
    itself refuses to use a PEM public key as an HMAC secret)."""

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": issuer.signing_kid}).encode())
    claims = b64(json.dumps({"iss": issuer.url, "sub": "mallory", "aud": RESOURCE, "exp": now + 600}).encode())
    mac = hmac.new(secret, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    return f"{header}.{claims}.{b64(mac)}"


@pytest.mark.slow  # waits out a real 5 s cooldown
def test_unknown_kid_refetches_the_jwks_at_most_once_per_cooldown():
    rotating = Issuer()
    try:
        rotating.signing_kid = rotating.new_key("rsa")
        strangers = [rotating.new_key("rsa", publish=False) for _ in range(4)]  # never published
        verifier = JwtVerifier(rotating.url, RESOURCE, refetch_cooldown_s=5.0)
        verifier.verify(rotating.token(RESOURCE))
        assert rotating.jwks_fetches == 1
        # The issuer rotates: a new key with a new kid, the old one withdrawn.
        rotating.published = [rotating.new_key("ec")]
        rotating.signing_kid = rotating.published[0]
        fresh = rotating.token(RESOURCE, sub="carol")
        # Within the cooldown neither the new kid nor made-up ones cost a fetch.
        for token in [fresh] + [rotating.token(RESOURCE, kid=kid) for kid in strangers * 5]:
            with pytest.raises(InvalidToken):
                verifier.verify(token)
        assert rotating.jwks_fetches == 1

        def accepted() -> bool:
            try:
                return verifier.verify(fresh).subject == "carol"
            except InvalidToken:
                return False

        wait_until(accepted, timeout=60, interval=0.5, message="the rotated key to be fetched")
        assert rotating.jwks_fetches == 2
        # That refetch restarted the cooldown: unknown kids are again refused without a fetch.
        for kid in strangers * 5:
            with pytest.raises(InvalidToken):
                verifier.verify(rotating.token(RESOURCE, kid=kid))
        assert rotating.jwks_fetches == 2
    finally:
        rotating.close()


def test_unreachable_issuer_is_a_temporary_failure_not_a_bad_token(issuer):
    verifier = JwtVerifier(unused_url(), RESOURCE, refetch_cooldown_s=60)
    for _ in range(2):  # the second answer comes from the remembered failure, without waiting on the network
        with pytest.raises(IssuerUnavailable):
            verifier.verify(issuer.token(RESOURCE))


# ---------------------------------------------------------------- in-process: the middleware and its bodies


def whoami_app(config: Config, tokens: dict[str, str] | None) -> TestClient:
    async def whoami(request: Request) -> JSONResponse:
        return JSONResponse({"principal": request.user.identity, "scopes": list(request.auth.scopes)})

    routes = [Mount("", routes=[Route("/mcp", whoami, methods=["POST"])], middleware=[authentication(config, tokens)])]
    return TestClient(Starlette(routes=routes))


def refusal(response: httpx.Response, status: int, machine_code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    validate(body, "core", "JSONRPCErrorResponse")
    assert body["error"]["data"]["machine_code"] == machine_code
    assert body["error"]["data"]["fingerprint"].startswith("vidforge@")
    return body["error"]


def test_middleware_resolves_principals_and_answers_contract_shaped_refusals(issuer):
    config = Config(port=8123, oauth_issuer=issuer.url, oauth_scopes=SCOPE)
    app = whoami_app(config, {"ci-key": "ci"})
    prm = "http://127.0.0.1:8123/.well-known/oauth-protected-resource/mcp"

    def post(token: str | None = None) -> httpx.Response:
        return app.post("/mcp", headers={"Authorization": f"Bearer {token}"} if token else {})

    assert post(issuer.token(config.resource, sub="alice")).json() == {"principal": "alice", "scopes": [SCOPE]}
    assert post("ci-key").json() == {"principal": "ci", "scopes": [SCOPE]}

    missing = post()
    refusal(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"] == f'Bearer resource_metadata="{prm}", scope="{SCOPE}"'

    expired = post(issuer.token(config.resource, exp=int(time.time()) - 300))
    error = refusal(expired, 401, "unauthorized")
    assert "expired" in error["data"]["details"]["reason"] and prm in error["data"]["details"]["reason"]
    assert expired.headers["www-authenticate"].startswith('Bearer error="invalid_token", error_description="')
    assert f'resource_metadata="{prm}"' in expired.headers["www-authenticate"]

    unscoped = post(issuer.token(config.resource, scope="profile"))
    refusal(unscoped, 403, "insufficient_scope")
    challenge = unscoped.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="insufficient_scope"') and f'scope="{SCOPE}"' in challenge

    down = whoami_app(Config(port=8123, oauth_issuer=unused_url()), None).post(
        "/mcp", headers={"Authorization": f"Bearer {issuer.token(config.resource)}"}
    )
    error = refusal(down, 503, "internal_error")
    assert error["data"]["temporary"] is True and down.headers["retry-after"]


def test_middleware_without_oauth_keeps_tokens_file_and_local_modes():
    static = whoami_app(Config(), {"tok": "alice"})
    assert static.post("/mcp", headers={"Authorization": "Bearer tok"}).json()["principal"] == "alice"
    wrong = static.post("/mcp", headers={"Authorization": "Bearer nope"})
    refusal(wrong, 401, "unauthorized")
    assert wrong.headers["www-authenticate"].endswith('realm="vidforge"')
    assert whoami_app(Config(), None).post("/mcp").json() == {"principal": "local", "scopes": []}


def test_public_url_sets_the_resource_identifier(monkeypatch):
    monkeypatch.setenv("VIDFORGE_PUBLIC_URL", "https://vidforge.example.com/")
    monkeypatch.setenv("VIDFORGE_OAUTH_SCOPES", "vidforge:render  vidforge:read")
    config = Config.from_env(host="0.0.0.0", port=9000)
    assert config.resource == "https://vidforge.example.com/mcp"
    assert config.required_scopes == ("vidforge:render", "vidforge:read")
    monkeypatch.delenv("VIDFORGE_PUBLIC_URL")
    assert Config.from_env(host="127.0.0.1", port=9000).resource == "http://127.0.0.1:9000/mcp"


# ---------------------------------------------------------------- a real `vidforge serve` in OAuth mode


@pytest.fixture(scope="module")
def server(tmp_path_factory, issuer):
    env = {"VIDFORGE_OAUTH_ISSUER": issuer.url, "VIDFORGE_OAUTH_SCOPES": SCOPE}
    # A static CI key beside OAuth, mapped to the same principal as the JWT subject `alice`.
    with ServerProcess(tmp_path_factory.mktemp("oauth") / "data", env=env, tokens={"ci-key": "alice"}) as proc:
        yield proc


def resource_of(server) -> str:
    return server.url  # VIDFORGE_PUBLIC_URL unset: http://HOST:PORT/mcp


def mcp_post(server, token: str | None) -> httpx.Response:
    """A well-formed `tools/list` (modern wire), so any refusal is about the credential alone."""
    wire = Wire(server.url, token=token)
    try:
        return wire.request("tools/list")
    finally:
        wire.close()


@pytest.mark.ray
def test_protected_resource_metadata_is_public_at_both_paths(server, issuer):
    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
        response = httpx.get(server.base + path)
        assert response.status_code == 200, response.text
        document = response.json()
        assert document["resource"] == resource_of(server)
        assert document["authorization_servers"] == [issuer.url]
        assert document["scopes_supported"] == [SCOPE]
        assert document["bearer_methods_supported"] == ["header"]


@pytest.mark.ray
def test_every_route_challenges_without_a_token(server):
    prm = f"{server.base}/.well-known/oauth-protected-resource/mcp"
    expected = f'Bearer resource_metadata="{prm}", scope="{SCOPE}"'
    responses = [
        mcp_post(server, None),
        httpx.post(f"{server.base}/assets", content=b"x"),
        httpx.get(f"{server.base}/artifacts/task_x/final.mp4"),
    ]
    for response in responses:
        refusal(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == expected


@pytest.mark.ray
def test_bad_tokens_are_refused(server, issuer):
    resource, now = resource_of(server), int(time.time())
    unpublished = issuer.new_key("rsa", publish=False)
    for token in (
        issuer.token(resource, exp=now - 300, iat=now - 900),
        issuer.token(resource, nbf=now + 300),
        issuer.token("http://127.0.0.1:1/mcp"),
        issuer.token(resource, iss="https://evil.example.com"),
        issuer.token(resource, kid=unpublished),
        "not-a-known-key",
    ):
        response = mcp_post(server, token)
        refusal(response, 401, "unauthorized")
        assert response.headers["www-authenticate"].startswith('Bearer error="invalid_token"')
    response = mcp_post(server, issuer.token(resource, scope="profile"))
    refusal(response, 403, "insufficient_scope")
    assert response.headers["www-authenticate"].startswith('Bearer error="insufficient_scope", error_description=')
    assert f'scope="{SCOPE}"' in response.headers["www-authenticate"]


@pytest.mark.ray
def test_principals_are_token_subjects_and_isolated(server, issuer, tmp_path):
    resource = resource_of(server)
    alice_jwt, bob_jwt = issuer.token(resource, sub="alice"), issuer.token(resource, sub="bob")
    alice = Wire(server.url, token=alice_jwt, tasks=True)
    bob = Wire(server.url, token=bob_jwt, tasks=True)
    ci = Wire(server.url, token="ci-key", tasks=True)  # the tokens file keeps working beside OAuth
    assert alice.result("server/discover")["supportedVersions"] == [PROTOCOL]
    assert [t["name"] for t in ci.result("tools/list")["tools"]][0] == "vidforge_render_video"

    clip = upload(server, make_clip(str(tmp_path / "clip.mp4"), seconds=1.0), alice_jwt)
    args = {"source_asset_uri": clip, "output_format": "mp4", "resolution": "720p"}
    assert bob.tool("vidforge_render_video", args)["structuredContent"]["code"] == "source_not_found"
    task_id = alice.tool("vidforge_render_video", args)["taskId"]
    # ext-tasks: another principal's task answers exactly like an unknown one.
    assert bob.task("tasks/get", task_id)["error"] == alice.task("tasks/get", "task_" + "0" * 26)["error"]
    assert poll_task(alice, task_id, lambda t: t["status"] in TERMINAL)["status"] == "completed"
    # The CI key's principal is `alice`: it sees alice's task; bob still does not see the artifact.
    assert ci.task("tasks/get", task_id)["result"]["status"] == "completed"
    url = f"{server.base}/artifacts/{task_id}/final.mp4"
    assert httpx.get(url, headers={"Authorization": f"Bearer {bob_jwt}"}).status_code == 404
    assert httpx.get(url, headers={"Authorization": f"Bearer {alice_jwt}"}).status_code == 200
    for wire in (alice, bob, ci):
        wire.close()


@pytest.mark.ray
def test_key_rotation_needs_no_restart(server, issuer):
    resource = resource_of(server)
    assert mcp_post(server, issuer.token(resource)).status_code == 200
    # The issuer rotates to a new key with a new kid and withdraws the old one.
    issuer.signing_kid = issuer.new_key("ec", publish=False)
    issuer.published = [issuer.signing_kid]
    fresh = issuer.token(resource, sub="alice")
    # JWKS refetches for an unknown kid are rate-limited (JWKS_REFETCH_COOLDOWN_S), so allow for one wait.
    wait_until(
        lambda: mcp_post(server, fresh).status_code == 200,
        timeout=90,
        interval=1.0,
        message="a token signed with the rotated key to be accepted",
    )
    assert Wire(server.url, token=fresh).result("tools/list")["tools"]
