"""The task store on a real PostgreSQL server (tests/postgres.py): the `TaskStore` interface, the layout version
(an older layout migrated on open, a newer one refused), secrets kept out of errors and logs, and one owner at a
time: a second store waits, says so once, and takes over when the first closes or its process is killed."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from urllib.parse import urlsplit

import psycopg
import pytest

from actors.postgres_store import PostgresTaskStore, StateOwned
from actors.store import SCHEMA_VERSION, task_row
from mcp_protocol.domain import Artifact, Cancelled, Phase, RenderRequest, Succeeded, TaskRecord, TaskStatus
from mcp_protocol.state_outage import StateUnavailable
from mcp_protocol.webhook_events import Attempt, Backlog, DeliveryState, EventType, OutboxEvent, event_id
from tests import postgres
from tests.harness import wait_until

postgres_url, state_url = postgres.postgres_url, postgres.state_url  # the real server's fixtures

pytestmark = pytest.mark.slow  # starts a PostgreSQL server

T_MS = 1_785_333_731_000
SOURCE = "vidforge://assets/a_" + "1" * 24


def record(task_id: str, *, created_at_ms: int = T_MS, principal: str = "alice", finished_at_ms: int | None = None):
    """A working record, or a succeeded one finished at ``finished_at_ms``."""
    fields: dict = {}
    if finished_at_ms is not None:
        artifact = Artifact(ext="mp4", size_bytes=10, duration_s=1.0, finished_at_ms=finished_at_ms)
        fields = {"status": TaskStatus.COMPLETED, "phase": Phase.DONE, "end": Succeeded(artifact=artifact)}
    return TaskRecord(
        task_id=task_id,
        principal=principal,
        request=RenderRequest(
            source_asset_uri=SOURCE, output_format="mp4", resolution="720p", idempotency_key=f"key-{task_id}"
        ),
        status_message="",
        created_at_ms=created_at_ms,
        last_updated_at_ms=created_at_ms,
        ttl_ms=86_400_000,
        poll_interval_ms=10_000,
        **fields,
    )


def test_records_round_trip_and_each_query_answers_in_its_order(state_url):
    store = PostgresTaskStore(state_url)
    try:
        live_late, live_early = record("t_live2", created_at_ms=T_MS + 5), record("t_live1", created_at_ms=T_MS + 1)
        old = record("t_old", created_at_ms=T_MS, finished_at_ms=T_MS + 100)
        older = record("t_older", created_at_ms=T_MS + 2, finished_at_ms=T_MS + 50)
        bob = record("t_bob", created_at_ms=T_MS + 3, principal="bob", finished_at_ms=T_MS + 10_000)
        for rec in (live_late, old, live_early, older, bob):
            store.save_task(rec)
        assert store.get_task("t_old") == old and store.get_task("t_none") is None
        assert [r.task_id for r in store.live_tasks()] == ["t_live1", "t_live2"]
        assert store.owned_task_ids("alice", 2) == ["t_live2", "t_older"]
        assert store.owned_task_ids("alice", 10, before=(T_MS + 2, "t_older")) == ["t_live1", "t_old"]
        # Retention starts at the later of creation and finish; oldest first, at most `limit`, never a live one.
        assert [r.task_id for r in store.expired_tasks(T_MS + 100, 10)] == ["t_older", "t_old"]
        assert [r.task_id for r in store.expired_tasks(T_MS + 100_000, 1)] == ["t_older"]
        assert store.known_task_ids(["t_old", "t_bob", "t_none"]) == {"t_old", "t_bob"}
        assert store.count_tasks() == 5 and store.count_finished() == {TaskStatus.COMPLETED: 3}
        cancelled = live_early.model_copy(
            update={"status": TaskStatus.CANCELLED, "phase": Phase.DONE, "end": Cancelled(), "version": 2}
        )
        store.save_task(cancelled)  # an upsert: the same id, its new state
        assert store.get_task("t_live1") == cancelled and [r.task_id for r in store.live_tasks()] == ["t_live2"]
        store.delete_tasks(["t_old", "t_bob"])
    finally:
        store.close()
    reopened = PostgresTaskStore(state_url)  # every write was committed before it returned
    try:
        assert reopened.known_task_ids(["t_old", "t_bob", "t_live1", "t_live2", "t_older"]) == {
            "t_live1",
            "t_live2",
            "t_older",
        }
        assert reopened.get_task("t_live1") == cancelled
    finally:
        reopened.close()


def test_idempotency_keys_are_claimed_with_their_task_and_forgotten_by_age_or_deletion(state_url):
    store = PostgresTaskStore(state_url)
    try:
        first, second = record("t_1", created_at_ms=T_MS), record("t_2", created_at_ms=T_MS + 1000)
        store.save_task(first, claim_idempotency_key=True)
        store.save_task(second)  # not claimed: its key names nothing
        assert store.find_idempotent("alice", "key-t_1", T_MS - 1) == "t_1"
        assert store.find_idempotent("alice", "key-t_1", T_MS) is None  # claimed at, not after, the cutoff
        assert (
            store.find_idempotent("bob", "key-t_1", 0) is None and store.find_idempotent("alice", "key-t_2", 0) is None
        )
        reclaimed = first.model_copy(update={"task_id": "t_3", "created_at_ms": T_MS + 2000})
        store.save_task(reclaimed, claim_idempotency_key=True)  # the same (principal, key), a newer render
        assert store.find_idempotent("alice", "key-t_1", 0) == "t_3"
        assert store.drop_idempotency(T_MS + 1999) == 0 and store.drop_idempotency(T_MS + 2000) == 1
        store.save_task(reclaimed, claim_idempotency_key=True)
        store.delete_tasks(["t_3"])
        assert store.find_idempotent("alice", "key-t_1", 0) is None
    finally:
        store.close()


V2_TABLES = """
CREATE TABLE vidforge_schema (version INTEGER NOT NULL);
INSERT INTO vidforge_schema VALUES (%s);
CREATE TABLE tasks (task_id TEXT PRIMARY KEY, principal TEXT NOT NULL, status TEXT NOT NULL, idempotency_key TEXT,
                    created_at_ms BIGINT NOT NULL, record TEXT NOT NULL);
