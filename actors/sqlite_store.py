"""The embedded task store: one SQLite file in WAL mode under the state dir (the head node's own disk).

Enough for one head whose disk outlives it; `actors.postgres_store` keeps the same records in a database server
instead. The layout version is the database's ``user_version`` (see ``actors.store``).
"""

import functools
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from actors.store import (
    BACKLOG,
    DELIVERY_COLUMNS,
    DROP_SETTLED,
    DUE_CONDITION,
    OUTBOX_INDEXES,
    OUTBOX_INSERT,
    OUTBOX_TABLE,
    RECORD_ATTEMPT,
    SCHEMA_VERSION,
    TASK_COLUMNS,
    attempt_row,
    delivery_of,
    list_deliveries_query,
    migrated_record,
    outbox_row,
    retain_from_ms,
    sql_statements,
    task_row,
)
from mcp_protocol.domain import TERMINAL, TaskRecord, TaskStatus
from mcp_protocol.state_outage import StateUnavailable
from mcp_protocol.webhook_events import Attempt, Backlog, Delivery, OutboxEvent
from media_store.private_files import create_private_file, make_private_dirs

_TABLES = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id         TEXT PRIMARY KEY,
    principal       TEXT NOT NULL,
    status          TEXT NOT NULL,
    idempotency_key TEXT,
    created_at_ms   INTEGER NOT NULL,
    record          TEXT NOT NULL,
    retain_from_ms  INTEGER  -- NULL while the task is live: see actors.store.retain_from_ms
);
CREATE TABLE IF NOT EXISTS idempotency (
    principal     TEXT NOT NULL,
    key           TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (principal, key)
)
"""
# Every query the registry makes is served by one of these, so none reads the whole history.
_INDEXES = """
-- A principal's tasks, newest first, a page at a time (`owned_task_ids`), without reading anyone else's.
CREATE INDEX IF NOT EXISTS tasks_by_principal ON tasks (principal, created_at_ms, task_id);
-- The live tasks (`live_tasks`, the registry's start) without reading the finished ones, and the count of those
-- (`count_finished`) from the index alone.
CREATE INDEX IF NOT EXISTS tasks_by_status ON tasks (status);
-- The oldest finished tasks first (`expired_tasks`, the sweep).
CREATE INDEX IF NOT EXISTS tasks_by_retention ON tasks (retain_from_ms, task_id);
-- Keys past their window (`drop_idempotency`, the sweep).
CREATE INDEX IF NOT EXISTS idempotency_by_claim ON idempotency (created_at_ms);
-- The keys that still point at deleted tasks (`delete_tasks`).
CREATE INDEX IF NOT EXISTS idempotency_by_task ON idempotency (task_id)
"""
_LIVE = ", ".join(f"'{status.value}'" for status in TaskStatus if not status.terminal)
_TERMINAL = ", ".join(f"'{status.value}'" for status in TERMINAL)
_ID_BATCH = 500  # ids per `IN (...)` query: well under SQLite's bound on a statement's parameters
# The disk's state, not the request: full (SQLITE_FULL), turned read-only (SQLITE_READONLY), failing I/O
# (SQLITE_IOERR), the file out of reach (SQLITE_CANTOPEN), or another process's lock (SQLITE_BUSY). SQLite rolls the
# transaction back, so the file stays whole and the same write succeeds once the disk is back.
_UNAVAILABLE_CODES = frozenset(
    {sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_BUSY}
)
RETRY_AFTER_MS = 5000  # a hint: about the time an operator or the sweep needs to free space
P = ParamSpec("P")
R = TypeVar("R")


def _disk_faults_unavailable(
    writes: bool,
) -> Callable[[Callable[Concatenate["SqliteTaskStore", P], R]], Callable[Concatenate["SqliteTaskStore", P], R]]:
    """A call the disk failed is `StateUnavailable`, remembered as the reason until a write succeeds (a read that
    succeeds says nothing of a full disk)."""

    def decorate(
        method: Callable[Concatenate["SqliteTaskStore", P], R],
    ) -> Callable[Concatenate["SqliteTaskStore", P], R]:
        @functools.wraps(method)
        def guarded(store: "SqliteTaskStore", /, *args: P.args, **kwargs: P.kwargs) -> R:
            try:
                result = method(store, *args, **kwargs)
            except sqlite3.Error as exc:
                if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in _UNAVAILABLE_CODES:
                    raise
                store.down_reason = f"{store.path}: {exc}"
                raise StateUnavailable(store.down_reason, RETRY_AFTER_MS) from None
            if writes:
                store.down_reason = None
            return result

        return guarded

    return decorate


_reads = _disk_faults_unavailable(writes=False)
_writes = _disk_faults_unavailable(writes=True)


class SqliteTaskStore:
    """Write-through `actors.store.TaskStore`: every mutating method has committed before it returns.

    WAL with ``synchronous=FULL`` fsyncs the log on every commit, so an acknowledged write survives a
    power loss, not just a process crash (``NORMAL`` would only guarantee the latter).
    """

    FILENAME = "registry.sqlite3"

    def __init__(self, state_dir: str) -> None:
        make_private_dirs(state_dir)
        self.path = Path(state_dir) / self.FILENAME
        create_private_file(self.path)  # SQLite gives its -wal and -shm files the database's mode
        # The owning actor serialises all access on its event loop, but Ray may run the constructor on a
        # different thread than the loop, so the connection must not be pinned to its creating thread.
        self._conn = sqlite3.connect(self.path, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self.down_reason: str | None = None
        self._migrate()

    def session(self) -> int:
        """Always the one: a failed SQLite commit is rolled back, so nothing held in memory needs reloading."""
        return 1

    def unavailable_reason(self) -> str | None:
        return self.down_reason

    @_reads
    def probe(self) -> None:
        self._conn.execute("SELECT 1").fetchone()

    def _migrate(self) -> None:
        """Create or bring the layout to SCHEMA_VERSION, in one transaction: all of it, or none.

        A new file has version 0 and no tables; an older layout gains what it lacks (the outbox, for layout 3) and
        has its records rewritten (layouts 0 and 1) or just their ``retain_from_ms`` filled in (layout 2)."""
        (version,) = self._conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path} holds task records of layout {version}, newer than this vidforge's")
        if version == SCHEMA_VERSION:
            return
        with self._conn:
            self._conn.execute("BEGIN")  # DDL too: Python's sqlite3 would otherwise commit it at once
            for statement in sql_statements(_TABLES, OUTBOX_TABLE.format(ms="INTEGER")):
                self._conn.execute(statement)
            columns = {name for _, name, *_ in self._conn.execute("PRAGMA table_info(tasks)")}
            if "retain_from_ms" not in columns:  # a table of layout 2 or older
                self._conn.execute("ALTER TABLE tasks ADD COLUMN retain_from_ms INTEGER")
            rows = self._conn.execute("SELECT record FROM tasks").fetchall() if version < 3 else []
            for (stored,) in rows:
                rec = migrated_record(stored, version)
                self._conn.execute(
                    "UPDATE tasks SET record = ?, retain_from_ms = ? WHERE task_id = ?",
                    (rec.model_dump_json() if version < 2 else stored, retain_from_ms(rec), rec.task_id),
                )
            for statement in sql_statements(_INDEXES, OUTBOX_INDEXES):
                self._conn.execute(statement)
            self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @_reads
    def live_tasks(self) -> list[TaskRecord]:
        rows = self._conn.execute(f"SELECT record FROM tasks WHERE status IN ({_LIVE}) ORDER BY created_at_ms, task_id")
        return [TaskRecord.model_validate_json(record) for (record,) in rows]

    @_reads
    def get_task(self, task_id: str) -> TaskRecord | None:
        row = self._conn.execute("SELECT record FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
        return TaskRecord.model_validate_json(row[0]) if row else None

    @_writes
    def save_task(
        self, record: TaskRecord, *, claim_idempotency_key: bool = False, events: Sequence[OutboxEvent] = ()
    ) -> None:
        with self._conn:
            self._conn.execute(
                f"INSERT OR REPLACE INTO tasks ({TASK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)", task_row(record)
            )
            if claim_idempotency_key:
                self._conn.execute(
                    "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?)",
                    (record.principal, record.request.idempotency_key, record.task_id, record.created_at_ms),
                )
            self._conn.executemany(_sqlite(OUTBOX_INSERT), [outbox_row(event) for event in events])

    @_reads
    def owned_task_ids(self, principal: str, limit: int, before: tuple[int, str] | None = None) -> list[str]:
        if before is None:
            rows = self._conn.execute(
                "SELECT task_id FROM tasks WHERE principal = ? ORDER BY created_at_ms DESC, task_id DESC LIMIT ?",
                (principal, limit),
            )
        else:
            rows = self._conn.execute(
                "SELECT task_id FROM tasks WHERE principal = ? AND (created_at_ms, task_id) < (?, ?)"
                " ORDER BY created_at_ms DESC, task_id DESC LIMIT ?",
                (principal, *before, limit),
            )
        return [task_id for (task_id,) in rows]

    @_reads
    def expired_tasks(self, retained_from_before_ms: int, limit: int) -> list[TaskRecord]:
        rows = self._conn.execute(
            "SELECT record FROM tasks WHERE retain_from_ms <= ? ORDER BY retain_from_ms, task_id LIMIT ?",
            (retained_from_before_ms, limit),
        )
        return [TaskRecord.model_validate_json(record) for (record,) in rows]

    @_writes
    def delete_tasks(self, task_ids: list[str]) -> None:
        """One commit (one fsync) for a whole sweep batch, not one per task."""
        rows = [(task_id,) for task_id in task_ids]
        with self._conn:
            self._conn.executemany("DELETE FROM tasks WHERE task_id = ?", rows)
            self._conn.executemany("DELETE FROM idempotency WHERE task_id = ?", rows)

    @_reads
    def find_idempotent(self, principal: str, key: str, claimed_after_ms: int) -> str | None:
        row = self._conn.execute(
            "SELECT task_id FROM idempotency WHERE principal = ? AND key = ? AND created_at_ms > ?",
            (principal, key, claimed_after_ms),
        ).fetchone()
        return row[0] if row else None

    @_writes
    def drop_idempotency(self, claimed_at_or_before_ms: int) -> int:
        with self._conn:
            return self._conn.execute(
                "DELETE FROM idempotency WHERE created_at_ms <= ?", (claimed_at_or_before_ms,)
            ).rowcount

    @_reads
    def known_task_ids(self, task_ids: Iterable[str]) -> set[str]:
        ids, known = list(task_ids), set[str]()
        for start in range(0, len(ids), _ID_BATCH):
            batch = ids[start : start + _ID_BATCH]
            rows = self._conn.execute(
                f"SELECT task_id FROM tasks WHERE task_id IN ({', '.join('?' * len(batch))})", batch
            )
            known.update(task_id for (task_id,) in rows)
        return known

    @_reads
    def count_tasks(self) -> int:
        (count,) = self._conn.execute("SELECT count(*) FROM tasks").fetchone()
        return int(count)

    @_reads
    def count_finished(self) -> dict[TaskStatus, int]:
        rows = self._conn.execute(f"SELECT status, count(*) FROM tasks WHERE status IN ({_TERMINAL}) GROUP BY status")
        return {TaskStatus(status): count for status, count in rows}

    @_writes
    def webhooks_due(self, now_ms: int, limit: int, lease_until_ms: int) -> list[Delivery]:
        with self._conn:
            rows = self._conn.execute(
                _sqlite(f"SELECT event_id, {DELIVERY_COLUMNS} FROM webhook_outbox WHERE {DUE_CONDITION}"),
                (now_ms, limit),
            ).fetchall()
            self._conn.executemany(
                "UPDATE webhook_outbox SET next_attempt_at_ms = ? WHERE event_id = ?",
                [(lease_until_ms, event_id) for event_id, *_ in rows],
            )
        return [delivery_of(row[1:]) for row in rows]

    @_writes
    def record_webhook_attempt(self, event_id: str, attempt: Attempt) -> None:
        with self._conn:
            self._conn.execute(_sqlite(RECORD_ATTEMPT), attempt_row(event_id, attempt))

    @_reads
    def list_webhook_deliveries(
        self, principal: str, limit: int, before: tuple[int, str] | None = None
    ) -> list[Delivery]:
        query, params = list_deliveries_query(principal, limit, before)
        return [delivery_of(row) for row in self._conn.execute(_sqlite(query), params)]

    @_reads
    def webhook_backlog(self) -> Backlog:
        count, oldest, next_due = self._conn.execute(BACKLOG).fetchone()
        return Backlog(pending=count, oldest_created_at_ms=oldest, next_due_at_ms=next_due)

    @_writes
    def drop_webhook_deliveries(self, created_at_or_before_ms: int, limit: int) -> int:
        with self._conn:
            return self._conn.execute(_sqlite(DROP_SETTLED), (created_at_or_before_ms, limit)).rowcount

    def close(self) -> None:
        self._conn.close()


def _sqlite(statement: str) -> str:
    """A statement shared with the PostgreSQL store (``actors.store``), with SQLite's placeholders."""
    return statement.replace("%s", "?")
