"""The frame tally of a RenderPool, behind one interface (`PoolTally`) for its two homes.

A render's tasks report their frames done and hand over their stills to the pool's one FrameTally
(serve_app.rendering._render_tasks), each run under a key of its own; the driver opens a run's counts, follows and
reads them, and closes them. Where the tally lives depends on where the pool does:

- `HostedTally`: in the actor the pool lives in (the render supervisor), which serves the tasks' reports into it.
  It costs no process, and the driver hears of each report as it comes in.
- `ActorTally`: for a pool outside any actor, an actor of its own, started on first use (one worker process for
  every render of the pool, not one each), called through its typed client (`FrameTallyClient`); the driver reads
  it every interval.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

import ray

from actors.actor_calls import ActorCall, ActorCast, ActorClient
from serve_app.rendering._render_tasks import PROGRESS_INTERVAL_S, FrameTally, TallyRef

# No CPU: it must start while the segments hold every core. Restarted if lost (reports are best effort meanwhile).
_tally_actor = ray.remote(num_cpus=0, max_restarts=-1)(FrameTally)


class PoolTally(Protocol):
    """What a render driver does with its pool's FrameTally."""

    async def open(self, run: str, segment_count: int, interval_s: float) -> TallyRef:
        """Open `run`'s counts, one per segment and one for the mux; its tasks report through the returned reference,
        every `interval_s`. The counts are open when this returns: a report arriving before would be dropped as a
        closed run's."""
        ...

    async def moved(self, run: str, interval_s: float) -> None:
        """Returns when `run`'s counts may have moved: at the next report where reports are heard of (at once if one
        came since the last call), else after `interval_s`."""
        ...

    async def still_came(self, run: str) -> None:
        """Returns when a still of `run` may have come in (as `moved`, every PROGRESS_INTERVAL_S where not heard of)."""
        ...

    async def counts(self, run: str) -> list[int] | None:
        """Each of `run`'s segments' count, then the mux's; None when it is not open (e.g. the tally actor restarted
        since). Raises ActorUnavailable when the tally actor is gone."""
        ...

    async def stills(self, run: str) -> dict[str, bytes] | None:
        """The stills `run`'s segments have made so far, by name; None when it is not open. Raises ActorUnavailable
        when the tally actor is gone."""
        ...

    def close(self, run: str) -> None:
        """Forget `run`'s counts: its tasks have all ended, and a late report is dropped."""
        ...

    def shutdown(self) -> None:
        """End what the tally runs on, if it has a process of its own."""
        ...


async def stills_made(tally: PoolTally, run: str, names: set[str]) -> dict[str, bytes]:
    """The stills `names` of `run`, once its segments have made them all. Raises ActorUnavailable when the tally
    actor is gone."""
    while True:
        made = await tally.stills(run)
        if made is not None and names <= made.keys():
            return {name: made[name] for name in names}
        await tally.still_came(run)


class HostedTally:
    """The tally held in the actor the pool lives in. `host` is that actor's handle, whose `report_frames` and
    `report_still` (RenderSupervisor's) hand the tasks' reports to this one's, which wake the run's driver."""

    def __init__(self, host: Any) -> None:
        self._host = host
        self._frames = FrameTally()
        self._moved: dict[str, asyncio.Event] = {}  # per open run: a report came in
        self._still_came: dict[str, asyncio.Event] = {}  # per open run: a still came in

    async def open(self, run: str, segment_count: int, interval_s: float) -> TallyRef:
        self._frames.open(run, segment_count + 1)
        self._moved[run] = asyncio.Event()
        self._still_came[run] = asyncio.Event()
        return TallyRef(self._host, run, segment_count, interval_s)

    def report_frames(self, run: str, index: int, frames_done: int) -> None:
        """A segment's or the mux's report: into the tally, waking `run`'s driver."""
        self._frames.report_frames(run, index, frames_done)
        if (moved := self._moved.get(run)) is not None:
            moved.set()

    def report_still(self, run: str, name: str, png: bytes) -> None:
        """A segment task's still: into the tally, waking `run`'s approval gate."""
        self._frames.report_still(run, name, png)
        if (came := self._still_came.get(run)) is not None:
            came.set()

    async def moved(self, run: str, interval_s: float) -> None:
        await _heard_or_slept(self._moved.get(run), interval_s)

    async def still_came(self, run: str) -> None:
        await _heard_or_slept(self._still_came.get(run), PROGRESS_INTERVAL_S)

    async def counts(self, run: str) -> list[int] | None:
        return self._frames.counts(run)

    async def stills(self, run: str) -> dict[str, bytes] | None:
        return self._frames.stills_of(run)

    def close(self, run: str) -> None:
        self._frames.close(run)
        self._moved.pop(run, None)
        self._still_came.pop(run, None)

    def shutdown(self) -> None:
        """Nothing to end: the tally lives as long as its host."""


class FrameTallyApi(Protocol):
    """What a driver asks of a FrameTally actor (_render_tasks.FrameTally's methods, as awaited through Ray)."""

    async def open(self, run: str, task_count: int) -> None: ...
    async def counts(self, run: str) -> list[int] | None: ...
    async def stills_of(self, run: str) -> dict[str, bytes] | None: ...
    async def close(self, run: str) -> None: ...


class FrameTallyClient(ActorClient):
    """A pool's own FrameTally actor, as a `FrameTallyApi`."""

    open = ActorCall(FrameTallyApi.open)
    counts = ActorCall(FrameTallyApi.counts)
    stills_of = ActorCall(FrameTallyApi.stills_of)
    close = ActorCast(FrameTallyApi.close)


class ActorTally:
    """The tally as an actor of its own, started on first use."""

    def __init__(self) -> None:
        self._client: FrameTallyClient | None = None

    async def open(self, run: str, segment_count: int, interval_s: float) -> TallyRef:
        if self._client is None:
            self._client = FrameTallyClient(_tally_actor.remote(), "frame tally")
        await self._client.open(run, segment_count + 1)
        return TallyRef(self._client.handle, run, segment_count, interval_s)

    async def moved(self, run: str, interval_s: float) -> None:
        await asyncio.sleep(interval_s)  # read, not heard from

    async def still_came(self, run: str) -> None:
        await asyncio.sleep(PROGRESS_INTERVAL_S)

    async def counts(self, run: str) -> list[int] | None:
        return await self._opened().counts(run)

    async def stills(self, run: str) -> dict[str, bytes] | None:
        return await self._opened().stills_of(run)

    def close(self, run: str) -> None:
        if self._client is not None:
            self._client.close(run)

    def shutdown(self) -> None:
        if self._client is not None:
            ray.kill(self._client.handle)
            self._client = None

    def _opened(self) -> FrameTallyClient:
        assert self._client is not None, "read after a run was opened"
        return self._client


async def _heard_or_slept(heard: asyncio.Event | None, interval_s: float) -> None:
    """Wait for `heard` and reset it; without one (the run is not open), for `interval_s`."""
    if heard is None:
        await asyncio.sleep(interval_s)
        return
    await heard.wait()
    heard.clear()
