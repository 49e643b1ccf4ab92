"""A registry database written before typed records (layout 0: records held the finished wire results) is
migrated when the store opens: every render reads back exactly as it did, and the store is marked layout 1.
Pure: SQLite and the wire builders, no Ray."""

from __future__ import annotations

import json
import sqlite3

import pytest

from actors.sqlite_store import SqliteTaskStore
from actors.store import SCHEMA_VERSION
from mcp_protocol import errors
from mcp_protocol.domain import (
    ApprovalTimedOut,
    Artifact,
    Cancelled,
    Failed,
    Rejected,
    RenderRequest,
    Succeeded,
    TaskRecord,
    Unsupported,
)
from mcp_protocol.envelope import VidforgeError, tool_error_result
from mcp_protocol.error_codes import ErrorCode
from mcp_protocol.results import end_result, render_success_result

RETENTION_S = 604_800
T_MS = 1_785_333_731_000
ARGUMENTS = {
    "source_asset_uri": "vidforge://assets/a_" + "1" * 24,
    "output_format": "webm",
    "resolution": "1080p",
    "watermark": {"image_asset_uri": "vidforge://assets/a_" + "2" * 24, "position": "center", "opacity": 0.5},
    "idempotency_key": "k",
}
REQUEST = RenderRequest.model_validate(ARGUMENTS)
V0_SCHEMA = """
CREATE TABLE tasks (task_id TEXT PRIMARY KEY, principal TEXT NOT NULL, status TEXT NOT NULL, idempotency_key TEXT,
                    created_at_ms INTEGER NOT NULL, record TEXT NOT NULL);
CREATE TABLE idempotency (principal TEXT NOT NULL, key TEXT NOT NULL, task_id TEXT NOT NULL,
                          created_at_ms INTEGER NOT NULL, PRIMARY KEY (principal, key));
"""


def v0_record(task_id: str, status: str, **fields) -> dict:
    """A record as the layout-0 registry wrote it."""
    return {
        "task_id": task_id,
        "principal": "alice",
        "arguments": ARGUMENTS,
        "idempotency_key": "k",
        "status": status,
        "phase": "done" if status in ("completed", "cancelled") else "rendering",
        "status_message": "Render complete.",
        "frames_done": 90,
        "frames_total": 90,
        "fps": None,
        "source_fps": None,
        "created_at_ms": T_MS,
        "last_updated_at_ms": T_MS + 60_000,
        "ttl_ms": 86_400_000,
        "poll_interval_ms": 10_000,
        "input_key": None,
        "input_seq": 1,
        "input_request": None,
        "approval_deadline_ms": None,
        "timeout_result": None,
        "approval": None,
        "cancel_requested": False,
        "result": None,
        "error": None,
        "artifact": None,
        "version": 7,
        "attempt": 1,
        **fields,
    }


def stored_error(error: VidforgeError, request_id: str) -> dict:
    error.request_id = request_id
    return tool_error_result(error)


ARTIFACT = {
    "path": "/data/artifacts/task_ok/final.webm",
    "files": ["/data/artifacts/task_ok/final.webm"],
    "ext": "webm",
    "mime": "video/webm",
    "size_bytes": 4096,
    "duration_s": 3.0,
    "expires_at_ms": T_MS + 60_000 + RETENTION_S * 1000,
}
SUCCESS = render_success_result(
    "task_ok",
    REQUEST,
    Artifact(
        ext="webm",
        size_bytes=4096,
        duration_s=3.0,
        finished_at_ms=T_MS + 60_000,
    ),
    RETENTION_S,
)
APPROVAL = {"key": "watermark-approval-1", "approved": False, "note": "too big", "at_ms": T_MS + 30_000}
V0 = [
    v0_record("task_ok", "completed", result=SUCCESS, artifact=ARTIFACT),
    v0_record(
        "task_rejected",
        "completed",
        approval=APPROVAL,
        result=stored_error(errors.watermark_rejected(REQUEST, "too big"), "req_0000000000000001"),
    ),
    v0_record(
        "task_timeout",
        "completed",
        result=stored_error(errors.watermark_approval_timeout(REQUEST, 90), "req_0000000000000002"),
    ),
    v0_record(
        "task_media",
        "completed",
        result=stored_error(
            errors.media_limit_exceeded("source_asset_uri", "too long (VIDFORGE_MAX_SOURCE_DURATION_S)"),
            "req_0000000000000003",
        ),
    ),
    v0_record(
        "task_fault",
        "completed",
        result=stored_error(errors.render_failed(REQUEST, "RuntimeError: boom"), "req_0000000000000004"),
    ),
    v0_record("task_disk", "completed", result=stored_error(errors.storage_full(REQUEST), "req_0000000000000005")),
    v0_record("task_cancelled", "cancelled", status_message="Render cancelled."),
    v0_record(
        "task_waiting",
        "input_required",
        phase="awaiting_watermark_approval",
        input_key="watermark-approval-1",
        input_request={
            "preview_uri": "vidforge://renders/task_waiting/watermark-preview.png",
            "position": "center",
            "opacity": 0.5,
            "timeout_s": 1800.0,
        },
        approval_deadline_ms=T_MS + 1_800_000,
        timeout_result={"isError": True},
        poll_interval_ms=30_000,
    ),
    v0_record("task_working", "working", phase="rendering", frames_done=12),
]
TASK_IDS = [rec["task_id"] for rec in V0]