CREATE TABLE idempotency (principal TEXT NOT NULL, key TEXT NOT NULL, task_id TEXT NOT NULL,
                          created_at_ms BIGINT NOT NULL, PRIMARY KEY (principal, key));
"""


def write_old_layout(url: str, version: int, *records: tuple[str, str, str]) -> None:
    """Tables of an older layout (no retain_from_ms) holding (task_id, status, record JSON) rows."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        for statement in V2_TABLES.strip().split(";"):
            if statement.strip():
                conn.execute(statement, (version,) if "%s" in statement else None)
        for task_id, status, stored in records:
            conn.execute("INSERT INTO tasks VALUES (%s, 'alice', %s, 'k', %s, %s)", (task_id, status, T_MS, stored))


def test_an_older_layout_is_migrated_on_open(state_url):
    finished = record("t_done", finished_at_ms=T_MS + 500)
    # Layout 1 accepted an asset URI followed by a newline; layout 3 stores it canonical.
    layout1 = record("t_live").model_dump(mode="json")
    layout1["request"]["source_asset_uri"] = SOURCE + "\n"
    write_old_layout(
        state_url,
        1,
        ("t_done", "completed", finished.model_dump_json()),
        ("t_live", "working", json.dumps(layout1)),
    )
    store = PostgresTaskStore(state_url)
    try:
        assert store.get_task("t_live").request.source_asset_uri == SOURCE
        assert [r.task_id for r in store.expired_tasks(T_MS + 500, 10)] == ["t_done"]  # retain_from_ms filled in
        assert [r.task_id for r in store.live_tasks()] == ["t_live"]
    finally:
        store.close()
    with psycopg.connect(state_url) as conn:
        assert conn.execute("SELECT version FROM vidforge_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_a_newer_layout_is_refused_naming_the_database_but_not_its_password(state_url, caplog):
    write_old_layout(state_url, SCHEMA_VERSION + 1)
    password = urlsplit(state_url).password
    with pytest.raises(RuntimeError, match=f"layout {SCHEMA_VERSION + 1}, newer than this vidforge's") as refused:
        PostgresTaskStore(state_url)
    assert urlsplit(state_url).path in str(refused.value) and password not in str(refused.value)
    with psycopg.connect(state_url) as conn:  # left as it was
        assert conn.execute("SELECT version FROM vidforge_schema").fetchall() == [(SCHEMA_VERSION + 1,)]


def test_a_wrong_password_is_refused_without_echoing_the_url(state_url):
    wrong = state_url.replace(f":{urlsplit(state_url).password}@", ":not-the-Password-42@")
    with pytest.raises(RuntimeError, match="cannot open the task state in postgresql://127.0.0.1") as refused:
        PostgresTaskStore(wrong)
    assert "not-the-Password-42" not in str(refused.value) and "password authentication failed" in str(refused.value)


def test_a_table_named_tasks_that_vidforge_did_not_make_is_left_alone(state_url):
    with psycopg.connect(state_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE tasks (id INTEGER)")
    with pytest.raises(RuntimeError, match="a table named tasks that vidforge did not make"):
        PostgresTaskStore(state_url)


def open_in_thread(url: str) -> tuple[threading.Thread, list[PostgresTaskStore]]:
    opened: list[PostgresTaskStore] = []
    thread = threading.Thread(target=lambda: opened.append(PostgresTaskStore(url)), daemon=True)
    thread.start()
    return thread, opened


def waiting_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "waiting to take over" in r.getMessage()]


def test_a_second_store_waits_saying_so_once_and_takes_over_when_the_first_closes(state_url, caplog):
    caplog.set_level(logging.WARNING, logger="actors.postgres_store")
    first = PostgresTaskStore(state_url)
    first.save_task(record("t_1"))
    with pytest.raises(StateOwned, match="another vidforge server owns the task state"):
        PostgresTaskStore(state_url, wait=False)
    thread, opened = open_in_thread(state_url)
    wait_until(lambda: waiting_lines(caplog), timeout=60, message="the waiting store's log line")
    assert not opened  # still waiting: the first owns the state
    first.close()
    thread.join(timeout=60)
    (second,) = opened
    try:
        assert second.get_task("t_1") == record("t_1")
        lines = waiting_lines(caplog)
        host = urlsplit(state_url)
        assert lines == [
            f"vidforge: another head owns the task state in postgresql://127.0.0.1:{host.port}{host.path};"
            " waiting to take over"
        ]
        assert host.password not in caplog.text
    finally:
        second.close()


def test_the_waiting_store_takes_over_when_the_owners_process_is_killed(state_url, caplog):
    caplog.set_level(logging.WARNING, logger="actors.postgres_store")
    with postgres.store_held_open("actors.postgres_store.PostgresTaskStore", state_url) as holder:
        thread, opened = open_in_thread(state_url)
        wait_until(lambda: waiting_lines(caplog), timeout=60, message="the waiting store's log line")
        assert not opened
        os.kill(holder.pid, signal.SIGKILL)
        thread.join(timeout=60)
        (second,) = opened
        second.save_task(record("t_after"))
        second.close()
        assert len(waiting_lines(caplog)) == 1


def test_a_store_whose_session_is_ended_answers_unavailable_then_owns_a_new_one(state_url, postgres_url, caplog):
    caplog.set_level(logging.WARNING, logger="actors.postgres_store")
    store = PostgresTaskStore(state_url, retry_max_s=0.5)
    try:
        store.save_task(record("t_1"))
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                (urlsplit(state_url).path.lstrip("/"),),
            )
        with pytest.raises(StateUnavailable, match="reconnecting"):
            store.save_task(record("t_2"))
        wait_until(lambda: store.unavailable_reason() is None, timeout=60, message="the store's new session")
        assert store.session() == 2
        store.save_task(record("t_2"))  # on the new session, which took the lock first
        with pytest.raises(StateOwned):
            PostgresTaskStore(state_url, wait=False)
        said = [r.getMessage() for r in caplog.records if "lost the task state's session" in r.getMessage()]
        assert len(said) == 1 and urlsplit(state_url).password not in caplog.text
    finally:
        store.close()
    other = PostgresTaskStore(state_url, wait=False)  # the lock went with the session
    try:
        assert other.known_task_ids(["t_1", "t_2"]) == {"t_1", "t_2"}
    finally:
        other.close()


