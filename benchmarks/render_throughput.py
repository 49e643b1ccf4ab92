"""Render throughput: one render through vidforge against the ffmpeg CLI doing the same job.

The job: a 1080p 30 fps clip with audio -> 720p mp4 (libx264 at the kernels' preset and CRF, AAC audio)
with a watermark. The ffmpeg side is one plain command with ffmpeg's default scaler, the same watermark and the
kernels' x264 and AAC settings (read from render_kernels, not restated here).

Two modes:

- default: the Ray render driver in this process (`RenderRun` on a local Ray), against ffmpeg. Ray start-up
  (and warming its workers) is left out: a server pays it once, not per render. Prints wall time and fps of
  both, their ratio, the driver's per-stage breakdown, an optional scaling sweep (workers = N), and output
  equivalence (frame count, duration, PSNR-Y against a single-segment encode, at the segment boundaries).
- `--mcp`: a real `vidforge serve` (started and warmed here, excluded), the render created with `tools/call`,
  its watermark approved the moment the task asks, completion seen on a `subscriptions/listen` stream: the
  whole path an agent takes. Prints wall ratio (target <= 1.10), output bytes ratio (target <= 1.05) and PSNR-Y
  of both outputs against the lanczos-scaled source (target: vidforge no more than 0.2 dB below ffmpeg), the
  stage breakdown (control plane, probe, preview, wait for a CPU, audio, segments, approval, mux, what lies
  outside the driver, how late the client saw completion), and the peak RSS of every server process kind.
  `--memory 30,120` adds renders of 4k sources of those lengths (4k out), printing each process kind's peak
  RSS per length (target: none above 1 GiB, no growth with length).

    .venv/bin/python benchmarks/render_throughput.py --seconds 60 --segments 1,2,4
    .venv/bin/python benchmarks/render_throughput.py --mcp --seconds 30
    .venv/bin/python benchmarks/render_throughput.py --mcp --seconds 30 --memory 30,60,120
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serving import (  # noqa: E402 - first: it sets up Ray's authentication mode (see there)
    BenchServer,
    ProcessSampler,
    RenderTrace,
    drive_render,
    print_cpu,
    print_peaks,
    render_args,
    supervisor_timings,
)

# isort: split

import av  # noqa: E402
import numpy as np  # noqa: E402
import ray  # noqa: E402
from clips import FFMPEG, benchmark_clip, benchmark_logo, luma_planes  # noqa: E402
from media import make_clip, psnr_y  # noqa: E402 - the suite's clip generators (tests/)

from render_kernels.audio import AAC_BIT_RATE  # noqa: E402
from render_kernels.compose import Watermark  # noqa: E402
from render_kernels.encoders import X264_OPTIONS  # noqa: E402
from render_kernels.probe import probe  # noqa: E402
from render_kernels.spec import RenderSpec, WatermarkSpec  # noqa: E402
from serve_app.rendering._render_driver import RenderRun  # noqa: E402
from serve_app.rendering._render_job import RenderJob  # noqa: E402

RESOLUTION = "720p"
# The idle spell before the idle render: past Ray's idle worker threshold (five minutes on a vidforge cluster), after
# which a worker nobody keeps is gone. Target for the warm pool's cost at rest, per node (issue 38).
IDLE_MINUTES, SHORT_IDLE_MINUTES = 10.0, 6.0
IDLE_COST_TARGET = 0.02  # CPU-s per second
POOL_KIND = "warm pool (held)"  # benchmarks/serving.py's name for the held render workers' processes
WATERMARK = {"position": "bottom_right", "opacity": 0.6}


class AutoApprove:
    """Render hooks for a benchmark: no progress reporting, the preview is approved at once."""

    async def progress(self, report) -> None:
        pass

    async def preview_ready(self, preview_path: str) -> bool:
        return True


def _warm_up() -> None:
    # The imports are the warm-up: what a render's tasks load.
    import render_kernels.audio  # noqa: F401
    import render_kernels.mux  # noqa: F401
    import render_kernels.probe  # noqa: F401
    import render_kernels.video  # noqa: F401


def render_vidforge(source: str, spec: RenderSpec, out_dir: str, workers: int) -> RenderRun:
    os.makedirs(out_dir, exist_ok=True)
    job = RenderJob(
        source, spec, os.path.join(out_dir, "final.mp4"), os.path.join(out_dir, "preview.png"), workers=workers
    )
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
    width, height = spec.output_size(info)
    if spec.watermark is None:
        video = ["-vf", f"scale={width}:{height}", "-map", "0:v:0"]
    else:
        x, y, wm_w, wm_h = watermark_box(spec.watermark, width, height)
        graph = (
            f"[0:v]scale={width}:{height}[v];"
            f"[1:v]scale={wm_w}:{wm_h},format=rgba,colorchannelmixer=aa={spec.watermark.opacity}[wm];"
            f"[v][wm]overlay={x}:{y}:format=yuv420,format=yuv420p[out]"
        )
        video = ["-i", spec.watermark.image, "-filter_complex", graph, "-map", "[out]"]
    x264 = [arg for key, value in X264_OPTIONS.items() for arg in (f"-{key}", value)]
    return [
        *FFMPEG,
        "-y",
        "-i",
        source,
        *video,
        "-map",
        "0:a?",
        "-c:v",
        "libx264",
        *x264,
        "-c:a",
        "aac",
        "-b:a",
        str(AAC_BIT_RATE),
        "-movflags",
        "+faststart",
        out_path,
    ]


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
            print(
                f"  segment {s.index}: {s.frame_count} frames, decode+scale+watermark {s.stats.decode_s:.2f} s,"
                f" encode {s.stats.encode_s:.2f} s, {s.stats.fps:.1f} fps"
            )
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
        print(
            f"  N={n}: {len(runs[n].segment_stats)} segments, {wall:7.2f} s, {frames / wall:6.1f} fps, "
            f"speed-up vs N={counts[0]}: {base / wall:.2f}x"
        )
    return runs


def report_equivalence(run: RenderRun, single: RenderRun, info) -> None:
    counts = [s.frame_count for s in run.segment_stats]
    boundaries = [sum(counts[:i]) for i in range(1, len(counts))]
    frames, average, edge_min = equivalence(run.job.out_path, single.job.out_path, boundaries)
    print(f"\noutput equivalence (vidforge, {len(counts)} segments, vs one segment):")
    print(
        f"  frames {frames} (source {info.frame_count}), "
        f"duration delta {duration_s(run.job.out_path) - info.duration_s:+.3f} s"
    )
    print(f"  PSNR-Y average {average:.2f} dB, minimum at {len(boundaries)} segment boundaries {edge_min:.2f} dB")


# --- through MCP ---------------------------------------------------------------------------------------

WALL_TARGET, BYTES_TARGET, PSNR_SLACK_DB = 1.10, 1.05, 0.2


def lanczos_reference(source: str, width: int, height: int):
    """The source's Y planes scaled with lanczos (the reference both outputs are scored against), one at a time."""
    command = [
        *FFMPEG,
        "-i",
        source,
        "-vf",
        f"scale={width}:{height}:flags=lanczos",
        "-pix_fmt",
        "yuv420p",
        "-f",
        "rawvideo",
        "-",
    ]
    frame_bytes = width * height * 3 // 2
    with subprocess.Popen(command, stdout=subprocess.PIPE) as proc:
        while len(raw := proc.stdout.read(frame_bytes)) == frame_bytes:
            yield np.frombuffer(raw, np.uint8, width * height).reshape(height, width)


