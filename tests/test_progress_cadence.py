"""Issue 33 item 2: progress that never goes quiet. A 600-frame watermarked render on a real `vidforge serve` with a
0.5 s poll hint, polled on both surfaces (`tasks/get` and `vidforge_get_render_status`) every 0.5 s while a
`subscriptions/listen` stream listens. From its first counted frame to `completed` (the wait for the approval
aside), in every phase (encoding, muxing, storing), the figures advance once a poll interval: at least three polls in
four show a new progress figure, none is shown by three polls in a row (1.5 s without a new one), no two
notifications are 1.5 s apart; and 100 % is shown before `completed`.

A condition on what the client sees, not on speed: the render's reports are driven by the time passing in its
workers, so a slow (loaded) machine only makes the render longer, not its silences. The pollers count polls rather
than seconds: a slow answer on a loaded machine is one poll fewer, never a silence of the render."""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

import pytest

from tests.harness import RENDER_DEADLINE_S, TERMINAL, ServerProcess, Wire, listen_messages, upload
from tests.media import make_clip, make_watermark_png

pytestmark = pytest.mark.ray

POLL_S = 0.5  # the shared server's poll hint (tests/harness.py SHARED_ENV), and how long a poller waits between polls
QUIET_POLLS = 3  # polls in a row showing one figure: 1.5 s without a new one at one poll every 0.5 s
NEW_SHARE = 0.75  # of the polls show a new figure (a report a second, as before issue 33, makes one in two)
QUIET_S = 1.5  # between two notifications
FPS, SECONDS = 24, 25.0  # 600 frames
JUDGED = 4  # figures a poller must see at least for the cadence to be judged
TOKEN = "tok-cadence"
TOKENS = {TOKEN: "cadence"}  # on the session's shared server (tests/conftest.py)

FRAME = re.compile(r"Rendering: (\d+)% \(frame (\d+)/\d+\)")
# The speed and the time left change with every report; a new progress figure is one the rest of the text shows.
SPEED_AND_ETA = re.compile(r" at \d+\.\d fps(?: \(\d+\.\d\dx real time\))?, about [\w ]+ left")
STATES = {"queued": "working", "rendering": "working", "awaiting_watermark_approval": "input_required"}


class Seen(NamedTuple):
    at: float  # monotonic seconds: when the answer or the notification arrived
    status: str  # the task's status (the status tool's state, as one)
    figure: str  # the progress text without its speed and time left

    @property
    def shown(self) -> tuple[str, str]:
        return self.status, self.figure


@pytest.fixture(scope="module")
def server(shared_server):
    return shared_server


@pytest.fixture(scope="module")
def assets(server, tmp_path_factory):
    root = tmp_path_factory.mktemp("cadence-media")
    clip = make_clip(str(root / "clip.mp4"), seconds=SECONDS, width=320, height=180, fps=FPS, gop=2 * FPS)
    logo = make_watermark_png(str(root / "logo.png"))
    return upload(server, clip, TOKEN), upload(server, logo, TOKEN)


def figures(message: str) -> str:
    return SPEED_AND_ETA.sub("", message)


def counted(figure: str) -> bool:
    """Whether a progress text shows a frame encoded: the render is under way (not queued, probing or starting)."""
    return (m := FRAME.match(figure)) is not None and int(m[2]) > 0


def under_way(observed: list[Seen]) -> list[list[Seen]]:
    """The stretches of `observed` in which the render works, from its first counted frame to its end (the end
    closes the last one). A wait for the watermark approval is the person's, not the render's: it splits them."""
    stretches: list[list[Seen]] = []
    current: list[Seen] | None = None
    begun = False
    for seen in observed:
        begun = begun or (seen.status == "working" and counted(seen.figure))
        if not begun:
            continue
        if seen.status == "input_required":
            current = None
            continue
        if current is None:
            current = []
            stretches.append(current)
        current.append(seen)
        if seen.status != "working":
            break
    return stretches


def quiet_polls(polled: list[Seen]) -> list[tuple[int, str, float]]:
    """(polls, figure, seconds from the first answer to the last) of each figure QUIET_POLLS or more polls in a row
    showed while the render worked."""
    quiet = []
    for stretch in under_way(polled):
        for (status, figure), alike in itertools.groupby(stretch, key=lambda seen: seen.shown):
            run = list(alike)
            if status == "working" and len(run) >= QUIET_POLLS:
                quiet.append((len(run), figure, round(run[-1].at - run[0].at, 2)))
    return quiet


def new_share(polled: list[Seen]) -> float:
    """The share of the polls after the first of each stretch that showed a figure the poll before did not."""
    pairs = [(before, after) for stretch in under_way(polled) for before, after in itertools.pairwise(stretch)]
    return sum(before.shown != after.shown for before, after in pairs) / max(1, len(pairs))