def outbox_event(task_id: str, n: int = 0, principal: str = "alice") -> OutboxEvent:
    created = T_MS + n
    eid = event_id(task_id, n, EventType.COMPLETED)
    return OutboxEvent(
        event_id=eid,
        type=EventType.COMPLETED,
        task_id=task_id,
        principal=principal,
        url="https://hooks.example/h",
        created_at_ms=created,
        body=json.dumps({"id": eid}),
    )


def test_an_event_is_written_in_the_transaction_of_its_record(state_url):
    store = PostgresTaskStore(state_url)
    try:
        first = outbox_event("t_1")
        store.save_task(record("t_1"), events=[first, first])  # the same event twice: one row
        assert store.get_task("t_1") is not None
        assert [d.event for d in store.list_webhook_deliveries("alice", 10)] == [first]
        # A failure inside the transaction (PostgreSQL refuses a NUL in text): neither the record nor the event.
        broken = outbox_event("t_2", 1).model_copy(update={"task_id": "t_2\x00"})
        with pytest.raises(psycopg.DataError):
            store.save_task(record("t_2"), events=[broken])
        assert store.get_task("t_2") is None
        assert [d.event.task_id for d in store.list_webhook_deliveries("alice", 10)] == ["t_1"]
        assert store.webhook_backlog().pending == 1
    finally:
        store.close()


