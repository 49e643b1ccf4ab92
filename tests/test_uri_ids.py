"""Asset URIs are parsed once, whole, where a caller hands them in, and compared as ids after (issue 32, item 1).

A render created with `vidforge://assets/<id>` and one character more (a trailing newline: a `$`-anchored check
matches before it) ran, while the retention sweep, stripping the prefix, did not see `<id>\\n` as `<id>` and deleted
the assets of the live render. In-process, on the real parts: the production `tools/call` handler
(`mcp_protocol.tools.ToolCalls`), the real `AssetStore` on a local media store under tmp_path resolving the
assets as the server's create does, and the real `TaskRegistry` with its sweep. The wire end to end (the JSON a
client sends, through a real `vidforge serve`) is `test_a_near_miss_uri_is_refused_over_the_wire`.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors import TaskRegistry
from actors.store import TaskStore
from mcp_protocol.catalog import RENDER_TOOL
from mcp_protocol.domain import Cancelled, RenderRequest, TaskRecord
from mcp_protocol.tools import ToolCalls
from mcp_protocol.views import Caller
from serve_app.config import Config
from serve_app.ingress.review.capability import LinkRefused, ReviewCapability, ReviewSigner
from serve_app.media.assets import Asset, AssetStore
from tests.fast_wire import fast_wire
from tests.harness import Wire, upload
from tests.media import make_clip, make_watermark_png

RETENTION_S = 60
RENDER = {"output_format": "mp4", "resolution": "720p"}
PRINCIPAL = "alice"


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


class StoredAssetRenders:
    """The render service's create as the server's (`serve_app.ingress.ray_render_service`) resolves assets —
    through `AssetStore.resolve` on the store the uploads are in — then the registry's create; nothing renders."""

    def __init__(self, assets: AssetStore, registry: TaskRegistry) -> None:
        self.assets = assets
        self.registry = registry

    async def create_render(self, principal: str, request: RenderRequest) -> TaskRecord:
        self.assets.resolve(request.source_asset_uri, principal, "source_asset_uri")
        if request.watermark is not None:
            self.assets.resolve(request.watermark.image_asset_uri, principal, "watermark.image_asset_uri")
        return (await self.registry.create(principal, request)).task


@dataclass
class World:
    """One server's worth of the real parts, on one data dir; `clock` is the registry's (epoch seconds)."""

    config: Config
    assets: AssetStore
    registry: TaskRegistry
    tools: ToolCalls
    clock: list[float]

    @classmethod
    def at(cls, data_dir: Path) -> World:
        config = Config(
            data_dir=str(data_dir),
            sweep_interval_s=3600,
            asset_retention_s=RETENTION_S,
            approval_timeout_s=3600,
            max_concurrent_renders=1000,
        )
        clock = [time.time()]
        registry = TaskRegistry(config.registry_settings(), lambda: clock[0])
        assets = AssetStore(config)
        return cls(config, assets, registry, ToolCalls(StoredAssetRenders(assets, registry), config), clock)

    def upload(self, media_files: dict[str, str], kind: str) -> Asset:
        return self.assets.add_file(media_files[kind], PRINCIPAL)

    async def render(self, source: str, watermark: str | None = None) -> dict:
        args: dict = {"source_asset_uri": source, **RENDER}
        if watermark is not None:
            args["watermark"] = {"image_asset_uri": watermark}
        return await self.tools.call(Caller(PRINCIPAL), RENDER_TOOL, args)

    async def sweep_past_retention(self) -> None:
        """One sweep pass with every asset uploaded so far past its retention (and no approval past its window)."""
        self.clock[0] += 2 * RETENTION_S
        await self.registry.sweep()

    def stored(self) -> set[str]:
        return set(self.assets.index.metas())


def named_assets(rec: TaskRecord) -> list[str]:
    return list(rec.request.asset_uris().values())


@pytest.mark.fast
@pytest.mark.parametrize("field", ["source_asset_uri", "watermark.image_asset_uri"])
def test_each_near_miss_of_an_asset_uri_is_refused_as_source_not_found(tmp_path, media_files, field):
    world = World.at(tmp_path)
    clip, logo = world.upload(media_files, "video"), world.upload(media_files, "image")
    exact = clip.uri if field == "source_asset_uri" else logo.uri

    async def run() -> None:
        for name, uri in near_misses(exact).items():
            source, watermark = (uri, logo.uri) if field == "source_asset_uri" else (clip.uri, uri)
            result = await world.render(source, watermark)
            assert result["isError"] is True, (name, result)
            error = result["structuredContent"]
            assert (error["code"], error["details"]["field"]) == ("source_not_found", field), (name, error)
        assert await world.registry.nonterminal() == []  # nothing was created
        accepted = await world.render(clip.uri, logo.uri)
        assert accepted["isError"] is False, accepted
        (rec,) = await world.registry.nonterminal()
        assert named_assets(rec) == [clip.uri, logo.uri]  # stored as sent: the canonical form

    asyncio.run(run())


@pytest.mark.fast
@pytest.mark.parametrize("form", list(near_misses("vidforge://assets/a_" + "0" * 24)))
def test_no_asset_of_a_live_render_is_deleted_by_the_sweep(tmp_path, media_files, form):
    """Whatever the edge makes of a near-miss URI, the sweep never deletes an asset a live render names: every
    live render's assets still resolve after a sweep past their retention, and only the unused asset goes."""
    world = World.at(tmp_path)
    clip, logo, unused = (world.upload(media_files, kind) for kind in ("video", "image", "image"))

    async def run() -> None:
        await world.render(near_misses(clip.uri)[form], near_misses(logo.uri)[form])
        await world.sweep_past_retention()
        live = await world.registry.nonterminal()
        for rec in live:
            for uri in named_assets(rec):
                world.assets.resolve(uri, PRINCIPAL, "source_asset_uri")  # raises source_not_found if deleted
        assert unused.asset_id not in world.stored()

    asyncio.run(run())


