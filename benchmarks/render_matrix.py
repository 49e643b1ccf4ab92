"""The render matrix (issue #22, "Performance that holds on every source"): one render through MCP per case,
against the ffmpeg CLI doing the same job.

A case is a matrix source (matrix_sources.py: gradient, noisy, long_gop, bframes_editlist; 1920x1080 30 fps) x a
length (10, 30, 120 s) x a variant: `watermark+audio` (the issue's 192x96 logo at opacity 0.8, bottom right; the
source with its AAC tone), `watermark` (the logo, a silent source), `audio` (no logo, the tone) or `plain` (no
logo, a silent source). Each case renders to 720p mp4 on one warm `vidforge serve` (its start-up and a warm-up
render are left out, as render_throughput.py --mcp does) the way an agent renders: upload, `tools/call`, the
watermark approved the moment the task asks, completion seen on a `subscriptions/listen` stream; then the same
job as one ffmpeg command (render_throughput.ffmpeg_command). `--repeat N` runs both sides N times, interleaved,
and keeps the best wall time of each.

Printed per case: vidforge's wall (tools/call -> completion seen), ffmpeg's, their ratio (target <= 1.10), the
CPU seconds of each side (vidforge: every process of the server's session, ProcessSampler; ffmpeg: the child's
rusage), where vidforge's time went (the supervisor's stage timings: probe, preview, plan, wait for a CPU, audio,
segments, approval, mux; what lies before and after the driver; how late the client saw completion), and
every output's frame count against the source's (FAIL when one differs). Then a summary of every case and the
worst.

    .venv/bin/python benchmarks/render_matrix.py                                 # 4 sources x 10/30/120 s x 2
    .venv/bin/python benchmarks/render_matrix.py --quick                         # a smoke run: 2 sources, 10 s
    .venv/bin/python benchmarks/render_matrix.py --sources noisy --lengths 30 --variants plain,audio --repeat 2
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serving import (  # noqa: E402 - first: it sets up Ray's authentication mode (see there)
    BenchServer,
    ProcessSampler,
    RenderTrace,
    drive_render,
    render_args,
    supervisor_timings,
)

# isort: split

from matrix_sources import SOURCES, WATERMARK, matrix_logo, matrix_source  # noqa: E402
from render_throughput import ffmpeg_command  # noqa: E402

from render_kernels.probe import probe  # noqa: E402
from render_kernels.spec import RenderSpec, WatermarkSpec  # noqa: E402

RESOLUTION = "720p"
WALL_TARGET = 1.10
LENGTHS = (10.0, 30.0, 120.0)
VARIANTS = {  # name -> (watermark, audio)
    "watermark+audio": (True, True),
    "watermark": (True, False),
    "audio": (False, True),
    "plain": (False, False),
}
DEFAULT_VARIANTS = ("watermark+audio", "plain")
QUICK_SOURCES, QUICK_VARIANTS = ("gradient", "bframes_editlist"), ("watermark+audio",)

# The driver's stages in the order a render goes through them (RenderRun.stages; they overlap: the audio and the
# preview run beside the segments), and what each measures; a stage the driver gains later is printed after them.
STAGES = {
    "probe": "probe (isolated parser, start-up included; none: the upload's facts)",
    "preview": "watermark preview (and the source's first frame, for the review page)",
    "plan": "plan (segments, codec choice)",
    "queue": "wait for the first CPU (fair scheduler)",
    "audio": "audio (queued to done)",
    "segments": "segments (queued to last done)",
    "approval": "approval wait, as the driver saw it",
    "mux": "mux",
    "total": "driver total",
}


@dataclass(frozen=True)
class Case:
    source: str
    seconds: float
    variant: str

    @property
    def watermark(self) -> bool:
        return VARIANTS[self.variant][0]

    @property
    def audio(self) -> bool:
        return VARIANTS[self.variant][1]

    @property
    def label(self) -> str:
        return f"{self.source} {self.seconds:g} s {self.variant}"


@dataclass
class Attempt:
    trace: RenderTrace
    cpu_s: float  # the server session's CPU seconds during the render
    cpu_by_kind: dict[str, float]
    frames: int  # of vidforge's output


@dataclass
class Result:
    case: Case
    source_frames: int
    best: Attempt  # vidforge's fastest attempt
    ff_wall: float  # ffmpeg's fastest attempt
    ff_cpu: float  # ... and its CPU seconds
    vf_frames: list[int]  # every attempt's output frame count
    ff_frames: list[int]
    timings: Any = None  # the supervisor's RenderTimings of the best attempt

    @property
    def wall(self) -> float:
        return self.best.trace.seen_done - self.best.trace.sent

    @property
    def ratio(self) -> float:
        return self.wall / self.ff_wall

    @property
    def frames_ok(self) -> bool:
        return all(n == self.source_frames for n in self.vf_frames + self.ff_frames)


def render_once(server: BenchServer, args: dict) -> Attempt:
    """One render through MCP, the server's processes sampled meanwhile (as render_throughput.mcp_render)."""
    with ProcessSampler(os.getsid(server.pid)) as sampler:
        time.sleep(0.3)  # one sample of everything alive before the mark
        sampler.mark()
        trace = drive_render(server, RenderTrace(principal=0, watermark="watermark" in args), args)
    if not trace.ok:
        raise RuntimeError(f"render failed: {trace.task}")
    frames = probe(server.artifact(trace.task_id)).frame_count
    return Attempt(trace, sampler.cpu_s(), dict(sampler.cpu_by_kind), frames)


