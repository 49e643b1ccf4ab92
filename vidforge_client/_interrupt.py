"""Ctrl-C for the client's commands: the event loop's SIGINT handler.

While a render task runs, the first Ctrl-C sets `cancel_task`: the tasks extension sends `tasks/cancel` at once and
ends the call (the server stops the render). Before the task exists, after it ended, or pressed a second time, it
stops the command where it is, like the default handler would, but through the command's own cleanup (a partial
download is removed). Either way the command exits 130.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import anyio


class Interrupt:
    def __init__(self) -> None:
        self.cancel_task: anyio.Event | None = None  # made on the loop, by `installed`
        self.pressed = False
        self._task_running = False
        self._main: asyncio.Task[object] | None = None

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Handle SIGINT on the running loop for the current task (the command's)."""
        loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        self.cancel_task = anyio.Event()
        loop.add_signal_handler(signal.SIGINT, self._pressed)
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)

    @contextmanager
    def cancels_task(self) -> Iterator[anyio.Event]:
        """While inside, Ctrl-C sets the event it gives (for the tasks extension, which cancels the task on the
        server) instead of stopping the command."""
        assert self.cancel_task is not None, "installed"
        self._task_running = True
        try:
            yield self.cancel_task
        finally:
            self._task_running = False

    def _pressed(self) -> None:
        first = not self.pressed
        self.pressed = True
        if first and self._task_running and self.cancel_task is not None:
            self.cancel_task.set()
        elif self._main is not None:
            self._main.cancel()
