"""What every task store shares: the layout version, the record migrations, and the `TaskStore` interface.

The storage boundary: `TaskRecord`s go in and come out; a record's JSON (and the migration of older layouts)
lives only behind it. Each backend keeps a layout version (SQLite: `user_version`; PostgreSQL: a one-row table)
and migrates an older layout when opened, in one transaction with the version bump. Version 0 (a store written
before typed records, issue 11) kept each render's finished wire result (its `CallToolResult`, the approval
timeout's result) in the record; `migrate_v0` turns such a record into the outcome it describes. Version 1 (before
asset URIs were matched whole, issue 32) may hold a render's asset URI with a trailing newline;
`canonical_asset_uris` stores it as the URI it stands for. Version 2 (before the registry held only live tasks in
memory, issue 36) lacks the `retain_from_ms` column, indexed so that retention finds expired records without
reading the rest. Version 3 (before webhooks, issue 37) lacks the `webhook_outbox` table: the events a change of a
render causes, written in the transaction of that change and delivered from there (serve_app/webhooks/).
"""

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from mcp_protocol.asset_uri import AssetRef
from mcp_protocol.domain import TaskRecord, TaskStatus
from mcp_protocol.webhook_events import Attempt, Backlog, Delivery, DeliveryState, OutboxEvent

SCHEMA_VERSION = 4


class TaskStore(Protocol):
    """Where the registry's task records live: every mutating method has committed (durably) before it returns.

    Every method raises ``mcp_protocol.state_outage.StateUnavailable`` when the store cannot answer for now (its
    database down or hung, its disk full or read-only): nothing was changed, and the same call may succeed later.

    Two backends implement it: ``actors.sqlite_store.SqliteTaskStore`` (the embedded default) and
    ``actors.postgres_store.PostgresTaskStore``; ``actors.open_store.open_task_store`` picks one.
    """

    def live_tasks(self) -> list[TaskRecord]:
        """Every non-terminal record (working, input_required), oldest first (created_at_ms, task_id); served by an
        index, not a scan of the finished ones."""
        ...

    def get_task(self, task_id: str) -> TaskRecord | None:
        """One record by its id."""
        ...

    def save_task(
        self, record: TaskRecord, *, claim_idempotency_key: bool = False, events: Sequence[OutboxEvent] = ()
    ) -> None:
        """Upsert a task record; with ``claim_idempotency_key`` also point its (principal, key) at it, and add
        ``events`` to the webhook outbox (an event id already there stays as it is), all in the same commit."""
        ...

    def owned_task_ids(self, principal: str, limit: int, before: tuple[int, str] | None = None) -> list[str]:
        """Up to ``limit`` of the principal's task ids, newest first (creation time, then id); with ``before`` (the
        (created_at_ms, task_id) of a previous page's last task), those after it in that order."""
        ...

    def expired_tasks(self, retained_from_before_ms: int, limit: int) -> list[TaskRecord]:
        """Terminal records whose retention started (``retain_from_ms``) at or before the cutoff, oldest first, at
        most ``limit``; served by the index on retain_from_ms."""
        ...

    def delete_tasks(self, task_ids: list[str]) -> None:
        """Remove tasks and any idempotency key that still points at them, in one commit."""
        ...

    def find_idempotent(self, principal: str, key: str, claimed_after_ms: int) -> str | None:
        """The task id ``(principal, key)`` was claimed for after ``claimed_after_ms``, if any."""
        ...

    def drop_idempotency(self, claimed_at_or_before_ms: int) -> int:
        """Forget keys claimed at or before the cutoff (the complement of ``find_idempotent``); returns the count."""
        ...

    def known_task_ids(self, task_ids: Iterable[str]) -> set[str]:
        """Which of these ids are stored."""
        ...

    def count_tasks(self) -> int:
        """How many records are stored (for the benchmark and metrics)."""
        ...

    def count_finished(self) -> dict[TaskStatus, int]:
        """How many terminal records of each terminal status are stored (the registry's metrics start from it);
        served by an index, not by reading the records."""
        ...

    def webhooks_due(self, now_ms: int, limit: int, lease_until_ms: int) -> list[Delivery]:
        """Pending deliveries due at ``now_ms``, oldest due first, at most ``limit``, each leased until
        ``lease_until_ms`` in the same commit (see ``serve_app.webhooks.outbox.Outbox.due``)."""
        ...

    def record_webhook_attempt(self, event_id: str, attempt: Attempt) -> None:
        """One attempt's outcome, on a delivery still pending (``Outbox.record_attempt``)."""
        ...

    def list_webhook_deliveries(
        self, principal: str, limit: int, before: tuple[int, str] | None = None
    ) -> list[Delivery]:
        """A page of the principal's deliveries, newest event first (``Outbox.list_deliveries``)."""
        ...

    def webhook_backlog(self) -> Backlog:
        """The pending deliveries' count, the oldest one's creation time and the soonest one's next attempt (served by
        the due index)."""
        ...

    def drop_webhook_deliveries(self, created_at_or_before_ms: int, limit: int) -> int:
        """Forget up to ``limit`` settled (delivered or given-up) deliveries created at or before the cutoff, oldest
        first, through the index on settled rows; returns how many went."""
        ...

    def session(self) -> int:
        """The number of the session (connection) calls go through now, a new one after each reconnection: what a
        caller holds in memory may be behind the store when it changes (a commit whose answer was lost may have
        landed). Raises ``StateUnavailable`` while there is none."""
        ...

    def unavailable_reason(self) -> str | None:
        """Why the state cannot be read or written now (the last failure), or None while it can."""
        ...

    def probe(self) -> None:
        """Ask the store something trivial now, so that a lost session is noticed without waiting for a real call
        (``StateUnavailable`` if it is)."""
        ...

    def close(self) -> None: ...


