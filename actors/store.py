"""Durable storage for task records: one SQLite file in WAL mode under the data dir.

The storage boundary: `TaskRecord`s go in and come out; a record's JSON (and the migration of older layouts)
lives only here. The database's `user_version` says which layout its records have. Version 0 (a store written
before typed records, issue 11) kept each render's finished wire result (its `CallToolResult`, the approval
timeout's result) in the record; `migrate_v0` turns such a record into the outcome it describes. Version 1 (before
asset URIs were matched whole, issue 32) may hold a render's asset URI with a trailing newline;
`canonical_asset_uris` stores it as the URI it stands for. Each runs once, when the store is opened, in one
transaction with the version bump.
"""

import json
import sqlite3
from pathlib import Path
from typing import Any

from mcp_protocol.asset_uri import AssetRef
from mcp_protocol.domain import TaskRecord
from media_store.private_files import create_private_file, make_private_dirs

SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_id         TEXT PRIMARY KEY,
    principal       TEXT NOT NULL,
    status          TEXT NOT NULL,
    idempotency_key TEXT,
    created_at_ms   INTEGER NOT NULL,
    record          TEXT NOT NULL
);
-- A principal's tasks, newest first, a page at a time (`owned_task_ids`), without reading anyone else's.
CREATE INDEX IF NOT EXISTS tasks_by_principal ON tasks (principal, created_at_ms, task_id);
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
        make_private_dirs(data_dir)
        self.path = Path(data_dir) / self.FILENAME
        create_private_file(self.path)  # SQLite gives its -wal and -shm files the database's mode
        # The owning actor serialises all access on its event loop, but Ray may run the constructor on a
        # different thread than the loop, so the connection must not be pinned to its creating thread.
        self._conn = sqlite3.connect(self.path, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        with self._conn:
            self._conn.executescript(_SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Bring the stored records to SCHEMA_VERSION (in one transaction: all of them, or none)."""
        (version,) = self._conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise RuntimeError(f"{self.path} holds task records of layout {version}, newer than this vidforge's")
        if version == SCHEMA_VERSION:
            return
        with self._conn:
            rows = self._conn.execute("SELECT record FROM tasks").fetchall()
            for (record,) in rows:
                stored = json.loads(record)
                migrated = canonical_asset_uris(
                    migrate_v0(stored) if version == 0 else TaskRecord.model_validate(stored)
                )
                self._conn.execute(
                    "UPDATE tasks SET record = ? WHERE task_id = ?", (migrated.model_dump_json(), migrated.task_id)
                )
            self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def load_tasks(self) -> list[TaskRecord]:
        """Every stored task record, oldest first."""
        rows = self._conn.execute("SELECT record FROM tasks ORDER BY created_at_ms, task_id")
        return [TaskRecord.model_validate_json(record) for (record,) in rows]

    def save_task(self, record: TaskRecord, *, claim_idempotency_key: bool = False) -> None:
        """Upsert a task record; with ``claim_idempotency_key`` also point its key at it, in the same commit."""
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?, ?)",
                (
                    record.task_id,
                    record.principal,
                    record.status.value,
                    record.request.idempotency_key,
                    record.created_at_ms,
                    record.model_dump_json(),
                ),
            )
            if claim_idempotency_key:
                self._conn.execute(
                    "INSERT OR REPLACE INTO idempotency VALUES (?, ?, ?, ?)",
                    (record.principal, record.request.idempotency_key, record.task_id, record.created_at_ms),
                )

    def owned_task_ids(self, principal: str, limit: int, before: tuple[int, str] | None = None) -> list[str]:
        """Up to ``limit`` of the principal's task ids, newest first (creation time, then id); with ``before`` (the
        (created_at_ms, task_id) of a previous page's last task), those after it in that order."""
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


def migrate_v0(old: dict[str, Any]) -> TaskRecord:
    """A record of layout 0 as a `TaskRecord`: its arguments become the request, its pending input the pending
    approval, and its stored result (or the cancellation) the end it describes."""
    status = old["status"]
    end: dict[str, Any] | None = None
    if status == "cancelled":
        end = {"outcome": "cancelled"}
    elif status in ("completed", "failed"):  # nothing ever stored `failed`; read it as the fault it would be
        end = _v0_end(old)
    pending = None
    if status == "input_required":
        pending = {
            "key": old["input_key"],
            "deadline_ms": old["approval_deadline_ms"],
            "timeout_s": (old.get("input_request") or {}).get("timeout_s", 1800.0),
        }
    approval = old.get("approval")
    return TaskRecord.model_validate(
        {
            "task_id": old["task_id"],
            "principal": old["principal"],
            "request": old["arguments"],
            "status": "completed" if status == "failed" else status,
            "phase": old["phase"],
            "status_message": old.get("status_message") or "",
            "frames_done": old.get("frames_done", 0),
            "frames_total": old.get("frames_total", 0),
            "fps": old.get("fps"),
            "source_fps": old.get("source_fps"),
            "created_at_ms": old["created_at_ms"],
            "last_updated_at_ms": old["last_updated_at_ms"],
            "ttl_ms": old["ttl_ms"],
            "poll_interval_ms": old["poll_interval_ms"],
            "input_seq": old.get("input_seq", 0),
            "pending": pending,
            "approval": approval and {k: approval.get(k) for k in ("key", "approved", "note", "at_ms")},
            "cancel_requested": old.get("cancel_requested", False),
            "end": end,
            "version": old["version"],
            "attempt": old.get("attempt", 0),
        }
    )


def canonical_asset_uris(rec: TaskRecord) -> TaskRecord:
    """A record of layout 1 with its asset URIs canonical. The `$`-anchored check of layout 1 also accepted a URI
    followed by a newline, and the render ran on that asset; the sweep, reading ids only from canonical URIs
    (`RenderRequest.asset_ids`), would otherwise take the asset from under a live render."""

    def canonical(uri: str) -> str:
        ref = AssetRef.parse(uri.removesuffix("\n"))
        return ref.uri if ref is not None else uri

    request = rec.request
    update: dict[str, Any] = {"source_asset_uri": canonical(request.source_asset_uri)}
    if request.watermark is not None:
        update["watermark"] = request.watermark.model_copy(
            update={"image_asset_uri": canonical(request.watermark.image_asset_uri)}
        )
    return rec.model_copy(update={"request": request.model_copy(update=update)})


def _v0_end(old: dict[str, Any]) -> dict[str, Any]:
    """The end a layout-0 terminal record's result (or error) describes."""
    result = old.get("result") or {}
    if result and not result.get("isError"):
        artifact = old["artifact"]
        return {
            "outcome": "succeeded",
            "artifact": {  # its files stay where they were: media_store.artifacts' layout, by the task's id
                "ext": artifact["ext"],
                "size_bytes": artifact["size_bytes"],
                "duration_s": artifact["duration_s"],
                # Completion is the record's last change; the stored expiry was this plus the retention then.
                "finished_at_ms": old["last_updated_at_ms"],
            },
        }
    envelope = result.get("structuredContent") or {}
    if not envelope:  # a `failed` task's JSON-RPC error
        error = old.get("error") or {}
        envelope = {**(error.get("data") or {}), "code": "render_failed", "details": {"reason": error.get("message")}}
    code = envelope.get("code")
    details = envelope.get("details") or {}
    request_id = envelope.get("request_id") or "req_migrated"
    if code == "watermark_rejected":
        return {"outcome": "rejected", "note": (old.get("approval") or {}).get("note"), "request_id": request_id}
    if code == "watermark_approval_timeout":
        return {
            "outcome": "approval_timeout",
            "timeout_s": _v0_window_s(details.get("reason", "")),
            "request_id": request_id,
        }
    if code in ("source_not_found", "unsupported_codec", "media_limit_exceeded"):
        return {
            "outcome": "unsupported",
            "code": code,
            "field": details.get("field") or "source_asset_uri",
            "reason": details.get("reason", ""),
            "request_id": request_id,
        }
    if code not in ("render_timeout", "storage_full"):
        code = "render_failed"
    return {
        "outcome": "failed",
        "code": code,
        "reason": details.get("reason") or "render failed",
        "request_id": request_id,
    }


def _v0_window_s(reason: str) -> float:
    """The approval window a layout-0 timeout result states ("Approval window of 30 minutes elapsed ...")."""
    words = reason.removeprefix("Approval window of ").split()
    try:
        count, unit = float(words[0]), words[1]
    except (IndexError, ValueError):
        return 1800.0
    return count * {"second": 1, "minute": 60, "hour": 3600, "day": 86_400}.get(unit.rstrip("s"), 1)