def psnr_against_source(path: str, source: str, width: int, height: int) -> float:
    """Average PSNR-Y of `path` against the lanczos-scaled source, over every frame."""
    scores = [psnr_y(a, b) for a, b in zip(luma_planes(path), lanczos_reference(source, width, height))]
    return sum(s for s in scores if math.isfinite(s)) / len(scores)


def stream_bytes(path: str) -> dict[str, int]:
    """Bytes of each stream's packets (video, audio) in a file."""
    sizes: dict[str, int] = {}
    with av.open(path) as container:
        for packet in container.demux():
            if packet.size:
                kind = packet.stream.type
                sizes[kind] = sizes.get(kind, 0) + packet.size
    return sizes


def run_ffmpeg(source: str, spec: RenderSpec, out_path: str) -> float:
    started = time.perf_counter()
    subprocess.run(ffmpeg_command(source, spec, out_path), check=True)
    return time.perf_counter() - started


def mcp_render(
    server: BenchServer, source_uri: str, logo_uri: str | None, resolution: str = RESOLUTION
) -> tuple[RenderTrace, ProcessSampler]:
    """One render through MCP, with the server's processes sampled meanwhile."""
    with ProcessSampler(os.getsid(server.pid)) as sampler:
        time.sleep(0.3)  # one sample of everything alive before the mark
        sampler.mark()
        trace = drive_render(
            server,
            RenderTrace(principal=0, watermark=logo_uri is not None),
            render_args(source_uri, logo_uri, resolution),
        )
    if not trace.ok:
        raise RuntimeError(f"render failed: {trace.task}")
    return trace, sampler