def run_ffmpeg(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one ffmpeg run: its rusage, as the only child reaped meanwhile."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_case(server: BenchServer, case: Case, workdir: str, uploads: dict[str, str], logo: str, repeat: int) -> Result:
    source = matrix_source(workdir, case.source, case.seconds, case.audio)
    info = probe(source)
    if source not in uploads:
        uploads[source] = server.upload(source)
    if logo not in uploads:
        uploads[logo] = server.upload(logo)
    args = render_args(uploads[source], uploads[logo] if case.watermark else None, RESOLUTION)
    if case.watermark:
        args["watermark"].update(WATERMARK)  # the issue's opacity, not render_args' 0.6
    watermark = WatermarkSpec(logo, **WATERMARK) if case.watermark else None
    ff_out = _ff_path(workdir, case)
    command = ffmpeg_command(source, RenderSpec("mp4", RESOLUTION, watermark), ff_out)
    attempts, ff_runs, ff_frames = [], [], []
    for _ in range(repeat):  # interleaved: a load change on a shared machine hits both sides alike
        attempts.append(render_once(server, args))
        ff_runs.append(run_ffmpeg(command))
        ff_frames.append(probe(ff_out).frame_count)
        print(
            f"  {case.label}: vidforge {attempts[-1].trace.seen_done - attempts[-1].trace.sent:.2f} s, "
            f"ffmpeg {ff_runs[-1][0]:.2f} s",
            flush=True,
        )
    best = min(attempts, key=lambda a: a.trace.seen_done - a.trace.sent)
    ff_wall, ff_cpu = min(ff_runs)
    result = Result(case, info.frame_count, best, ff_wall, ff_cpu, [a.frames for a in attempts], ff_frames)
    result.timings = supervisor_timings(server, [best.trace.task_id])[best.trace.task_id]
    return result


def _ff_path(workdir: str, case: Case) -> str:
    os.makedirs(os.path.join(workdir, "matrix-out"), exist_ok=True)
    return os.path.join(workdir, "matrix-out", f"{case.source}-{case.seconds:g}s-{case.variant}-ffmpeg.mp4")


def stage_rows(result: Result) -> list[tuple[str, float | None]]:
    """Where vidforge's wall time went: the client's view around the supervisor's stage timings."""
    trace, timings = result.best.trace, result.timings
    rows: list[tuple[str, float | None]] = [("tools/call -> CreateTaskResult", trace.created - trace.sent)]
    if timings is None:
        return [*rows, ("(the supervisor no longer has this render's timings)", None)]
    stages = timings.stages
    rows.append(("before the driver (create, durable write, supervisor start)", timings.started_at - trace.sent))
    for key in [*STAGES, *sorted(set(stages) - set(STAGES))]:
        if key in stages:
            rows.append((STAGES.get(key, key), stages[key]))
        if key == "audio" and timings.audio_wall_s is not None:
            rows.append(("  audio kernel alone", timings.audio_wall_s))
        if key == "segments":
            rows.extend((f"  segment {i} kernel", w) for i, w in enumerate(timings.segment_wall_s))
    if trace.asked is not None and trace.approved is not None:
        rows.append(("approval round trip, as the client saw it (asked -> answered)", trace.approved - trace.asked))
    if timings.completed_at is not None:
        rows.append(
            (
                "after the driver (registry completion, durable write)",
                timings.completed_at - timings.started_at - stages["total"],
            )
        )
        rows.append(("completion seen late (listen stream latency)", trace.seen_done - timings.completed_at))
    return rows


def report_case(result: Result) -> None:
    verdict = "PASS" if result.ratio <= WALL_TARGET else "FAIL"
    print(
        f"\n{result.case.label}: vidforge {result.wall:.2f} s, ffmpeg {result.ff_wall:.2f} s, "
        f"ratio {result.ratio:.2f} {verdict} (target <= {WALL_TARGET}); vidforge is {result.wall - result.ff_wall:+.2f} s"
    )
    kinds = sorted(result.best.cpu_by_kind.items(), key=lambda kv: -kv[1])
    top = ", ".join(f"{kind} {seconds:.1f}" for kind, seconds in kinds if seconds >= 0.1)
    print(f"  CPU-s: vidforge {result.best.cpu_s:.1f} (server session: {top}), ffmpeg {result.ff_cpu:.1f}")
    for name, seconds in stage_rows(result):
        print(f"  {name:66s} {seconds:7.2f} s" if seconds is not None else f"  {name}")
    frames = f"vidforge {result.vf_frames}, ffmpeg {result.ff_frames}, source {result.source_frames}"
    print(f"  frames: {frames}" + ("" if result.frames_ok else "  FAIL: an output's frame count differs"))


def report_summary(results: list[Result]) -> None:
    print(f"\nsummary ({len(results)} cases; wall = tools/call -> completion seen, best of each side):")
    print(
        f"  {'source':18s} {'len':>5s} {'variant':16s} {'vidforge':>9s} {'ffmpeg':>8s} {'ratio':>6s}       "
        f"{'CPU-s vf':>8s} {'ff':>6s}  frames"
    )
    for r in results:
        print(
            f"  {r.case.source:18s} {r.case.seconds:4g}s {r.case.variant:16s} {r.wall:8.2f}s {r.ff_wall:7.2f}s "
            f"{r.ratio:6.2f} {'PASS' if r.ratio <= WALL_TARGET else 'FAIL':4s}  {r.best.cpu_s:8.1f} {r.ff_cpu:6.1f}  "
            f"{'ok' if r.frames_ok else 'FAIL'}"
        )
    if results:
        worst = max(results, key=lambda r: r.ratio)
        failed = sum(r.ratio > WALL_TARGET for r in results)
        print(f"  worst: {worst.case.label}, ratio {worst.ratio:.2f}; {failed} of {len(results)} over {WALL_TARGET}")
        bad_frames = [r.case.label for r in results if not r.frames_ok]
        print(f"  frame counts: {'all equal to the source' if not bad_frames else 'FAIL in ' + ', '.join(bad_frames)}")


def _names(text: str, known, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        sys.exit(f"unknown {what} {unknown}: choose from {', '.join(known)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", default=",".join(SOURCES), help=f"comma-separated, of {', '.join(SOURCES)}")
    parser.add_argument("--lengths", default=",".join(f"{s:g}" for s in LENGTHS), help="source lengths, seconds")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--repeat", type=int, default=1, help="run both sides this many times, keep the best of each")
    parser.add_argument("--workdir", help="sources (reused), outputs and the server's data (default: a temporary dir)")
    parser.add_argument(
        "--quick", action="store_true", help=f"a smoke run: 10 s, {' and '.join(QUICK_SOURCES)}, {QUICK_VARIANTS[0]}"
    )
    args = parser.parse_args()
    if args.quick:
        args.lengths, args.sources, args.variants = "10", ",".join(QUICK_SOURCES), ",".join(QUICK_VARIANTS)
    sources = _names(args.sources, SOURCES, "sources")
    variants = _names(args.variants, VARIANTS, "variants")
    lengths = [float(n) for n in args.lengths.split(",") if n.strip()]
    cases = [Case(s, n, v) for n in lengths for s in sources for v in variants]
    workdir = args.workdir or tempfile.mkdtemp(prefix="vidforge-matrix-")
    print(
        f"render matrix: {len(cases)} cases ({', '.join(sources)} x {', '.join(f'{n:g} s' for n in lengths)} x "
        f"{', '.join(variants)}), 720p, best of {args.repeat}; {os.cpu_count()} CPUs, load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )

    # Every source first (generating one would load the machine beside a render), and the warm-up's: long enough
    # for one segment per CPU (2 s each at least), so every segment worker a case uses has started before it.
    for case in cases:
        matrix_source(workdir, case.source, case.seconds, case.audio)
    warm_source = matrix_source(workdir, "gradient", max(4.0, 2.0 * (os.cpu_count() or 1)), True)
    logo = matrix_logo(workdir)

    results: list[Result] = []
    with BenchServer(os.path.join(workdir, "server")) as server:
        print(f"server start-up (excluded): {server.startup_s:.1f} s", flush=True)
        uploads = {warm_source: server.upload(warm_source), logo: server.upload(logo)}
        started = time.perf_counter()
        render_once(server, render_args(uploads[warm_source], uploads[logo], RESOLUTION))
        print(f"warm-up render (excluded): {time.perf_counter() - started:.1f} s", flush=True)
        for case in cases:
            results.append(run_case(server, case, workdir, uploads, logo, max(1, args.repeat)))
            report_case(results[-1])
    report_summary(results)
    print(f"\noutputs in {workdir}")


if __name__ == "__main__":
    main()
