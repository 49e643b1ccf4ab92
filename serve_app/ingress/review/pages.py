"""The server's HTML: Jinja2 templates (package data in `templates/`, autoescaped), the static files the pages load,
and the headers every page response carries — the review page's and the front page's (serve_app/ingress/_home_page.py).

The pages load nothing from elsewhere and need no inline code, so their Content-Security-Policy forbids all but
their own images, stylesheet and script and forms posting back to them (the one script shows times in the viewer's
time zone; without it the page still works and shows them in UTC). They must not be framed (a framed Approve button
can be clicked by a page the person never meant to use: `frame-ancestors 'none'` and `X-Frame-Options: DENY`); the
capability in the review URL must not leak to another site through `Referer` (`no-referrer`); and nothing is cached,
since a decision changes the page (`no-store`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import ChoiceLoader, Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from mcp_protocol.domain import TaskRecord
from mcp_protocol.timefmt import iso_ms

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; img-src 'self'; style-src 'self'; script-src 'self'; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_PATH = "/review/static"
# Every file the pages load: hls.js is pinned by web/package-lock.json and copied here by `make player`.
STATIC_TYPES = {
    "review.css": "text/css",
    "local-time.js": "text/javascript",
    "hls.min.js": "text/javascript",
    "stream-player.js": "text/javascript",
}
STYLESHEET_PATH = f"{STATIC_PATH}/review.css"
SCRIPT_PATH = f"{STATIC_PATH}/local-time.js"
STREAM_SCRIPT_PATHS = (f"{STATIC_PATH}/hls.min.js", f"{STATIC_PATH}/stream-player.js")  # in this order
TEMPLATES = "serve_app.ingress.review"  # also the pages' shared ones: base.html (the head), moment.html


@dataclass(frozen=True)
class ReviewedRender:
    """A render as the review page shows it: its record, and what its assets' stored facts say about the output
    (None when they are gone, e.g. after the assets' retention): the source's duration, the output frame's size,
    and the watermark image's size (width, height), from which the page outlines where the watermark lands."""

    record: TaskRecord
    duration_s: float | None
    output_size: tuple[int, int] | None
    watermark_size: tuple[int, int] | None = None


@dataclass(frozen=True)
class Moment:
    """A point in time as a page shows it: `iso` (RFC 3339 UTC) for `<time datetime>`, which the page's script
    shows in the viewer's own zone; `utc` is the text shown until it has (or without scripts)."""

    iso: str
    utc: str

    @classmethod
    def of_ms(cls, epoch_ms: float) -> Moment:
        iso = iso_ms(epoch_ms)
        return cls(iso, iso.replace("T", " ").removesuffix("Z") + " UTC")


@functools.cache
def templates(package: str) -> Environment:
    """The Jinja2 environment over `package`'s `templates/` folder, then the review page's (its pages extend
    `base.html` and import `moment.html` from there: one head, one time markup for every page)."""
    return Environment(
        loader=ChoiceLoader([PackageLoader(package, "templates"), PackageLoader(TEMPLATES, "templates")]),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def html_page(template: str, status: int = 200, package: str = TEMPLATES, **context: Any) -> HTMLResponse:
    """`template` of `package`, rendered with the pages' stylesheet and script, with the security headers."""
    html = templates(package).get_template(template).render(stylesheet=STYLESHEET_PATH, script=SCRIPT_PATH, **context)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def refused_page(
    status: int, title: str, reason: str, back: str | None = None, code: str | None = None, ended: Moment | None = None
) -> HTMLResponse:
    """A refusal a person can read: what happened and what to do (`back`: the review page, when it still works;
    `code`: the contract's error code, for whoever reports it; `ended`: when the link stopped working)."""
    return html_page("refused.html", status, title=title, reason=reason, back=back, code=code, ended=ended)


@functools.cache
def _static(name: str) -> bytes:
    return (STATIC_DIR / name).read_bytes()


async def static_file(request: Request) -> Response:
    """`GET /review/static/{name}`: the pages' stylesheet and script (CSP `style-src 'self'; script-src 'self'`)."""
    name = request.path_params["name"]
    media_type = STATIC_TYPES.get(name)
    if media_type is None:
        return refused_page(404, "Not found", "There is no such file.")
    return Response(_static(name), media_type=media_type, headers=SECURITY_HEADERS)


def static_route() -> Route:
    return Route(STATIC_PATH + "/{name}", static_file, methods=["GET"])


def image(data: bytes, media_type: str = "image/png") -> Response:
    return Response(data, media_type=media_type, headers=SECURITY_HEADERS)
