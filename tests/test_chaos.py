"""Issue 8 item 8: the chaos run's short mode — renders from three principals survive killed segment workers,
a killed supervisor, a killed registry and a SIGKILLed server, exactly, with nothing lost or left over.

The full run is `make chaos` (`benchmarks/chaos.py`)."""

from __future__ import annotations

import pytest

from benchmarks.chaos import KILL_KINDS, run_chaos

pytestmark = pytest.mark.ray


@pytest.mark.timeout(1500)
def test_chaos_short_mode_loses_nothing():
    report = run_chaos(short=True)
    table = "\n".join(f"{name}: {value}" for name, value in report.rows())
    assert report.failures == [], table
    assert report.lost == [] and len(report.renders) == 6
    for kind in KILL_KINDS:
        assert report.kills[kind] >= 1, table  # every kind of kill really happened
    assert any(r.cancel_sent for r in report.renders) and any(r.approvals for r in report.renders), table
