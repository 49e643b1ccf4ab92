"""`vidforge state migrate --to postgresql://…`, run as the operator runs it (a subprocess) against a real PostgreSQL
server: every task and idempotency key of the SQLite registry arrives, a database that already holds tasks is
refused unless --force, and it does not run while a server has either store open. The password is never printed."""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from actors.postgres_store import PostgresTaskStore
from actors.sqlite_store import SqliteTaskStore
from tests import postgres
from tests.harness import REPO
from tests.test_postgres_store import T_MS, outbox_event, record

pytestmark = pytest.mark.slow  # starts a PostgreSQL server

postgres_url, state_url = postgres.postgres_url, postgres.state_url  # the real server's fixtures


def vidforge(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("VIDFORGE_")}
    return subprocess.run(
        [sys.executable, "-m", "serve_app.launch.cli", *args],
        cwd=REPO,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def sqlite_registry(tmp_path):
    """A state dir whose SQLite registry holds a live task, two finished ones, two claimed idempotency keys and a
    pending webhook delivery."""
    store = SqliteTaskStore(str(tmp_path))
    store.save_task(
        record("t_live", created_at_ms=T_MS + 3), claim_idempotency_key=True, events=[outbox_event("t_live")]
    )
    store.save_task(record("t_done", created_at_ms=T_MS, finished_at_ms=T_MS + 10), claim_idempotency_key=True)
    store.save_task(record("t_bob", created_at_ms=T_MS + 1, principal="bob", finished_at_ms=T_MS + 20))
    store.close()
    return tmp_path


def test_every_task_and_key_moves_and_the_output_says_what_next_without_the_password(sqlite_registry, state_url):
    done = vidforge("state", "migrate", "--to", state_url, "--data-dir", str(sqlite_registry))
    assert done.returncode == 0, done.stderr
    assert "copied 3 tasks, 2 idempotency keys and 1 webhook deliveries" in done.stdout
    assert "VIDFORGE_STATE_URL" in done.stdout
    assert urlsplit(state_url).password not in done.stdout + done.stderr
    target = PostgresTaskStore(state_url)
    try:
        source = SqliteTaskStore(str(sqlite_registry))
        for task_id in ("t_live", "t_done", "t_bob"):
            assert target.get_task(task_id) == source.get_task(task_id)
        source.close()
        assert [r.task_id for r in target.live_tasks()] == ["t_live"]
        assert [r.task_id for r in target.expired_tasks(T_MS + 100, 10)] == ["t_done", "t_bob"]
        assert target.find_idempotent("alice", "key-t_done", 0) == "t_done"
        assert target.find_idempotent("alice", "key-t_live", 0) == "t_live"
        # The pending delivery goes on from the new store, as it was.
        assert [d.event for d in target.webhooks_due(T_MS + 10**9, 10, T_MS + 10**9 + 1)] == [outbox_event("t_live")]
    finally:
        target.close()


def test_a_database_that_holds_tasks_is_refused_unless_forced(sqlite_registry, state_url):
    target = PostgresTaskStore(state_url)
    target.save_task(record("t_other"))
    target.close()
    refused = vidforge("state", "migrate", "--data-dir", str(sqlite_registry), VIDFORGE_STATE_URL=state_url)
    assert refused.returncode == 2 and "already holds 1 tasks: --force replaces them" in refused.stderr
    forced = vidforge("state", "migrate", "--force", "--data-dir", str(sqlite_registry), VIDFORGE_STATE_URL=state_url)
    assert forced.returncode == 0, forced.stderr
    target = PostgresTaskStore(state_url)
    try:
        assert target.count_tasks() == 3 and target.get_task("t_other") is None
    finally:
        target.close()


def test_it_does_not_run_while_a_server_has_either_store_open(sqlite_registry, state_url):
    with postgres.store_held_open("actors.sqlite_store.SqliteTaskStore", str(sqlite_registry)):
        refused = vidforge("state", "migrate", "--to", state_url, "--data-dir", str(sqlite_registry))
        assert refused.returncode == 2 and "is open in another process: stop vidforge serve first" in refused.stderr
    owner = PostgresTaskStore(state_url)  # a head running on the database
    try:
        refused = vidforge("state", "migrate", "--to", state_url, "--data-dir", str(sqlite_registry))
        assert refused.returncode == 2 and "another vidforge server owns the task state" in refused.stderr
        assert owner.count_tasks() == 0
    finally:
        owner.close()
    assert vidforge("state", "migrate", "--to", state_url, "--data-dir", str(sqlite_registry)).returncode == 0


def test_a_url_that_is_not_postgresql_or_a_missing_registry_is_refused(tmp_path, sqlite_registry):
    wrong = vidforge("state", "migrate", "--to", "mysql://root:hunter2@db/x", "--data-dir", str(sqlite_registry))
    assert wrong.returncode == 2 and "must be a postgresql://" in wrong.stderr and "hunter2" not in wrong.stderr
    empty = vidforge("state", "migrate", "--to", "postgresql://db/x", "--data-dir", str(tmp_path / "none"))
    assert empty.returncode == 2 and "no SQLite registry at" in empty.stderr
    assert not (tmp_path / "none").exists()