def report_mcp(trace: RenderTrace, timings, sampler: ProcessSampler, ff_wall: float) -> float:
    """Print the stage breakdown of one MCP render; return its wall time (create sent -> completion seen)."""
    wall = trace.seen_done - trace.sent
    stages = timings.stages
    print(
        f"\nvidforge through MCP: {wall:.2f} s from tools/call to completion seen "
        f"(ffmpeg {ff_wall:.2f} s; ratio {wall / ff_wall:.2f}, target <= {WALL_TARGET})"
    )
    rows = [
        ("tools/call -> CreateTaskResult", trace.created - trace.sent),
        ("probe (isolated parser, its start-up included; none: the upload's facts)", stages.get("probe")),
        ("watermark preview (a task beside the segments; with the probe if there was one)", stages.get("preview")),
        ("wait for the first CPU (fair scheduler)", stages.get("queue")),
        ("audio (from queued to done)", stages.get("audio")),
        ("  audio kernel alone", timings.audio_wall_s),
        ("segments (queued to last done)", stages.get("segments")),
        *((f"  segment {i} kernel", w) for i, w in enumerate(timings.segment_wall_s)),
        ("approval wait (input_required -> approved, overlaps the segments)", stages.get("approval")),
        ("mux", stages.get("mux")),
        ("driver total", stages.get("total")),
        ("before the driver (create, durable write, supervisor start)", timings.started_at - trace.sent),
        (
            "after the driver (registry completion, durable write)",
            timings.completed_at - timings.started_at - stages["total"],
        ),
        ("completion seen after it was written (listen stream)", trace.seen_done - timings.completed_at),
    ]
    for name, seconds in rows:
        if seconds is not None:
            print(f"  {name:66s} {seconds:7.2f} s")
    print(f"  (a client that polls instead sees it up to pollIntervalMs later: {trace.task['pollIntervalMs']} ms)")
    print(f"  server CPU during the render: {sampler.cpu_s():.1f} s")
    print_cpu("  by process kind:", sampler.cpu_by_kind)
    return wall


