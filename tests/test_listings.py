"""The caller's own assets and renders, a page at a time, newest first (what `GET /assets` and `GET /renders` serve,
serve_app/ingress/_listings.py): the registry's per-principal listing on its real SQLite store, and the asset index's
on a real media store. Over HTTP, with the CLI: tests/test_cli_render.py."""

from __future__ import annotations

import sqlite3

import pytest

from actors.task_registry import TaskRegistry
from mcp_protocol.domain import RenderRequest
from media_store.assets import AssetIndex
from media_store.opening import open_media_store
from serve_app._config import Config
from serve_app.media.assets import AssetStore
from tests.media import make_clip, make_watermark_png

T0 = 1_785_333_731.0
REQUEST = RenderRequest(source_asset_uri="vidforge://assets/a_1", output_format="mp4", resolution="720p")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def pages(fetch, limit: int) -> list[list]:
    """Every page `fetch(limit, before)` gives, following each page's last item, until one is not full."""
    found, before = [], None
    while True:
        page = fetch(limit, before)
        found.append(page)
        if len(page) < limit:
            return found
        before = page[-1]


@pytest.mark.anyio
async def test_a_principal_lists_its_own_renders_newest_first_page_by_page(tmp_path):
    clock = Clock()
    config = Config(data_dir=str(tmp_path), sweep_interval_s=3600, max_concurrent_renders=100)
    registry = TaskRegistry(config.registry_settings(), clock)
    alice = []
    for step in range(7):
        clock.now = T0 + step // 2  # two created in the same millisecond each time: the id orders them
        alice.append((await registry.create("alice", REQUEST)).task)
        await registry.create("bob", REQUEST)
    newest_first = sorted(alice, key=lambda rec: (rec.created_at_ms, rec.task_id), reverse=True)

    listed = []
    before = None
    while True:
        page = await registry.list_owned("alice", 3, before)
        listed.append([rec.task_id for rec in page])
        if len(page) < 3:
            break
        before = (page[-1].created_at_ms, page[-1].task_id)
    assert [len(page) for page in listed] == [3, 3, 1]
    assert [task_id for page in listed for task_id in page] == [rec.task_id for rec in newest_first]
    assert all(rec.principal == "bob" for rec in await registry.list_owned("bob", 100))
    assert await registry.list_owned("mallory", 100) == []


def test_the_renders_listing_is_served_by_an_index_on_the_principal(tmp_path):
    """The registry reads a page through the store's (principal, created_at_ms, task_id) index: no scan of every
    principal's records."""
    TaskRegistry(Config(data_dir=str(tmp_path), sweep_interval_s=3600).registry_settings())
    with sqlite3.connect(tmp_path / "registry.sqlite3") as db:
        plan = db.execute(
            "EXPLAIN QUERY PLAN SELECT task_id FROM tasks WHERE principal = ? AND (created_at_ms, task_id) < (?, ?)"
            " ORDER BY created_at_ms DESC, task_id DESC LIMIT ?",
            ("alice", 1, "task_x", 10),
        ).fetchall()
    assert any("USING COVERING INDEX tasks_by_principal" in row[-1] for row in plan), plan


def test_a_principal_lists_its_own_assets_newest_first_page_by_page(tmp_path):
    config = Config(data_dir=str(tmp_path / "data"))
    store = AssetStore(config)
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=0.5, width=64, height=36, audio=False)
    logo = make_watermark_png(str(tmp_path / "logo.png"))
    mine = [store.add_file(path, "alice").asset_id for path in (clip, logo, clip, logo, clip)]
    store.add_file(logo, "bob")
    index = AssetIndex(open_media_store(None, config.data_dir))

    def fetch(limit, before):
        return index.owned("alice", limit, None if before is None else (before["created_at"], before["asset_id"]))

    listed = [meta["asset_id"] for page in pages(fetch, 2) for meta in page]
    assert sorted(listed) == sorted(mine) and len(listed) == len(set(listed))
    uploaded = [meta["created_at"] for meta in index.owned("alice", 10)]
    assert uploaded == sorted(uploaded, reverse=True)
    assert [meta["principal"] for meta in index.owned("bob", 10)] == ["bob"]
    assert index.owned("mallory", 10) == []
