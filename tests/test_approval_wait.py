"""Issue 38 item 3: a render waiting for its watermark approval holds no CPU it does not use. Its segments render
during the wait; when its last one ends before the answer, the fair scheduler hands that CPU to the next queued task
at once instead of keeping it for the render's mux (which cannot start before the answer). Pure: the scheduler
with one CPU and tasks whose first return is a future settled here (no Ray)."""

from __future__ import annotations

import asyncio

import pytest

from serve_app.rendering._scheduling import SegmentScheduler


async def loop_turns(count: int = 10) -> None:
    """Let the loop run what is ready (the end of a task's first return is handled in a callback, then a task)."""
    for _ in range(count):
        await asyncio.sleep(0)


async def started_when_the_cpu_frees(awaiting_approval: bool) -> bool:
    """Alice's render's only task ends on the one CPU while Bob's task waits: whether Bob's starts at once."""
    scheduler = SegmentScheduler(capacity=lambda: 1)
    loop = asyncio.get_running_loop()
    alice_done = loop.create_future()
    alice = scheduler.submit("alice", "a1", lambda: [alice_done])
    bob = scheduler.submit("bob", "b1", lambda: [loop.create_future()])
    await alice
    scheduler.awaiting_input("alice", "a1", awaiting_approval)
    alice_done.set_result(None)
    await loop_turns()
    return bob.done()


@pytest.mark.anyio
async def test_a_render_awaiting_approval_gives_its_cpu_back_when_its_last_task_ends():
    assert await started_when_the_cpu_frees(awaiting_approval=True)


@pytest.mark.anyio
async def test_a_render_not_awaiting_keeps_the_cpu_for_its_mux():
    assert not await started_when_the_cpu_frees(awaiting_approval=False)


@pytest.mark.anyio
async def test_the_cpu_kept_for_a_mux_is_given_back_once_the_render_asks_for_approval():
    scheduler = SegmentScheduler(capacity=lambda: 1)
    loop = asyncio.get_running_loop()
    alice_done = loop.create_future()
    await scheduler.submit("alice", "a1", lambda: [alice_done])
    bob = scheduler.submit("bob", "b1", lambda: [loop.create_future()])
    alice_done.set_result(None)
    await loop_turns()
    assert not bob.done()  # kept for alice's mux
    scheduler.awaiting_input("alice", "a1", True)
    await asyncio.wait_for(bob, 5)
