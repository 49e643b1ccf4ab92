"""What the quality check costs a render: the same render with it and without it, in turn, several rounds.

The job is render_throughput's (a 1080p30 clip with audio -> 720p with a watermark, through the Ray render driver in
this process, Ray's start-up and the workers' warm-up left out), in a format of your choice. Each round renders once
with the check (its thresholds, report and contact sheet, as a server makes them: `VIDFORGE_QC` on, fidelity as the
server's default, off) and once without (`VIDFORGE_QC=false`), in alternating order so that neither side always runs first; the medians are compared. `--fidelity` checks with fidelity
(`VIDFORGE_QC_FIDELITY=true`), the part that costs.
Target: the check adds at most 3 % to a render's wall time. It also prints the report of the last checked render.

    .venv/bin/python benchmarks/qc_cost.py --seconds 30 --rounds 5
    .venv/bin/python benchmarks/qc_cost.py --seconds 30 --rounds 5 --format webm
    .venv/bin/python benchmarks/qc_cost.py --seconds 30 --rounds 5 --fidelity
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving  # noqa: E402, F401 - first: it sets up Ray's authentication mode (see there)

# isort: split

import ray  # noqa: E402
from clips import benchmark_clip, benchmark_logo  # noqa: E402
from render_throughput import RESOLUTION, WATERMARK, AutoApprove, _warm_up  # noqa: E402

from render_kernels.probe import probe  # noqa: E402
from render_kernels.qc.findings import QcThresholds  # noqa: E402
from render_kernels.spec import RenderSpec, WatermarkSpec  # noqa: E402
from serve_app.rendering._render_driver import RenderRun  # noqa: E402
from serve_app.rendering._render_job import RenderJob  # noqa: E402

TARGET_OVERHEAD = 0.03


def render(source: str, spec: RenderSpec, out_dir: str, checked: bool, fidelity: bool) -> RenderRun:
    os.makedirs(out_dir, exist_ok=True)
    job = RenderJob(
        source,
        spec,
        os.path.join(out_dir, f"final.{spec.output_format}"),
        os.path.join(out_dir, "preview.png"),
        qc=QcThresholds() if checked else None,
        contact_sheet_path=os.path.join(out_dir, "contact-sheet.jpg") if checked else None,
        qc_fidelity=fidelity,
    )
    run = RenderRun(job, AutoApprove())
    asyncio.run(run.run())
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the generated 1080p clip")
    parser.add_argument("--rounds", type=int, default=5, help="renders with and without the check, each")
    parser.add_argument("--format", default="mp4", choices=("mp4", "webm", "mov"))
    parser.add_argument("--workdir", help="where inputs and outputs go (default: a temporary directory)")
    parser.add_argument(
        "--no-fidelity", action="store_true", help="the check without fidelity (VIDFORGE_QC_FIDELITY=false)"
    )
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="vidforge-qc-")
    source = benchmark_clip(workdir, args.seconds)
    spec = RenderSpec(args.format, RESOLUTION, WatermarkSpec(benchmark_logo(workdir), **WATERMARK))
    info = probe(source)
    print(f"source: {info.width}x{info.height} {info.fps:g} fps, {info.duration_s:.1f} s -> {RESOLUTION} {args.format}")

    ray.init(include_dashboard=False, log_to_driver=False)
    cpus = int(ray.cluster_resources()["CPU"])
    ray.get([ray.remote(_warm_up).remote() for _ in range(cpus)])
    render(source, spec, os.path.join(workdir, "warm"), True, args.fidelity)  # the workers' first render, not counted

    walls: dict[bool, list[float]] = {True: [], False: []}
    last: RenderRun | None = None
    for round_ in range(args.rounds):
        for checked in (True, False) if round_ % 2 == 0 else (False, True):
            started = time.perf_counter()
            out_dir = os.path.join(workdir, f"r{round_}-{'qc' if checked else 'plain'}")
            run = render(source, spec, out_dir, checked, fidelity=args.fidelity)
            walls[checked].append(time.perf_counter() - started)
            last = run if checked else last
        print(f"round {round_ + 1}: with {walls[True][-1]:.2f} s, without {walls[False][-1]:.2f} s")
    ray.shutdown()

    with_qc, without = statistics.median(walls[True]), statistics.median(walls[False])
    overhead = with_qc / without - 1
    print(f"\nmedian wall: with the check {with_qc:.2f} s, without {without:.2f} s")
    verdict = "met" if overhead <= TARGET_OVERHEAD else "NOT met"
    print(f"quality check overhead: {overhead * 100:+.1f} % (target <= {TARGET_OVERHEAD * 100:.0f} %): {verdict}")
    if last is not None and last.qc is not None:
        print("last report:", json.dumps(last.qc.to_json()))


if __name__ == "__main__":
    main()