@pytest.fixture
def migrated(tmp_path) -> dict[str, TaskRecord]:
    with sqlite3.connect(tmp_path / SqliteTaskStore.FILENAME) as conn:
        conn.executescript(V0_SCHEMA)
        for rec in V0:
            conn.execute(
                "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?)",
                (rec["task_id"], "alice", rec["status"], "k", rec["created_at_ms"], json.dumps(rec)),
            )
    store = SqliteTaskStore(str(tmp_path))
    records = {task_id: store.get_task(task_id) for task_id in TASK_IDS}
    store.close()
    return records


def test_every_finished_render_reads_back_as_before(migrated):
    for old in V0:
        rec = migrated[old["task_id"]]
        assert rec.request == REQUEST and rec.version == old["version"] and rec.status == old["status"]
        if old["result"] is not None:
            assert end_result(rec, RETENTION_S) == old["result"], old["task_id"]


def test_each_result_becomes_the_outcome_it_describes(migrated):
    assert migrated["task_ok"].end == Succeeded(
        artifact=Artifact(
            ext="webm",
            size_bytes=4096,
            duration_s=3.0,
            finished_at_ms=T_MS + 60_000,
        )
    )
    assert migrated["task_rejected"].end == Rejected(note="too big", request_id="req_0000000000000001")
    assert migrated["task_timeout"].end == ApprovalTimedOut(timeout_s=90, request_id="req_0000000000000002")
    assert isinstance(migrated["task_media"].end, Unsupported)
    assert migrated["task_media"].end.code is ErrorCode.MEDIA_LIMIT_EXCEEDED
    assert migrated["task_fault"].end == Failed(
        code=ErrorCode.RENDER_FAILED, reason="RuntimeError: boom", request_id="req_0000000000000004"
    )
    assert isinstance(migrated["task_disk"].end, Failed) and migrated["task_disk"].end.code is ErrorCode.STORAGE_FULL
    assert migrated["task_cancelled"].end == Cancelled()


def test_unfinished_renders_keep_their_state(migrated):
    waiting = migrated["task_waiting"]
    assert waiting.pending is not None and waiting.pending.key == "watermark-approval-1"
    assert (waiting.pending.deadline_ms, waiting.pending.timeout_s) == (T_MS + 1_800_000, 1800.0)
    assert waiting.poll_interval_ms == 30_000 and waiting.end is None
    assert migrated["task_working"].frames_done == 12 and migrated["task_working"].end is None


def test_the_store_is_marked_migrated_and_opens_again_unchanged(tmp_path, migrated):
    with sqlite3.connect(tmp_path / SqliteTaskStore.FILENAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    again = SqliteTaskStore(str(tmp_path))
    assert {task_id: again.get_task(task_id) for task_id in TASK_IDS} == migrated


def test_a_newer_layout_is_refused(tmp_path):
    SqliteTaskStore(str(tmp_path)).close()
    with sqlite3.connect(tmp_path / SqliteTaskStore.FILENAME) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(RuntimeError, match="newer"):
        SqliteTaskStore(str(tmp_path))


V3_SCHEMA = V0_SCHEMA.replace("record TEXT NOT NULL);", "record TEXT NOT NULL, retain_from_ms INTEGER);")


def test_layout_3_gains_the_webhook_outbox_and_keeps_its_records(tmp_path):
    from mcp_protocol.webhook_events import EventType, OutboxEvent

    rec = TaskRecord(
        task_id="task_live",
        principal="alice",
        request=REQUEST,
        status_message="",
        created_at_ms=T_MS,
        last_updated_at_ms=T_MS,
        ttl_ms=86_400_000,
        poll_interval_ms=10_000,
    )
    with sqlite3.connect(tmp_path / SqliteTaskStore.FILENAME) as conn:
        conn.executescript(V3_SCHEMA)
        conn.execute(
            "INSERT INTO tasks VALUES (?, 'alice', 'working', 'k', ?, ?, NULL)",
            (rec.task_id, T_MS, rec.model_dump_json()),
        )
        conn.execute("PRAGMA user_version = 3")
    store = SqliteTaskStore(str(tmp_path))
    assert store.get_task(rec.task_id) == rec
    event = OutboxEvent(
        event_id="evt_1",
        type=EventType.CANCELLED,
        task_id=rec.task_id,
        principal="alice",
        url="https://hooks.example/h",
        created_at_ms=T_MS,
        body="{}",
    )
    store.save_task(rec, events=[event])
    assert [d.event for d in store.webhooks_due(T_MS, 10, T_MS + 1)] == [event]
    with sqlite3.connect(tmp_path / SqliteTaskStore.FILENAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,) == (4,)