def compare_mcp(
    source: str,
    logo: str,
    spec: RenderSpec,
    info,
    workdir: str,
    repeat: int,
    memory: list[float],
    memory_fps: int,
    idle_s: float,
) -> None:
    """The render three ways a user meets it, each beside an ffmpeg run of the same job right after it: the first
    render after `vidforge serve` started (cold), `repeat` more at once (warm; the best of each side is reported in
    detail), and one after `idle_s` of rest (idle), with the cluster's CPU and the warm pool's memory at rest."""
    width, height = spec.output_size(info)
    ffmpeg_out = os.path.join(workdir, "ffmpeg.mp4")
    with BenchServer(workdir) as server:
        print(f"server start-up (excluded): {server.startup_s:.1f} s")
        source_uri, logo_uri = server.upload(source), server.upload(logo)
        pairs: dict[str, list[tuple[RenderTrace, ProcessSampler, float]]] = {"cold": [], "warm": [], "idle": []}

        def render_pair(mode: str) -> None:
            trace, sampler = mcp_render(server, source_uri, logo_uri)
            ff_wall = run_ffmpeg(source, spec, ffmpeg_out)
            pairs[mode].append((trace, sampler, ff_wall))
            wall = trace.seen_done - trace.sent
            print(f"{mode} render: vidforge {wall:.2f} s, ffmpeg {ff_wall:.2f} s: {wall / ff_wall:.2f} x")

        render_pair("cold")
        for _ in range(repeat):
            render_pair("warm")
        if idle_s > 0:
            rest = idle_spell(server, idle_s)
            render_pair("idle")
        traces = [trace for runs in pairs.values() for trace, _, _ in runs]
        timings = supervisor_timings(server, [t.task_id for t in traces])
        # Best of each side (as `compare` does), never the pair with the best ratio: on a shared machine one
        # slow ffmpeg attempt would otherwise decide the figure in vidforge's favour.
        trace, sampler, _ = min(pairs["warm"], key=lambda r: r[0].seen_done - r[0].sent)
        ff_wall = min(r[2] for r in pairs["warm"])
        output = os.path.join(workdir, "vidforge-mcp.mp4")
        shutil.copyfile(server.artifact(trace.task_id), output)
        peaks = dict(sampler.peak_rss)
        nodes = len(ray_nodes(server))
    print(f"\nthe render as a user meets it (ffmpeg CLI beside each; target <= {WALL_TARGET} x each):")
    for mode, runs in pairs.items():
        for mode_trace, _, mode_ff in runs:
            wall = mode_trace.seen_done - mode_trace.sent
            print(f"  {mode:5s} vidforge {wall:6.2f} s, ffmpeg {mode_ff:6.2f} s: {wall / mode_ff:5.2f} x")
    if idle_s > 0:
        report_rest(rest, idle_s, nodes)
    memory_runs = render_memory(workdir, memory, memory_fps) if memory else {}

    report_mcp(trace, timings[trace.task_id], sampler, ff_wall)
    print_peaks(
        f"\npeak RSS per process kind during that render ({info.duration_s:g} s "
        f"{info.width}x{info.height} -> {spec.resolution}):",
        peaks,
    )
    ff_out = os.path.join(workdir, "ffmpeg.mp4")
    vf_bytes, ff_bytes = os.path.getsize(output), os.path.getsize(ff_out)
    vf_streams, ff_streams = stream_bytes(output), stream_bytes(ff_out)
    print(
        f"\noutput size: vidforge {vf_bytes} bytes, ffmpeg {ff_bytes} bytes: ratio {vf_bytes / ff_bytes:.3f} "
        f"(target <= {BYTES_TARGET})"
    )
    print(
        f"  video stream {vf_streams.get('video', 0)} vs {ff_streams.get('video', 0)} bytes, audio "
        f"{vf_streams.get('audio', 0)} vs {ff_streams.get('audio', 0)} bytes"
    )
    vf_psnr = psnr_against_source(output, source, width, height)
    ff_psnr = psnr_against_source(ff_out, source, width, height)
    print(
        f"PSNR-Y against the lanczos-scaled source: vidforge {vf_psnr:.2f} dB, ffmpeg {ff_psnr:.2f} dB "
        f"(target: vidforge >= ffmpeg - {PSNR_SLACK_DB} dB)"
    )
    print(
        f"frames: vidforge {probe(output).frame_count}, ffmpeg {probe(ff_out).frame_count}, source {info.frame_count}"
    )
    for seconds, run_peaks in memory_runs.items():
        print_peaks(f"\npeak RSS per process kind, {seconds:g} s 4k source -> 4k:", run_peaks)
    if memory_runs:
        kinds = sorted({k for peaks in memory_runs.values() for k in peaks})
        lengths = list(memory_runs)
        print("\npeak RSS (MiB) by source length: " + "  ".join(f"{s:g} s" for s in lengths))
        for kind in kinds:
            row = "  ".join(f"{memory_runs[s].get(kind, 0) / 2**20:6.0f}" for s in lengths)
            print(f"  {kind:34s} {row}")


def idle_spell(server: BenchServer, seconds: float) -> ProcessSampler:
    """Leave the server alone for `seconds`, sampling its processes (CPU, and memory by kind) meanwhile."""
    print(f"idle spell: {seconds:g} s with no request", flush=True)
    with ProcessSampler(os.getsid(server.pid), interval_s=1.0) as rest:
        time.sleep(seconds)  # the idle spell is the measurement itself
    return rest


def report_rest(rest: ProcessSampler, seconds: float, nodes: int) -> None:
    """The cost of the server at rest over an idle spell: the whole cluster's, and the warm pool's share (its held
    render workers: CPU per second and resident memory); idle workers a render left beyond the pool apart."""
    pool_cpu = rest.cpu_by_kind.get(POOL_KIND, 0.0)
    pool_rss = rest.peak_rss.get(POOL_KIND, 0)
    print(f"\nat rest over the {seconds:g} s idle spell ({nodes} node(s)):")
    print(f"  the whole server: {rest.cpu_s() / seconds:.4f} CPU-s per second")
    print(
        f"  the warm pool's held render workers: {pool_cpu / seconds / nodes:.4f} CPU-s per second per node "
        f"(target <= {IDLE_COST_TARGET}), largest {pool_rss / 2**20:.0f} MiB resident"
    )
    leftovers = rest.cpu_by_kind.get("idle Ray worker", 0.0)
    print(f"  idle workers beyond the pool (Ray ends them after its idle threshold): {leftovers / seconds:.4f} CPU-s/s")
    print_cpu("  by process kind (CPU-s over the spell):", rest.cpu_by_kind)


