"""The lanes' checks (tests/lanes.py): a test not marked `slow` (or `ray`) that starts `vidforge serve`, a Ray node
or Ray fails at that call, before anything starts; a marked one may."""

from __future__ import annotations

import subprocess
import sys

import pytest
import ray

from tests.lanes import require_slow_mark, slow_command

UNMARKED = "mark it \\(or its module\\) `slow`"


def test_an_unmarked_test_that_starts_vidforge_serve_fails_before_it_starts():
    with pytest.raises(pytest.fail.Exception, match=UNMARKED):  # a path with no program: nothing could start
        subprocess.Popen(["/nonexistent/bin/vidforge", "serve", "--port", "8000"])


def test_an_unmarked_test_that_starts_ray_fails_before_it_starts():
    with pytest.raises(pytest.fail.Exception, match=f"starts Ray .*{UNMARKED}"):
        ray.init(address="auto", num_cpus=1)  # arguments Ray refuses at once: without the check, a ValueError


@pytest.mark.parametrize(
    "command, starts",
    [
        ([sys.executable, "-m", "serve_app.launch.cli", "serve", "--port", "8000"], "a `vidforge serve` process"),
        (["/venv/bin/vidforge", "serve"], "a `vidforge serve` process"),
        ("vidforge serve --host 0.0.0.0", "a `vidforge serve` process"),
        (["/venv/bin/ray", "start", "--head", "--block"], "a Ray node (`ray start`)"),
        (["/venv/bin/vidforge", "render", "clip.mp4"], None),
        (["/venv/bin/vidforge", "assets", "add", "serve"], None),
        ([sys.executable, "-c", "print('serve')"], None),
        (["make", "-n", "serve"], None),
    ],
)
def test_the_commands_only_the_slow_lane_may_run(command, starts):
    assert slow_command(command) == starts


@pytest.mark.slow
def test_a_marked_test_may_start_them():
    require_slow_mark("a `vidforge serve` process")
