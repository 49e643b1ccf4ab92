"""Rate-distortion: the bits vidforge's encodes spend against the ffmpeg CLI's at equal quality (BD-rate).

For each matrix source (matrix_sources.py, video only), and `camera`, the upscaling case (camera-like footage at
640x272 23.976 fps, H.264 High with B-frames, rendered to 1694x720), at four CRF points: vidforge's encode exactly as a render
makes it (probe, plan_segments as the driver plans on this machine, encode_segment for each segment, mux_segments;
so its segments and their seams are in it) and one ffmpeg command (libx264 at the kernels' preset, ffmpeg's default
scaler: bicubic, as the kernels'), both to 720p. Both are scored against the same reference, the source scaled
with lanczos: video-stream bit rate and PSNR-Y averaged over every frame (and, for vidforge, the lowest PSNR-Y
of the frames either side of each seam). From the two curves, the Bjøntegaard delta rate (`bd_rate`): how many
more bits vidforge needs than ffmpeg for the same PSNR-Y (target <= +2 %). VMAF too when the ffmpeg build has
libvmaf (Debian's has not: then the report says it was not measured).

In-process: no Ray, no server. The CRF is changed for one encode by setting the kernels' x264 options in this
process (`x264_crf`).

    .venv/bin/python benchmarks/rate_distortion.py                       # 5 sources x 10 s, CRF 19/23/27/31
    .venv/bin/python benchmarks/rate_distortion.py --quick               # 2 sources x 4 s
    .venv/bin/python benchmarks/rate_distortion.py --seconds 30 --sources noisy --crfs 18,22,26,30
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)  # the sibling benchmarks (imported where used: see `bd_rate`)

CRFS = (19, 23, 27, 31)
RESOLUTION = "720p"
BD_RATE_TARGET_PCT = 2.0
QUICK_SOURCES, QUICK_SECONDS = ("gradient", "noisy"), 4.0


def bd_rate(
    rates_a: Sequence[float], psnr_a: Sequence[float], rates_b: Sequence[float], psnr_b: Sequence[float]
) -> float:
    """Bjøntegaard delta rate of curve b against curve a, in percent: how many more bits b spends than a for the
    same quality, on average over the quality range both curves cover (negative: b spends fewer).

    The classic method: for each curve, log10(rate) fitted as a cubic polynomial of the quality (PSNR, or any
    score where higher is better; a lower degree with fewer than 4 points), each fit integrated over the
    overlapping quality range; the mean difference d of the log rates gives 10^d - 1. Pure (numpy only: the unit
    test imports this module without the measuring stack, which is imported inside the functions below).
    """
    if min(len(rates_a), len(rates_b)) < 2:
        raise ValueError("a curve needs at least two points")
    lo = max(min(psnr_a), min(psnr_b))
    hi = min(max(psnr_a), max(psnr_b))
    if hi <= lo:
        raise ValueError(
            f"the curves share no quality range (a {min(psnr_a)}..{max(psnr_a)}, b {min(psnr_b)}..{max(psnr_b)})"
        )

    def mean_log_rate(rates: Sequence[float], quality: Sequence[float]) -> float:
        fit = np.polyfit(np.asarray(quality, float), np.log10(np.asarray(rates, float)), min(3, len(rates) - 1))
        integral = np.polyint(fit)
        return float((np.polyval(integral, hi) - np.polyval(integral, lo)) / (hi - lo))

    return (10 ** (mean_log_rate(rates_b, psnr_b) - mean_log_rate(rates_a, psnr_a)) - 1) * 100


# --- the encodes --------------------------------------------------------------------------------------------


@contextmanager
def x264_crf(crf: int) -> Iterator[None]:
    """The kernels' x264 CRF set to `crf` in this process while the block runs, then restored.

    Faithful to a render at that CRF: `X264_OPTIONS` is the very dict `ENCODER_OPTIONS["libx264"]` holds, and
    `encoders.open_video_encoder` copies it each time it opens an encoder, so every segment encoder opened in the
    block runs at `crf` with everything else as a render has it (preset, frame threads, global header); the
    dict is changed in place, never replaced, and nothing reads it once the encoder is open.
    """
    from render_kernels.encoders import X264_OPTIONS

    saved = X264_OPTIONS["crf"]
    X264_OPTIONS["crf"] = str(crf)
    try:
        yield
    finally:
        X264_OPTIONS["crf"] = saved


def segment_plan(info, workers: int):
    """The segments a render of `info` plans on `workers` CPUs (render_plan.plan_render: plan_segments at that
    width, max_frames from Config's segment_max_megapixels at the output size, as render_plan._max_segment_frames)."""
    from render_kernels.plan import plan_segments
    from render_kernels.spec import RenderSpec
    from serve_app._config import Config

    width, height = RenderSpec("mp4", RESOLUTION).output_size(info)
    max_frames = max(1, Config.model_fields["segment_max_megapixels"].default * 1_000_000 // (width * height))
    return plan_segments(info, workers, max_frames=max_frames)


def encode_vidforge(source: str, info, segments, crf: int, out_path: str, cpus: int) -> float:
    """The render's video, made by the kernels one segment after another (each segment's bytes are the same
    wherever it runs: the render fixes the encoder and its thread count), muxed; returns the wall seconds."""
    from render_kernels.encoders import segment_threads
    from render_kernels.mux import mux_segments
    from render_kernels.spec import RenderSpec
    from render_kernels.video import encode_segment

    # What a CPU node's render fixes: the encoder, and the threads its plan leaves each segment (plan_render).
    threads = segment_threads(cpus, len(segments))
    spec = RenderSpec("mp4", RESOLUTION, video_encoder="libx264", segment_threads=threads)
    started = time.perf_counter()
    with x264_crf(crf):
        encoded = (encode_segment(source, segment, spec, info) for segment in segments)  # read by the mux in turn
        mux_segments(encoded, None, "mp4", out_path, info.fps)
    return time.perf_counter() - started


def encode_ffmpeg(source: str, crf: int, out_path: str, threads: int | None) -> float:
    """render_throughput's ffmpeg command for the same job (no watermark; the source has no audio), at `crf`."""
    from render_throughput import ffmpeg_command  # imports Ray: kept out of `bd_rate`'s import

    from render_kernels.spec import RenderSpec

    with x264_crf(crf):
        command = ffmpeg_command(source, RenderSpec("mp4", RESOLUTION), out_path)
    if threads:
        command[-1:-1] = ["-threads", str(threads)]
    started = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - started


# --- the scores ---------------------------------------------------------------------------------------------


@dataclass
class Point:
    """One encode at one CRF: video bit rate, per-frame PSNR-Y against the reference, VMAF when measured."""

    crf: int
    path: str
    encode_s: float
    kbps: float = 0.0
    psnr: list[float] = field(default_factory=list)
    vmaf: float | None = None
    frames: int = 0  # the output's frame count (probe)

    @property
    def mean_psnr(self) -> float:
        finite = [s for s in self.psnr if math.isfinite(s)]  # an identical frame would count as infinite
        return sum(finite) / len(finite) if finite else math.inf

    def at(self, frames: Sequence[int]) -> float:
        return min((self.psnr[i] for i in frames if 0 <= i < len(self.psnr)), default=math.inf)


def score(points: list[Point], source: str, info) -> None:
    """Bit rate and per-frame PSNR-Y of every point, against one pass of the lanczos reference."""
    from clips import luma_planes
    from media import psnr_y
    from render_throughput import lanczos_reference, stream_bytes

    from render_kernels.spec import RenderSpec

    width, height = RenderSpec("mp4", RESOLUTION).output_size(info)
    seconds = info.frame_count / info.fps
    for point in points:
        point.kbps = stream_bytes(point.path).get("video", 0) * 8 / seconds / 1000
    for reference, *planes in zip(lanczos_reference(source, width, height), *(luma_planes(p.path) for p in points)):
        for point, plane in zip(points, planes):
            point.psnr.append(psnr_y(plane, reference))


def has_libvmaf() -> bool:
    filters = subprocess.run(["ffmpeg", "-hide_banner", "-filters"], capture_output=True, text=True).stdout
    return re.search(r"^\s*\S+\s+libvmaf\s", filters, re.MULTILINE) is not None


def vmaf(path: str, source: str, width: int, height: int) -> float:
    """libvmaf's VMAF score (its default model, pooled mean) of `path` against the lanczos-scaled source."""
    graph = (
        f"[1:v]scale={width}:{height}:flags=lanczos,format=yuv420p[ref];[0:v]format=yuv420p[main];"
        f"[main][ref]libvmaf=n_threads={os.cpu_count() or 1}"
    )
    command = ["ffmpeg", "-hide_banner", "-nostats", "-i", path, "-i", source, "-lavfi", graph, "-f", "null", "-"]
    log = subprocess.run(command, capture_output=True, text=True, check=True).stderr
    return float(re.findall(r"VMAF score[:=]\s*([0-9.]+)", log)[-1])


# --- one source ---------------------------------------------------------------------------------------------


@dataclass
class SourceResult:
    name: str
    frames: int
    seams: list[int]  # the first frame of each segment after the first
    vidforge: list[Point]
    ffmpeg: list[Point]
    bd_psnr: float
    bd_vmaf: float | None
    frame_counts_ok: bool

    def seam_frames(self) -> list[int]:
        return [i for seam in self.seams for i in (seam - 1, seam)]


def _bd(a: list[Point], b: list[Point], quality) -> float:
    try:
        return bd_rate([p.kbps for p in a], [quality(p) for p in a], [p.kbps for p in b], [quality(p) for p in b])
    except ValueError as err:
        print(f"  BD-rate not computed: {err}")
        return math.nan


def measure_source(name: str, args, workdir: str, with_vmaf: bool) -> SourceResult:
    from matrix_sources import matrix_source

    from render_kernels.probe import probe
    from render_kernels.spec import RenderSpec

    source = matrix_source(workdir, name, args.seconds, audio=False)
    info = probe(source)
    segments = segment_plan(info, args.workers)
    seams = [s.start_frame for s in segments[1:]]
    width, height = RenderSpec("mp4", RESOLUTION).output_size(info)
    print(
        f"\n{name}: {info.width}x{info.height} {info.fps:g} fps, {info.frame_count} frames -> {width}x{height}; "
        f"vidforge plans {len(segments)} segment(s) on {args.workers} CPUs, seams at frames {seams or 'none'}",
        flush=True,
    )
    vf_points, ff_points = [], []
    for crf in args.crfs:  # interleaved: a load change on a shared machine hits both sides alike
        vf_out = os.path.join(workdir, "rd", f"{name}-{args.seconds:g}s-crf{crf}-vidforge.mp4")
        ff_out = os.path.join(workdir, "rd", f"{name}-{args.seconds:g}s-crf{crf}-ffmpeg.mp4")
        os.makedirs(os.path.dirname(vf_out), exist_ok=True)
        vf_points.append(Point(crf, vf_out, encode_vidforge(source, info, segments, crf, vf_out, args.workers)))
        ff_points.append(Point(crf, ff_out, encode_ffmpeg(source, crf, ff_out, args.ffmpeg_threads)))
        print(
            f"  CRF {crf}: vidforge {vf_points[-1].encode_s:.1f} s, ffmpeg {ff_points[-1].encode_s:.1f} s", flush=True
        )
    started = time.perf_counter()
    score(vf_points + ff_points, source, info)
    if with_vmaf:
        for point in vf_points + ff_points:
            point.vmaf = vmaf(point.path, source, width, height)
    print(f"  scored in {time.perf_counter() - started:.1f} s")
    for point in vf_points + ff_points:  # what a player counts, not only what the scoring pass paired up
        point.frames = probe(point.path).frame_count
    counts_ok = all(p.frames == len(p.psnr) == info.frame_count for p in vf_points + ff_points)
    result = SourceResult(
        name,
        info.frame_count,
        seams,
        vf_points,
        ff_points,
        _bd(ff_points, vf_points, lambda p: p.mean_psnr),
        _bd(ff_points, vf_points, lambda p: p.vmaf) if with_vmaf else None,
        counts_ok,
    )
    report_source(result)
    return result


def report_source(r: SourceResult) -> None:
    seam_frames = r.seam_frames()
    vmaf_head = f"  {'VMAF':>5}" if r.bd_vmaf is not None else ""
    print(
        f"  {'CRF':>4}  {'vidforge kbit/s':>15} {'PSNR-Y':>7} {'seam min':>8}{vmaf_head}"
        f"   {'ffmpeg kbit/s':>13} {'PSNR-Y':>7} {'at seams':>8}{vmaf_head}"
    )
    for vf, ff in zip(r.vidforge, r.ffmpeg):
        vf_vmaf = f"  {vf.vmaf:5.2f}" if vf.vmaf is not None else ""
        ff_vmaf = f"  {ff.vmaf:5.2f}" if ff.vmaf is not None else ""
        vf_seam = f"{vf.at(seam_frames):8.2f}" if seam_frames else f"{'-':>8}"
        ff_seam = f"{ff.at(seam_frames):8.2f}" if seam_frames else f"{'-':>8}"
        print(
            f"  {vf.crf:>4}  {vf.kbps:15.1f} {vf.mean_psnr:7.2f} {vf_seam}{vf_vmaf}"
            f"   {ff.kbps:13.1f} {ff.mean_psnr:7.2f} {ff_seam}{ff_vmaf}"
        )
    if not r.frame_counts_ok:
        counts = {os.path.basename(p.path): p.frames for p in r.vidforge + r.ffmpeg}
        print(f"  FAIL: frame counts differ from the source's {r.frames}: {counts}")
    for side, points in (("vidforge", r.vidforge), ("ffmpeg", r.ffmpeg)):
        if not rises(points):
            print(f"  note: {side}'s bit rate does not rise with its PSNR-Y here: the BD-rate's fit is a poor guide")
    print(f"  BD-rate vidforge vs ffmpeg (PSNR-Y): {r.bd_psnr:+.2f} %  {verdict(r.bd_psnr)}")
    if r.bd_vmaf is not None:
        print(f"  BD-rate vidforge vs ffmpeg (VMAF):   {r.bd_vmaf:+.2f} %  {verdict(r.bd_vmaf)}")


def rises(points: list[Point]) -> bool:
    """Whether the rate rises with the quality along the curve (what a rate-distortion curve does, and what
    fitting log rate as a function of PSNR assumes)."""
    ordered = sorted(points, key=lambda p: p.mean_psnr)
    return all(a.kbps < b.kbps for a, b in zip(ordered, ordered[1:]))


def verdict(pct: float) -> str:
    if math.isnan(pct):
        return "(not computed)"
    return f"{'PASS' if pct <= BD_RATE_TARGET_PCT else 'FAIL'} (target <= +{BD_RATE_TARGET_PCT:g} %)"


def main() -> None:
    from matrix_sources import ALL_SOURCES as SOURCES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sources", default=",".join(SOURCES), help=f"comma-separated, of {', '.join(SOURCES)}")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each source")
    parser.add_argument("--crfs", default=",".join(map(str, CRFS)), help="the CRF points (at least 2; 4 for a cubic)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="the plan's width (default: CPUs)")
    parser.add_argument("--ffmpeg-threads", type=int, default=None, help="ffmpeg's -threads (default: its own)")
    parser.add_argument("--workdir", help="sources and encodes (sources are reused; default: a temporary dir)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SECONDS:g} s clips of {', '.join(QUICK_SOURCES)}")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.sources = QUICK_SECONDS, ",".join(QUICK_SOURCES)
    args.crfs = [int(c) for c in args.crfs.split(",") if c.strip()]
    names = [n for n in args.sources.split(",") if n.strip()]
    workdir = args.workdir or tempfile.mkdtemp(prefix="vidforge-rd-")
    with_vmaf = has_libvmaf()
    print(
        f"rate-distortion: {len(names)} source(s) x {args.seconds:g} s, CRF {args.crfs}, 720p; load average "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; ffmpeg threads: {args.ffmpeg_threads or 'its own'}, "
        "vidforge's: those its plan gives each segment (segment_threads)"
    )
    if not with_vmaf:
        print("VMAF: not measured (this ffmpeg build has no libvmaf filter: `ffmpeg -filters`); PSNR-Y only")

    results = [measure_source(name, args, workdir, with_vmaf) for name in names]

    print("\nsummary: BD-rate of vidforge against ffmpeg (positive: vidforge needs more bits for the same quality)")
    for r in results:
        seam_frames = r.seam_frames()
        seam = min(p.at(seam_frames) for p in r.vidforge) if seam_frames else None
        seam_text = f"worst seam frame PSNR-Y {seam:.2f} dB" if seam is not None else "no seams"
        vmaf_text = f", VMAF {r.bd_vmaf:+.2f} %" if r.bd_vmaf is not None else ""
        frames = "" if r.frame_counts_ok else ", FRAME COUNT FAIL"
        if not (rises(r.vidforge) and rises(r.ffmpeg)):
            frames += " (a curve whose rate does not rise with PSNR: the BD-rate is a poor guide)"
        print(
            f"  {r.name:18s} PSNR-Y {r.bd_psnr:+6.2f} % {verdict(r.bd_psnr)}{vmaf_text}; "
            f"{len(r.seams) + 1} segment(s), {seam_text}{frames}"
        )
    finite = [r for r in results if not math.isnan(r.bd_psnr)]
    if finite:
        worst = max(finite, key=lambda r: r.bd_psnr)
        print(f"  worst: {worst.name} {worst.bd_psnr:+.2f} %")
    if not with_vmaf:
        print("  VMAF not measured: the ffmpeg build lacks libvmaf")
    print(f"\nencodes in {os.path.join(workdir, 'rd')}")


if __name__ == "__main__":
    main()
