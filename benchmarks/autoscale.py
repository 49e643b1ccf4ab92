"""The elastic cluster over time (issue 20): a burst of renders on Ray's own autoscaler, from an empty cluster back to
an empty one.

A head with no CPUs and one worker type of 1-CPU nodes, 0 to `--max-nodes` of them (Ray's fake multi-node provider:
each node is a real raylet on this machine; tests/autoscaling_cluster.py), idle timeout 6 s. The render driver runs
here as the supervisor runs it, with the scheduler told of the autoscaler (VIDFORGE_AUTOSCALING_CONFIG), and
`--renders` renders of a `--seconds` clip from two principals are submitted at once. Every half second it samples the
queued CPU tasks (audio and segments waiting for a CPU), the worker nodes up, the CPUs busy, and the renders done,
until the last node is gone; then prints the series and two figures: from the first queued task to the first new
node, and from the moment the queue drained to the last node removed. `--plot PATH` draws the same as a PNG.

    .venv/bin/python benchmarks/autoscale.py --plot docs/autoscale.png
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ray  # noqa: E402

from render_kernels.probe import probe  # noqa: E402
from render_kernels.spec import RenderSpec  # noqa: E402
from serve_app.rendering._autoscaling import ElasticCluster  # noqa: E402
from serve_app.rendering._render_driver import RenderRun  # noqa: E402
from serve_app.rendering._render_job import RenderJob  # noqa: E402
from serve_app.rendering._render_pool import RenderPool  # noqa: E402
from serve_app.rendering._scheduling import SegmentScheduler  # noqa: E402
from tests.autoscaling_cluster import HEAD_IP, FakeAutoscalingCluster, cpu_worker  # noqa: E402
from tests.media import make_clip  # noqa: E402

SAMPLE_S = 0.5
REMOVAL_DEADLINE_S = 180.0


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the burst was submitted
    queued: int  # CPU tasks waiting in vidforge's fair queue
    nodes: int  # worker nodes up
    busy_cpus: float
    done: int  # renders completed


class Hooks:
    async def progress(self, report) -> None:
        pass

    async def preview_ready(self, preview_path: str) -> bool:
        return True


def worker_nodes() -> int:
    return sum(1 for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0)


def busy_cpus() -> float:
    return ray.cluster_resources().get("CPU", 0.0) - ray.available_resources().get("CPU", 0.0)


async def burst(pool: RenderPool, jobs: list[RenderJob]) -> list[Sample]:
    started = time.monotonic()
    samples: list[Sample] = []
    runs = [asyncio.ensure_future(RenderRun(job, Hooks(), pool).run()) for job in jobs]
    while True:
        done = sum(1 for run in runs if run.done())
        sample = Sample(time.monotonic() - started, pool.scheduler.queued(), worker_nodes(), busy_cpus(), done)
        samples.append(sample)
        if done == len(runs) and sample.nodes == 0:
            break
        if done == len(runs) and sample.t > REMOVAL_DEADLINE_S:
            raise SystemExit(f"worker nodes still up {REMOVAL_DEADLINE_S:g} s after the burst began")
        await asyncio.sleep(SAMPLE_S)
    for run in runs:
        run.result()  # a failed render fails the benchmark
    return samples


def figures(samples: list[Sample], renders: int) -> dict[str, float]:
    """Seconds: first queued task -> first new node; queue empty for good -> last node removed; work ended (every
    render done, no CPU busy) -> last node removed; and when the last render was done."""
    first_queued = next(s.t for s in samples if s.queued)
    first_node = next(s.t for s in samples if s.nodes)
    drained = next(s.t for s in samples if s.t > max(x.t for x in samples if x.queued))
    idle = next(s.t for s in samples if s.done == renders and s.busy_cpus == 0)
    removed = samples[-1].t  # the burst's sampling ends when the last node is gone
    return {
        "to_first_node": first_node - first_queued,
        "drained_to_removed": removed - drained,
        "idle_to_removed": removed - idle,
        "all_done": next(s.t for s in samples if s.done == renders),
    }


def plot(samples: list[Sample], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [s.t for s in samples]
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5))
    top.step(t, [s.queued for s in samples], where="post", label="queued CPU tasks")
    top.step(t, [s.done for s in samples], where="post", label="renders done")
    top.legend(loc="upper right")
    top.set_ylabel("count")
    bottom.step(t, [s.nodes for s in samples], where="post", label="worker nodes up")
    bottom.step(t, [s.busy_cpus for s in samples], where="post", label="CPUs busy")
    bottom.legend(loc="upper right")
    bottom.set_xlabel("seconds since the burst")
    bottom.set_ylabel("count")
    top.set_title(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--renders", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--max-nodes", type=int, default=3)
    parser.add_argument("--plot", default=None, help="write the series as a PNG here")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="vfb-", dir="/tmp"))  # short: unix socket paths under it
    cluster = FakeAutoscalingCluster(root, {"cpu": cpu_worker(cpus=1, max_workers=args.max_nodes)})
    try:
        clip = make_clip(str(root / "source.mp4"), seconds=args.seconds, fps=15, gop=15)
        info = probe(clip)
        cluster.start()
        ray.init(
            address=cluster.address,
            _node_ip_address=HEAD_IP,
            namespace=f"bench-autoscale-{uuid.uuid4().hex}",
            log_to_driver=False,
        )
        elastic = ElasticCluster.of(str(root / "autoscaling.json"), 0, 0)
        pool = RenderPool(SegmentScheduler(elastic=elastic))
        jobs = [
            RenderJob(
                clip, RenderSpec("mp4", "720p"), str(root / f"out{i}.mp4"), principal=f"p{i % 2}", source_info=info
            )
            for i in range(args.renders)
        ]
        try:
            samples = asyncio.run(burst(pool, jobs))
        finally:
            pool.close()
    finally:
        ray.shutdown()
        cluster.stop()
    found = figures(samples, args.renders)
    print("    t s  queued  nodes  busy CPUs  done")
    for s in samples:
        print(f"{s.t:7.1f}  {s.queued:6d}  {s.nodes:5d}  {s.busy_cpus:9.1f}  {s.done:4d}")
    print(
        f"\n{args.renders} renders of {args.seconds:g} s, 0..{args.max_nodes} nodes of 1 CPU, idle timeout 6 s: "
        f"first queued task -> first new node {found['to_first_node']:.1f} s; all renders done at "
        f"{found['all_done']:.1f} s; queue empty -> last node removed {found['drained_to_removed']:.1f} s "
        f"(work ended -> last node removed {found['idle_to_removed']:.1f} s)"
    )
    if args.plot:
        title = (
            f"{args.renders} renders, 0..{args.max_nodes} nodes x 1 CPU: first node {found['to_first_node']:.1f} s "
            f"after the first queued task,\nlast node gone {found['drained_to_removed']:.1f} s after the queue emptied"
        )
        plot(samples, args.plot, title)
        print(f"plot: {args.plot}")
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
