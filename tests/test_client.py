"""The `vidforge` client's parts that need no server (vidforge_client): the progress figures read back from the
status messages the server writes, where the client finds the server, where the video goes, how failures become one
line and an exit code, and that the client imports no Ray. End to end against a real server: tests/test_cli_render.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx2
import pytest

from mcp_protocol.answers import ErrorEnvelope
from mcp_protocol.domain import Phase
from mcp_protocol.progress import PLACEMENT_PREFIX, RenderProgress
from tests.harness import REPO
from vidforge_client._progress import ProgressFigures
from vidforge_client._render import RenderOrder, default_output
from vidforge_client.address import BadServerUrl, ServerAddress
from vidforge_client.failures import ClientFailure, ExitCode, failure_of
from vidforge_client.tasks import TaskCancelled, TaskEnded, TaskState


def state(message: str, status: str = "working") -> TaskState:
    return TaskState.model_validate({"taskId": "task_x", "status": status, "statusMessage": message})


# -- progress: the server's own status messages, read back ------------------------------------------------------


def test_the_figures_of_an_encoding_render_are_read_from_its_status_message():
    message = RenderProgress(Phase.RENDERING, 302, 720, fps=45.2, source_fps=30.0).message()
    figures = ProgressFigures.of(state(message))
    assert figures == ProgressFigures("encoding", 41, 302, 720, 45.2, "10 s")
    assert figures.line() == "encoding  41%  frame 302/720  45.2 fps  ETA 10 s"


@pytest.mark.parametrize(
    "progress, phase, percent",
    [
        (RenderProgress(Phase.PROBING), "probing the source", None),
        (RenderProgress(Phase.RENDERING, 10, 720), "encoding", 1),  # speed not measured yet
        (RenderProgress(Phase.RENDERING, 720, 720, fps=50.0), "encoding", 100),
        (RenderProgress(Phase.MUXING, 720, 720), "muxing", 100),
        (RenderProgress(Phase.RENDERING, 360, 720, 30.0, 30.0, f"{PLACEMENT_PREFIX}2 GPU nodes."), "encoding", 50),
    ],
)
def test_every_phase_reads_as_a_phase_and_a_percentage(progress, phase, percent):
    figures = ProgressFigures.of(state(progress.message()))
    assert (figures.phase, figures.percent) == (phase, percent)


def test_queued_awaiting_approval_and_done_read_as_phases():
    assert ProgressFigures.of(state("Render queued; encoding starts shortly.")).phase == "Render queued"
    assert ProgressFigures.of(state("Waiting for user approval …", "input_required")).phase == "awaiting approval"
    done = ProgressFigures.of(state("Rendered.", "completed"))
    assert (done.phase, done.percent) == ("done", 100)


# -- where the server is ---------------------------------------------------------------------------------------


def test_the_server_and_token_come_from_the_flags_else_the_environment_else_the_default():
    assert ServerAddress.of(None, None, {}) == ServerAddress("http://127.0.0.1:8000/mcp", None)
    environ = {"VIDFORGE_URL": "http://vf.example:9000/", "VIDFORGE_TOKEN": "tok-env"}
    assert ServerAddress.of(None, None, environ) == ServerAddress("http://vf.example:9000/mcp", "tok-env")
    flagged = ServerAddress.of("https://other.example/mcp", "tok-flag", environ)
    assert flagged == ServerAddress("https://other.example/mcp", "tok-flag")
    assert flagged.base_url == "https://other.example" and flagged.headers == {"Authorization": "Bearer tok-flag"}
    with pytest.raises(BadServerUrl, match="not an http"):
        ServerAddress.of("127.0.0.1:8000", None, {})


# -- where the video goes -------------------------------------------------------------------------------------


def order(source: str, output: Path | None = None) -> RenderOrder:
    return RenderOrder(source, "720p", "mp4", None, "bottom_right", 1.0, output, approve=False)


def test_the_default_output_sits_beside_the_source_named_for_the_render(tmp_path):
    assert default_output(str(tmp_path / "clip.mov"), "1080p", "webm") == tmp_path / "clip.1080p.webm"
    assert default_output(str(tmp_path / "clip.720p.mp4"), "720p", "mp4") == tmp_path / "clip.720p.720p.mp4"
    assert default_output("vidforge://assets/a_0123456789abcdef", "4k", "mov") == Path("a_0123456789abcdef.4k.mov")


def test_the_output_is_never_the_source_and_its_folder_must_exist(tmp_path):
    source = tmp_path / "clip.mp4"
    source.write_bytes(b"video")
    assert order(str(source)).output_path() == tmp_path / "clip.720p.mp4"
    for output, why in [(source, "is the source itself"), (tmp_path / "missing" / "out.mp4", "no such directory")]:
        with pytest.raises(ClientFailure, match=why) as refused:
            order(str(source), output).output_path()
        assert refused.value.exit_code is ExitCode.USAGE


# -- failures: one line and an exit code ------------------------------------------------------------------------


ADDRESS = ServerAddress("http://127.0.0.1:9/mcp", None)


def test_a_refused_connection_inside_the_sdks_exception_groups_reads_as_the_server_not_running():
    nested = ExceptionGroup("task group", [ExceptionGroup("inner", [httpx2.ConnectError("refused")])])
    failure = failure_of(nested, ADDRESS)
    assert failure is not None and failure.exit_code is ExitCode.SERVER
    assert failure.message == (
        "cannot reach http://127.0.0.1:9/mcp: is `vidforge serve` running? (start it with `make serve`, or pass --server)"
    )


def test_tasks_that_end_without_a_result_and_a_cancel_on_request_have_their_exit_codes():
    ended = failure_of(ExceptionGroup("g", [TaskEnded(state("Render cancelled.", "cancelled"))]), ADDRESS)
    assert ended is not None and ended.exit_code is ExitCode.FAILED and "task_x was cancelled" in ended.message
    cancelled = failure_of(TaskCancelled("task_x"), ADDRESS)
    assert cancelled is not None and cancelled.exit_code is ExitCode.INTERRUPTED
    assert failure_of(ValueError("a bug"), ADDRESS) is None


def test_the_error_envelope_is_read_on_both_carriers():
    envelope = {"code": "unsupported_codec", "message": "Unsupported media.", "details": {"reason": "text, not video"}}
    renamed = {
        "machine_code": "unsupported_codec",
        "human_message": "Unsupported media.",
        "details": envelope["details"],
    }
    for body in ({"error": envelope}, {"jsonrpc": "2.0", "error": {"code": -32602, "message": "x", "data": renamed}}):
        refusal = ErrorEnvelope.in_body(body)
        assert refusal is not None and refusal.text() == "Unsupported media: text, not video"
    assert ErrorEnvelope.in_body({"detail": "nothing of ours"}) is None


def test_the_client_imports_no_ray():
    probe = "import sys, vidforge_client.commands, vidforge_client.tasks; print('ray' in sys.modules)"
    ran = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0 and ran.stdout.strip() == "False", ran.stdout + ran.stderr


@pytest.mark.parametrize(
    "command", [["--help"], ["--version"], ["renders", "list"], ["assets", "list", "--json"], ["renders", "get", "x"]]
)
def test_commands_that_open_no_mcp_session_start_without_the_sdk(command):
    """Only `render` talks MCP: the rest start without the SDK or its types, most of a command's start-up (`renders
    get` loads the types once an answer comes, to read its quality check). The server here refuses the connection,
    so each ends as `vidforge` does when no server runs."""
    probe = (
        "import sys, runpy\n"
        f"sys.argv = ['vidforge', *{command!r}]\n"
        "try:\n"
        "    runpy.run_module('serve_app.launch.cli', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('mcp' in sys.modules or 'mcp_types' in sys.modules, file=sys.stderr)\n"
    )
    env = {"VIDFORGE_SERVER": "http://127.0.0.1:9/mcp", "PATH": "/usr/bin:/bin"}
    ran = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert ran.stderr.strip().splitlines()[-1] == "False", ran.stdout + ran.stderr
