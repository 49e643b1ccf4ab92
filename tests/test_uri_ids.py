"""Asset URIs are parsed once, whole, where a caller hands them in, and compared as ids after (issue 32, item 1).

A render created with `vidforge://assets/<id>` and one character more (a trailing newline: a `$`-anchored check
matches before it) ran, while the retention sweep, stripping the prefix, did not see `<id>\\n` as `<id>` and deleted
the assets of the live render. In-process, on the real parts (tests/fast_wire.py): the JSON a client sends to the
production `/mcp`, the production render service (`RegistryRenderService`) resolving the assets in the real
`AssetStore` on a local media store under tmp_path, and the real `TaskRegistry` with its sweep, on a clock the test
moves on. The wire end to end (through a real `vidforge serve`) is `test_a_near_miss_uri_is_refused_over_the_wire`.

Every other string a pattern checks is matched whole too: resource URIs, review tokens, and the request path a route
serves (`POST /assets%0A` reached the upload route past the admission's upload cap, which compares the path itself).
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from actors.sqlite_store import SqliteTaskStore
from mcp_protocol.catalog import RENDER_TOOL
from mcp_protocol.domain import Cancelled, RenderRequest, TaskRecord
from serve_app.ingress.app import whole_paths
from serve_app.ingress.review.capability import LinkRefused, ReviewCapability, ReviewSigner
from serve_app.media.assets import Asset
from tests.fast_wire import FastWire, fast_wire
from tests.harness import Wire, upload
from tests.media import make_clip, make_watermark_png

RETENTION_S = 60
RENDER = {"output_format": "mp4", "resolution": "720p"}
PRINCIPAL = "alice"  # FastWire's tok-alice


def near_misses(uri: str) -> dict[str, str]:
    """Strings one slip away from `uri` (`vidforge://assets/<id>`): none of them is that URI."""
    asset_id = uri.removeprefix("vidforge://assets/")
    return {
        "trailing LF": uri + "\n",
        "trailing CRLF": uri + "\r\n",
        "trailing CR": uri + "\r",
        "trailing space": uri + " ",
        "trailing tab": uri + "\t",
        "leading space": " " + uri,
        "trailing NUL": uri + "\x00",
        "trailing line separator": uri + "\u2028",
        "upper-case scheme": "VIDFORGE://assets/" + asset_id,
        "mixed-case scheme": "Vidforge://assets/" + asset_id,
        "upper-case id": "vidforge://assets/" + asset_id.upper(),
        "percent-encoded underscore": "vidforge://assets/a%5F" + asset_id[2:],
        "percent-encoded slash": "vidforge://assets%2F" + asset_id,
        "trailing slash": uri + "/",
        "query": uri + "?v=1",
        "fragment": uri + "#x",
        "dot segment": "vidforge://assets/./" + asset_id,
    }


@pytest.fixture(scope="module")
def media_files(tmp_path_factory) -> dict[str, str]:
    """A tiny real clip and a PNG, made once (each test stores its own copies)."""
    folder = tmp_path_factory.mktemp("media")
    clip = make_clip(str(folder / "clip.mp4"), seconds=0.2, width=64, height=36, fps=10, audio=False, gop=2)
    return {"video": clip, "image": make_watermark_png(str(folder / "logo.png"))}


class Clock:
    """The registry's clock (epoch seconds), moved on by the test."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@dataclass
class World:
    """One server's worth of the real parts, on one data dir (FastWire's), and the registry's clock."""

    wire: FastWire
    clock: Clock

    def upload(self, media_files: dict[str, str], kind: str) -> Asset:
        return self.wire.service.assets.add_file(media_files[kind], PRINCIPAL)

    def render(self, source: str, watermark: str | None = None) -> dict:
        args: dict = {"source_asset_uri": source, **RENDER}
        if watermark is not None:
            args["watermark"] = {"image_asset_uri": watermark}
        return self.wire.tool(RENDER_TOOL, args)

    def live(self) -> list[TaskRecord]:
        return self.wire.run(self.wire.registry.nonterminal())

    def resolve(self, uri: str) -> Asset:
        """The asset `uri` names, as a render's create resolves it (source_not_found once it is deleted)."""
        return self.wire.service.assets.resolve(uri, PRINCIPAL, "source_asset_uri")

    def sweep_past_retention(self) -> None:
        """One sweep pass with every asset uploaded so far past its retention (and no approval past its window)."""
        self.clock.now += 2 * RETENTION_S
        self.wire.run(self.wire.registry.sweep())

    def stored(self) -> set[str]:
        return set(self.wire.service.assets.index.metas())


@contextmanager
def world(data_dir: Path) -> Iterator[World]:
    clock = Clock()
    with fast_wire(
        data_dir, clock=clock, asset_retention_s=RETENTION_S, approval_timeout_s=3600, max_concurrent_renders=1000
    ) as wire:
        yield World(wire, clock)


