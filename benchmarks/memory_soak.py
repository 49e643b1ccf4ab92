"""Memory soak: does the server's process tree keep what its renders took? A census by process before and after
`--minutes` of mixed load through MCP.

A real `vidforge serve` (started here, with `--principals` tokens) is warmed up with one render of each job of the
mix, left until the warm pool holds its workers again, and counted: the warmed-up census. Then `--principals`
agents, one per principal, each render the mix in turn (their own offset into it) for `--minutes`: 720p, 1080p
and 4k outputs of a 1080p clip with audio, as mp4, mov and webm, every other one watermarked (approved the moment
it asks, through `vidforge_approve_watermark`), each followed on a `subscriptions/listen` stream. A census is taken
every `--census-s` while they run, and a last one once the load has stopped and the warm pool holds its workers
again: the end census.

A census reads every process of the server's session from /proc: resident memory (RSS, from statm) and unique set
size (USS: Private_Clean + Private_Dirty from smaps_rollup, what the process alone holds and would hand back by
exiting), summed by process group. Pooled Ray workers are one group whatever they run at the moment (a warm-pool
holder, a segment, a mux, idle): a process keeps its pid from task to task, so each worker's RSS at warm-up and at
the end is printed too, and how many were started and ended meanwhile (recycled ones among them,
VIDFORGE_WORKER_MAX_RENDERS).

Prints each group's RSS MiB at warm-up, at the peak census and at the end, the tree's total, and the figure beside
its target: "tree growth +x % (target <= +15 %)", the end census against the warmed-up one (both at rest: a census
taken mid-render counts the frames in flight, which a render hands back when it ends; the peak is printed
beside it).

    .venv/bin/python benchmarks/memory_soak.py               # an hour of mixed load, 3 principals
    .venv/bin/python benchmarks/memory_soak.py --minutes 3   # a short check
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serving import BenchServer, RenderTrace, drive_render  # noqa: E402 - first: it sets up Ray's authentication mode

# isort: split
from clips import benchmark_clip, benchmark_logo  # noqa: E402

GROWTH_TARGET = 0.15  # the tree at the end of the soak, at rest, against its warmed-up size (issue: + 15 % at most)
SETTLE_S = 8.0  # after the load: the warm pool holds its workers again HOLD_AFTER_S (2 s) after the last render
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 2**20

# The mix, as (output format, resolution, watermarked): every agent renders it in turn from its own offset.
MIX = (
    ("mp4", "720p", True),
    ("webm", "720p", False),
    ("mp4", "1080p", False),
    ("mov", "1080p", True),
    ("mp4", "720p", False),
    ("mp4", "4k", True),
)

# A process's group, from its title (Ray titles a worker `ray::<task or actor>` while it runs one).
POOLED = ("ray::IDLE", "warm_worker", "encode_segment_parts", "mux_stored_segments", "encode_audio_parts")
POOLED += ("render_pictures",)
GROUPS = (
    ("ServeReplica", "ingress (Serve replicas)"),
    ("ProxyActor", "Serve HTTP proxy"),
    ("ServeController", "Serve controller"),
    ("RenderSupervisor", "supervisor"),
    ("TaskRegistry", "registry"),
    ("serve_app.media._parser_process", "media parser"),
    ("serve_app.launch.cli", "vidforge serve (Ray driver)"),
    ("raylet", "raylet"),
    ("gcs_server", "gcs_server"),
    ("MetricsExporter", "metrics exporter"),
    ("LeaseLedger", "lease ledger"),
    ("DashboardAgent", "Ray dashboard agent"),
    ("RuntimeEnvAgent", "Ray runtime-env agent"),
    ("autoscaler/_private/monitor.py", "Ray autoscaler monitor"),
    ("dashboard.py", "Ray dashboard"),
    ("log_monitor", "Ray log monitor"),
)
WORKERS = "render workers (pooled)"


def group_of(title: str) -> str:
    if any(needle in title for needle in POOLED):
        return WORKERS
    for needle, group in GROUPS:
        if needle in title:
            return group
    return "other Ray worker" if title.startswith("ray::") else "other"


@dataclass
class Census:
    at: float  # seconds since the load started (negative: before it)
    rss: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # bytes, by group
    uss: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    count: Counter[str] = field(default_factory=Counter)
    workers: dict[int, int] = field(default_factory=dict)  # pid -> RSS, the pooled render workers

    @property
    def total_rss(self) -> int:
        return sum(self.rss.values())

    @property
    def total_uss(self) -> int:
        return sum(self.uss.values())


def take_census(session: int, at: float) -> Census:
    """Every process of `session`: RSS and USS by group."""
    census = Census(at)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.getsid(pid) != session:
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                title = fh.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/statm") as fh:
                rss = int(fh.read().split()[1]) * PAGE
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                private = re.findall(r"^Private_(?:Clean|Dirty):\s+(\d+) kB", fh.read(), re.M)
            uss = sum(int(kb) for kb in private) * 1024
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or a zombie
        if not title:  # a zombie: nothing resident
            continue
        group = group_of(title)
        census.rss[group] += rss
        census.uss[group] += uss
        census.count[group] += 1
        if group == WORKERS:
            census.workers[pid] = rss
    return census


class Agent:
    """One principal's renders, one after another, until `stop` is set."""

    def __init__(self, server: BenchServer, principal: int, source: str, logo: str, stop: threading.Event) -> None:
        self.server, self.principal, self.source, self.logo, self.stop = server, principal, source, logo, stop
        self.done: Counter[str] = Counter()
        self.failed: list[str] = []

    def run(self) -> None:
        for fmt, resolution, watermark in itertools.islice(itertools.cycle(MIX), self.principal, None):
            if self.stop.is_set():
                return
            trace = render(self.server, self.principal, self.source, self.logo, fmt, resolution, watermark)
            if trace.ok:
                self.done[f"{resolution} {fmt}{' wm' if watermark else ''}"] += 1
            else:  # what the client saw at the end: the status, and the message or the result's error text
                seen = trace.task.get("statusMessage") or str(trace.task.get("result"))[:200]
                self.failed.append(f"{trace.task_id} ({trace.task.get('status')}: {seen})")


