"""The front page (`GET /`), in-process: what it says in each credential mode, the browser hardening headers it
shares with the review page, that it names no secret, and that the Origin/Host guard covers it. The same page on a
real `vidforge serve` (unauthenticated beside bearer-protected routes, in a browser) is in tests/test_review_page.py."""

from __future__ import annotations

import html as markup
import json
import re

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.testclient import TestClient

from mcp_protocol.identity import server_version
from serve_app._config import Config
from serve_app.ingress._home_page import home_routes
from serve_app.ingress._origin import OriginGuard, OriginPolicy
from serve_app.ingress.review.pages import SECURITY_HEADERS, STYLESHEET_PATH
from serve_app.ingress.review.routes import review_routes

SECRET_TOKEN = "tok-front-page-secret-0123456789"
REVIEW_KEY = "front-page-review-key-" + "k" * 32


def client(config: Config) -> TestClient:
    """The page's routes (and the static files it loads) behind the production Origin/Host guard, as build_app puts
    it in front of every route; no review backend is reached on these paths."""
    app = Starlette(
        routes=[*home_routes(config), *review_routes(config, backend=None)],  # type: ignore[arg-type]
        middleware=[Middleware(OriginGuard, policy=OriginPolicy.from_config(config))],
    )
    return TestClient(app, base_url=config.public_base_url)


def tokens_config(tmp_path, **settings) -> Config:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({SECRET_TOKEN: "alice"}))
    return Config(data_dir=str(tmp_path / "data"), tokens_file=str(tokens), review_key=REVIEW_KEY, **settings)


def text_of(html: str) -> str:
    return markup.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)))


def test_the_page_names_the_server_its_endpoint_and_where_to_look_next(tmp_path):
    config = tokens_config(tmp_path, port=8123)
    page = client(config).get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for name, value in SECURITY_HEADERS.items():
        assert page.headers[name] == value, name
    html, text = page.text, text_of(page.text)
    assert f'<span id="version">{server_version()}</span>' in html
    assert '<code id="mcp-url">http://127.0.0.1:8123/mcp</code>' in html
    assert 'href="/readyz"' in html and 'href="/healthz"' in html
    assert "Authorization: Bearer <token>" in text  # how to connect, in this credential mode
    assert "README.md" in text and "docs/" in text
    assert f'href="{STYLESHEET_PATH}"' in html
    for link in re.findall(r'(?:href|src)="([^"]+)"', html):
        assert link.startswith("/"), link  # nothing points at another site
    # No secret and nothing of anyone's work: the token, the review key, the data dir are nowhere on it.
    for secret in (SECRET_TOKEN, "alice", REVIEW_KEY, str(tmp_path)):
        assert secret not in html


def test_the_page_loads_its_stylesheet_with_or_without_a_review_key(tmp_path):
    keyless = Config(data_dir=str(tmp_path / "data"))
    stylesheet = client(keyless).get(STYLESHEET_PATH)
    assert stylesheet.status_code == 200 and stylesheet.headers["content-type"].startswith("text/css")


@pytest.mark.parametrize(
    "settings, says",
    [
        ({}, "no credentials are needed"),
        ({"oauth_issuer": "https://issuer.example"}, "/.well-known/oauth-protected-resource/mcp"),
    ],
)
def test_the_page_says_how_to_connect_in_each_credential_mode(tmp_path, settings, says):
    config = Config(data_dir=str(tmp_path / "data"), public_url="https://vf.example", **settings)
    page = client(config).get("/", headers={"Host": "vf.example"})
    assert page.status_code == 200 and says in page.text
    assert "https://vf.example/mcp" in page.text


def test_the_origin_and_host_guard_covers_the_page(tmp_path):
    web = client(tokens_config(tmp_path))
    assert web.get("/", headers={"Origin": "http://127.0.0.1:5173"}).status_code == 200  # a local tool's page
    assert web.get("/", headers={"Origin": "https://evil.example"}).status_code == 403
    assert web.get("/", headers={"Host": "rebound.example"}).status_code == 403
