"""Where a test lane's CPU goes: every process on the machine sampled while the lane runs, by kind.

On 2 cores the full lane keeps both busy from start to end, so it only gets shorter with less CPU work. This runs a
test command (default: `make test`'s two-worker part) and samples /proc every second: the CPU seconds of each process
kind (a Ray worker counts under what it runs at the moment; `Ray worker starting` is a worker process before it has
connected, `idle Ray worker` one between tasks, importing what its first task needs), how many processes of each kind
started, the machine's busy CPU seconds and the lane's wall time, then each test module's seconds from the run's
JUnit report. A process that starts and ends between two samples is missed, and one that ends loses its last second:
the kinds' sum falls a little short of the machine's.

    .venv/bin/python benchmarks/lane_cpu.py                         # the full lane's two-worker part (~30 min)
    .venv/bin/python benchmarks/lane_cpu.py -- tests/test_recovery.py -q   # one module
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serving import _kind, busy_cpu_seconds, cpu_seconds  # noqa: E402

FULL_LANE = ["-n", "2", "--dist", "loadfile", "-m", "not solo", "-q", "-p", "no:cacheprovider"]
# What runs beside the server's own Ray workers (benchmarks/serving.py names those), most specific first.
LANE_KINDS = (
    ("default_worker.py", "Ray worker starting"),
    ("gcs_server", "Ray GCS"),
    ("raylet/raylet", "raylet"),
    ("DashboardAgent", "Ray dashboard agent"),
    ("dashboard", "Ray dashboard agent"),
    ("RuntimeEnvAgent", "Ray runtime-env agent"),
    ("runtime_env", "Ray runtime-env agent"),
    ("log_monitor", "Ray log monitor"),
    ("autoscaler", "Ray autoscaler monitor"),
    ("exec(eval(", "pytest worker (the tests' own work)"),
    ("pytest", "pytest"),
    ("chrom", "Chromium"),
    ("postgres", "PostgreSQL"),
    ("moto", "S3 server (moto)"),
    ("prometheus", "Prometheus"),
    ("node_modules", "Node clients"),
    ("bin/vidforge", "vidforge CLI"),
)
TOP_MODULES = 25


def lane_kind(title: str) -> str:
    for needle, kind in LANE_KINDS:
        if needle in title:
            return kind
    return _kind(title) if title.startswith("ray::") or "serve_app" in title else "other"


class MachineSampler:
    """Every process on the machine, each second: CPU used since the start (or its birth) by kind, and starts."""

    def __init__(self) -> None:
        self.cpu_by_kind: Counter[str] = Counter()
        self.started: Counter[str] = Counter()
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> MachineSampler:
        self._last = {pid: cpu for pid, _, cpu in self._processes()}  # what ran before counts from now
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            seen = {}
            for pid, title, cpu in self._processes():
                kind = lane_kind(title)
                if pid not in self._last:
                    self.started[kind] += 1
                self.cpu_by_kind[kind] += cpu - self._last.get(pid, 0.0)
                seen[pid] = cpu
            self._last = seen

    @staticmethod
    def _processes():
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    title = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
                cpu = cpu_seconds(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            if title:  # kernel threads have none
                yield int(entry.name), title, cpu


def module_seconds(report: Path) -> Counter[str]:
    """Each test module's summed test seconds (setup, call, teardown) from a JUnit report."""
    seconds: Counter[str] = Counter()
    for case in ElementTree.parse(report).iter("testcase"):
        seconds[case.get("classname", "").split(".")[-1]] += float(case.get("time", 0))
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pytest_args", nargs="*", help="pytest's arguments (default: the full lane's two workers)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "lane.xml"
        command = [sys.executable, "-m", "pytest", *(args.pytest_args or FULL_LANE), f"--junitxml={report}"]
        busy, started = busy_cpu_seconds(), time.monotonic()
        with MachineSampler() as sampler:
            code = subprocess.call(command)
        wall, busy = time.monotonic() - started, busy_cpu_seconds() - busy
        print(f"\nwall {wall:.0f} s; machine busy {busy:.0f} CPU-s ({busy / wall:.2f} cores of {os.cpu_count()})")
        print(f"{'process kind':38s} {'CPU-s':>8s} {'share':>6s} {'started':>8s}")
        for kind, seconds in sampler.cpu_by_kind.most_common():
            if seconds >= 1:
                print(f"{kind:38s} {seconds:8.0f} {seconds / busy:6.1%} {sampler.started[kind]:8d}")
        if report.exists():
            print(f"\nthe {TOP_MODULES} longest modules (test seconds, summed over both workers)")
            for module, seconds in module_seconds(report).most_common(TOP_MODULES):
                print(f"  {module:40s} {seconds:7.0f}")
    return code


if __name__ == "__main__":
    sys.exit(main())
