"""`vidforge render`, `vidforge assets list` and `vidforge renders list|get`, run as a person runs them (a subprocess
of the installed command line) against a live `vidforge serve` with a tokens file and a 0.5 s poll interval (the
session's shared server): the video it downloads is checked with PyAV, the task it ran on the wire, and every failure
is one line with its documented exit code."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from PIL import Image

from tests.harness import RENDER_DEADLINE_S, REPO, SHEET_MAX_BYTES, Wire, free_port, wait_until
from tests.media import decode_all, make_clip, make_watermark_png

pytestmark = pytest.mark.ray

TOKEN, OTHER_TOKEN = "tok-cli", "tok-cli-other"
TOKENS = {TOKEN: "cli-user", OTHER_TOKEN: "cli-other"}  # on the session's shared server (tests/conftest.py)
VIDFORGE = [sys.executable, "-m", "serve_app.launch.cli"]
STARTED = re.compile(r"render (task_\w+) started")
REVIEW_LINK = re.compile(r"approve or reject it: (http://\S+/review/\S+)")


@pytest.fixture(scope="module")
def server(shared_server):
    return shared_server


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli-media")
    return {
        "clip": make_clip(str(root / "clip.mp4"), seconds=2.0, width=320, height=180, audio=True),
        "logo": make_watermark_png(str(root / "logo.png"), w=64, h=32),
    }


def vidforge(*args: str, token: str | None = TOKEN, timeout: float = RENDER_DEADLINE_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "VIDFORGE_TOKEN": token or ""}
    return subprocess.run(
        [*VIDFORGE, *args], cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )


def one_line(stderr: str) -> str:
    """A failure as stderr shows it: one line, `vidforge: …`, the last (after what was done before it, such as an
    upload), and no traceback."""
    failures = [line for line in stderr.splitlines() if line.startswith("vidforge: ")]
    assert len(failures) == 1 and stderr.strip().splitlines()[-1] == failures[0], stderr
    assert "Traceback" not in stderr, stderr
    return failures[0]


class Running:
    """`vidforge ARGS` in the background, its stderr read line by line as it comes."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "VIDFORGE_TOKEN": TOKEN}
        self.proc = subprocess.Popen(
            [*VIDFORGE, *args],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: re.Pattern[str] | str) -> re.Match[str]:
        def found() -> re.Match[str] | None:
            assert self.proc.poll() is None or any(re.search(pattern, line) for line in self.lines), self.stderr
            return next((m for line in self.lines if (m := re.search(pattern, line))), None)

        return wait_until(found, RENDER_DEADLINE_S, message=f"{pattern!r} on the command's stderr")

    def finish(self) -> tuple[int, str]:
        """(exit code, stdout) once it has ended."""
        assert self.proc.stdout is not None
        stdout = self.proc.stdout.read()  # a line or two: no pipe fills meanwhile; stderr is the reader's
        self.proc.wait(timeout=RENDER_DEADLINE_S)
        self.reader.join(timeout=60)
        return self.proc.returncode, stdout

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)


