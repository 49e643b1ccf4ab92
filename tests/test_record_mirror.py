"""A replica's record mirror (serve_app.ingress._record_mirror) against the real TaskRegistry, in-process: the mirror
follows the registry's change feed and reads through it, exactly as over Ray, without Ray."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from actors.change_feed import Changes, Snapshot
from actors.task_registry import TaskRegistry
from mcp_protocol.domain import Cancelled, RenderRequest, TaskRecord
from serve_app._config import Config
from serve_app.ingress._record_mirror import RecordMirror

REQUEST = RenderRequest(source_asset_uri="vidforge://assets/a_1", output_format="mp4", resolution="720p")
WAIT_S = 0.2  # the mirror's long poll, short so a test's change of registry or fault is picked up soon
DEADLINE_S = 30.0


class InProcessFeed:
    """The mirror's registry feed over an in-process TaskRegistry: each call awaits the registry's own coroutine,
    so the real registry answers. It counts the reads, notes the feed position each answer delivered, can hold
    a read's answer back (to land it after a feed answer), can fail the feed (a registry gone), and can be
    pointed at a restarted registry."""

    def __init__(self, registry: TaskRegistry) -> None:
        self.registry = registry
        self.reads = 0  # reads answered by the registry
        self.feed_calls = 0
        self.delivered = -1  # the sequence of the last feed answer handed to the mirror (it applies it at once)
        self.hold_reads: asyncio.Event | None = None  # while set to an unset event, read answers wait for it
        self.hold_changes: asyncio.Event | None = None  # likewise the feed's answers
        self.failing = False

    async def changes(self, epoch: str | None, since: int, timeout_s: float) -> Changes:
        self.feed_calls += 1
        if self.failing:
            raise ConnectionError("the registry is unreachable")
        answer = await self.registry.changes(epoch, since, timeout_s)
        if self.hold_changes is not None:
            await self.hold_changes.wait()
        self.delivered = answer.seq
        return answer

    async def read(self, principal: str, task_id: str) -> Snapshot:
        snapshot = await self.registry.read(principal, task_id)
        self.reads += 1
        if self.hold_reads is not None:
            await self.hold_reads.wait()
        return snapshot


def registry(tmp_path) -> TaskRegistry:
    return TaskRegistry(Config(data_dir=str(tmp_path), sweep_interval_s=3600).registry_settings())


async def new_task(reg: TaskRegistry, principal: str = "alice") -> TaskRecord:
    return (await reg.create(principal, REQUEST)).task


async def until(condition, what: str) -> None:
    """Wait for `condition()` to hold, checking between the event loop's other work."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}"
        await asyncio.sleep(0.01)


async def mirrored(mirror: RecordMirror, task_id: str, until_record, principal: str = "alice") -> TaskRecord:
    """Poll the mirror, as a client polls tasks/get, until its answer satisfies `until_record`."""
    deadline = time.monotonic() + DEADLINE_S
    while not until_record(rec := await mirror.get(principal, task_id)):
        assert time.monotonic() < deadline, f"the mirror still answers {rec!r}"
        await asyncio.sleep(0.01)
    return rec


async def applied(feed: InProcessFeed, reg: TaskRegistry) -> None:
    """Wait until the mirror has applied every change the registry has published so far."""
    position = (await reg.read("", "")).seq
    await until(lambda: feed.delivered >= position, f"the feed delivering sequence {position}")


def follow(tmp_path, capacity: int = 100):
    reg = registry(tmp_path)
    feed = InProcessFeed(reg)
    return reg, feed, RecordMirror(feed, capacity, wait_s=WAIT_S)


@contextlib.asynccontextmanager
async def live_mirror(tmp_path, capacity: int = 100):
    """A mirror following a fresh registry, once its feed has answered (live)."""
    reg, feed, mirror = follow(tmp_path, capacity)
    async with mirror.following():
        await until(lambda: mirror.live, "the mirror live")
        yield reg, feed, mirror


@pytest.mark.anyio
async def test_a_mirrored_record_is_refreshed_by_the_feed(tmp_path):
    async with live_mirror(tmp_path) as (reg, feed, mirror):
        task = await new_task(reg)
        assert await mirror.get("alice", task.task_id) == task and task.task_id in mirror
        reads = feed.reads
        waiting = await reg.request_input(task.task_id, 60)
        assert await mirrored(mirror, task.task_id, lambda rec: rec.status == "input_required") == waiting
        await reg.answer_input("alice", task.task_id, True)
        resumed = await mirrored(mirror, task.task_id, lambda rec: rec.status == "working")
        assert resumed == await reg.get("alice", task.task_id) and resumed.approval.approved
        assert feed.reads == reads  # every answer since the first came from the mirror


@pytest.mark.anyio
async def test_a_foreign_task_answers_like_an_unknown_one_and_unknown_is_never_mirrored(tmp_path):
    async with live_mirror(tmp_path) as (reg, feed, mirror):
        task = await new_task(reg, "alice")
        assert await mirror.get("mallory", task.task_id) is None  # read through: nothing mirrored yet
        assert task.task_id not in mirror
        assert await mirror.get("alice", task.task_id) == task
        reads = feed.reads
        assert await mirror.get("mallory", task.task_id) is None  # from the mirror, by the registry's rule
        assert feed.reads == reads
        for _ in range(2):
            assert await mirror.get("alice", "task_doesnotexist") is None
        assert feed.reads == reads + 2 and len(mirror) == 1
        # a task created elsewhere (another replica) after the mirror went live is visible at once
        later = await new_task(reg, "alice")
        assert await mirror.get("alice", later.task_id) == later


