"""TaskRegistry: the task lifecycle contract (ext-tasks state machine, idempotency, quota, approvals,
housekeeping, durability), exercised on the plain class with a fake clock, on both task stores: SQLite, and a real
PostgreSQL server (tests/postgres.py; those runs are `slow`: they start a server); plus one Ray restart test."""

import asyncio
import os
import pickle
import re
import sqlite3
import time
import uuid

import pytest

from actors.change_feed import Changes
from actors.errors import InvalidTransition, QuotaExceeded, TaskNotFound
from actors.held_records import MAX_UNSAVED_BUMPS
from actors.sqlite_store import SqliteTaskStore
from actors.task_registry import DELETION_LOG_BATCHES, Created, IdempotencyConflict, TaskRegistry
from mcp_protocol.domain import (
    AnswerResult,
    Approval,
    ApprovalAnswer,
    ApprovalTimedOut,
    Artifact,
    Cancelled,
    PendingApproval,
    Rejected,
    RenderRequest,
    Succeeded,
)
from serve_app._config import Config
from tests import postgres

T0 = 1_785_333_731.0  # 2026-07-29T14:02:11Z, the contract's createdAt
HOUR_S = 3600
DAY_S = 24 * HOUR_S
# Long enough that the background sweep never runs on its own; tests call sweep() themselves.
QUIET = {"sweep_interval_s": 3600}


def settings(tmp_path, **config) -> Config:
    return Config(data_dir=str(tmp_path), **{**QUIET, **config})


REQUEST = RenderRequest(source_asset_uri="vidforge://assets/a_1", output_format="mp4", resolution="720p")
ARTIFACT = Artifact(ext="mp4", size_bytes=10, duration_s=1.0, finished_at_ms=int(T0 * 1000))
DONE = Succeeded(artifact=ARTIFACT)
TERMINAL_END = {"completed": DONE, "cancelled": Cancelled()}
PENDING_INPUT = {
    "input_seq": 1,
    "pending": PendingApproval(key="watermark-approval-1", deadline_ms=int((T0 + 1800) * 1000), timeout_s=1800),
    "phase": "awaiting_watermark_approval",
}


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


_opened: list[TaskRegistry] = []  # the registries `make` opened in the running test, closed after it