def render(
    server: BenchServer, principal: int, source: str, logo: str, fmt: str, resolution: str, watermark: bool
) -> RenderTrace:
    args = {"source_asset_uri": source, "output_format": fmt, "resolution": resolution}
    if watermark:
        args["watermark"] = {"image_asset_uri": logo, "position": "bottom_right", "opacity": 0.6}
    return drive_render(server, RenderTrace(principal=principal, watermark=watermark), args)


def mib(n: int) -> str:
    return f"{n / MIB:8.0f}"


def report(warm: Census, peak: Census, end: Census, censuses: list[Census]) -> float:
    """Print the census table and the figures; returns the tree's growth (end against warm-up)."""
    groups = sorted(set(warm.rss) | set(end.rss) | set(peak.rss), key=lambda g: -max(warm.rss[g], end.rss[g]))
    print(f"\ncensus by process group, RSS MiB (USS MiB), processes; peak census at {peak.at / 60:.1f} min:")
    print(f"  {'group':30s} {'warmed up':>18s} {'peak':>18s} {'end':>18s}   end - warm")
    for group in groups:
        cells = [f"{mib(c.rss[group])} ({c.uss[group] / MIB:4.0f}) {c.count[group]:2d}" for c in (warm, peak, end)]
        print(f"  {group:30s} {' '.join(cells)}   {(end.rss[group] - warm.rss[group]) / MIB:+7.0f}")
    cells = [f"{mib(c.total_rss)} ({c.total_uss / MIB:4.0f})   " for c in (warm, peak, end)]
    print(f"  {'the whole tree':30s} {' '.join(cells)}   {(end.total_rss - warm.total_rss) / MIB:+7.0f}")

    print("\nthe tree (RSS MiB) at each census:")
    print("  " + ", ".join(f"{c.at / 60:.0f} min {c.total_rss / MIB:.0f}" for c in censuses))

    kept = sorted(set(warm.workers) & set(end.workers))
    print(
        f"\npooled render workers: {len(warm.workers)} at warm-up, {len(end.workers)} at the end; "
        f"{len(kept)} lived through the soak, {len(set(warm.workers) - set(end.workers))} ended, "
        f"{len(set(end.workers) - set(warm.workers))} started"
    )
    if kept:
        print(
            "  those that lived through it, RSS MiB warm-up -> end: "
            + ", ".join(f"{warm.workers[p] / MIB:.0f} -> {end.workers[p] / MIB:.0f}" for p in kept)
        )
    if end.workers:
        print(
            "  every worker at the end, RSS MiB: "
            + ", ".join(f"{rss / MIB:.0f}" for rss in sorted(end.workers.values()))
        )
    growth = end.total_rss / warm.total_rss - 1
    uss_growth = end.total_uss / warm.total_uss - 1
    peak_growth = peak.total_rss / warm.total_rss - 1
    print(
        f"\ntree growth {growth:+.1%} (target <= +{GROWTH_TARGET:.0%}: {'met' if growth <= GROWTH_TARGET else 'NOT met'})"
        f"; USS {uss_growth:+.1%}; at the peak census (renders in flight) {peak_growth:+.1%}"
    )
    return growth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0, help="how long the mixed load runs")
    parser.add_argument("--principals", type=int, default=3, help="principals, one agent each")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of the source clip")
    parser.add_argument("--census-s", type=float, default=60.0, help="seconds between two censuses under load")
    parser.add_argument("--workdir", help="keep inputs and outputs here (the clip is reused when present)")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="a server setting (repeatable)"
    )
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="vidforge-soak-")
    source, logo = benchmark_clip(workdir, args.seconds), benchmark_logo(workdir)
    env = {"VIDFORGE_MAX_CONCURRENT_RENDERS": "4", **dict(kv.split("=", 1) for kv in args.env)}
    print(
        f"memory soak: {args.minutes:g} min of mixed load ({len(MIX)} jobs of a {args.seconds:g} s 1080p clip), "
        f"{args.principals} principals; {os.cpu_count()} cores; settings {env}"
    )
    with BenchServer(workdir, args.principals, env) as server:
        print(f"server start-up: {server.startup_s:.1f} s")
        session = os.getsid(server.pid)
        sources = [server.upload(source, p) for p in range(args.principals)]
        logos = [server.upload(logo, p) for p in range(args.principals)]
        started = time.monotonic()
        for fmt, resolution, watermark in sorted(set(MIX)):  # warm-up: one of each job, in turn
            trace = render(server, 0, sources[0], logos[0], fmt, resolution, watermark)
            assert trace.ok, trace.task
        print(f"warm-up: {len(set(MIX))} renders in {time.monotonic() - started:.0f} s")
        time.sleep(SETTLE_S)
        warm = take_census(session, -SETTLE_S)
        print(f"warmed-up census: the tree {warm.total_rss / MIB:.0f} MiB RSS")

        stop = threading.Event()
        agents = [Agent(server, p, sources[p], logos[p], stop) for p in range(args.principals)]
        censuses = [warm]
        started = time.monotonic()
        with ThreadPoolExecutor(len(agents)) as pool:
            running = [pool.submit(agent.run) for agent in agents]
            while (elapsed := time.monotonic() - started) < args.minutes * 60:
                time.sleep(min(args.census_s, args.minutes * 60 - elapsed))
                censuses.append(take_census(session, time.monotonic() - started))
                print(f"  {censuses[-1].at / 60:5.1f} min: the tree {censuses[-1].total_rss / MIB:.0f} MiB RSS")
            stop.set()
            for future in running:
                future.result()  # an agent's error ends the benchmark
        wall = time.monotonic() - started
        time.sleep(SETTLE_S)
        end = take_census(session, time.monotonic() - started)
        censuses.append(end)

    done = sum((a.done for a in agents), Counter())
    failed = [t for a in agents for t in a.failed]
    print(
        f"\nload: {sum(done.values())} renders in {wall / 60:.1f} min ({', '.join(f'{k} {v}' for k, v in sorted(done.items()))})"
        f"; {len(failed)} failed {failed or ''}"
    )
    report(warm, max(censuses, key=lambda c: c.total_rss), end, censuses)


if __name__ == "__main__":
    main()