def retain_from_ms(record: TaskRecord) -> int | None:
    """When a record's retention started (the ``retain_from_ms`` column): ``TaskRecord.expires_ms`` less the
    retention, for a terminal record; None while it is live (a live task never expires)."""
    return record.expires_ms(0) if record.status.terminal else None


TaskRow = tuple[str, str, str, str | None, int, str, int | None]
TASK_COLUMNS = "task_id, principal, status, idempotency_key, created_at_ms, record, retain_from_ms"


def task_row(record: TaskRecord) -> TaskRow:
    """A record as the values of ``TASK_COLUMNS``, in that order."""
    return (
        record.task_id,
        record.principal,
        record.status.value,
        record.request.idempotency_key,
        record.created_at_ms,
        record.model_dump_json(),
        retain_from_ms(record),
    )


# The webhook outbox (layout 4), the same in both stores but for the type of its times (`ms`: INTEGER in SQLite,
# BIGINT in PostgreSQL). A row per event; `event` is the OutboxEvent's JSON, the other columns where its delivery
# stands (what `mcp_protocol.webhook_events.Delivery` holds).
OUTBOX_TABLE = """
CREATE TABLE IF NOT EXISTS webhook_outbox (
    event_id           TEXT PRIMARY KEY,
    principal          TEXT NOT NULL,
    task_id            TEXT NOT NULL,
    created_at_ms      {ms} NOT NULL,
    state              TEXT NOT NULL DEFAULT 'pending',
    attempts           INTEGER NOT NULL DEFAULT 0,
    next_attempt_at_ms {ms} NOT NULL,
    last_attempt_at_ms {ms},
    last_error         TEXT,
    event              TEXT NOT NULL
)
"""
# An outbox row's values, in this order: what a bulk copy between stores moves (`vidforge state migrate`).
OUTBOX_COLUMNS = (
    "event_id, principal, task_id, created_at_ms, state, attempts, next_attempt_at_ms, last_attempt_at_ms,"
    " last_error, event"
)
OUTBOX_INDEXES = """
-- The due deliveries (`webhooks_due`) and the backlog, without reading the settled ones.
CREATE INDEX IF NOT EXISTS webhook_outbox_due ON webhook_outbox (next_attempt_at_ms, event_id) WHERE state = 'pending';
-- A principal's deliveries, newest first (`list_webhook_deliveries`).
CREATE INDEX IF NOT EXISTS webhook_outbox_by_principal ON webhook_outbox (principal, created_at_ms, event_id);
-- The oldest settled deliveries first (`drop_webhook_deliveries`, the sweep).
CREATE INDEX IF NOT EXISTS webhook_outbox_settled ON webhook_outbox (created_at_ms) WHERE state <> 'pending'
"""
# The statements both stores run, in PostgreSQL's placeholder style (the SQLite store reads `%s` as `?`).
OUTBOX_INSERT = (
    "INSERT INTO webhook_outbox (event_id, principal, task_id, created_at_ms, next_attempt_at_ms, event)"
    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (event_id) DO NOTHING"
)
DELIVERY_COLUMNS = "event, state, attempts, next_attempt_at_ms, last_error, last_attempt_at_ms"
DUE_CONDITION = "state = 'pending' AND next_attempt_at_ms <= %s ORDER BY next_attempt_at_ms, event_id LIMIT %s"
RECORD_ATTEMPT = (
    "UPDATE webhook_outbox SET attempts = attempts + 1, state = %s, next_attempt_at_ms = %s, last_error = %s,"
    " last_attempt_at_ms = %s WHERE event_id = %s AND state = 'pending'"
)
LIST_DELIVERIES = (
    f"SELECT {DELIVERY_COLUMNS} FROM webhook_outbox WHERE principal = %s {{after}}"
    " ORDER BY created_at_ms DESC, event_id DESC LIMIT %s"
)
LIST_AFTER = "AND (created_at_ms, event_id) < (%s, %s)"
BACKLOG = "SELECT count(*), min(created_at_ms), min(next_attempt_at_ms) FROM webhook_outbox WHERE state = 'pending'"
DROP_SETTLED = (
    "DELETE FROM webhook_outbox WHERE event_id IN (SELECT event_id FROM webhook_outbox"
    " WHERE state <> 'pending' AND created_at_ms <= %s ORDER BY created_at_ms LIMIT %s)"
)


