"""The registry's working set (issue 36): in memory only the live tasks and a bounded cache of finished ones; a
finished record out of the cache is read from the store by key, and nothing a request does reads every record.
In-process on the real stores (counted through a wrapper), SQLite and PostgreSQL (`backend`, as in
tests/test_task_registry.py), with a fake clock; no Ray."""

import sqlite3
from pathlib import Path

import pytest

from actors.change_feed import ChangeFeed
from actors.errors import QuotaExceeded
from actors.open_store import open_task_store
from actors.sqlite_store import SqliteTaskStore
from actors.store import SCHEMA_VERSION, TaskStore
from mcp_protocol.domain import Succeeded, TaskRecord
from media_store import _s3 as s3_backend
from media_store.assets import EXPIRY_PAGE, AssetIndex, meta_key
from media_store.local import LocalMediaStore
from media_store.opening import open_media_store
from tests import test_task_registry
from tests.test_task_registry import ARTIFACT, DAY_S, FakeClock, new_task, request, sqlite_only

backend = test_task_registry.backend  # the autouse fixture: each test here on both task stores
CACHE = 3


class CountingStore:
    """The store `open_task_store` opens (SQLite or PostgreSQL), counting the registry's reads of it."""

    def __init__(self, store: TaskStore) -> None:
        self._store = store
        self.reads: list[str] = []

    def __getattr__(self, name: str):
        return getattr(self._store, name)

    def live_tasks(self) -> list[TaskRecord]:
        self.reads.append("live_tasks")
        return self._store.live_tasks()

    def get_task(self, task_id: str) -> TaskRecord | None:
        self.reads.append(task_id)
        return self._store.get_task(task_id)


@pytest.fixture
def make(monkeypatch):
    """``make(tmp_path, clock, **config)``: a registry whose store (the one `open_task_store` opens) counts the
    reads; returns the registry and its store. Close a registry before opening another on the same state."""
    opened: list[CountingStore] = []

    def open_counting(registry_settings, *, wait=True):
        opened.append(CountingStore(open_task_store(registry_settings, wait=wait)))
        return opened[-1]

    monkeypatch.setattr("actors.task_registry.open_task_store", open_counting)

    def make(tmp_path, clock, **config):
        reg = test_task_registry.make(tmp_path, clock, registry_cache_size=CACHE, **config)
        return reg, opened[-1]

    return make


async def finished(reg, count, principal="alice", **changes):
    """``count`` completed tasks of ``principal``, oldest first."""
    done = []
    for _ in range(count):
        task = await new_task(reg, principal, **changes)
        done.append(await reg.finish(task.task_id, Succeeded(artifact=ARTIFACT)))
    return done


@pytest.mark.anyio
async def test_a_restarted_registry_loads_only_live_tasks_and_reads_finished_ones_by_key(tmp_path, make):
    clock = FakeClock()
    first, _ = make(tmp_path, clock)
    done = await finished(first, 2 * CACHE)
    live = await new_task(first)
    first.close()
    reg, store = make(tmp_path, clock)
    assert store.reads == ["live_tasks"] and list(reg._records.live) == [live.task_id] and reg._records.cached == 0
    assert await reg.get("alice", done[0].task_id) == done[0]
    assert store.reads[-1] == done[0].task_id  # read from the store by its key ...
    assert await reg.get("alice", done[0].task_id) == done[0]
    assert store.reads.count(done[0].task_id) == 1  # ... once: then it is cached
    for rec in done:
        assert await reg.get_any(rec.task_id) == rec
    assert reg._records.cached == CACHE  # more finished records touched than the cache holds: it stays bounded
    assert await reg.get("mallory", done[-1].task_id) is None  # a foreign task stays unknown


