"""Bounded, jittered backoff: how long to wait before asking an unavailable task state again.

Each wait doubles from ``first_s`` up to ``max_s`` and is drawn at random from its upper half ("equal jitter"), so
the heads, replicas and drivers that lost the same database do not all knock at the same instant when it returns,
and none waits more than ``max_s`` once it is back.
"""

from __future__ import annotations

import random

FIRST_S = 0.1


class Backoff:
    def __init__(self, max_s: float, first_s: float = FIRST_S) -> None:
        self.max_s = max_s
        self.first_s = min(first_s, max_s)
        self._ceiling = self.first_s

    def next_s(self) -> float:
        """The next wait, in seconds."""
        ceiling = self._ceiling
        self._ceiling = min(self.max_s, ceiling * 2)
        return random.uniform(ceiling / 2, ceiling)

    def hint_ms(self) -> int:
        """A caller's retry hint: the longest the next wait can be, in milliseconds (at least a second)."""
        return max(1000, int(self._ceiling * 1000))

    def reset(self) -> None:
        self._ceiling = self.first_s
