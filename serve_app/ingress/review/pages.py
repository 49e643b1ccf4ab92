"""The review page's HTML: Jinja2 templates (package data in `templates/`, autoescaped) and the headers every review
response carries.

The page works without JavaScript and loads nothing from elsewhere, so its Content-Security-Policy can forbid all but
its own images and stylesheet and forms posting back to it; it must not be framed (a framed Approve button can be
clicked by a page the person never meant to use: `frame-ancestors 'none'` and `X-Frame-Options: DENY`); the
capability in its URL must not leak to another site through `Referer` (`no-referrer`); and nothing of it is cached,
since a decision changes it (`no-store`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from mcp_protocol.domain import TaskRecord

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; img-src 'self'; style-src 'self'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
STYLESHEET = Path(__file__).resolve().parent / "static" / "review.css"
STYLESHEET_PATH = "/review/static/review.css"


@dataclass(frozen=True)
class ReviewedRender:
    """A render as the review page shows it: its record, and what its source's stored facts say about the output
    (None when the source's facts are gone, e.g. after the asset's retention)."""

    record: TaskRecord
    duration_s: float | None
    output_size: tuple[int, int] | None


@functools.cache
def _templates() -> Environment:
    return Environment(
        loader=PackageLoader("serve_app.ingress.review", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
    html = _templates().get_template(template).render(stylesheet=STYLESHEET_PATH, **context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def refused_page(status: int, title: str, reason: str, back: str | None = None) -> HTMLResponse:
    """A refusal a person can read: what happened and what to do (`back`: the review page, when it still works)."""
    return page("refused.html", status, title=title, reason=reason, back=back)


@functools.cache
def _stylesheet() -> bytes:
    return STYLESHEET.read_bytes()


async def stylesheet(request: Request) -> Response:
    """`GET /review/static/review.css` (CSP `style-src 'self'`: no inline style)."""
    return Response(_stylesheet(), media_type="text/css", headers=SECURITY_HEADERS)


def image(png: bytes) -> Response:
    return Response(png, media_type="image/png", headers=SECURITY_HEADERS)