def ray_nodes(server: BenchServer) -> list[dict]:
    """The server's cluster's alive nodes (a second Ray driver on it)."""
    ray.init(address=server.ray_address, namespace="vidforge", log_to_driver=False)
    try:
        return [node for node in ray.nodes() if node["Alive"]]
    finally:
        ray.shutdown()


def render_memory(workdir: str, lengths: list[float], fps: int) -> dict[float, dict[str, int]]:
    """Peak RSS per process kind while rendering 4k sources of each length to 4k (no watermark), each on a fresh
    server: a pooled Ray worker keeps the memory of what it ran before, so renders on one server would not
    compare."""
    peaks: dict[float, dict[str, int]] = {}
    for seconds in lengths:
        clip = os.path.join(workdir, f"source-4k-{seconds:g}s-{fps}fps.mp4")
        if not os.path.exists(clip):
            started = time.perf_counter()
            make_clip(clip, seconds=seconds, width=3840, height=2160, fps=fps, audio=True, gop=fps)
            print(f"generated {clip} in {time.perf_counter() - started:.1f} s")
        with BenchServer(os.path.join(workdir, f"memory-{seconds:g}s")) as server:
            trace, sampler = mcp_render(server, server.upload(clip), None, "4k")
        print(f"4k render of {seconds:g} s: {trace.seen_done - trace.sent:.1f} s")
        peaks[seconds] = dict(sampler.peak_rss)
    return peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", help="source video (default: generate a 1080p30 clip with audio)")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the generated clip")
    parser.add_argument("--segments", default="", help="comma-separated worker counts for a scaling sweep")
    parser.add_argument("--repeat", type=int, default=1, help="run both sides this many times, keep the best")
    parser.add_argument("--cpus", type=int, default=None, help="CPUs Ray may use (default: all)")
    parser.add_argument("--workdir", help="where inputs and outputs go (default: a temporary directory)")
    parser.add_argument("--mcp", action="store_true", help="through a real vidforge serve, as an agent does")
    parser.add_argument(
        "--memory",
        default="",
        help="with --mcp: comma-separated 4k source lengths (s) to measure peak RSS per process kind on",
    )
    parser.add_argument("--memory-fps", type=int, default=30, help="frame rate of those 4k sources")
    parser.add_argument(
        "--idle-minutes",
        type=float,
        default=None,
        help=f"with --mcp: the idle spell before the idle render (default {IDLE_MINUTES:g}; 0: none)",
    )
    parser.add_argument(
        "--short", action="store_true", help=f"with --mcp: an idle spell of {SHORT_IDLE_MINUTES:g} minutes"
    )
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="vidforge-bench-")
    os.makedirs(workdir, exist_ok=True)

    source = args.input or benchmark_clip(workdir, args.seconds)
    logo = benchmark_logo(workdir)
    spec = RenderSpec("mp4", RESOLUTION, WatermarkSpec(logo, **WATERMARK))
    info = probe(source)
    print(
        f"source: {info.width}x{info.height} {info.fps:g} fps, {info.frame_count} frames, "
        f"{info.duration_s:.1f} s, audio={'yes' if info.audio else 'no'}"
    )

    if args.mcp:
        if not shutil.which("ffmpeg"):
            sys.exit("--mcp compares against ffmpeg: install it (apt-get install ffmpeg)")
        lengths = [float(n) for n in args.memory.split(",") if n.strip()]
        idle_minutes = args.idle_minutes
        if idle_minutes is None:
            idle_minutes = SHORT_IDLE_MINUTES if args.short else IDLE_MINUTES
        compare_mcp(source, logo, spec, info, workdir, max(1, args.repeat), lengths, args.memory_fps, idle_minutes * 60)
        print(f"\noutputs in {workdir}")
        return

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