def named_assets(rec: TaskRecord) -> list[str]:
    return list(rec.request.asset_uris().values())


@pytest.mark.parametrize("field", ["source_asset_uri", "watermark.image_asset_uri"])
def test_each_near_miss_of_an_asset_uri_is_refused_as_source_not_found(tmp_path, media_files, field):
    with world(tmp_path) as server:
        clip, logo = server.upload(media_files, "video"), server.upload(media_files, "image")
        exact = clip.uri if field == "source_asset_uri" else logo.uri
        for name, uri in near_misses(exact).items():
            source, watermark = (uri, logo.uri) if field == "source_asset_uri" else (clip.uri, uri)
            result = server.render(source, watermark)
            assert result["isError"] is True, (name, result)
            error = result["structuredContent"]
            assert (error["code"], error["details"]["field"]) == ("source_not_found", field), (name, error)
        assert server.live() == []  # nothing was created
        accepted = server.render(clip.uri, logo.uri)
        assert accepted["isError"] is False, accepted
        (rec,) = server.live()
        assert named_assets(rec) == [clip.uri, logo.uri]  # stored as sent: the canonical form


@pytest.mark.parametrize("form", list(near_misses("vidforge://assets/a_" + "0" * 24)))
def test_no_asset_of_a_live_render_is_deleted_by_the_sweep(tmp_path, media_files, form):
    """Whatever the edge makes of a near-miss URI, the sweep never deletes an asset a live render names: every
    live render's assets still resolve after a sweep past their retention, and only the unused asset goes."""
    with world(tmp_path) as server:
        clip, logo, unused = (server.upload(media_files, kind) for kind in ("video", "image", "image"))
        server.render(near_misses(clip.uri)[form], near_misses(logo.uri)[form])
        server.sweep_past_retention()
        for rec in server.live():
            for uri in named_assets(rec):
                server.resolve(uri)  # raises source_not_found if deleted
        assert unused.asset_id not in server.stored()


def test_a_record_stored_with_a_trailing_newline_keeps_its_assets_after_the_upgrade(tmp_path, media_files):
    """A store written before this check could hold `<uri>\\n` (the old `$` accepted it): opening it canonicalises
    the URI, so the render's assets stay in use and still resolve."""
    with world(tmp_path) as old_server:
        clip, logo = old_server.upload(media_files, "video"), old_server.upload(media_files, "image")
        request = RenderRequest.model_validate(
            {"source_asset_uri": clip.uri + "\n", **RENDER, "watermark": {"image_asset_uri": logo.uri + "\n"}}
        )
        # What the old edge let through, written as it wrote it: straight into the registry.
        task_id = old_server.wire.run(old_server.wire.registry.create(PRINCIPAL, request)).task.task_id
        store = Path(old_server.wire.config.data_dir) / SqliteTaskStore.FILENAME
    with closing(sqlite3.connect(store)) as db:
        db.execute("PRAGMA user_version = 1")  # the layout before canonical asset URIs
    with world(tmp_path) as reopened:
        (rec,) = reopened.live()
        assert rec.task_id == task_id and named_assets(rec) == [clip.uri, logo.uri]
        reopened.sweep_past_retention()
        assert {clip.asset_id, logo.asset_id} <= reopened.stored()


# -- the sweep, as a property ------------------------------------------------------------------------------------

FORMS = list(near_misses("vidforge://assets/a_" + "0" * 24))


@st.composite
def render_plans(draw, videos: int, images: int) -> list[tuple[int, int | None, str | None, str]]:
    """Renders over the uploads: (source video index, watermark image index or None, near-miss form of the source
    or None, fate)."""
    return draw(
        st.lists(
            st.tuples(
                st.integers(0, videos - 1),
                st.none() | st.integers(0, images - 1),
                st.none() | st.sampled_from(FORMS),
                st.sampled_from(["working", "input_required", "cancelled"]),
            ),
            max_size=6,
        )
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), videos=st.integers(1, 3), images=st.integers(1, 3))
def test_the_sweep_deletes_exactly_the_assets_no_live_render_names(media_files, data, videos, images):
    plans = data.draw(render_plans(videos, images))
    with tempfile.TemporaryDirectory() as folder, world(Path(folder)) as server:
        clips = [server.upload(media_files, "video").uri for _ in range(videos)]
        logos = [server.upload(media_files, "image").uri for _ in range(images)]
        for source, watermark, form, fate in plans:
            source_uri = near_misses(clips[source])[form] if form else clips[source]
            result = server.render(source_uri, logos[watermark] if watermark is not None else None)
            assert result["isError"] is (form is not None), result  # only a near-miss is refused
            if result["isError"]:
                continue
            task_id = result["structuredContent"]["render_id"]
            if fate == "input_required":
                server.wire.ask_approval(task_id)
            elif fate == "cancelled":
                server.wire.end(task_id, Cancelled())
        live = server.live()
        # What a live render reads is what its URIs resolve to (and each must resolve before the sweep).
        named = {server.resolve(uri).asset_id for rec in live for uri in named_assets(rec)}
        server.sweep_past_retention()
        assert server.stored() == named
        # A live render keeps its URIs only in their canonical form.
        assert {uri for rec in live for uri in named_assets(rec)} <= set(clips + logos)


