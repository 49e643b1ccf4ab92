"""The two lanes: `make test-fast` runs every test not marked `slow` (or `ray`); `make test` runs them all.

A test is fast unless marked otherwise, so a test that starts what only the slow lane may — Ray (`ray.init`, Ray's
own auto-init included), a Ray node (`ray start`) or a `vidforge serve` process (tests.harness.ServerProcess, or a
test's own launch) — fails at that call, before anything starts, unless it (or its module) carries the mark.
`install` puts the checks in place (tests/conftest.py, at start-up); tests/conftest.py tells `current` which test
is being set up, run or torn down.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import ray

SLOW_MARKS = ("slow", "ray")
current: pytest.Item | None = None  # the test being set up, run or torn down; None between tests


def require_slow_mark(what: str) -> None:
    """Fail the current test when it starts `what` without a mark that keeps it out of the fast lane."""
    if current is not None and not any(current.get_closest_marker(mark) for mark in SLOW_MARKS):
        pytest.fail(
            f"{current.nodeid} starts {what}: mark it (or its module) `slow`, so `make test-fast` leaves it out",
            pytrace=False,
        )


def slow_command(args: object) -> str | None:
    """What a subprocess command starts that only the slow lane may: `vidforge serve` or a Ray node."""
    argv = [str(arg) for arg in args] if isinstance(args, list | tuple) else str(args).split()
    commands = {(Path(program).name, subcommand) for program, subcommand in zip(argv, argv[1:])}
    if commands & {("vidforge", "serve"), ("serve_app.launch.cli", "serve")}:
        return "a `vidforge serve` process"
    if ("ray", "start") in commands:
        return "a Ray node (`ray start`)"
    return None


_popen_init = subprocess.Popen.__init__
_ray_init = ray.init


def _checked_popen_init(self, args, *rest, **options):
    if (what := slow_command(args)) is not None:
        require_slow_mark(what)
    _popen_init(self, args, *rest, **options)


def _checked_ray_init(*args, **options):
    require_slow_mark("Ray (`ray.init`)")
    return _ray_init(*args, **options)


def install() -> None:
    """Check every subprocess launch (ServerProcess, the clusters, a test's own) and every `ray.init` (Ray's auto-init
    on a first remote call goes through it too)."""
    subprocess.Popen.__init__ = _checked_popen_init
    ray.init = _checked_ray_init