@pytest.mark.anyio
async def test_quota_and_idempotent_replays_hold_with_finished_tasks_out_of_cache(tmp_path, make):
    clock = FakeClock()
    first, _ = make(tmp_path, clock, max_concurrent_renders=2)
    keyed = (await finished(first, 1, idempotency_key="launch"))[0]
    await finished(first, 2 * CACHE)  # pushes the keyed one out of the cache
    await new_task(first)
    first.close()
    reg, store = make(tmp_path, clock, max_concurrent_renders=2)
    assert await reg.count_active("alice") == 1  # from the live set: the finished ones never count
    replay = await reg.create("alice", request(idempotency_key="launch"))
    assert replay.task == keyed and not replay.created and keyed.task_id in store.reads
    await new_task(reg)
    with pytest.raises(QuotaExceeded):
        await new_task(reg)
    assert await reg.count_active("bob") == 0


@pytest.mark.anyio
async def test_retention_deletes_through_the_index_without_reading_the_others(tmp_path, make):
    clock = FakeClock()
    reg, store = make(tmp_path, clock, sweep_batch=2)
    old = await finished(reg, 3)
    clock.advance(2 * DAY_S)
    recent = await finished(reg, 2)
    clock.advance(6 * DAY_S)  # past the 7-day retention of the first three only
    store.reads.clear()
    first_pass, second_pass = await reg.sweep(), await reg.sweep()
    assert (first_pass.tasks_deleted, first_pass.backlog, second_pass.tasks_deleted) == (2, True, 1)
    assert store.reads == []  # found through the retention index, never read one by one
    assert store.known_task_ids(rec.task_id for rec in old + recent) == {rec.task_id for rec in recent}
    assert (await reg.sweep()).tasks_deleted == 0


@pytest.mark.anyio
async def test_watch_and_the_change_feed_answer_finished_tasks_out_of_cache(tmp_path, make):
    clock = FakeClock()
    reg, store = make(tmp_path, clock)
    start = await reg.changes(None, 0, timeout_s=30)
    done = await finished(reg, 2 * CACHE)
    feed = await reg.changes(start.epoch, start.seq, timeout_s=30)
    assert feed.records == tuple(done)  # evicted ones come from the store
    store.reads.clear()
    assert await reg.watch("alice", [done[0].task_id], {done[0].task_id: 0}, timeout_s=30) == [done[0]]
    assert await reg.watch("alice", [done[0].task_id, "task_unknown"], {done[0].task_id: 99}, timeout_s=0.05) == []
    assert store.reads.count("task_unknown") == 1  # looked at once, not on every change while waiting


@sqlite_only  # its queries' batches
def test_known_task_ids_answers_only_the_ids_asked_about(tmp_path):
    store = SqliteTaskStore(str(tmp_path))
    assert store.known_task_ids([]) == set()
    assert store.known_task_ids(f"task_{n}" for n in range(1200)) == set()  # more than one query's batch


def layout_2_store(tmp_path, records: list[TaskRecord]) -> None:
    """A database as layout 2 wrote it: no retain_from_ms column."""
    with sqlite3.connect(tmp_path / SqliteTaskStore.FILENAME) as conn:
        conn.executescript(
            "CREATE TABLE tasks (task_id TEXT PRIMARY KEY, principal TEXT NOT NULL, status TEXT NOT NULL,"
            " idempotency_key TEXT, created_at_ms INTEGER NOT NULL, record TEXT NOT NULL);"
            "CREATE TABLE idempotency (principal TEXT NOT NULL, key TEXT NOT NULL, task_id TEXT NOT NULL,"
            " created_at_ms INTEGER NOT NULL, PRIMARY KEY (principal, key));"
            "PRAGMA user_version = 2;"
        )
        for rec in records:
            conn.execute(
                "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?)",
                (rec.task_id, rec.principal, rec.status.value, None, rec.created_at_ms, rec.model_dump_json()),
            )


