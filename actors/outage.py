"""Riding out a task state that is out of reach: a write the render must not lose (its completion, its end, its
approval request) is held and sent again until the state answers.

Held, not queued: each render holds at most the one call it is making, so what waits is bounded by the renders in
flight. A write sent again is safe: the registry's transitions are idempotent for the same outcome, and a webhook
event is written in its record's commit under an id of its own (one row, however often the write is tried).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from actors.backoff import Backoff
from mcp_protocol.state_outage import StateUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


async def until_state_answers(call: Callable[[], Awaitable[T]], what: str, retry_max_s: float) -> T:
    """``call()``'s answer, asked again after a bounded, jittered wait for as long as it raises `StateUnavailable`;
    said once in the log when it had to wait (``what``: the write, for that line). Cancellation ends the wait."""
    backoff = Backoff(retry_max_s)
    waited = False
    while True:
        try:
            answer = await call()
        except StateUnavailable as unavailable:
            if not waited:
                log.warning("holding %s until the task state answers: %s", what, unavailable.reason)
                waited = True
            await asyncio.sleep(backoff.next_s())
            continue
        if waited:
            log.warning("%s written after the task state came back", what)
        return answer