# -- the other ids a caller sends, matched whole -----------------------------------------------------------------


def test_a_resource_uri_one_character_off_names_nothing(tmp_path):
    with fast_wire(tmp_path) as wire:
        source = wire.media.video
        render_id = wire.tool(RENDER_TOOL, {"source_asset_uri": source, **RENDER})["structuredContent"]["render_id"]
        wire.succeed(render_id)
        video = f"vidforge://videos/{render_id}/final.mp4"
        assert wire.result("resources/read", {"uri": video}, video)["contents"][0]["uri"] == video
        for uri in (video + "\n", video + " ", video.upper(), video.replace("final", "final%2E")):
            error = wire.call("resources/read", {"uri": uri}, uri)["error"]
            assert error["data"]["machine_code"] == "resource_not_found", (uri, error)


def test_a_review_token_one_character_off_is_refused():
    signer = ReviewSigner("test-review-key-" + "x" * 32)
    cap = ReviewCapability("task_a", 1, 2_000)
    token = signer.token(cap)
    assert signer.verify("task_a", token, now_s=1_000) == cap
    for edited in (token + "\n", token + " ", " " + token, token + "\r\n"):
        with pytest.raises(LinkRefused) as refused:
            signer.verify("task_a", edited, now_s=1_000)
        assert refused.value.status == 403, repr(edited)


async def _served(request: Request) -> PlainTextResponse:
    return PlainTextResponse(f"served {request.scope['path']!r}")


def test_a_request_path_one_newline_off_routes_nowhere():
    """Routes shaped as build_app's (a top-level route with a parameter, and the authenticated mount), made whole."""
    routes = [
        Route("/review/{task_id}", _served, methods=["GET"]),
        Mount("", routes=[Route("/assets", _served, methods=["POST"]), Route("/mcp", _served, methods=["POST"])]),
    ]
    whole_paths(routes)
    client = TestClient(Starlette(routes=routes))
    assert client.post("/assets").status_code == 200 and client.post("/mcp").status_code == 200
    for path in ("/assets%0A", "/assets%0D%0A", "/mcp%0A", "/mcp%0A%0A"):
        assert client.post(path).status_code == 404, path
    assert client.get("/review/task_a%0A").text == "served '/review/task_a\\n'"  # the id holds it: no task has it


# -- end to end: the JSON a client sends, through a real `vidforge serve` ---------------------------------------

TOKENS = {"tok-uri-ids": "uri-ids"}


@pytest.mark.slow
def test_a_near_miss_uri_is_refused_over_the_wire(shared_server, media_files):
    """The issue's probe: real uploads, then a render naming them one character off, as a client sends it."""
    clip, logo = (upload(shared_server, media_files[kind], "tok-uri-ids") for kind in ("video", "image"))
    wire = Wire(shared_server.url, token="tok-uri-ids")
    try:
        for name, uri in near_misses(clip).items():
            for source, watermark, field in ((uri, logo, "source_asset_uri"), (clip, uri, "watermark.image_asset_uri")):
                args = {"source_asset_uri": source, **RENDER, "watermark": {"image_asset_uri": watermark}}
                error = wire.tool(RENDER_TOOL, args)["structuredContent"]
                assert (error["code"], error["details"]["field"]) == ("source_not_found", field), (name, error)
        accepted = wire.tool(RENDER_TOOL, {"source_asset_uri": clip, **RENDER})["structuredContent"]
        assert accepted["status"] == "accepted", accepted  # the exact URIs name the uploads
        wire.tool("vidforge_cancel_render", {"render_id": accepted["render_id"]})
    finally:
        wire.close()


@pytest.mark.slow
def test_a_request_path_one_newline_off_is_no_route_over_the_wire(shared_server, media_files):
    """`POST /assets%0A` is not an upload the admission does not count: the served routes match the whole path."""
    headers = {"Authorization": "Bearer tok-uri-ids"}
    with open(media_files["image"], "rb") as image:
        body = image.read()
    for path in ("/assets%0A", "/mcp%0A"):
        response = httpx.post(f"{shared_server.base}{path}", content=body, headers=headers, timeout=60)
        assert response.status_code == 404 and response.json()["error"]["code"] == "route_not_found", (
            path,
            response.text,
        )
    assert httpx.post(f"{shared_server.base}/assets", content=body, headers=headers, timeout=60).status_code == 201