@sqlite_only  # a SQLite file of layout 2 (PostgreSQL's migration: tests/test_postgres_store.py)
@pytest.mark.anyio
async def test_migration_from_layout_2_fills_the_retention_start(tmp_path, make):
    clock = FakeClock()
    source = tmp_path / "source"
    reg, _ = make(source, clock)
    done = (await finished(reg, 1))[0]
    live = await new_task(reg)
    layout_2_store(tmp_path, [done, live])
    store = SqliteTaskStore(str(tmp_path))
    with sqlite3.connect(tmp_path / SqliteTaskStore.FILENAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        rows = dict(conn.execute("SELECT task_id, retain_from_ms FROM tasks"))
    assert rows == {done.task_id: done.expires_ms(0), live.task_id: None}
    assert store.live_tasks() == [live] and store.get_task(done.task_id) == done
    assert store.expired_tasks(done.expires_ms(0) - 1, 10) == [] and store.expired_tasks(done.expires_ms(0), 10) == [
        done
    ]


ASSET_META = b'{"principal": "alice", "created_at": 1.0, "size_bytes": 1}'


@sqlite_only  # no task store involved: once is enough
def test_the_asset_sweep_lists_one_page_per_pass_and_goes_round(tmp_path):
    media = LocalMediaStore(str(tmp_path))
    ids = [f"a_{n:024d}" for n in range(EXPIRY_PAGE - 1)]  # two objects each: a page and most of another
    for asset_id in ids:
        # Written where the store keeps them, not through put_bytes: its fsync per object made these 1998 writes
        # ~9 s on a busy disk, and what is under test is the listing.
        for key, data in ((f"assets/{asset_id}/blob", b"x"), (meta_key(asset_id), ASSET_META)):
            path = Path(media.path(key))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    index = AssetIndex(media)
    first = index.expired(2.0, set(), limit=len(ids))
    second = index.expired(2.0, set(), limit=len(ids))
    assert (len(first), len(second)) == (EXPIRY_PAGE // 2, EXPIRY_PAGE // 2 - 1) and sorted(first + second) == ids
    assert index.expired(2.0, set(), limit=len(ids)) == first  # round again from the first page
    assert index.usage("alice") == len(ids) and len(index.owned("alice", 10)) == 10  # whole listings still


@sqlite_only  # no task store involved: once is enough
def test_the_change_feed_remembers_a_bounded_number_of_changed_tasks():
    feed = ChangeFeed(log_size=2)
    for task_id in ("task_a", "task_b", "task_a", "task_c"):  # task_b's change (seq 2) leaves the log
        feed.changed(task_id)
    assert feed.readable(feed.epoch, 2) and not feed.readable(feed.epoch, 1)
    assert feed.since(feed.epoch, 2, lambda task_id: None).records == ()  # (records as this reader finds them)
    assert feed.since(feed.epoch, 1, lambda task_id: None).reset


def page_through(media) -> list[str]:
    """Every key under `l/`, a page of two at a time."""
    keys, after = [], None
    while page := media.list("l/", start_after=after, limit=2):
        keys += [found.key for found in page]
        after = page[-1].key
    return keys


KEYS = ["l/a-b", "l/a/1", "l/a/2", "l/a0", "l/b/c/3", "l/b/d"]  # "/" sorts between "-" and "0"


@sqlite_only  # no task store involved: once is enough
def test_a_local_store_lists_in_key_order_a_page_at_a_time(tmp_path):
    media = LocalMediaStore(str(tmp_path))
    for key in reversed(KEYS):
        media.put_bytes(key, b"x")
    assert [found.key for found in media.list("l/")] == KEYS == page_through(media)
    assert [found.key for found in media.list("l/", start_after="l/a/1", limit=3)] == KEYS[2:5]


@pytest.mark.slow  # a real S3 server process (moto)
@sqlite_only  # no task store involved: once is enough
def test_a_bucket_lists_in_key_order_a_page_at_a_time(s3_server, monkeypatch):
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    s3_backend._bucket.cache_clear()  # clients are built from the environment, once per process
    media = open_media_store(f"s3://{s3_server.bucket}/paging", "/nonexistent-data-dir")
    try:
        for key in reversed(KEYS):
            media.put_bytes(key, b"x")
        assert [found.key for found in media.list("l/")] == KEYS == page_through(media)
        assert [found.key for found in media.list("l/", start_after="l/a/1", limit=3)] == KEYS[2:5]
    finally:
        media.delete_prefix("l/")
        s3_backend._bucket.cache_clear()
