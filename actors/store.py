"""Durable storage for task records: one SQLite file in WAL mode under the data dir."""

import json
import sqlite3
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id         TEXT PRIMARY KEY,
    principal       TEXT NOT NULL,
    status          TEXT NOT NULL,
    idempotency_key TEXT,
    created_at_ms   INTEGER NOT NULL,
    record          TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS idempotency (
    principal     TEXT NOT NULL,
    key           TEXT NOT NULL,
    task_id       TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (principal, key)
);
"""


class TaskStore:
    """Write-through store: every mutating method has committed before it returns.

    WAL with ``synchronous=FULL`` fsyncs the log on every commit, so an acknowledged write survives a
    power loss, not just a process crash (``NORMAL`` would only guarantee the latter).
    """

    FILENAME = "registry.sqlite3"

    def __init__(self, data_dir: str) -> None:
        path = Path(data_dir)
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / self.FILENAME
        # The owning actor serialises all access on its event loop, but Ray may run the constructor on a
        # different thread than the loop, so the connection must not be pinned to its creating thread.
        self._conn = sqlite3.connect(self.path, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        with self._conn:
            self._conn.executescript(_SCHEMA)

    def load_tasks(self) -> list[dict]:
        """Every stored task record, oldest first."""
        rows = self._conn.execute("SELECT record FROM tasks ORDER BY created_at_ms, task_id")
        return [json.loads(record) for (record,) in rows]

    def save_task(self, record: dict, *, claim_idempotency_key: bool = False) -> None:
        """Upsert a task record; with ``claim_idempotency_key`` also point its key at it, in the same commit."""
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?, ?)",
                (
                    record["task_id"],
                    record["principal"],
                    record["status"],
                    record["idempotency_key"],
                    record["created_at_ms"],
                    json.dumps(record, separators=(",", ":")),
                ),
            )
            if claim_idempotency_key:
                self._conn.execute(
                    "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?)",
                    (record["principal"], record["idempotency_key"], record["task_id"], record["created_at_ms"]),
                )

    def delete_tasks(self, task_ids: list[str]) -> None:
        """Remove tasks and any idempotency key that still points at them, in one commit (one fsync for a
        whole sweep batch, not one per task)."""
        rows = [(task_id,) for task_id in task_ids]
        with self._conn:
            self._conn.executemany("DELETE FROM tasks WHERE task_id = ?", rows)
            self._conn.executemany("DELETE FROM idempotency WHERE task_id = ?", rows)

    def find_idempotent(self, principal: str, key: str, claimed_after_ms: int) -> str | None:
        """The task id ``(principal, key)`` was claimed for after ``claimed_after_ms``, if any."""
        row = self._conn.execute(
            "SELECT task_id FROM idempotency WHERE principal = ? AND key = ? AND created_at_ms > ?",
            (principal, key, claimed_after_ms),
        ).fetchone()
        return row[0] if row else None

    def drop_idempotency(self, claimed_at_or_before_ms: int) -> int:
        """Forget keys claimed at or before the cutoff (the complement of ``find_idempotent``); returns the count."""
        with self._conn:
            return self._conn.execute(
                "DELETE FROM idempotency WHERE created_at_ms <= ?", (claimed_at_or_before_ms,)
            ).rowcount

    def close(self) -> None:
        self._conn.close()