@pytest.fixture(autouse=True, params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def backend(request, monkeypatch):
    """Every test on each task store: `settings` reads VIDFORGE_STATE_URL, a fresh database per test. A test of one
    store only says so with `sqlite_only`. The registries a test opened are closed after it: a PostgreSQL one holds
    its database's ownership (and a connection) until then."""
    if request.param == "postgresql":
        monkeypatch.setenv("VIDFORGE_STATE_URL", postgres.postgres_server().new_database())
    yield request.param
    while _opened:
        _opened.pop().close()


sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # overrides the fixture's params


def make(tmp_path, clock=None, driver=None, **config):
    """A registry on the test's store. Close it (``close``) before opening another on the same state: on PostgreSQL
    the second waits for the first's ownership."""
    reg = TaskRegistry(settings(tmp_path, **config).registry_settings(), clock or FakeClock(), driver)
    _opened.append(reg)
    return reg


def request(**changes) -> RenderRequest:
    return REQUEST.model_copy(update=changes)


async def new_task(reg, principal="alice", **changes):
    return (await reg.create(principal, request(**changes))).task


async def ask_approval(reg, task_id, timeout_s=1800):
    return await reg.request_input(task_id, timeout_s)


async def task_in(reg, status):
    """A fresh task brought to ``status`` through the public driver methods."""
    task = await new_task(reg)
    if status == "input_required":
        return await ask_approval(reg, task.task_id)
    if status in TERMINAL_END:
        return await reg.finish(task.task_id, TERMINAL_END[status])
    return task


# -- creation ------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_create_returns_a_working_queued_record(tmp_path):
    reg = make(tmp_path)
    created = await reg.create("alice", request(resolution="1080p", idempotency_key="k1"))
    task = created.task
    assert created.created is True
    assert re.fullmatch(r"task_[a-z2-7]{26}", task.task_id)
    assert task.principal == "alice"
    assert task.request == request(resolution="1080p", idempotency_key="k1")
    assert task.status == "working" and task.phase == "queued"
    assert task.status_message == "Render queued; encoding starts shortly."
    assert task.created_at_ms == task.last_updated_at_ms == int(T0 * 1000)
    assert task.ttl_ms == 86_400_000 and task.poll_interval_ms == 10_000
    assert task.version == 1 and task.attempt == 0 and task.input_seq == 0
    assert task.end is task.artifact is task.approval is task.pending is None
    assert await reg.get("alice", task.task_id) == task


@pytest.mark.anyio
async def test_returned_records_cannot_change_the_registrys(tmp_path):
    reg = make(tmp_path)
    task = await new_task(reg)
    with pytest.raises(ValueError):  # pydantic's frozen-instance error
        task.status = "completed"
    with pytest.raises(ValueError):
        task.request.source_asset_uri = "tampered"
    stored = await reg.get_any(task.task_id)
    assert stored.status == "working" and stored.request.source_asset_uri == "vidforge://assets/a_1"


@pytest.mark.anyio
async def test_foreign_task_reads_like_an_unknown_one(tmp_path):
    reg = make(tmp_path)
    task = await new_task(reg, "alice")
    assert await reg.get("mallory", task.task_id) is None
    assert await reg.get("mallory", "task_doesnotexist") is None
    assert await reg.request_cancel("mallory", task.task_id) is None
    assert await reg.get_artifact("mallory", task.task_id) is None
    assert await reg.get_any("task_doesnotexist") is None


# -- state machine ---------------------------------------------------------------------------------------

LEGAL = [
    ("working", "working"),
    ("working", "input_required"),
    ("working", "completed"),
    ("working", "cancelled"),
    ("input_required", "input_required"),
    ("input_required", "working"),
    ("input_required", "completed"),
    ("input_required", "cancelled"),
]
STATUSES = ["working", "input_required", "completed", "cancelled"]


def fields_for(status):
    if status in TERMINAL_END:
        return {"end": TERMINAL_END[status]}
    return {"input_required": PENDING_INPUT, "working": {"phase": "rendering", "pending": None}}[status]


@pytest.mark.parametrize(("start", "target"), LEGAL)
@pytest.mark.anyio
async def test_legal_transitions(tmp_path, start, target):
    reg = make(tmp_path)
    task = await task_in(reg, start)
    moved = await reg.transition(task.task_id, target, **fields_for(target), status_message="moved")
    assert moved.status == target
    assert moved.version == task.version + 1
    if target in TERMINAL_END:
        assert moved.phase == "done" and moved.pending is None and moved.end == TERMINAL_END[target]


@pytest.mark.parametrize("start", ["completed", "cancelled"])
@pytest.mark.parametrize("target", STATUSES)
@pytest.mark.anyio
async def test_terminal_states_never_change(tmp_path, start, target):
    reg = make(tmp_path)
    task = await task_in(reg, start)
    with pytest.raises(InvalidTransition):
        await reg.transition(task.task_id, target, **fields_for(target))
    assert await reg.get_any(task.task_id) == task


@pytest.mark.anyio
async def test_transition_rejects_unknown_status_fields_and_tasks(tmp_path):
    reg = make(tmp_path)
    task_id = (await new_task(reg)).task_id
    with pytest.raises(InvalidTransition):
        await reg.transition(task_id, "paused")
    with pytest.raises(ValueError):
        await reg.transition(task_id, "working", version=99)
    with pytest.raises(ValueError):
        await reg.transition(task_id, "working", phase="done")
    with pytest.raises(ValueError):
        await reg.transition(task_id, "working", phase="encoding")
    with pytest.raises(ValueError):  # only terminal tasks carry an end
        await reg.transition(task_id, "working", end=DONE)
    with pytest.raises(ValueError):  # no input_required without a pending approval (its deadline)
        await reg.transition(task_id, "input_required")
    with pytest.raises(InvalidTransition):  # vidforge never produces ext-tasks' `failed`
        await reg.transition(task_id, "failed")
    with pytest.raises(TaskNotFound):
        await reg.transition("task_doesnotexist", "working")
    assert (await reg.get_any(task_id)).version == 1


@pytest.mark.parametrize(
    ("status", "payload"),
    [
        ("completed", {}),
        ("completed", {"end": Cancelled()}),
        ("cancelled", {}),
        ("cancelled", {"end": DONE}),
    ],
)
@pytest.mark.anyio
async def test_terminal_end_rule(tmp_path, status, payload):
    """A completed task carries how it ended; only a cancelled one ends cancelled."""

    reg = make(tmp_path)
    task_id = (await new_task(reg)).task_id
    with pytest.raises(ValueError):
        await reg.transition(task_id, status, **payload)
    assert (await reg.get_any(task_id)).status == "working"


@pytest.mark.anyio
async def test_finish_on_a_terminal_task_reports_the_lost_race(tmp_path):
    reg = make(tmp_path)
    task = await task_in(reg, "cancelled")
    assert await reg.finish(task.task_id, DONE) is None
    assert await reg.set_progress(task.task_id, 10, 10) is None
    assert await reg.bump_attempt(task.task_id) is None
    assert await reg.get_any(task.task_id) == task


@pytest.mark.anyio
async def test_unchanged_transition_does_not_bump_version(tmp_path):
    clock = FakeClock()
    reg = make(tmp_path, clock)
    task = await new_task(reg)
    clock.advance(5)
    same = await reg.transition(task.task_id, "working", phase="queued")
    assert same == task


# -- idempotency -------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_idempotency_key_replays_for_the_same_principal_only(tmp_path):
    reg = make(tmp_path)
    first = await reg.create("alice", request(idempotency_key="launch"))
    replay = await reg.create("alice", request(idempotency_key="launch"))
    assert replay == Created(first.task, created=False)
    other = await reg.create("bob", request(idempotency_key="launch"))
    assert other.created is True and other.task.task_id != first.task.task_id
    unkeyed = [await reg.create("alice", request()) for _ in range(2)]
    assert all(c.created for c in unkeyed)
    assert unkeyed[0].task.task_id != unkeyed[1].task.task_id


@pytest.mark.anyio
async def test_idempotency_key_expires_after_its_ttl(tmp_path):
    clock = FakeClock()
    reg = make(tmp_path, clock)
    first = await reg.create("alice", request(idempotency_key="launch"))
    clock.advance(DAY_S - 0.001)
    assert (await reg.create("alice", request(idempotency_key="launch"))).created is False
    clock.advance(0.001)
    fresh = await reg.create("alice", request(idempotency_key="launch"))
    assert fresh.created is True and fresh.task.task_id != first.task.task_id
    # The new claim lives on; only the sweep of a later day drops it.
    assert (await reg.sweep()).idempotency_keys_dropped == 0
    clock.advance(DAY_S)
    assert (await reg.sweep()).idempotency_keys_dropped == 1


@pytest.mark.anyio
async def test_idempotent_replay_is_not_blocked_by_the_quota(tmp_path):
    reg = make(tmp_path, max_concurrent_renders=1)
    first = await reg.create("alice", request(idempotency_key="launch"))
    assert (await reg.create("alice", request(idempotency_key="launch"))).task == first.task


@pytest.mark.anyio
async def test_idempotency_key_with_other_arguments_is_a_conflict_naming_the_original(tmp_path):
    reg = make(tmp_path, max_concurrent_renders=1)
    args = {
        "source_asset_uri": "vidforge://assets/a_1",
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": "vidforge://assets/a_2"},
        "idempotency_key": "launch",
    }
    first = (await reg.create("alice", RenderRequest.model_validate(args))).task
    # The same request: key order does not matter, nor a default spelled out.
    spelled = {**args, "watermark": {"opacity": 1, "image_asset_uri": "vidforge://assets/a_2"}}
    same = RenderRequest.model_validate(dict(reversed(list(spelled.items()))))
    assert await reg.replay("alice", same) == first
    assert (await reg.create("alice", same)).task == first
    other = request(resolution="1080p", idempotency_key="launch")
    with pytest.raises(IdempotencyConflict) as excinfo:
        await reg.replay("alice", other)
    assert excinfo.value.task_id == first.task_id
    with pytest.raises(IdempotencyConflict):  # checked before the quota, which alice has used up
        await reg.create("alice", other)
    assert await reg.replay("alice", request(idempotency_key="unused")) is None
    assert await reg.replay("bob", other) is None  # keys are per principal
    assert reg._store.count_tasks() == 1  # nothing was created by the conflicts


# -- quota -------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_quota_counts_non_terminal_tasks_per_principal(tmp_path):
    reg = make(tmp_path, max_concurrent_renders=2)
    first = await new_task(reg)
    await new_task(reg)
    with pytest.raises(QuotaExceeded) as excinfo:
        await new_task(reg)
    assert excinfo.value.retry_after_ms == 10_000  # no measurable progress: the poll interval
    assert (excinfo.value.active, excinfo.value.limit) == (2, 2)
    assert await reg.count_active("alice") == 2
    await new_task(reg, "bob")  # other principals are unaffected
    await reg.finish(first.task_id, Cancelled())
    assert await reg.count_active("alice") == 1
    await new_task(reg)


@pytest.mark.anyio
async def test_quota_retry_after_projects_the_soonest_finish(tmp_path):
    clock = FakeClock()
    reg = make(tmp_path, clock, max_concurrent_renders=2)
    slow, fast = await new_task(reg), await new_task(reg)
    clock.advance(100)
    await reg.set_progress(slow.task_id, 100, 1000)  # 10% in 100 s: 900 s to go
    await reg.set_progress(fast.task_id, 250, 1000)  # 25% in 100 s: 300 s to go
    with pytest.raises(QuotaExceeded) as excinfo:
        await new_task(reg)
    assert excinfo.value.retry_after_ms == 300_000
    await reg.set_progress(fast.task_id, 1000, 1000)  # done encoding, muxing: clamp to the floor
    with pytest.raises(QuotaExceeded) as excinfo:
        await new_task(reg)
    assert excinfo.value.retry_after_ms == 1000


@pytest.mark.anyio
async def test_quota_retry_after_is_at_least_one_second(tmp_path):
    reg = make(tmp_path, max_concurrent_renders=1, poll_interval_ms=10)
    await new_task(reg)
    with pytest.raises(QuotaExceeded) as excinfo:
        await new_task(reg)
    assert excinfo.value.retry_after_ms == 1000


@sqlite_only  # no store involved: once is enough
def test_errors_survive_pickling():
    """Ray pickles exceptions raised in an actor; the attributes must come back."""
    errors = (
        QuotaExceeded(1500, 4, 4),
        InvalidTransition("t", "completed", "working"),
        TaskNotFound("t"),
        IdempotencyConflict("t"),
    )
    for error in errors:
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and copy.__dict__ == error.__dict__ and str(copy) == str(error)


# -- progress ----------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_progress_is_monotonic_and_only_real_changes_bump_the_version(tmp_path):
    reg = make(tmp_path)
    task_id = (await new_task(reg)).task_id
    step = await reg.set_progress(task_id, 50, 100, phase="rendering", message="Rendering: 50%")
    assert (step.frames_done, step.frames_total, step.phase) == (50, 100, "rendering")
    assert step.status_message == "Rendering: 50%" and step.version == 2
    back = await reg.set_progress(task_id, 30, 100)
    assert back == step  # a late, smaller report changes nothing
    forward = await reg.set_progress(task_id, 60, 100)
    assert forward.frames_done == 60 and forward.version == 3


@pytest.mark.anyio
async def test_progress_while_awaiting_approval_keeps_naming_the_pending_input(tmp_path):
    reg = make(tmp_path)
    task_id = (await new_task(reg)).task_id
    await reg.request_input(task_id, 60, message="Approve the watermark")
    step = await reg.set_progress(task_id, 40, 100, phase="rendering", message="Rendering: 40%")
    assert step.frames_done == 40 and step.status == "input_required"
    assert step.phase == "awaiting_watermark_approval" and step.status_message == "Approve the watermark"


# -- approvals -------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_input_keys_are_never_reused_across_rounds(tmp_path):
    reg = make(tmp_path)
    task_id = (await new_task(reg)).task_id
    first = await ask_approval(reg, task_id)
    assert (first.status, first.pending.key, first.poll_interval_ms) == (
        "input_required",
        "watermark-approval-1",
        30_000,
    )
    assert first.phase == "awaiting_watermark_approval"
    answered = await reg.answer_input("alice", task_id, True, key="watermark-approval-1")
    assert answered.result == "recorded"
    assert (answered.task.status, answered.task.phase) == ("working", "rendering")
    assert answered.task.poll_interval_ms == 10_000 and answered.task.pending is None

    second = await ask_approval(reg, task_id)
    assert second.pending.key == "watermark-approval-2" and second.approval is None
    stale = await reg.answer_input("alice", task_id, False, key="watermark-approval-1")
    assert stale.result == "ignored" and stale.task.status == "input_required"
    with pytest.raises(InvalidTransition):  # one outstanding request at a time
        await ask_approval(reg, task_id)
    done = await reg.answer_input("alice", task_id, False, note="too big", key="watermark-approval-2")
    assert done.result == "recorded"
    assert done.task.approval.key == "watermark-approval-2"


@pytest.mark.anyio
async def test_answer_input_outcomes(tmp_path):
    clock = FakeClock()
    reg = make(tmp_path, clock)
    task_id = (await new_task(reg)).task_id
    not_found = ApprovalAnswer(result=AnswerResult.NOT_FOUND, task=None)
    assert await reg.answer_input("mallory", task_id, True) == not_found
    assert await reg.answer_input("alice", "task_doesnotexist", True) == not_found
    assert (await reg.answer_input("alice", task_id, True)).result == "not_pending"

    await ask_approval(reg, task_id)
    assert (await reg.answer_input("alice", task_id, True, key="watermark-approval-9")).result == "ignored"
    clock.advance(7)
    recorded = await reg.answer_input("alice", task_id, True, note="looks good")
    assert recorded.result == "recorded"
    assert recorded.task.approval == Approval(
        key="watermark-approval-1", approved=True, note="looks good", at_ms=int((T0 + 7) * 1000)
    )
    replayed = await reg.answer_input("alice", task_id, True)
    assert replayed == ApprovalAnswer(result=AnswerResult.REPLAYED, task=recorded.task)
    conflict = await reg.answer_input("alice", task_id, False)
    assert conflict == ApprovalAnswer(result=AnswerResult.CONFLICT, task=recorded.task)
    # An answered key is no longer outstanding.
    assert (await reg.answer_input("alice", task_id, True, key="watermark-approval-1")).result == "ignored"


@pytest.mark.anyio
async def test_rejection_completes_as_rejected_atomically(tmp_path):
    reg = make(tmp_path)
    task_id = (await new_task(reg)).task_id
    await ask_approval(reg, task_id)
    before = await reg.get_any(task_id)
    rejected = await reg.answer_input("alice", task_id, False, note="logo too large")
    task = rejected.task
    assert rejected.result == "recorded"
    assert (task.status, task.phase) == ("completed", "done")
    assert isinstance(task.end, Rejected) and task.end.note == "logo too large"
    assert task.approval.approved is False and task.approval.note == "logo too large"
    assert task.pending is None and task.version == before.version + 1
    assert (await reg.answer_input("alice", task_id, False)).result == "replayed"
    assert (await reg.answer_input("alice", task_id, True)).result == "conflict"
    assert await reg.finish(task_id, DONE) is None


@pytest.mark.anyio
async def test_sweep_times_out_unanswered_approvals(tmp_path):
    clock = FakeClock()
    reg = make(tmp_path, clock)
    task_id = (await new_task(reg)).task_id
    await ask_approval(reg, task_id, timeout_s=1800)
    clock.advance(1799)
    assert (await reg.sweep()).approvals_timed_out == 0
    clock.advance(1)
    assert (await reg.sweep()).approvals_timed_out == 1
    task = await reg.get_any(task_id)
    assert (task.status, task.phase) == ("completed", "done")
    assert isinstance(task.end, ApprovalTimedOut) and task.end.timeout_s == 1800 and task.pending is None
    assert (await reg.answer_input("alice", task_id, True)).result == "not_pending"
    assert (await reg.sweep()).approvals_timed_out == 0


@pytest.mark.anyio
async def test_background_sweep_starts_lazily_and_wakes_watchers(tmp_path):
    clock = FakeClock()
    reg = make(tmp_path, clock, sweep_interval_s=0.01)
    task_id = (await new_task(reg)).task_id
    pending = await ask_approval(reg, task_id, timeout_s=60)
    clock.advance(60)
    changed = await reg.watch("alice", [task_id], {task_id: pending.version}, timeout_s=30)
    assert [t.status for t in changed] == ["completed"]


# -- cancel, artifacts, supervisor -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_request_cancel_records_intent_idempotently(tmp_path):
    reg = make(tmp_path)
    task_id = (await new_task(reg)).task_id
    first = await reg.request_cancel("alice", task_id)
    assert first.cancel_requested is True and first.status == "working" and first.version == 2
    assert await reg.request_cancel("alice", task_id) == first
    done = await reg.finish(task_id, Cancelled())
    assert await reg.request_cancel("alice", task_id) == done


@pytest.mark.anyio
async def test_artifact_is_published_only_with_a_completed_task(tmp_path):
    reg = make(tmp_path)
    task_id = (await new_task(reg)).task_id
    assert await reg.get_artifact("alice", task_id) is None
    await reg.finish(task_id, DONE)
    assert await reg.get_artifact("alice", task_id) == ARTIFACT
    assert await reg.get_artifact("bob", task_id) is None


@pytest.mark.anyio
async def test_a_requested_cancel_wins_over_any_completion(tmp_path):
    """A cancel acknowledged while the driver finishes (records its artifact and result) is applied: the
    completion is discarded (None: the driver deletes its file), the task ends cancelled, the quota is free."""

    reg = make(tmp_path, max_concurrent_renders=1)
    task_id = (await new_task(reg)).task_id
    await reg.request_cancel("alice", task_id)
    assert await reg.finish(task_id, DONE) is None
    ended = await reg.get_any(task_id)
    assert ended.status == "cancelled" and ended.end == Cancelled() and ended.artifact is None
    assert await reg.count_active("alice") == 0
    # The driver's own cancel, the same end: already applied, answered with the record it made (as a retry whose
    # first answer was lost is), not discarded.
    assert await reg.finish(task_id, Cancelled()) == ended


class RecordingDriver:
    """The registry's Driver for these tests: remembers which tasks the sweep asked to have driven."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def drive(self, task_id: str) -> None:
        self.asked.append(task_id)


@pytest.mark.anyio
async def test_sweep_redrives_every_non_terminal_task_without_a_live_lease(tmp_path):
    clock, driver = FakeClock(), RecordingDriver()
    reg = make(tmp_path, clock, driver)
    unstarted = (await new_task(reg)).task_id  # its supervisor start never ran
    driven = (await new_task(reg)).task_id
    waiting = (await task_in(reg, "input_required")).task_id
    ended = (await task_in(reg, "completed")).task_id
    assert (await reg.sweep()).redriven == []  # a fresh task's start may still be on its way
    await reg.renew_leases([driven])
    clock.advance(10)
    await reg.renew_leases([driven])
    clock.advance(10)
    assert (await reg.sweep()).redriven == [unstarted, waiting]
    assert driver.asked == [unstarted, waiting]
    assert (await reg.sweep()).redriven == []  # the poke holds the lease: asked once per term
    clock.advance(15)
    assert set((await reg.sweep()).redriven) == {unstarted, driven, waiting}  # no beat answered
    assert ended not in driver.asked
    await reg.finish(unstarted, Cancelled())
    clock.advance(15)
    assert set((await reg.sweep()).redriven) == {driven, waiting}

    # A restarted registry holds no leases: it waits one term from its own start before asking.
    reg.close()
    again = make(tmp_path, clock, driver)
    assert (await again.sweep()).redriven == []
    clock.advance(15)
    assert set((await again.sweep()).redriven) == {driven, waiting}


@pytest.mark.anyio
async def test_nonterminal_and_bump_attempt_serve_the_supervisor(tmp_path):
    reg = make(tmp_path)
    running = await new_task(reg)
    waiting = await task_in(reg, "input_required")
    await task_in(reg, "completed")
    assert {t.task_id for t in await reg.nonterminal()} == {running.task_id, waiting.task_id}
    assert (await reg.bump_attempt(running.task_id)).attempt == 1
    assert (await reg.bump_attempt(running.task_id)).attempt == 2
    with pytest.raises(TaskNotFound):
        await reg.bump_attempt("task_doesnotexist")


# -- retention ---------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_retention_sweep_deletes_artifact_file_and_record(tmp_path):
    clock = FakeClock()
    data_dir = tmp_path / "data"
    reg = make(data_dir, clock)
    task_id = (await new_task(reg)).task_id
    unfinished_id = (await new_task(reg)).task_id
    clock.advance(HOUR_S)  # the render took an hour: the artifact outlives creation + 7 days by that
    folder = data_dir / "artifacts" / task_id
    folder.mkdir(parents=True)
    video, preview = folder / "final.mp4", folder / "watermark-preview.png"
    video.write_bytes(b"\x00" * 10)
    preview.write_bytes(b"\x89PNG")
    expires_at_ms = int((clock() + 7 * DAY_S) * 1000)
    artifact = Artifact(ext="mp4", size_bytes=10, duration_s=1.0, finished_at_ms=int(clock() * 1000))
    await reg.finish(task_id, Succeeded(artifact=artifact))

    clock.advance(DAY_S + 1)  # past ttl_ms: the record stays for the fallback status tool
    assert (await reg.sweep()).tasks_deleted == 0
    clock.now = T0 + 7 * DAY_S  # creation + retention, but the artifact has an hour left
    assert (await reg.sweep()).tasks_deleted == 0
    assert video.exists() and await reg.get("alice", task_id) is not None
    clock.now = expires_at_ms / 1000
    assert (await reg.sweep()).tasks_deleted == 1
    assert not video.exists() and not preview.exists() and not folder.exists()
    assert await reg.get("alice", task_id) is None
    assert await reg.get("alice", unfinished_id) is not None  # non-terminal tasks are never swept
    reg.close()
    assert await make(data_dir, clock).get("alice", task_id) is None


# -- watch -------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_watch_wakes_on_change(tmp_path):
    reg = make(tmp_path)
    task = await new_task(reg)
    waiter = asyncio.create_task(reg.watch("alice", [task.task_id], {task.task_id: 1}, timeout_s=30))
    await asyncio.sleep(0)  # let the watcher start waiting (correct either way: it re-checks versions)
    await reg.set_progress(task.task_id, 5, 10)
    changed = await asyncio.wait_for(waiter, 30)
    assert [(t.task_id, t.version, t.frames_done) for t in changed] == [(task.task_id, 2, 5)]


@pytest.mark.anyio
async def test_watch_returns_at_once_when_already_newer_and_times_out_otherwise(tmp_path):
    reg = make(tmp_path)
    mine, theirs = await new_task(reg, "alice"), await new_task(reg, "bob")
    assert [t.task_id for t in await reg.watch("alice", [mine.task_id], {}, timeout_s=30)] == [mine.task_id]
    ids = [mine.task_id, theirs.task_id, "task_doesnotexist"]
    assert await reg.watch("alice", ids, {mine.task_id: 1}, timeout_s=0.05) == []
    await reg.set_progress(theirs.task_id, 1, 10)  # a foreign change never wakes this principal
    assert await reg.watch("alice", ids, {mine.task_id: 1}, timeout_s=0.05) == []


# -- change feed -------------------------------------------------------------------------------------------


async def feed_position(reg):
    """Where a new reader starts: its first call (no epoch) is answered at once with a reset and the position."""
    start = await reg.changes(None, 0, timeout_s=30)
    assert start.reset and start.records == () and start.deleted == ()
    return start.epoch, start.seq


async def expired_tasks(reg, clock, count):
    """``count`` finished tasks, with the clock moved past their retention."""
    ids = [(await task_in(reg, "completed")).task_id for _ in range(count)]
    clock.advance(8 * DAY_S)
    return ids


@pytest.mark.anyio
async def test_changes_lists_every_principals_changes_after_the_readers_position(tmp_path):
    reg = make(tmp_path)
    epoch, start = await feed_position(reg)
    mine, theirs = await new_task(reg, "alice"), await new_task(reg, "bob")
    await reg.set_progress(mine.task_id, 5, 10)
    first = await reg.changes(epoch, start, timeout_s=30)
    assert not first.reset and first.epoch == epoch and first.seq == start + 3
    # each changed task once, as it is now, in the order of its last change
    assert first.records == (await reg.get_any(theirs.task_id), await reg.get_any(mine.task_id))
    assert first.deleted == ()
    await reg.request_cancel("bob", theirs.task_id)
    second = await reg.changes(epoch, first.seq, timeout_s=30)
    assert second.records == (await reg.get_any(theirs.task_id),) and second.seq == first.seq + 1


@pytest.mark.anyio
async def test_changes_waits_for_a_change_and_times_out_with_none(tmp_path):
    reg = make(tmp_path)
    epoch, start = await feed_position(reg)
    quiet = await reg.changes(epoch, start, timeout_s=0.05)
    assert quiet == Changes(epoch=epoch, seq=start)
    waiter = asyncio.create_task(reg.changes(epoch, start, timeout_s=30))
    await asyncio.sleep(0)  # let the reader start waiting (correct either way: it re-checks the sequence)
    task = await new_task(reg)
    assert (await asyncio.wait_for(waiter, 30)).records == (task,)


@pytest.mark.anyio
async def test_changes_lists_the_tasks_the_sweep_deleted(tmp_path):
    clock = FakeClock()
    reg = make(tmp_path, clock)
    gone = tuple(sorted(await expired_tasks(reg, clock, 2)))  # expired together: deleted in id order
    epoch, start = await feed_position(reg)
    kept = await new_task(reg)
    waiter = asyncio.create_task(reg.changes(epoch, start + 1, timeout_s=30))
    await asyncio.sleep(0)
    assert (await reg.sweep()).tasks_deleted == 2
    deletion = await asyncio.wait_for(waiter, 30)  # a purge wakes the feed's readers
    assert deletion.deleted == gone and deletion.records == () and deletion.seq == start + 3
    since_start = await reg.changes(epoch, start, timeout_s=30)
    assert since_start.records == (kept,) and since_start.deleted == gone


@pytest.mark.anyio
async def test_changes_resets_a_reader_of_another_instance_or_behind_the_deletion_log(tmp_path):
    clock = FakeClock()
    reg = make(tmp_path, clock, sweep_batch=1)  # the log keeps DELETION_LOG_BATCHES deletions
    epoch, start = await feed_position(reg)
    await expired_tasks(reg, clock, DELETION_LOG_BATCHES + 1)
    mid = start + 2 * (DELETION_LOG_BATCHES + 1)  # after the creations, before any deletion
    await reg.sweep()  # one deletion: still in the log
    assert not (await reg.changes(epoch, mid, timeout_s=30)).reset
    for _ in range(DELETION_LOG_BATCHES):
        await reg.sweep()
    behind = await reg.changes(epoch, mid, timeout_s=30)  # the first deletion left the log
    assert behind.reset and behind.records == behind.deleted == () and behind.seq == mid + DELETION_LOG_BATCHES + 1
    assert not (await reg.changes(epoch, mid + 1, timeout_s=30)).reset
    other = await reg.changes("another-instance", behind.seq, timeout_s=30)
    assert other.reset and other.epoch == epoch
    reg.close()
    restarted = make(tmp_path, clock, sweep_batch=1)
    assert (await restarted.changes(epoch, behind.seq, timeout_s=30)).reset
    assert (await restarted.read("alice", "task_x")).epoch != epoch


@pytest.mark.anyio
async def test_read_answers_like_get_with_the_feed_position(tmp_path):
    reg = make(tmp_path)
    epoch, start = await feed_position(reg)
    task = await new_task(reg, "alice")
    snapshot = await reg.read("alice", task.task_id)
    assert (snapshot.epoch, snapshot.seq, snapshot.record) == (epoch, start + 1, task)
    await reg.set_progress(task.task_id, 1, 10)
    assert (await reg.read("alice", task.task_id)).seq == start + 2
    foreign, unknown = await reg.read("mallory", task.task_id), await reg.read("alice", "task_doesnotexist")
    assert foreign.record is None and unknown.record is None and foreign.seq == unknown.seq == start + 2


# -- durability --------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_restart_recovers_every_task_and_result(tmp_path):
    async def before():
        reg = make(tmp_path)
        done = await new_task(reg, idempotency_key="launch")
        await ask_approval(reg, done.task_id)
        await reg.answer_input("alice", done.task_id, True)
        await reg.set_progress(done.task_id, 100, 100)
        await reg.finish(done.task_id, DONE)
        waiting = await task_in(reg, "input_required")
        cancelled = await task_in(reg, "cancelled")
        held = [await reg.get_any(t.task_id) for t in (done, waiting, cancelled)]
        reg.close()
        return held

    async def after():
        reg = make(tmp_path)
        replay = await reg.create("alice", records[0].request)
        return [await reg.get_any(t.task_id) for t in records], await reg.nonterminal(), replay

    records = await before()
    recovered, nonterminal, replay = await after()
    # the unfinished task comes back with its version moved past any unsaved progress bump; nothing else moves
    records[1] = records[1].model_copy(update={"version": records[1].version + MAX_UNSAVED_BUMPS})
    assert recovered == records
    assert nonterminal == [records[1]]
    assert replay == Created(records[0], created=False)


def stored(reg, task_id):
    """The record as the registry's store holds it (not as the registry publishes it)."""
    return reg._store.get_task(task_id)


@pytest.mark.anyio
async def test_live_progress_is_published_at_once_but_stored_only_with_durable_changes(tmp_path):
    reg = make(tmp_path)
    task_id = (await new_task(reg)).task_id
    probing = await reg.set_progress(task_id, 0, 0, phase="probing")
    assert stored(reg, task_id) == probing  # a phase change is durable
    live = await reg.set_progress(task_id, 40, 600, fps=55.5, source_fps=30.0)
    assert (live.frames_done, live.fps, live.version) == (40, 55.5, probing.version + 1)
    assert await reg.get_any(task_id) == live  # every reader sees it at once ...
    assert stored(reg, task_id) == probing  # ... but it cost no store write
    muxing = await reg.set_progress(task_id, 600, 600, phase="muxing", source_fps=30.0)
    assert stored(reg, task_id) == muxing  # the next durable change carries the frames with it
    resumed = await reg.set_progress(task_id, 0, 0, phase="probing")  # a restarted render probes again
    assert (resumed.frames_done, resumed.frames_total) == (600, 600)  # what is known stays shown


@pytest.mark.anyio
async def test_unsaved_progress_is_bounded_and_versions_never_go_back_across_restarts(tmp_path):
    async def first_life():
        reg = make(tmp_path)
        task_id = (await new_task(reg)).task_id
        for frames in range(1, MAX_UNSAVED_BUMPS + 1):
            rec = await reg.set_progress(task_id, frames, 10_000)
        assert stored(reg, task_id) == rec  # the bound was reached: that bump was saved
        for frames in range(MAX_UNSAVED_BUMPS + 1, 2 * MAX_UNSAVED_BUMPS):
            rec = await reg.set_progress(task_id, frames, 10_000)
        assert stored(reg, task_id).version < rec.version  # a crash now loses these bumps
        reg.close()
        return rec

    async def reload(task_id):
        reg = make(tmp_path)
        found = await reg.get_any(task_id)
        reg.close()
        return found

    last_seen = await first_life()
    again = await reload(last_seen.task_id)
    assert again.version > last_seen.version  # a retried long poll cannot wait for a version it passed
    assert (await reload(last_seen.task_id)).version > again.version  # and again after another restart


@sqlite_only
def test_store_is_sqlite_in_wal_mode(tmp_path):
    make(tmp_path)
    path = tmp_path / SqliteTaskStore.FILENAME
    assert path.name == "registry.sqlite3"
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


# -- Ray ---------------------------------------------------------------------------------------------------


@pytest.mark.ray
@sqlite_only  # the actor's ownership of a PostgreSQL state: tests/test_two_heads.py
@pytest.mark.anyio
async def test_detached_registry_actor_recovers_after_a_kill_behind_its_typed_client(tmp_path):
    """The registry actor through `actors.client.RegistryClient`: its own errors arrive as themselves, a kill is
    survived (the actor restarts from its store), and an actor gone for good is `ActorUnavailable`."""
    import ray

    from actors.client import ActorUnavailable, open_registry

    namespace = f"vidforge-test-{uuid.uuid4().hex}"
    ray.init(num_cpus=1, include_dashboard=False, namespace=namespace)
    registry = None
    try:
        registry = open_registry(
            Config(data_dir=str(tmp_path), max_concurrent_renders=1, namespace=namespace).registry_settings()
        )
        handle = registry.handle
        task = (await registry.create("alice", request())).task
        with pytest.raises(QuotaExceeded) as excinfo:  # the method's error: its type and fields across Ray
            await registry.create("alice", request(resolution="4k"))
        assert type(excinfo.value) is QuotaExceeded and excinfo.value.retry_after_ms >= 1000
        old_pid = ray.get(handle.__ray_call__.remote(lambda reg: os.getpid()), timeout=60)

        ray.kill(handle, no_restart=False)
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, "the registry actor did not come back"
            try:
                if ray.get(handle.__ray_call__.remote(lambda reg: os.getpid()), timeout=10) != old_pid:
                    break
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                pass  # still restarting
        recovered = await registry.get("alice", task.task_id)
        assert recovered == task.model_copy(update={"version": task.version + MAX_UNSAVED_BUMPS})  # see restart test

        again = open_registry(Config(data_dir=str(tmp_path), namespace=namespace).registry_settings())
        assert again.handle._actor_id == handle._actor_id

        ray.kill(handle)  # for good: no restart
        with pytest.raises(ActorUnavailable) as gone:
            await registry.get("alice", task.task_id)
        assert gone.value.actor == "task registry"
    finally:
        if registry is not None:
            ray.kill(registry.handle)  # detached: it would outlive this test otherwise
        ray.shutdown()