@pytest.mark.anyio
async def test_a_read_behind_an_applied_change_is_answered_but_not_kept(tmp_path):
    async with live_mirror(tmp_path) as (reg, feed, mirror):
        task = await new_task(reg)
        await applied(feed, reg)
        feed.hold_reads = asyncio.Event()
        reader = asyncio.create_task(mirror.get("alice", task.task_id))
        await until(lambda: feed.reads == 1, "the registry answering the read")
        # The task changes, and the mirror applies the change, before the read's answer lands: the change
        # found the task not mirrored (so it was not applied to it) and the read does not show it.
        progressed = await reg.set_progress(task.task_id, 5, 10)
        await applied(feed, reg)
        feed.hold_reads.set()
        assert await reader == task
        assert task.task_id not in mirror
        feed.hold_reads = None
        assert await mirror.get("alice", task.task_id) == progressed and task.task_id in mirror
        assert feed.reads == 2


@pytest.mark.anyio
async def test_a_write_through_this_replica_drops_its_task(tmp_path):
    async with live_mirror(tmp_path) as (reg, feed, mirror):
        task = await new_task(reg)
        await mirror.get("alice", task.task_id)
        cancelling = await reg.request_cancel("alice", task.task_id)
        mirror.forget(task.task_id)  # as RayRenderService does once the write returned
        assert task.task_id not in mirror
        assert await mirror.get("alice", task.task_id) == cancelling and feed.reads == 2  # read your own write
        # a read that overlapped a write is answered but not kept: it may predate the write
        mirror.forget(task.task_id)
        feed.hold_reads = asyncio.Event()
        reader = asyncio.create_task(mirror.get("alice", task.task_id))
        await until(lambda: feed.reads == 3, "the registry answering the read")
        mirror.forget(task.task_id)
        feed.hold_reads.set()
        assert await reader == cancelling and task.task_id not in mirror


@pytest.mark.anyio
async def test_a_restarted_registry_resets_the_mirror(tmp_path):
    async with live_mirror(tmp_path) as (reg, feed, mirror):
        tasks = [await new_task(reg) for _ in range(2)]
        for task in tasks:
            await mirror.get("alice", task.task_id)
        assert len(mirror) == 2
        feed.registry = registry(tmp_path)  # the registry restarted: a new instance on the same store
        await until(lambda: len(mirror) == 0, "the mirror dropping everything")
        await until(lambda: mirror.live, "the mirror live on the new registry")
        recovered = await mirror.get("alice", tasks[0].task_id)
        assert recovered == await feed.registry.get("alice", tasks[0].task_id)
        assert recovered.version > tasks[0].version  # the new instance moved versions past unsaved bumps


@pytest.mark.anyio
async def test_a_failing_feed_empties_the_mirror_and_reads_go_through_until_it_answers(tmp_path):
    async with live_mirror(tmp_path) as (reg, feed, mirror):
        task = await new_task(reg)
        await mirror.get("alice", task.task_id)
        feed.failing = True
        await until(lambda: not mirror.live and len(mirror) == 0, "the mirror dropping out")
        for _ in range(2):
            assert await mirror.get("alice", task.task_id) == task
        assert feed.reads == 3 and len(mirror) == 0
        feed.failing = False
        await until(lambda: mirror.live, "the mirror live again")
        await mirror.get("alice", task.task_id)
        assert task.task_id in mirror


@pytest.mark.anyio
async def test_capacity_zero_turns_the_mirror_off(tmp_path):
    reg, feed, mirror = follow(tmp_path, capacity=0)
    async with mirror.following():
        task = await new_task(reg)
        for _ in range(3):
            assert await mirror.get("alice", task.task_id) == task
        assert feed.reads == 3 and feed.feed_calls == 0 and len(mirror) == 0


@pytest.mark.anyio
async def test_the_least_recently_read_record_goes_first(tmp_path):
    async with live_mirror(tmp_path, capacity=2) as (reg, feed, mirror):
        first, second, third = [await new_task(reg) for _ in range(3)]
        for task in (first, second, first, third):
            await mirror.get("alice", task.task_id)
        assert len(mirror) == 2 and first.task_id in mirror and third.task_id in mirror
        assert second.task_id not in mirror


@pytest.mark.anyio
async def test_a_record_a_long_poll_answered_is_never_read_back_older(tmp_path):
    """A client told of a change on its listen stream (the registry's long poll, fresh) and reading the task at once
    gets that change or a later one, not the mirror's older copy still waiting for the feed to deliver."""
    async with live_mirror(tmp_path) as (reg, feed, mirror):
        task = await new_task(reg)
        await mirror.get("alice", task.task_id)
        await applied(feed, reg)
        feed.hold_changes = asyncio.Event()  # the feed's delivery of the change lags behind the long poll's answer
        ended = await reg.finish(task.task_id, Cancelled())
        assert await mirror.get("alice", task.task_id) == task  # the lag itself
        mirror.saw([ended])  # as the service does with what `watch` answered
        assert await mirror.get("alice", task.task_id) == ended
        mirror.saw([task])  # an older answer never replaces a newer record
        assert await mirror.get("alice", task.task_id) == ended
        feed.hold_changes.set()