def under_a_terminal(*args: str) -> tuple[int, str, str]:
    """`vidforge ARGS` with its stderr on a terminal (a pty), as in a shell: (exit code, stdout, what the terminal
    showed)."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "VIDFORGE_TOKEN": TOKEN, "TERM": "xterm-256color", "COLUMNS": "150"}
    proc = subprocess.Popen(
        [*VIDFORGE, *args], cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=terminal
    )
    os.close(terminal)
    shown = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the last writer closed the terminal
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stdout, _ = proc.communicate(timeout=RENDER_DEADLINE_S)
    reader.join(timeout=60)
    os.close(controller)
    return proc.returncode, stdout.decode(), shown.decode(errors="replace")


def task_of(server, task_id: str, token: str = TOKEN) -> dict:
    wire = Wire(server.url, token=token, tasks=True)
    try:
        return wire.task("tasks/get", task_id)
    finally:
        wire.close()


@pytest.fixture(scope="module")
def plain_render(server, media, tmp_path_factory) -> dict:
    """One render from the shell, under a terminal: `vidforge render clip.mp4 -o out.mp4`."""
    out = tmp_path_factory.mktemp("cli-out") / "out.mp4"
    code, stdout, shown = under_a_terminal("render", media["clip"], "-o", str(out), "--server", server.url)
    return {"code": code, "stdout": stdout, "shown": shown, "out": out}


def test_a_plain_render_lands_in_the_output_and_plays(plain_render, media):
    assert plain_render["code"] == 0, plain_render["shown"]
    out = plain_render["out"]
    (task_id,) = set(STARTED.findall(plain_render["shown"]))
    assert plain_render["stdout"].startswith(f"saved {out} (") and task_id in plain_render["stdout"]
    video, source = decode_all(str(out), keep="none"), decode_all(media["clip"], keep="none")
    assert (video.width, video.height) == (1280, 720) and video.video_codec == "h264"
    assert video.frame_count == source.frame_count
    assert not list(out.parent.glob(".*.part"))  # the download's temporary file is gone
    # The quality check's verdict printed, its contact sheet (the result's `image` block, through SDK 2.x) beside.
    sheet = out.with_name("out.contact-sheet.jpg")
    assert f"saved {sheet} (" in plain_render["stdout"] and "quality check: " in plain_render["stdout"]
    assert Image.open(sheet).format == "JPEG" and sheet.stat().st_size <= SHEET_MAX_BYTES


def test_the_terminal_shows_a_progress_bar_with_the_phase_and_percentage(plain_render):
    shown = plain_render["shown"]
    assert "\x1b[2K" in shown  # drawn in place (the line erased and drawn again), not printed line by line
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)  # what the terminal shows, without its control sequences
    assert re.search(r"done\s+━+\s+100%", text), text


def test_a_watermarked_render_with_approve_approves_it_itself(server, media, tmp_path):
    out = tmp_path / "stamped.webm"
    done = vidforge(
        "render", media["clip"], "--watermark", media["logo"], "--position", "top_left", "--opacity", "0.5",
        "--format", "webm", "--approve", "-o", str(out), "--server", server.url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "watermark approved (--approve)" in done.stderr
    # Piped, the progress comes as plain lines, a phase and a percentage each.
    assert re.search(r"^done\s+100%$", done.stderr, re.MULTILINE), done.stderr
    (task_id,) = set(STARTED.findall(done.stderr))
    result = task_of(server, task_id)["result"]
    assert result["status"] == "completed"
    structured = result["result"]["structuredContent"]
    assert structured["watermark_applied"] is True and structured["size_bytes"] == out.stat().st_size
    assert decode_all(str(out), keep="none").video_codec == "vp9"


def test_a_watermarked_render_waits_for_the_person_on_the_review_page(server, media, tmp_path):
    out = tmp_path / "reviewed.mp4"
    running = Running("render", media["clip"], "--watermark", media["logo"], "-o", str(out), "--server", server.url)
    link = running.wait_for(REVIEW_LINK)[1]
    assert running.proc.poll() is None  # it waits for the decision
    running.wait_for(r"^awaiting approval$")
    # The person opens the link and approves on the page (its form: the link's capability and the decision).
    cap = parse_qs(urlsplit(link).query)["cap"][0]
    decided = httpx.post(link.split("?")[0], data={"cap": cap, "decision": "approve"}, timeout=60)
    assert decided.status_code < 400, decided.text
    code, stdout = running.finish()
    assert code == 0, running.stderr
    assert stdout.startswith(f"saved {out} (")
    assert decode_all(str(out), keep="none").frame_count == decode_all(media["clip"], keep="none").frame_count


def test_a_watermark_rejected_on_the_review_page_is_one_line_and_exit_1(server, media, tmp_path):
    out = tmp_path / "rejected.mp4"
    running = Running("render", media["clip"], "--watermark", media["logo"], "-o", str(out), "--server", server.url)
    task_id = running.wait_for(STARTED)[1]
    link = running.wait_for(REVIEW_LINK)[1]
    cap = parse_qs(urlsplit(link).query)["cap"][0]
    form = {"cap": cap, "decision": "reject", "note": "logo too big"}
    assert httpx.post(link.split("?")[0], data=form, timeout=60).status_code < 400
    code, stdout = running.finish()
    assert code == 1 and stdout == "", running.stderr
    assert one_line(running.stderr).startswith(f"vidforge: {task_id} failed: watermark_rejected: "), running.stderr
    assert "logo too big" in running.lines[-1]
    assert not out.exists()


def test_ctrl_c_cancels_the_render_on_the_server(server, tmp_path):
    # Small pictures, quick to make and decode: the 1080p encode of its 600 frames is what runs past the SIGINT.
    source = make_clip(str(tmp_path / "long.mp4"), seconds=20.0, width=160, height=90, audio=False)
    out = tmp_path / "long.1080p.mp4"
    running = Running("render", source, "--resolution", "1080p", "--server", server.url)
    task_id = running.wait_for(STARTED)[1]
    running.wait_for(r"%\s+frame \d+/\d+")  # rendering, progress shown
    running.proc.send_signal(signal.SIGINT)
    code, stdout = running.finish()
    assert code == 130, running.stderr
    assert running.lines[-1] == f"vidforge: interrupted: {task_id} was cancelled on the server", running.stderr
    assert "Traceback" not in running.stderr and stdout == ""
    cancelled = wait_until(
        lambda: (task := task_of(server, task_id)["result"])["status"] == "cancelled" and task,
        RENDER_DEADLINE_S,
        message=f"{task_id} cancelled",
    )
    assert cancelled["status"] == "cancelled"
    assert not out.exists() and not list(tmp_path.glob(".*.part"))


def test_a_server_that_is_not_running_is_one_line_and_exit_3(media, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/mcp"
    for args in (["render", media["clip"], "-o", str(tmp_path / "x.mp4")], ["renders", "list"], ["assets", "list"]):
        refused = vidforge(*args, "--server", url, timeout=120)
        assert refused.returncode == 3, refused.stderr
        assert one_line(refused.stderr) == (
            f"vidforge: cannot reach {url}: is `vidforge serve` running? (start it with `make serve`, or pass --server)"
        )
    assert not (tmp_path / "x.mp4").exists()


def test_bad_input_is_one_line_and_exit_2(server, media, tmp_path):
    missing = vidforge("render", str(tmp_path / "nope.mp4"), "--server", server.url, timeout=120)
    assert missing.returncode == 2
    assert one_line(missing.stderr) == (
        f"vidforge: source {tmp_path / 'nope.mp4'} does not exist (give a file, or a vidforge://assets/… URI)"
    )
    notes = tmp_path / "notes.mp4"
    notes.write_text("these are my notes, not a video\n" * 20)
    refused = vidforge("render", str(notes), "--server", server.url, timeout=120)
    assert refused.returncode == 2
    assert one_line(refused.stderr).startswith(f"vidforge: the server refused {notes}: "), refused.stderr
    onto_itself = vidforge("render", media["clip"], "-o", media["clip"], "--server", server.url, timeout=120)
    assert onto_itself.returncode == 2 and "is the source itself" in one_line(onto_itself.stderr)
    assert decode_all(media["clip"], keep="none").frame_count == 60  # the source is untouched


def test_a_wrong_token_is_one_line_and_exit_3(server, media):
    refused = vidforge("render", media["clip"], "--server", server.url, token="not-a-token", timeout=120)
    assert refused.returncode == 3
    assert one_line(refused.stderr) == (
        f"vidforge: {server.base} refused the bearer token (401): check --token / VIDFORGE_TOKEN against the server's"
        " tokens file"
    )


def listed(server, what: str, token: str, *more: str) -> dict:
    done = vidforge(*what.split(), "--json", "--server", server.url, *more, token=token, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_listings_show_the_callers_own_items_only(server, plain_render):
    assert plain_render["code"] == 0
    (task_id,) = set(STARTED.findall(plain_render["shown"]))
    renders = listed(server, "renders list", TOKEN)["items"]
    assert task_id in [item["render_id"] for item in renders]
    created = [item["created_at"] for item in renders]
    assert created == sorted(created, reverse=True)  # newest first
    mine = listed(server, f"renders get {task_id}", TOKEN)
    assert mine["state"] == "succeeded" and mine["request"]["resolution"] == "720p"
    assert mine["video_uri"] == f"vidforge://videos/{task_id}/final.mp4"
    # What it used, metered in its tasks: CPU seconds of real encoding, within its wall time on this machine's cores.
    usage = mine["usage"]
    assert set(usage) == {"cpu_seconds", "render_seconds"} and 0 < usage["render_seconds"], usage
    assert 0 < usage["cpu_seconds"] <= usage["render_seconds"] * (os.cpu_count() or 1), usage
    shown = vidforge("renders", "get", task_id, "--server", server.url, token=TOKEN, timeout=120)
    assert shown.returncode == 0 and "CPU time" in shown.stdout and "render time" in shown.stdout, shown.stdout
    assets = listed(server, "assets list", TOKEN)["items"]
    assert {item["filename"] for item in assets} >= {"clip.mp4"} and all(item["uri"] for item in assets)
    # Another token's principal sees none of them, and cannot read the render.
    assert listed(server, "renders list", OTHER_TOKEN) == {"items": [], "next_cursor": None}
    assert listed(server, "assets list", OTHER_TOKEN) == {"items": [], "next_cursor": None}
    foreign = vidforge("renders", "get", task_id, "--server", server.url, token=OTHER_TOKEN, timeout=120)
    assert foreign.returncode == 2 and f"no render {task_id} for this token" in one_line(foreign.stderr)
    # The tables, for people.
    table = vidforge("renders", "list", "--server", server.url, timeout=120)
    assert table.returncode == 0 and task_id in table.stdout and "succeeded" in table.stdout


def test_the_listings_come_a_page_at_a_time(server, plain_render):
    assert plain_render["code"] == 0
    headers = {"Authorization": f"Bearer {TOKEN}"}

    def get(path: str, **params) -> dict:
        response = httpx.get(f"{server.base}{path}", params=params, headers=headers, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    for path, key in (("/renders", "render_id"), ("/assets", "uri")):
        whole = [item[key] for item in get(path)["items"]]
        paged, page = [], get(path, limit=1)
        while True:
            paged += [item[key] for item in page["items"]]
            if page["next_cursor"] is None:
                break
            page = get(path, limit=1, cursor=page["next_cursor"])
        assert whole and paged == whole, path
    refused = httpx.get(f"{server.base}/assets", params={"limit": "0"}, headers=headers, timeout=60)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "invalid_argument" and "VIDFORGE_MAX_LIST_ITEMS" in error["details"]["reason"]
