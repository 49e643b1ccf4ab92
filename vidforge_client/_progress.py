"""A render's progress as the person watching it sees it.

The tasks extension carries progress after creation in `statusMessage` only, in the contract's shape
("Rendering: 42% (frame 3021/7200), encoding at 45.2 fps (1.50x real time), about 12 s left."): `ProgressFigures.of`
reads the phase, frames, rate and ETA back out of it. Only the head ("Rendering: N% (frame D/T)") is relied on; what
follows it is read for the activity's first word (the phase: probing, encoding, muxing, …), a rate ("… fps") and an
ETA ("about … left") where there are some, so a server that words its phases differently still shows.

Two views: on a terminal a live `rich` progress bar (phase, bar, percent, frames, rate, ETA) with notes printed above
it; anywhere else (a pipe, a log, CI) one plain line per change, so the same figures reach a file.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Protocol

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from vidforge_client.tasks import TaskState

_HEAD = re.compile(r"^Rendering: (?P<percent>\d+)% \(frame (?P<done>\d+)/(?P<total>\d+)\)(?:, (?P<rest>.*))?$")
_RATE = re.compile(r"(?P<fps>\d+(?:\.\d+)?) fps")
_ETA = re.compile(r"about (?P<eta>.+?) left")
_CLAUSE_END = re.compile(r"[.;,]")
AWAITING_APPROVAL = "awaiting approval"


@dataclass(frozen=True)
class ProgressFigures:
    phase: str
    percent: int | None = None
    frames_done: int | None = None
    frames_total: int | None = None
    fps: float | None = None
    eta: str | None = None  # as the server says it: "12 s", "1 min 12 s"

    @classmethod
    def of(cls, state: TaskState) -> ProgressFigures:
        message = (state.status_message or "").strip()
        if state.status == "input_required":
            return cls(AWAITING_APPROVAL)
        if state.status == "completed":
            return cls("done", 100)
        head = _HEAD.match(message)
        if head is None:  # before the figures: queued, probing, a resumed render's note
            clause = _CLAUSE_END.split(message.removeprefix("Rendering: "), maxsplit=1)[0].strip()
            return cls(clause or state.status)
        rest = head["rest"] or ""
        activity = _CLAUSE_END.split(rest, maxsplit=1)[0].split()
        rate, eta = _RATE.search(rest), _ETA.search(rest)
        return cls(
            phase=activity[0] if activity else "rendering",
            percent=int(head["percent"]),
            frames_done=int(head["done"]),
            frames_total=int(head["total"]),
            fps=float(rate["fps"]) if rate else None,
            eta=eta["eta"] if eta else None,
        )

    @property
    def frames(self) -> str:
        return f"frame {self.frames_done}/{self.frames_total}" if self.frames_total else ""

    @property
    def rate(self) -> str:
        return f"{self.fps:.1f} fps" if self.fps is not None else ""

    @property
    def remaining(self) -> str:
        return f"ETA {self.eta}" if self.eta else ""

    def line(self) -> str:
        """The figures as one plain line."""
        percent = f"{self.percent}%" if self.percent is not None else ""
        return "  ".join(part for part in (self.phase, percent, self.frames, self.rate, self.remaining) if part)


class ProgressView(Protocol):
    def show(self, figures: ProgressFigures) -> None: ...

    def note(self, text: str) -> None:
        """A line of its own (a task id, a review link, where the video went), never cut or wrapped."""
        ...

    def close(self) -> None: ...


class LiveBar:
    """The terminal's view: a rich progress bar, redrawn in place; notes go above it."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description:<17}"),
            BarColumn(),
            TextColumn("{task.fields[percent]:>4}"),
            TextColumn("{task.fields[frames]}"),
            TextColumn("{task.fields[rate]}"),
            TextColumn("{task.fields[eta]}"),
            console=console,
        )
        self.task: TaskID | None = None

    def show(self, figures: ProgressFigures) -> None:
        percent = f"{figures.percent}%" if figures.percent is not None else ""
        # Frames once the source is probed (a pulsing bar until then); a phase without them keeps the bar as it is.
        total, completed = figures.frames_total, figures.frames_done
        if figures.percent == 100 and not total:
            total = completed = 1
        frames, rate, eta = figures.frames, figures.rate, figures.remaining  # the fields the columns show
        if self.task is None:
            self.task = self.progress.add_task(
                figures.phase, total=total, completed=completed or 0, percent=percent, frames=frames, rate=rate, eta=eta
            )
            self.progress.start()
        else:
            self.progress.update(
                self.task,
                description=figures.phase,
                total=total,
                completed=completed,
                percent=percent,
                frames=frames,
                rate=rate,
                eta=eta,
            )

    def note(self, text: str) -> None:
        self.console.print(text, soft_wrap=True, markup=False, highlight=False)

    def close(self) -> None:
        self.progress.stop()


class PlainLines:
    """A pipe's or a log's view: one line per change of the figures."""

    def __init__(self) -> None:
        self.last = ""

    def show(self, figures: ProgressFigures) -> None:
        line = figures.line()
        if line != self.last:
            self.last = line
            self.note(line)

    def note(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


def progress_view() -> ProgressView:
    """The view for this process's stderr: a live bar on a terminal, plain lines elsewhere."""
    console = Console(stderr=True)
    return LiveBar(console) if console.is_terminal else PlainLines()