def test_due_events_are_leased_and_a_row_another_session_holds_is_skipped(state_url):
    store = PostgresTaskStore(state_url)
    try:
        events = [outbox_event(f"t_{n}", n) for n in range(3)]
        for e in events:
            store.save_task(record(e.task_id), events=[e])
        with psycopg.connect(state_url) as other, other.transaction():
            other.execute("SELECT 1 FROM webhook_outbox WHERE event_id = %s FOR UPDATE", (events[0].event_id,))
            due = store.webhooks_due(T_MS + 10, 10, T_MS + 60_000)
        assert [d.event for d in due] == events[1:]  # oldest due first; the held row is not waited for
        assert [d.event for d in store.webhooks_due(T_MS + 10, 10, T_MS + 60_000)] == events[:1]
        assert store.webhooks_due(T_MS + 10, 10, T_MS + 60_000) == []  # every one leased
        store.record_webhook_attempt(
            events[1].event_id, Attempt(state=DeliveryState.DELIVERED, at_ms=T_MS + 20, next_attempt_at_ms=T_MS + 20)
        )
        settled = store.list_webhook_deliveries("alice", 1, before=(events[2].created_at_ms, events[2].event_id))[0]
        assert (settled.state, settled.attempts, settled.last_attempt_at_ms) == (DeliveryState.DELIVERED, 1, T_MS + 20)
        # Both pending ones are leased until T_MS + 60 000: the soonest next attempt.
        assert store.webhook_backlog() == Backlog(pending=2, oldest_created_at_ms=T_MS, next_due_at_ms=T_MS + 60_000)
        assert store.drop_webhook_deliveries(T_MS + 100, 10) == 1  # the settled one only
        assert [d.event for d in store.list_webhook_deliveries("alice", 10)] == [events[2], events[0]]
    finally:
        store.close()


def test_layout_3_gains_the_outbox_and_keeps_its_records(state_url):
    write_old_layout(state_url, 3, ("t_live", "working", record("t_live").model_dump_json()))
    with psycopg.connect(state_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE tasks ADD COLUMN retain_from_ms BIGINT")
    store = PostgresTaskStore(state_url)
    try:
        assert store.get_task("t_live") == record("t_live")
        store.save_task(record("t_live"), events=[outbox_event("t_live")])
        assert store.webhook_backlog().pending == 1
    finally:
        store.close()
    with psycopg.connect(state_url) as conn:
        assert conn.execute("SELECT version FROM vidforge_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_a_bulk_import_leaves_the_tables_vacuumed_and_analyzed(state_url):
    """A start right after `vidforge state migrate` counts the finished records from the status index alone: a bulk
    load left to autovacuum has no visibility map, and that count would read every row (1.1 s at a million)."""
    store = PostgresTaskStore(state_url)
    try:
        rows = (task_row(record(f"t_{n}", finished_at_ms=T_MS + 1)) for n in range(2000))
        assert store.import_rows(rows, [], replace=False) == (2000, 0, 0)
    finally:
        store.close()
    with psycopg.connect(state_url) as conn:
        pages, visible = conn.execute("SELECT relpages, relallvisible FROM pg_class WHERE relname = 'tasks'").fetchone()
    assert pages > 0 and visible == pages
