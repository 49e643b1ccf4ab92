"""The GPU path against the CPU path: the benchmark clip rendered to 720p by the render kernels alone.

No Ray, no server: PyAV, numpy and Pillow only, so it runs on a bare GPU machine. The same render (the kernels'
segments in turn, then the mux with the source's audio) along each path this machine has:

- cpu: software decode, CPU scale (swscale bicubic), libx264: what every node without a GPU runs;
- nvdec+nvenc: NVDEC decode and downscale on the GPU, h264_nvenc: where the GPU has NVENC (L4, L40S);
- nvdec+libx264: NVDEC decode and downscale on the GPU, libx264 on the CPU: the path for a GPU without
  NVENC (H100, H200), measured on any GPU where NVDEC opens.

Prints, per path: frames per second over the whole render (its segments one after another, so each path
gets the same single stream of work), the ratio to the CPU path, the kernels' decode (+scale) and encode
seconds, the output's frame count and its PSNR-Y against the CPU path's output (average and worst frame);
then one line per path this machine lacks, with the reason. Without a GPU only the CPU path runs.

    .venv/bin/python benchmarks/gpu_path.py                 # 30 s clip, 3 segments
    .venv/bin/python benchmarks/gpu_path.py --seconds 2     # a quick check
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from itertools import zip_longest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # render_kernels, bare
from clips import benchmark_clip, luma_planes  # noqa: E402

# isort: split

import av  # noqa: E402
import av.logging  # noqa: E402
from media import psnr_y  # noqa: E402 - tests/ is on the path (clips)

from render_kernels.audio import EncodedAudio, encode_audio
from render_kernels.decoders import NVDEC_DECODERS, nvdec_refusal  # noqa: E402
from render_kernels.encoders import open_video_encoder  # noqa: E402
from render_kernels.mux import mux_segments
from render_kernels.plan import plan_segments
from render_kernels.probe import probe
from render_kernels.source_info import (
    SourceInfo,
    frame_rate,  # noqa: E402
)
from render_kernels.spec import RenderSpec
from render_kernels.video import encode_segment

RESOLUTION = "720p"


@dataclass(frozen=True)
class Path:
    name: str
    spec: RenderSpec


@dataclass(frozen=True)
class Result:
    path: Path
    frames: int
    wall_s: float
    decode_s: float
    encode_s: float
    output: str


def nvenc_refusal(info: SourceInfo) -> str | None:
    """Why h264_nvenc does not open here at the output size, or None when it does."""
    width, height = RenderSpec("mp4", RESOLUTION).output_size(info)
    try:
        open_video_encoder("h264_nvenc", width, height, frame_rate(info.fps))
    except (av.FFmpegError, ValueError, OSError) as err:
        return str(err)
    return None


def paths(info: SourceInfo) -> tuple[list[Path], list[str]]:
    """The paths this machine has, and a line for each it lacks."""
    nvdec = NVDEC_DECODERS.get(info.video_codec)
    cpu = Path("cpu (decode, scale, libx264)", RenderSpec("mp4", RESOLUTION, video_encoder="libx264"))
    nvdec_refused = nvdec_refusal(info.video_codec, info.width, info.height, info.pixel_format)
    nvenc_refused = nvenc_refusal(info)
    gpu_nvenc = Path("nvdec+nvenc", RenderSpec("mp4", RESOLUTION, video_encoder="h264_nvenc", video_decoder=nvdec))
    gpu_x264 = Path("nvdec+libx264", RenderSpec("mp4", RESOLUTION, video_encoder="libx264", video_decoder=nvdec))
    available, missing = [cpu], []
    for path, refusals in ((gpu_nvenc, (nvdec_refused, nvenc_refused)), (gpu_x264, (nvdec_refused,))):
        reasons = [r for r in refusals if r is not None]
        if reasons:
            missing.append(f"{path.name}: unavailable: {'; '.join(reasons)}")
        else:
            available.append(path)
    return available, missing


def render(
    source: str, info: SourceInfo, path: Path, segments: int, out_path: str, audio: EncodedAudio | None
) -> Result:
    """The kernels' segments of the render one after another, timed, then muxed with `audio` (untimed)."""
    started = time.perf_counter()
    encoded = [encode_segment(source, s, path.spec, info) for s in plan_segments(info, segments)]
    wall_s = time.perf_counter() - started
    mux_segments(encoded, audio, "mp4", out_path, info.fps)
    return Result(
        path,
        sum(e.frame_count for e in encoded),
        wall_s,
        sum(e.stats.decode_s for e in encoded),
        sum(e.stats.encode_s for e in encoded),
        out_path,
    )


def compare(output: str, reference: str) -> tuple[int, float, float]:
    """(frames in `output`, average PSNR-Y against `reference`, worst frame's); identical frames count as 99 dB."""
    frames, scores = 0, []
    for ours, theirs in zip_longest(luma_planes(output), luma_planes(reference)):
        frames += ours is not None
        if ours is not None and theirs is not None:
            scores.append(min(psnr_y(ours, theirs), 99.0))
    return frames, (sum(scores) / len(scores) if scores else math.nan), min(scores, default=math.nan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", help="source video (default: generate a 1080p30 clip with audio)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of the generated clip")
    parser.add_argument(
        "--segments", type=int, default=3, help="segments of the render (each decoder seeks to its own)"
    )
    parser.add_argument("--workdir", help="where inputs and outputs go (default: a temporary directory)")
    args = parser.parse_args()
    av.logging.set_level(av.logging.ERROR)  # FFmpeg's own reason when a GPU codec does not open
    workdir = args.workdir or tempfile.mkdtemp(prefix="vidforge-gpu-")
    os.makedirs(workdir, exist_ok=True)
    source = args.input or benchmark_clip(workdir, args.seconds)
    info = probe(source)
    width, height = RenderSpec("mp4", RESOLUTION).output_size(info)
    planned = len(plan_segments(info, args.segments))
    print(
        f"source: {info.width}x{info.height} {info.video_codec} {info.pixel_format} {info.fps:g} fps, "
        f"{info.frame_count} frames, {info.duration_s:.1f} s; out {width}x{height}, {planned} segments in turn; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )

    available, missing = paths(info)
    audio = encode_audio(source, "mp4")
    results = []
    for number, path in enumerate(available):
        results.append(render(source, info, path, args.segments, os.path.join(workdir, f"path-{number}.mp4"), audio))

    cpu = results[0]
    print(f"\n{'path':<30} {'fps':>8} {'x cpu':>6} {'decode s':>9} {'encode s':>9} {'frames':>7}  PSNR-Y vs cpu")
    for result in results:
        frames, average, worst = compare(result.output, cpu.output)
        fps = result.frames / result.wall_s
        quality = "(reference)" if result is cpu else f"{average:.2f} dB average, {worst:.2f} dB worst frame"
        print(
            f"{result.path.name:<30} {fps:>8.1f} {fps / (cpu.frames / cpu.wall_s):>6.2f} {result.decode_s:>9.2f} "
            f"{result.encode_s:>9.2f} {frames:>7}  {quality}"
        )
        if frames != info.frame_count:
            print(f"  MISMATCH: {frames} frames out of {info.frame_count}")
    for line in missing:
        print(line)
    print(f"\noutputs in {workdir}")


if __name__ == "__main__":
    main()