def sql_statements(*scripts: str) -> list[str]:
    """The statements of DDL scripts (``;``-separated), without the pieces that hold only comments or blanks."""
    pieces = (piece.strip() for script in scripts for piece in script.split(";"))
    return [piece for piece in pieces if any(line and not line.startswith("--") for line in piece.splitlines())]


def outbox_row(event: OutboxEvent) -> tuple[str, str, str, int, int, str]:
    """An event as the values of ``OUTBOX_INSERT``: due at once (its creation time)."""
    return (
        event.event_id,
        event.principal,
        event.task_id,
        event.created_at_ms,
        event.created_at_ms,
        event.model_dump_json(),
    )


def list_deliveries_query(principal: str, limit: int, before: tuple[int, str] | None) -> tuple[str, tuple[object, ...]]:
    """``LIST_DELIVERIES`` and its values, with the page's start when ``before`` is given."""
    if before is None:
        return LIST_DELIVERIES.format(after=""), (principal, limit)
    return LIST_DELIVERIES.format(after=LIST_AFTER), (principal, *before, limit)


def delivery_of(row: Sequence[object]) -> Delivery:
    """A row of ``DELIVERY_COLUMNS`` as the delivery it describes."""
    event, state, attempts, next_ms, error, last_ms = row
    return Delivery(
        event=OutboxEvent.model_validate_json(str(event)),
        state=DeliveryState(str(state)),
        attempts=int(str(attempts)),
        next_attempt_at_ms=int(str(next_ms)),
        last_error=None if error is None else str(error),
        last_attempt_at_ms=None if last_ms is None else int(str(last_ms)),
    )


def attempt_row(event_id: str, attempt: Attempt) -> tuple[str, int, str | None, int, str]:
    """An attempt as the values of ``RECORD_ATTEMPT``."""
    return (attempt.state.value, attempt.next_attempt_at_ms, attempt.error, attempt.at_ms, event_id)


def migrated_record(stored: str, layout: int) -> TaskRecord:
    """A record stored as JSON under an older ``layout``, as a record of this one."""
    if layout >= 2:
        return TaskRecord.model_validate_json(stored)
    old = json.loads(stored)
    return canonical_asset_uris(migrate_v0(old) if layout == 0 else TaskRecord.model_validate(old))


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