def quiet_pushes(pushed: list[Seen]) -> list[tuple[float, str, str]]:
    """(seconds, figure before, figure after) of each two notifications QUIET_S or more apart while the render
    worked."""
    return [
        (round(after.at - before.at, 2), before.figure, after.figure)
        for stretch in under_way(pushed)
        for before, after in itertools.pairwise(stretch)
        if after.at - before.at >= QUIET_S
    ]


def shows_all_frames(observed: list[Seen]) -> bool:
    """Whether a working figure showed 100 % before the end."""
    return any(seen.status == "working" and (m := FRAME.match(seen.figure)) and m[1] == "100" for seen in observed)


def listen(server: ServerProcess, wire: Wire, task_id: str, notes: list[tuple[float, dict]]) -> None:
    """Collect a `subscriptions/listen` stream for one task, with each message's arrival time, until its result."""
    for message in listen_messages(server, wire, task_id, "listen-cadence"):
        notes.append((time.monotonic(), message))


def poll(task_id: str, read: Callable[[], tuple[str, str]], observed: list[Seen]) -> None:
    """`read` a surface (-> task status, progress text) into `observed` every POLL_S until the render ends. After a
    slow answer the next poll still waits half an interval: two polls close together would only show one figure."""
    deadline = time.monotonic() + RENDER_DEADLINE_S
    while not observed or observed[-1].status not in TERMINAL:
        assert time.monotonic() < deadline, f"render {task_id} did not finish; last polls {observed[-3:]}"
        asked = time.monotonic()
        status, message = read()
        observed.append(Seen(time.monotonic(), status, figures(message)))
        time.sleep(max(POLL_S / 2, asked + POLL_S - time.monotonic()))


def test_progress_never_goes_quiet_while_a_render_runs(server, assets):
    source, logo = assets
    wire = Wire(server.url, token=TOKEN, tasks=True)
    args = {
        "source_asset_uri": source,
        "output_format": "mp4",
        "resolution": "720p",
        "watermark": {"image_asset_uri": logo, "position": "bottom_right", "opacity": 0.8},
    }
    created = wire.tool("vidforge_render_video", args)
    assert created["pollIntervalMs"] == POLL_S * 1000
    task_id = created["taskId"]
    notes: list[tuple[float, dict]] = []
    listener = threading.Thread(target=listen, args=(server, wire, task_id, notes), daemon=True)
    listener.start()

    # The status tool on a client and a thread of its own: each surface is polled at its own pace.
    status_wire = Wire(server.url, token=TOKEN)
    statuses: list[Seen] = []  # figure: the status message, then the progress in brackets
    progress: list[float] = []

    def read_status() -> tuple[str, str]:
        status = status_wire.tool("vidforge_get_render_status", {"render_id": task_id})["structuredContent"]
        progress.append(status.get("progress", 0.0))
        state = STATES.get(status["state"], "completed" if status["state"] == "succeeded" else status["state"])
        return state, f"{status['status_message']} [{status.get('progress')}]"

    status_poller = threading.Thread(target=poll, args=(task_id, read_status, statuses), daemon=True)
    status_poller.start()

    tasks: list[dict] = []

    def read_task() -> tuple[str, str]:
        tasks.append(wire.task("tasks/get", task_id)["result"])
        if tasks[-1]["status"] == "input_required":  # a person would look at the preview; this one approves at once
            wire.tool("vidforge_approve_watermark", {"render_id": task_id, "approved": True})
        return tasks[-1]["status"], tasks[-1]["statusMessage"]

    polled: list[Seen] = []
    poll(task_id, read_task, polled)
    assert polled[-1].status == "completed" and tasks[-1]["result"]["isError"] is False, tasks[-1]
    working = {seen.figure for seen in polled if seen.status == "working" and counted(seen.figure)}
    assert len(working) >= JUDGED, f"too few figures polled to judge the cadence: {polled}"

    status_poller.join(RENDER_DEADLINE_S)
    assert statuses[-1].status == "completed" and progress[-1] == 1.0
    assert progress == sorted(progress), "the status tool's progress went backwards"
    listener.join(RENDER_DEADLINE_S)
    assert not listener.is_alive() and "result" in notes[-1][1], notes[-3:]
    pushed = [
        Seen(at, note["params"]["status"], figures(note["params"].get("statusMessage") or ""))
        for at, note in notes
        if note.get("method") == "notifications/tasks"
    ]
    assert pushed[-1].status == "completed"

    for surface, observed in (("tasks/get", polled), ("the status tool", statuses)):
        assert not quiet_polls(observed), f"{surface} went quiet: {quiet_polls(observed)}; polled {observed}"
        assert new_share(observed) >= NEW_SHARE, f"{surface}: {new_share(observed):.0%} new; polled {observed}"
    assert not quiet_pushes(pushed), f"notifications went quiet: {quiet_pushes(pushed)}; pushed {pushed}"
    # 100 % is shown before `completed`: to a poller, or at least to the listener, which hears every change.
    assert shows_all_frames(polled) or shows_all_frames(pushed), f"no 100 % before completed: {polled} {pushed}"
