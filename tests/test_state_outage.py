"""The task state going away and coming back, on real servers: a PostgreSQL server stopped, crashed, stalled by a
link that drops every byte, or failed over to a promoted standby; SQLite on a real disk (a tmpfs) that fills up or
turns read-only. In each: every call answers `StateUnavailable` (never hangs past its bound, never names a secret),
the store or the registry comes back on its own when the server does, one owner still holds, and nothing committed is
lost or corrupted."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from actors.outage import until_state_answers
from actors.postgres_store import PostgresTaskStore, StateOwned
from actors.sqlite_store import SqliteTaskStore
from actors.task_registry import TaskRegistry
from mcp_protocol.domain import Cancelled, RenderRequest
from mcp_protocol.state_outage import StateUnavailable
from serve_app._config import Config
from tests import postgres
from tests.harness import wait_until
from tests.stall_proxy import StallProxy
from tests.test_postgres_store import outbox_event, record

pytestmark = pytest.mark.slow  # starts PostgreSQL servers of its own (it stops and kills them)

TIMEOUT_S = 1.0  # VIDFORGE_STATE_TIMEOUT_S for these stores: the bound every call must keep
RETRY_MAX_S = 0.5
BACK_S = 60  # how long a store may take to answer again once its server does (a loaded 2-core machine)
REQUEST = RenderRequest(source_asset_uri="vidforge://assets/a_1", output_format="mp4", resolution="720p")


@pytest.fixture
def server() -> Iterator[postgres.PostgresServer]:
    """A server of this test's own, which it may stop, crash or fail over."""
    own = postgres.PostgresServer()
    yield own
    own.stop()


def open_store(url: str, **bounds: float) -> PostgresTaskStore:
    return PostgresTaskStore(url, timeout_s=bounds.get("timeout_s", TIMEOUT_S), retry_max_s=RETRY_MAX_S)


def unavailable(call) -> StateUnavailable:
    with pytest.raises(StateUnavailable) as raised:
        call()
    return raised.value


def answers_again(store: PostgresTaskStore, session: int) -> bool:
    try:
        return store.session() > session
    except StateUnavailable:
        return False


def test_a_stopped_server_is_waited_out_and_the_lock_is_taken_again(server):
    url = server.new_database()
    store = open_store(url)
    try:
        store.save_task(record("t_1"), events=[outbox_event("t_1")])
        server.stop_server()
        refused = unavailable(lambda: store.save_task(record("t_2")))
        assert refused.retry_after_ms >= 1000 and urlsplit(url).path in refused.reason
        assert server.password not in refused.reason and server.password not in refused.error().reason
        assert unavailable(store.session).reason == refused.reason  # at once, without touching the network
        assert store.unavailable_reason() is not None
        server.start_server()
        wait_until(lambda: answers_again(store, 1), BACK_S, 0.1, "the store's new session")
        assert store.unavailable_reason() is None
        store.save_task(record("t_2"))
        assert store.known_task_ids(["t_1", "t_2"]) == {"t_1", "t_2"}
        assert store.webhook_backlog().pending == 1
        with pytest.raises(StateOwned):  # the new session holds the lock: one owner still
            PostgresTaskStore(url, wait=False)
    finally:
        store.close()


def test_a_crashed_server_loses_nothing_committed(server):
    url = server.new_database()
    store = open_store(url)
    try:
        for n in range(20):
            store.save_task(record(f"t_{n}"))
        server.kill()
        unavailable(lambda: store.get_task("t_0"))
        server.start_server()
        wait_until(lambda: answers_again(store, 1), BACK_S, 0.1, "the store's new session")
        assert store.known_task_ids([f"t_{n}" for n in range(20)]) == {f"t_{n}" for n in range(20)}
    finally:
        store.close()


