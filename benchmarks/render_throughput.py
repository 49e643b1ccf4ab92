"""Render throughput: vidforge's Ray render driver against the ffmpeg CLI doing the same job.

The job: a 1080p 30 fps clip with audio -> 720p mp4 (libx264 at the kernels' preset and CRF, AAC audio)
with a watermark. Both sides use the kernels' own settings (read from render_kernels, not restated here),
so the comparison is like for like. Ray start-up (and warming its workers) is timed separately and left out
of the comparison: a server pays it once, not per render.

    .venv/bin/python benchmarks/render_throughput.py --seconds 60 --segments 1,2,4

Prints wall time and fps of both, their ratio, vidforge's per-stage breakdown, an optional scaling sweep
(workers = N), and output-equivalence figures (frame count, duration, PSNR-Y against a single-segment
encode of the same job, at the segment boundaries).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import av
import ray

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from media import make_clip, make_watermark_png, psnr_y  # noqa: E402 - the suite's clip generators

from render_kernels import RenderSpec, WatermarkSpec, output_size, plan_segments, probe  # noqa: E402
from render_kernels.audio import AAC_BIT_RATE  # noqa: E402
from render_kernels.compose import Watermark  # noqa: E402
from render_kernels.encoders import X264_OPTIONS  # noqa: E402
from serve_app.render_driver import RenderJob, RenderRun  # noqa: E402

RESOLUTION = "720p"
WATERMARK = {"position": "bottom_right", "opacity": 0.6}


class AutoApprove:
    """Render hooks for a benchmark: no progress reporting, the preview is approved at once."""

    async def progress(self, report) -> None:
        pass

    async def preview_ready(self, preview_path: str) -> bool:
        return True


def _warm_up() -> None:
    import render_kernels  # noqa: F401 - the import is the warm-up


def render_vidforge(source: str, spec: RenderSpec, out_dir: str, workers: int) -> RenderRun:
    os.makedirs(out_dir, exist_ok=True)
    job = RenderJob(source, spec, os.path.join(out_dir, "final.mp4"), os.path.join(out_dir, "preview.png"), workers)
    run = RenderRun(job, AutoApprove())
    asyncio.run(run.run())
    return run


def watermark_box(watermark: WatermarkSpec, width: int, height: int) -> tuple[int, int, int, int]:
    """(x, y, w, h) of the watermark the kernels blend into a width x height frame.

    Taken from the kernels rather than re-deriving their sizing rule here; 2 is the "unspecified" YUV
    matrix, which does not affect geometry.
    """
    return Watermark(watermark, width, height, colorspace=2).box


def ffmpeg_command(source: str, spec: RenderSpec, out_path: str) -> list[str]:
    """The same render as one plain ffmpeg command: scale with ffmpeg's default scaler (bicubic, as the kernels'
    INTERPOLATION), overlay the watermark if any (same size, place, opacity), x264 at the kernels' preset and
    CRF, AAC at the kernels' bit rate, +faststart."""
    info = probe(source)
    width, height = output_size(info.width, info.height, spec.resolution)
    if spec.watermark is None:
        video = ["-vf", f"scale={width}:{height}", "-map", "0:v:0"]
    else:
        x, y, wm_w, wm_h = watermark_box(spec.watermark, width, height)
        graph = (
            f"[0:v]scale={width}:{height}[v];"
            f"[1:v]scale={wm_w}:{wm_h},format=rgba,colorchannelmixer=aa={spec.watermark.opacity}[wm];"
            f"[v][wm]overlay={x}:{y}:format=yuv420,format=yuv420p[out]"
        )
        video = ["-i", spec.watermark.image_path, "-filter_complex", graph, "-map", "[out]"]
    x264 = [arg for key, value in X264_OPTIONS.items() for arg in (f"-{key}", value)]
    return [
        "ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-i", source, *video, "-map", "0:a?",
        "-c:v", "libx264", *x264, "-c:a", "aac", "-b:a", str(AAC_BIT_RATE), "-movflags", "+faststart", out_path,
    ]


def luma_planes(path: str):
    """Y planes of every frame, one at a time (a whole 720p minute would not fit in memory at once)."""
    with av.open(path) as container:
        for frame in container.decode(video=0):
            yield frame.reformat(format="yuv420p").to_ndarray()[: frame.height]


def equivalence(path: str, reference: str, boundaries: list[int]) -> tuple[int, float, float]:
    """(frames, average PSNR-Y, minimum PSNR-Y over the frames either side of each boundary).

    Identical frames (infinite PSNR) are left out of the average, which only makes it more conservative.
    """
    scores = [psnr_y(a, b) for a, b in zip(luma_planes(path), luma_planes(reference))]
    finite = [s for s in scores if math.isfinite(s)]
    average = sum(finite) / len(finite) if finite else math.inf
    edges = [scores[i] for b in boundaries for i in (b - 1, b) if 0 <= i < len(scores)]
    return len(scores), average, min(edges, default=math.inf)


def duration_s(path: str) -> float:
    with av.open(path) as container:
        return (container.duration or 0) / av.time_base


