"""The registry's change feed: which task records changed or went since a reader's last look.

Every Serve replica keeps a mirror of the records its clients poll (serve_app.ingress._record_mirror) and follows this
feed with one long poll, so a ``tasks/get`` on a record that has not changed costs no registry call. A reader
holds (epoch, sequence): the epoch is random per registry instance, so a reader of a restarted registry is
told to start over (its sequence means nothing to the new instance); the sequence counts every published
change and every deletion.

Collecting "what changed after S" costs O(changes after S), not O(tasks): each task's last change sits in an
ordered map kept in sequence order (a change moves its task to the end). Both the changed tasks and the deleted
ids are kept in bounded logs, so the feed's memory does not grow with the tasks held; a reader that fell behind
either log is told to reset (drop everything it holds), which is always safe. A changed record is read when a
reader asks (through the registry's working set: memory, or the store by key).
"""

from __future__ import annotations

import secrets
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import takewhile

from mcp_protocol.domain import TaskRecord


@dataclass(frozen=True)
class Changes:
    """One answer of the feed: the position to ask from next (``epoch``, ``seq``), the records changed and the
    task ids deleted after the reader's position, oldest first; ``reset``: drop everything held (the reader
    was of another registry instance, or behind the deletion log), nothing else is listed then."""

    epoch: str
    seq: int
    records: tuple[TaskRecord, ...] = ()
    deleted: tuple[str, ...] = ()
    reset: bool = False


@dataclass(frozen=True)
class Snapshot:
    """A record as ``TaskRegistry.get`` answers it (None: unknown or another principal's), with the feed
    position at the moment it was read: every later change of it has a greater ``seq`` in this ``epoch``."""

    epoch: str
    seq: int
    record: TaskRecord | None


class ChangeFeed:
    """The registry's bookkeeping of changes; the registry calls ``changed``/``deleted`` and answers with
    ``since``. Not async itself: the registry's event loop serializes every call."""

    def __init__(self, log_size: int) -> None:
        self.epoch = secrets.token_hex(8)
        self.seq = 0
        self._log_size = log_size  # tasks whose last change is remembered, and deletions remembered
        self._last_change: OrderedDict[str, int] = OrderedDict()  # task id -> seq of its last change, in seq order
        self._deletions: deque[tuple[int, str]] = deque(maxlen=log_size)  # (seq, task id), oldest first
        self._forgotten_through = 0  # the newest change or deletion that has left its log

    def changed(self, task_id: str) -> None:
        self.seq += 1
        self._last_change[task_id] = self.seq
        self._last_change.move_to_end(task_id)
        if len(self._last_change) > self._log_size:
            _, self._forgotten_through = self._last_change.popitem(last=False)

    def deleted(self, task_ids: Iterable[str]) -> None:
        for task_id in task_ids:
            self.seq += 1
            self._last_change.pop(task_id, None)
            if len(self._deletions) == self._deletions.maxlen:
                self._forgotten_through = max(self._forgotten_through, self._deletions[0][0])
            self._deletions.append((self.seq, task_id))

    def readable(self, epoch: str | None, since: int) -> bool:
        """Whether a reader at (``epoch``, ``since``) can be answered with changes rather than a reset."""
        return epoch == self.epoch and self._forgotten_through <= since <= self.seq

    def since(self, epoch: str | None, since: int, record: Callable[[str], TaskRecord | None]) -> Changes:
        """What changed after (``epoch``, ``since``), each changed task as ``record`` (its id) answers now."""
        if not self.readable(epoch, since):
            return Changes(epoch=self.epoch, seq=self.seq, reset=True)
        changed = takewhile(lambda entry: entry[1] > since, reversed(self._last_change.items()))
        deleted = takewhile(lambda entry: entry[0] > since, reversed(self._deletions))
        return Changes(
            epoch=self.epoch,
            seq=self.seq,
            records=tuple(rec for task_id, _ in reversed(list(changed)) if (rec := record(task_id)) is not None),
            deleted=tuple(task_id for _, task_id in reversed(list(deleted))),
        )