def test_a_stalled_link_is_bounded_and_this_heads_abandoned_session_is_ended(server):
    with StallProxy(server.port) as proxy:
        url = server.new_database().replace(f":{server.port}/", f":{proxy.port}/")
        store = open_store(url)
        try:
            store.save_task(record("t_1"))
            proxy.stall()  # the server accepted the connection; from now on it never answers
            started = time.monotonic()
            refused = unavailable(lambda: store.get_task("t_1"))
            # The bound is the watchdog's (TIMEOUT_S); the margin only absorbs a loaded machine's scheduling.
            assert time.monotonic() - started < TIMEOUT_S + 10
            assert f"no answer within {TIMEOUT_S:g} s" in refused.reason
            unavailable(lambda: store.save_task(record("t_2")))  # and at once while it reconnects
            proxy.resume()
            # The old session may still hold the lock on the server (its link only stalled): the store ends it.
            wait_until(lambda: answers_again(store, 1), BACK_S, 0.1, "the store's new session")
            store.save_task(record("t_2"))
            assert store.known_task_ids(["t_1", "t_2"]) == {"t_1", "t_2"}
            with psycopg.connect(server.new_database().rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
                holders = admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()
            assert holders == (1,)
        finally:
            store.close()


def test_a_failover_to_the_promoted_standby_keeps_every_committed_row(server):
    url = server.new_database()
    name = urlsplit(url).path.lstrip("/")
    standby = postgres.PostgresServer.standby_of(server)
    try:
        store = open_store(postgres.multi_host_url(server, standby, name))
        try:
            store.save_task(record("t_1"), events=[outbox_event("t_1")])
            standby.wait_caught_up(server)
            server.kill()
            unavailable(store.probe)
            standby.promote()
            wait_until(lambda: answers_again(store, 1), BACK_S, 0.1, "a session on the promoted standby")
            assert store.get_task("t_1") == record("t_1")
            assert store.webhook_backlog().pending == 1
            store.save_task(record("t_2"))
            assert store.known_task_ids(["t_1", "t_2"]) == {"t_1", "t_2"}
        finally:
            store.close()
    finally:
        standby.stop()


def registry_settings(tmp_path: Path, url: str):
    return Config(
        data_dir=str(tmp_path), state_url=url, state_timeout_s=TIMEOUT_S, state_retry_max_s=RETRY_MAX_S
    ).registry_settings()


def test_a_registry_built_while_the_database_is_down_answers_unavailable_then_serves(server, tmp_path):
    url = server.new_database()
    server.stop_server()

    async def scenario() -> None:
        registry = TaskRegistry(registry_settings(tmp_path, url))  # constructed anyway: never dead for good
        try:
            with pytest.raises(StateUnavailable) as refused:
                await registry.create("alice", REQUEST)
            assert server.password not in str(refused.value)
            health = await registry.state_health()
            assert not health.available and health.reason
            server.start_server()
            async with asyncio.timeout(BACK_S):
                while not (await registry.state_health()).available:
                    await asyncio.sleep(0.1)
            task = (await registry.create("alice", REQUEST)).task
            assert (await registry.get("alice", task.task_id)) == task
        finally:
            registry.close()

    asyncio.run(scenario())


def test_a_render_ended_during_an_outage_is_ended_once_when_the_database_returns(server, tmp_path):
    url = server.new_database()

    async def scenario() -> None:
        registry = TaskRegistry(registry_settings(tmp_path, url))
        try:
            task = (await registry.create("alice", REQUEST)).task
            server.stop_server()
            live = await registry.get("alice", task.task_id)  # reads of what it holds go on from memory
            assert live is not None and not live.status.terminal
            ending = asyncio.ensure_future(
                until_state_answers(lambda: registry.finish(task.task_id, Cancelled()), "the end", RETRY_MAX_S)
            )
            await asyncio.sleep(0)
            assert not ending.done()  # held while the database is away
            await asyncio.to_thread(server.start_server)
            ended = await asyncio.wait_for(ending, BACK_S)
            assert ended is not None and ended.status.value == "cancelled"
            again = await registry.finish(task.task_id, Cancelled())  # a retry whose first answer was lost
            assert again == ended
        finally:
            registry.close()

    asyncio.run(scenario())


# -- SQLite on a real disk that fills up or turns read-only ------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for the test (mounting needs root, as CI runs)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def integrity(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def test_sqlite_on_a_full_disk_answers_unavailable_and_recovers_when_space_returns(small_disk):
    store = SqliteTaskStore(str(small_disk / "state"))
    try:
        store.save_task(record("t_0"))
        filler = small_disk / "filler"
        with filler.open("wb") as out:  # the disk full but for a few pages
            try:
                while True:
                    out.write(b"\0" * 65536)
                    out.flush()
            except OSError:
                pass
        big = record("t_big").model_copy(update={"status_message": "x" * 500})
        refused = None
        for n in range(2000):
            try:
                store.save_task(big.model_copy(update={"task_id": f"t_{n + 1}"}))
            except StateUnavailable as exc:
                refused = exc
                break
        assert refused is not None and "full" in refused.reason
        assert store.unavailable_reason() == refused.reason
        assert store.get_task("t_0") == record("t_0")  # reads go on
        filler.unlink()
        store.save_task(record("t_after"))
        assert store.unavailable_reason() is None
        assert store.known_task_ids(["t_0", "t_after"]) == {"t_0", "t_after"}
    finally:
        store.close()
    assert integrity(small_disk / "state" / SqliteTaskStore.FILENAME) == "ok"


def test_a_registry_on_a_read_only_disk_answers_unavailable_and_serves_once_it_is_writable(small_disk):
    """The kernel refuses to remount a disk read-only under an open writer; a disk that comes back read-only (an
    fsck'd volume, a failed-over mount) is met by the next start: the registry is built anyway and waits."""
    settings = Config(
        data_dir=str(small_disk / "data"), state_dir=str(small_disk / "state"), state_retry_max_s=RETRY_MAX_S
    ).registry_settings()

    async def scenario() -> None:
        first = TaskRegistry(settings)
        kept = (await first.create("alice", REQUEST)).task
        first.close()
        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
        registry = TaskRegistry(settings)
        try:
            with pytest.raises(StateUnavailable, match="(?i)read-?only"):
                await registry.create("alice", REQUEST)
            assert not (await registry.state_health()).available
            subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
            async with asyncio.timeout(BACK_S):
                while not (await registry.state_health()).available:
                    await asyncio.sleep(0.1)
            reloaded = await registry.get("alice", kept.task_id)
            assert reloaded is not None and reloaded.request == kept.request and reloaded.status is kept.status
            await registry.create("alice", REQUEST)
        finally:
            registry.close()

    asyncio.run(scenario())
    assert integrity(small_disk / "state" / SqliteTaskStore.FILENAME) == "ok"