@pytest.mark.fast
def test_a_record_stored_with_a_trailing_newline_keeps_its_assets_after_the_upgrade(tmp_path, media_files):
    """A store written before this check could hold `<uri>\\n` (the old `$` accepted it): opening it canonicalises
    the URI, so the render's assets stay in use and still resolve."""
    world = World.at(tmp_path)
    clip, logo = world.upload(media_files, "video"), world.upload(media_files, "image")
    request = RenderRequest.model_validate(
        {"source_asset_uri": clip.uri + "\n", **RENDER, "watermark": {"image_asset_uri": logo.uri + "\n"}}
    )

    async def old_server() -> str:  # what the old edge let through, written as it wrote it
        return (await world.registry.create(PRINCIPAL, request)).task.task_id

    task_id = asyncio.run(old_server())
    with sqlite3.connect(Path(tmp_path) / TaskStore.FILENAME) as db:
        db.execute("PRAGMA user_version = 1")  # the layout before canonical asset URIs
    reopened = World.at(tmp_path)

    async def after_upgrade() -> None:
        (rec,) = await reopened.registry.nonterminal()
        assert rec.task_id == task_id and named_assets(rec) == [clip.uri, logo.uri]
        await reopened.sweep_past_retention()
        assert {clip.asset_id, logo.asset_id} <= reopened.stored()

    asyncio.run(after_upgrade())


# -- the sweep, as a property ------------------------------------------------------------------------------------

FORMS = list(near_misses("vidforge://assets/a_" + "0" * 24))


@st.composite
def render_plans(draw, assets: int) -> list[tuple[int, int | None, str | None, str]]:
    """Renders over `assets` uploads: (source index, watermark index or None, near-miss form or None, fate)."""
    return draw(
        st.lists(
            st.tuples(
                st.integers(0, assets - 1),
                st.none() | st.integers(0, assets - 1),
                st.none() | st.sampled_from(FORMS),
                st.sampled_from(["working", "input_required", "cancelled"]),
            ),
            max_size=6,
        )
    )


@pytest.mark.fast
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), assets=st.integers(1, 5))
def test_the_sweep_deletes_exactly_the_assets_no_live_render_names(media_files, data, assets):
    plans = data.draw(render_plans(assets))
    with tempfile.TemporaryDirectory() as folder:
        world = World.at(Path(folder))
        uploads = [world.upload(media_files, "image") for _ in range(assets)]
        uris = [upload.uri for upload in uploads]

        async def run() -> set[str]:
            for source, watermark, form, fate in plans:
                source_uri = near_misses(uris[source])[form] if form else uris[source]
                watermark_uri = uris[watermark] if watermark is not None else None
                result = await world.render(source_uri, watermark_uri)
                if result["isError"]:
                    continue
                task_id = result["structuredContent"]["render_id"]
                if fate == "input_required":
                    await world.registry.request_input(task_id, world.config.approval_timeout_s)
                elif fate == "cancelled":
                    await world.registry.finish(task_id, Cancelled())
            live = await world.registry.nonterminal()
            # What a live render reads is what its URIs resolve to (and each must resolve before the sweep).
            named = {world.assets.resolve(uri, PRINCIPAL, "uri").asset_id for rec in live for uri in named_assets(rec)}
            await world.sweep_past_retention()
            return named, {uri for rec in live for uri in named_assets(rec)}

        named, named_uris = asyncio.run(run())
        assert world.stored() == named
        assert named_uris <= set(uris)  # a live render keeps its URIs only in their canonical form


# -- the other ids a caller sends, matched whole -----------------------------------------------------------------


@pytest.mark.fast
def test_a_resource_uri_one_character_off_names_nothing(tmp_path):
    source = "vidforge://assets/a_" + "1" * 24
    with fast_wire(tmp_path) as wire:
        wire.service.add_asset(source, "alice", "video")
        render_id = wire.tool(RENDER_TOOL, {"source_asset_uri": source, **RENDER})["structuredContent"]["render_id"]
        wire.run(wire.service.succeed(render_id))
        video = f"vidforge://videos/{render_id}/final.mp4"
        assert wire.result("resources/read", {"uri": video}, video)["contents"][0]["uri"] == video
        for uri in (video + "\n", video + " ", video.upper(), video.replace("final", "final%2E")):
            error = wire.call("resources/read", {"uri": uri}, uri)["error"]
            assert error["data"]["machine_code"] == "resource_not_found", (uri, error)


@pytest.mark.fast
def test_a_review_token_one_character_off_is_refused():
    signer = ReviewSigner("test-review-key-" + "x" * 32)
    cap = ReviewCapability("task_a", 1, 2_000)
    token = signer.token(cap)
    assert signer.verify("task_a", token, now_s=1_000) == cap
    for edited in (token + "\n", token + " ", " " + token, token + "\r\n"):
        with pytest.raises(LinkRefused) as refused:
            signer.verify("task_a", edited, now_s=1_000)
        assert refused.value.status == 403, repr(edited)


# -- end to end: the JSON a client sends, through a real `vidforge serve` ---------------------------------------

TOKENS = {"tok-uri-ids": "uri-ids"}


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