def compare(source: str, spec: RenderSpec, frames: int, workdir: str, cpus: int, repeat: int) -> RenderRun:
    """vidforge and ffmpeg, interleaved `repeat` times (best of each counts: the machine may be shared)."""
    runs, ff_walls = [], []
    has_ffmpeg = shutil.which("ffmpeg") is not None
    for attempt in range(repeat):
        run = render_vidforge(source, spec, os.path.join(workdir, f"vidforge-{attempt}"), workers=cpus)
        runs.append(run)
        print(f"\nvidforge  workers={cpus}: {run.stages['total']:7.2f} s  {frames / run.stages['total']:6.1f} fps")
        print("  stages (wall s, overlapping): " + ", ".join(f"{k}={v:.2f}" for k, v in run.stages.items()))
        for s in run.segment_stats:
            print(f"  segment {s['index']}: {s['frame_count']} frames, decode+scale+watermark {s['decode_s']:.2f} s,"
                  f" encode {s['encode_s']:.2f} s, {s['fps']:.1f} fps")
        if has_ffmpeg:
            started = time.perf_counter()
            subprocess.run(ffmpeg_command(source, spec, os.path.join(workdir, "ffmpeg.mp4")), check=True)
            ff_walls.append(time.perf_counter() - started)
            print(f"ffmpeg  (same job)     : {ff_walls[-1]:7.2f} s  {frames / ff_walls[-1]:6.1f} fps")

    best = min(runs, key=lambda r: r.stages["total"])
    vf_wall = best.stages["total"]
    print(f"\nvidforge best of {repeat}: {vf_wall:.2f} s ({frames / vf_wall:.1f} fps)")
    if has_ffmpeg:
        ff_wall = min(ff_walls)
        print(f"ffmpeg   best of {repeat}: {ff_wall:.2f} s ({frames / ff_wall:.1f} fps)")
        print(f"ratio vidforge/ffmpeg: {vf_wall / ff_wall:.2f}  (target <= 1.10)")
    else:
        print("ffmpeg: not installed, comparison skipped (install it with: apt-get install ffmpeg)")
    return best


def scaling_sweep(source: str, spec: RenderSpec, frames: int, workdir: str, counts: list[int]) -> dict[int, RenderRun]:
    print("\nscaling sweep (workers = N):")
    runs: dict[int, RenderRun] = {}
    for n in counts:
        runs[n] = render_vidforge(source, spec, os.path.join(workdir, f"sweep-{n}"), workers=n)
        wall, base = runs[n].stages["total"], runs[counts[0]].stages["total"]
        print(f"  N={n}: {len(runs[n].segment_stats)} segments, {wall:7.2f} s, {frames / wall:6.1f} fps, "
              f"speed-up vs N={counts[0]}: {base / wall:.2f}x")
    return runs


def report_equivalence(run: RenderRun, single: RenderRun, info) -> None:
    boundaries = [s.start_frame for s in plan_segments(info, run.job.workers)][1:]
    frames, average, edge_min = equivalence(run.job.out_path, single.job.out_path, boundaries)
    print(f"\noutput equivalence (vidforge workers={run.job.workers} vs workers=1):")
    print(f"  frames {frames} (source {info.frame_count}), "
          f"duration delta {duration_s(run.job.out_path) - info.duration_s:+.3f} s")
    print(f"  PSNR-Y average {average:.2f} dB, minimum at {len(boundaries)} segment boundaries {edge_min:.2f} dB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", help="source video (default: generate a 1080p30 clip with audio)")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the generated clip")
    parser.add_argument("--segments", default="", help="comma-separated worker counts for a scaling sweep")
    parser.add_argument("--repeat", type=int, default=1, help="run both sides this many times, keep the best")
    parser.add_argument("--cpus", type=int, default=None, help="CPUs Ray may use (default: all)")
    parser.add_argument("--workdir", help="where inputs and outputs go (default: a temporary directory)")
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="vidforge-bench-")
    os.makedirs(workdir, exist_ok=True)

    source = args.input
    if source is None:
        source = os.path.join(workdir, f"source-1080p-{args.seconds:g}s.mp4")
        started = time.perf_counter()
        make_clip(source, seconds=args.seconds, width=1920, height=1080, fps=30, audio=True, gop=30)
        print(f"generated {source} in {time.perf_counter() - started:.1f} s")
    logo = make_watermark_png(os.path.join(workdir, "logo.png"), w=256, h=96, rgba=(255, 255, 255, 220))
    spec = RenderSpec("mp4", RESOLUTION, WatermarkSpec(logo, **WATERMARK))
    info = probe(source)
    print(f"source: {info.width}x{info.height} {info.fps:g} fps, {info.frame_count} frames, "
          f"{info.duration_s:.1f} s, audio={'yes' if info.audio else 'no'}")

    started = time.perf_counter()
    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
    cpus = int(ray.cluster_resources()["CPU"])
    # Start the workers and import the kernels there once: a running server has warm workers.
    ray.get([ray.remote(_warm_up).remote() for _ in range(cpus)])
    print(f"ray start-up (excluded below): {time.perf_counter() - started:.1f} s, {cpus} CPUs")

    best = compare(source, spec, info.frame_count, workdir, cpus, max(1, args.repeat))
    counts = [int(n) for n in args.segments.split(",") if n.strip()]
    sweep = scaling_sweep(source, spec, info.frame_count, workdir, counts) if counts else {}
    single = sweep.get(1) or render_vidforge(source, spec, os.path.join(workdir, "single"), workers=1)
    report_equivalence(best, single, info)
    print(f"\noutputs in {workdir}")
    ray.shutdown()


if __name__ == "__main__":
    main()
