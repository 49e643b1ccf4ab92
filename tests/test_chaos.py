"""Issue 8 item 8: the chaos script's short mode — renders from three principals survive killed segment
workers, a killed supervisor, a killed registry and a SIGKILLed server, exactly, with nothing lost or left over.

The full run is `make chaos` (`benchmarks/chaos.py`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness import REPO

pytestmark = pytest.mark.ray


@pytest.mark.timeout(1500)
def test_chaos_short_mode_loses_nothing():
    done = subprocess.run([sys.executable, "benchmarks/chaos.py", "--short"], cwd=REPO, capture_output=True,
                          text=True, timeout=1400)
    report = done.stdout
    assert done.returncode == 0, report + done.stderr[-3000:]
    assert "lost tasks                  0" in report
    for kind in ("segment-worker", "supervisor", "registry", "whole-server"):
        kills = next(line for line in report.splitlines() if line.startswith(f"kills: {kind}"))
        assert int(kills.split()[-1]) >= 1, report  # every kind of kill really happened
