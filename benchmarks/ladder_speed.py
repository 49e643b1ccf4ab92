"""A streaming ladder made by the render kernels against the ffmpeg CLI making the same ladder in one command.

The source is the benchmarks' 1080p30 clip with audio. vidforge: the chunks a render on this machine's CPUs cuts
(on the ladder's keyframe grid), each encoded in a process of its own with the progressive 1080p picture and the
four rungs (1080p, 720p, 480p, 360p), the audio beside them, then packaged (CMAF segments, MPD, HLS playlists).
ffmpeg: one command decoding once, `split` into the same five encodes (x264 at the kernels' settings, the same
GOPs and rate caps), the rungs through its `hls` fMP4 muxer; and the same without the progressive file. Each
rung's bytes and PSNR-Y (against the source scaled to the rung's size) are printed beside ffmpeg's.
Targets: vidforge's wall time within 1.10x ffmpeg's for the same outputs; each rung's bytes within 2 % of ffmpeg's
at its PSNR-Y.

    .venv/bin/python benchmarks/ladder_speed.py --seconds 30
    .venv/bin/python benchmarks/ladder_speed.py --seconds 30 --repeat 3   # best of three, interleaved

`--repeat R` runs the three sides R times, interleaved, and compares the best of each: on a shared machine one run
can land on a busy minute.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

import av
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clips import FFMPEG, benchmark_clip  # noqa: E402

from render_kernels.audio import encode_audio  # noqa: E402
from render_kernels.encoders import X264_OPTIONS, segment_threads  # noqa: E402
from render_kernels.ladder import DEFAULT_RUNGS, LadderSpec, rung_options  # noqa: E402
from render_kernels.mux import mux_segments  # noqa: E402
from render_kernels.plan import plan_segments  # noqa: E402
from render_kernels.probe import probe  # noqa: E402
from render_kernels.spec import RenderSpec  # noqa: E402
from render_kernels.streaming import package_stream  # noqa: E402
from render_kernels.video import encode_segment  # noqa: E402

TARGET_WALL_RATIO = 1.10
TARGET_BYTES = 0.02
LADDER = LadderSpec(DEFAULT_RUNGS, segment_s=4.0)


def vidforge(source: str, out_dir: str, cpus: int) -> float:
    info = probe(source)
    segments = plan_segments(info, cpus, cut_multiple=LADDER.keyframe_interval(info.fps))
    spec = RenderSpec("mp4", "1080p", video_encoder="libx264", segment_threads=segment_threads(cpus, len(segments)))
    started = time.perf_counter()
    # One process more than CPUs: the audio rides along beside the chunks, as a render's audio task asks for no CPU.
    with ProcessPoolExecutor(cpus + 1) as pool:
        audio = pool.submit(encode_audio, source, "mp4")
        chunks = [pool.submit(encode_segment, source, segment, spec, info, ladder=LADDER) for segment in segments]
        encoded = [chunk.result() for chunk in chunks]
        mux_segments(iter(encoded), audio.result(), "mp4", os.path.join(out_dir, "final.mp4"), info.fps)
        package_stream(iter(encoded), audio.result(), LADDER, info.fps, os.path.join(out_dir, "stream"))
    return time.perf_counter() - started


def ffmpeg(source: str, out_dir: str, progressive: bool) -> float:
    info = probe(source)
    interval = LADDER.keyframe_interval(info.fps)
    sizes = LADDER.sizes(info)
    labels = [f"r{index}" for index in range(len(sizes))]
    split = len(sizes) + (1 if progressive else 0)
    graph = f"[0:v]split={split}" + "".join(f"[s{i}]" for i in range(split)) + ";"
    graph += ";".join(f"[s{i}]scale={w}:{h}:flags=area[{labels[i]}]" for i, (w, h) in enumerate(sizes))
    command = [*FFMPEG, "-y", "-i", source, "-filter_complex", graph]
    for index, rung in enumerate(LADDER.rungs):
        options = rung_options(rung, interval)
        command += ["-map", f"[{labels[index]}]", f"-c:v:{index}", "libx264", f"-preset:v:{index}", "veryfast"]
        command += [f"-crf:v:{index}", X264_OPTIONS["crf"], f"-x264-params:v:{index}", options["x264-params"]]
        command += [f"-maxrate:v:{index}", options["maxrate"], f"-bufsize:v:{index}", options["bufsize"]]
    command += ["-map", "0:a", "-c:a", "aac"]
    streams = " ".join(f"v:{i},agroup:aud" for i in range(len(sizes))) + " a:0,agroup:aud"
    stream_dir = os.path.join(out_dir, "stream")
    command += ["-f", "hls", "-hls_time", f"{LADDER.segment_s:g}", "-hls_segment_type", "fmp4"]
    command += ["-hls_playlist_type", "vod", "-hls_flags", "independent_segments", "-master_pl_name", "master.m3u8"]
    command += ["-var_stream_map", streams, os.path.join(stream_dir, "%v", "media.m3u8")]
    if progressive:
        command += ["-map", f"[s{split - 1}]", "-map", "0:a", "-c:v", "libx264", "-preset", "veryfast"]
        command += ["-crf", X264_OPTIONS["crf"], "-c:a", "aac", os.path.join(out_dir, "final.mp4")]
    os.makedirs(stream_dir, exist_ok=True)
    started = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - started


def rung_figures(playlist: str, source: str, size: tuple[int, int]) -> tuple[int, float]:
    """(bytes of the rung's segments and init, mean PSNR-Y against the source scaled to `size` by area)."""
    directory = os.path.dirname(playlist)
    with open(playlist) as fh:
        listed = [line.strip() for line in fh if line.strip() and not line.startswith("#")]
    with open(playlist) as fh:
        init = [line.split('URI="')[1].split('"')[0] for line in fh if line.startswith("#EXT-X-MAP")]
    size_bytes = sum(os.path.getsize(os.path.join(directory, name)) for name in {*listed, *init})
    errors = []
    with av.open(playlist) as out, av.open(source) as src:
        for made, original in zip(out.decode(video=0), src.decode(video=0), strict=False):
            ref = original.reformat(*size, "yuv420p", interpolation="AREA").to_ndarray()[: size[1]]
            got = made.to_ndarray(format="yuv420p")[: size[1]]
            errors.append(np.mean((ref.astype(np.float64) - got.astype(np.float64)) ** 2))
    return size_bytes, float(np.mean([10 * np.log10(255**2 / max(e, 1e-10)) for e in errors]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "vidforge-bench"))
    parser.add_argument("--repeat", type=int, default=1, help="run every side this many times, keep the best")
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    os.makedirs(args.workdir, exist_ok=True)
    source = benchmark_clip(args.workdir, args.seconds)
    runs = {name: os.path.join(args.workdir, "ladder", name) for name in ("vidforge", "ffmpeg", "ffmpeg-ladder")}
    walls: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(max(1, args.repeat)):  # interleaved: a busy spell of the machine falls on every side alike
        for path in runs.values():
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(path)
        walls["vidforge"].append(vidforge(source, runs["vidforge"], cpus))
        walls["ffmpeg"].append(ffmpeg(source, runs["ffmpeg"], progressive=True))
        walls["ffmpeg-ladder"].append(ffmpeg(source, runs["ffmpeg-ladder"], progressive=False))
    ours, theirs, ladder_only = (min(walls[name]) for name in runs)
    best = f", best of {len(walls['vidforge'])}" if len(walls["vidforge"]) > 1 else ""
    print(f"{args.seconds:g} s 1080p30 -> progressive 1080p + {', '.join(LADDER.rungs)} on {cpus} CPUs{best}")
    print(f"  vidforge: {ours:.1f} s; ffmpeg, the same outputs: {theirs:.1f} s (ratio {ours / theirs:.2f}, ", end="")
    print(f"target <= {TARGET_WALL_RATIO:.2f}); ffmpeg, the ladder alone: {ladder_only:.1f} s")
    if len(walls["vidforge"]) > 1:
        print("  every run: " + "; ".join(f"{name} " + ", ".join(f"{w:.1f}" for w in walls[name]) for name in runs))
    info = probe(source)
    print(f"  {'rung':>6} {'vidforge KiB':>12} {'PSNR-Y':>7} {'ffmpeg KiB':>10} {'PSNR-Y':>7} {'bytes':>7}")
    for index, (rung, size) in enumerate(zip(LADDER.rungs, LADDER.sizes(info), strict=True)):
        our_bytes, our_psnr = rung_figures(os.path.join(runs["vidforge"], "stream", f"{rung}.m3u8"), source, size)
        ff_playlist = os.path.join(runs["ffmpeg"], "stream", str(index), "media.m3u8")
        ff_bytes, ff_psnr = rung_figures(ff_playlist, source, size)
        print(
            f"  {rung:>6} {our_bytes / 1024:12.0f} {our_psnr:7.2f} {ff_bytes / 1024:10.0f} {ff_psnr:7.2f} "
            f"{(our_bytes / ff_bytes - 1) * 100:+6.1f}% (target within {TARGET_BYTES * 100:.0f} % at its PSNR-Y)"
        )


if __name__ == "__main__":
    main()
