"""The sources of the render matrix (issue #22, "Performance that holds on every source"): 1920x1080 30 fps H.264
in mp4 of any length (and `camera`, outside the matrix: see below), with a 440 Hz AAC stereo 48 kHz tone or
without audio: the silent one made by one ffmpeg command from lavfi inputs, the other from its video and the
tone, once per work dir (written under a `.partial` name, then renamed: a clip already there is reused; an
interrupted run leaves none half-made).

- `gradient`: a horizontal RGB gradient whose levels shift 3 a frame, and a 40-pixel white square moving 7 px a
  frame; x264 ultrafast CRF 18 (no B-frames), a keyframe every 30 frames. Easy to compress.
- `noisy`: a zoom into the Mandelbrot set (soft, detailed, scaled up from 640x360 as a camera's picture is
  soft) under film grain that changes every frame (`noise=allf=t+u`); x264 veryfast CRF 20 without B-frames,
  a keyframe every 30 frames: ~20 Mbit/s, hard to compress and heavy to decode. Past 30 s the zoom starts
  again (on a keyframe), under grain of its own: its deeper frames cost minutes each to compute.
- `long_gop`: the moving test pattern (`testsrc2`), a keyframe every 10 s (keyint 300, no scene cuts), no
  B-frames: segments are cut between keyframes, and each decodes a lead-in from the keyframe before it.
- `bframes_editlist`: the test pattern with its hue turning, x264 veryfast with 3 B-frames (and a keyframe
  every 60 frames): the mp4 muxer writes an edit list on the video track (`elst`, media_time = the B-frame
  delay) so that the first frame shows at 0. Checked when it is made (`video_edit_list`: the box is read
  from the file; a clip without it raises), and visible with ffprobe: `-show_entries stream=start_time`
  says 0 with the edit list applied, 0.066667 (2 frames) with `-ignore_editlist 1`; every other source's
  video edit list (ffmpeg's mp4 muxer writes one on every track) starts at media time 0.
- `camera` (issue 38; not in the render matrix, `SOURCES`, but in `ALL_SOURCES`): what a camera writes at 640x272
  (2.35:1) 23.976 fps, for the upscaling case of rate_distortion.py (to 1694x720). A detailed, desaturated still
  (a Mandelbrot view rendered once at 1280x544) seen through a handheld camera: a slow pan with shake (a 1152x490
  crop that drifts, scaled down, so the picture moves by sub-pixel steps), a soft lens (gblur), texture that moves
  in place (Conway's life, blurred and overlay-blended into the luma), and sensor noise of its own in every frame
  (`noise=allf=t`); x264 medium, High profile, 3 B-frames (the mp4 gets an edit list), CRF 21, a keyframe at
  least every 60 frames and at scene cuts, as the device decides: ~0.9 Mbit/s, its B-frames nearly free and its
  keyframes a fresh picture of the grain, as a camera's are.

    .venv/bin/python benchmarks/matrix_sources.py --seconds 10 --workdir /tmp/matrix   # make all, show edit lists
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from clips import FFMPEG  # noqa: E402 - beside this file
from media import make_watermark_png  # noqa: E402 - the suite's PNG maker (tests/)

SOURCES = ("gradient", "noisy", "long_gop", "bframes_editlist")  # the render matrix's
ALL_SOURCES = (*SOURCES, "camera")
WIDTH, HEIGHT, FPS = 1920, 1080, 30
AUDIO_RATE, TONE_HZ, AUDIO_BIT_RATE = 48000, 440, "128k"
# The watermark: a 192x96 RGBA logo at opacity 0.8, bottom right.
LOGO_SIZE = (192, 96)
WATERMARK = {"position": "bottom_right", "opacity": 0.8}

# The gradient is computed on a 2-line picture (geq on a whole 1080p frame runs at ~5 fps on 2 cores) and
# stretched to 1080 lines (its pixels then made square again): it is horizontal, so every line is the same.
_RAMP = "X*255/(W-1)"
_GRADIENT = (
    f"color=black:s={WIDTH}x2:r={FPS},format=gbrp,"
    f"geq=r='mod({_RAMP}+3*N\\,256)':g='mod(255-{_RAMP}+3*N\\,256)':b='mod({_RAMP}/2+3*N\\,256)',"
    f"scale={WIDTH}:{HEIGHT}:flags=neighbor,setsar=1[bg];"  # square pixels: scale keeps the 1920x2 shape
    f"color=white:s=40x40:r={FPS}[square];"
    "[bg][square]overlay=x='mod(7*n\\,W-w)':y='(H-h)/2':shortest=1,format=yuv420p"
)
# The zoom's frames cost more the deeper it goes (its first 30 s took 36 s to make here, its first 52 s twenty
# minutes, then 0.7 s of picture a minute), so a longer source plays the first 30 s again (`loop` holds them, and
# passes the first ones through as they come: the 10 and 30 s sources are the same bytes as without it). The grain
# is still each frame's own, and every replay starts on a keyframe (900 frames, keyint 30): 120 s take ~2 minutes.
_ZOOM_FRAMES = 30 * FPS
_NOISY = (
    f"mandelbrot=s=640x360:r={FPS}:start_scale=0.6:end_scale=0.001:maxiter=1024,"
    f"loop=loop=-1:size={_ZOOM_FRAMES},"
    f"scale={WIDTH}:{HEIGHT}:flags=bicubic,noise=alls=10:allf=t+u,format=yuv420p"
)
_PATTERN = f"testsrc2=s={WIDTH}x{HEIGHT}:r={FPS}"
# The camera: its scene (the still, rendered once and held) is 2x the picture, so the crop that drifts by whole
# scene pixels moves the picture by half pixels; the shake is two faster, smaller sines on the pan's.
_CAMERA_RATE = "24000/1001"
_CAMERA = (
    f"mandelbrot=s=1280x544:r={_CAMERA_RATE}:start_scale=0.02:maxiter=512,trim=end_frame=1,loop=loop=-1:size=1,"
    "setpts=N/FRAME_RATE/TB,"
    "crop=1152:490:x='64+50*sin(0.21*t)+6*sin(2.9*t)':y='27+20*sin(0.17*t+1)+4*sin(3.7*t)',"
    "scale=640:272:flags=bicubic,setsar=1,gblur=sigma=0.6,format=yuv420p,eq=saturation=0.55[scene];"
    f"life=s=320x136:r={_CAMERA_RATE}:mold=20:ratio=0.3:seed=7:life_color=white:death_color=black:mold_color=gray,"
    "scale=640:272,gblur=sigma=3,format=yuv420p[texture];"
    "[scene][texture]blend=c0_mode=overlay:c0_opacity=0.35,noise=alls=3:allf=t,format=yuv420p"
)
_CAMERA_X264 = ["-c:v", "libx264", "-preset", "medium", "-profile:v", "high", "-crf", "21", "-bf", "3", "-g", "60"]


def _x264(preset: str, crf: int, keyint: int, bframes: int) -> list[str]:
    params = f"keyint={keyint}:min-keyint={keyint}:scenecut=0"
    return ["-c:v", "libx264", "-preset", preset, "-crf", str(crf), "-bf", str(bframes), "-x264-params", params]


# name -> (lavfi video graph, x264 arguments)
_RECIPES = {
    "gradient": (_GRADIENT, _x264("ultrafast", 18, 30, 0)),
    "noisy": (_NOISY, _x264("veryfast", 20, 30, 0)),
    "long_gop": (f"{_PATTERN},format=yuv420p", _x264("veryfast", 20, 300, 0)),
    "bframes_editlist": (f"{_PATTERN},hue=H=2*PI*t/10,format=yuv420p", _x264("veryfast", 20, 60, 3)),
    "camera": (_CAMERA, _CAMERA_X264),
}


def source_command(name: str, seconds: float, out_path: str) -> list[str]:
    """The ffmpeg command that writes matrix source `name`, silent, to `out_path` (mp4, whatever its extension)."""
    graph, x264 = _RECIPES[name]
    encode = [*FFMPEG, "-y", "-f", "lavfi", "-i", graph, "-map", "0:v", *x264, "-pix_fmt", "yuv420p"]
    return [*encode, "-t", f"{seconds:g}", "-f", "mp4", out_path]


def tone_command(silent_path: str, seconds: float, out_path: str) -> list[str]:
    """The ffmpeg command that writes `silent_path`'s video (copied, packet for packet) with the tone beside it."""
    tone = f"sine=frequency={TONE_HZ}:sample_rate={AUDIO_RATE}"
    return [*FFMPEG, "-y", "-i", silent_path, "-f", "lavfi", "-i", tone, "-map", "0:v", "-map", "1:a"] + [
        *("-c:v", "copy", "-c:a", "aac", "-ac", "2", "-b:a", AUDIO_BIT_RATE),
        *("-t", f"{seconds:g}", "-f", "mp4", out_path),
    ]


def matrix_source(workdir: str, name: str, seconds: float, audio: bool) -> str:
    """Matrix source `name`, `seconds` long, with or without audio, in `workdir` (made on first use). The one with
    audio is the silent one's video with the tone added: one encode of the picture for both (`noisy` at 120 s
    takes two minutes to make)."""
    if name not in _RECIPES:
        raise ValueError(f"unknown matrix source {name!r}: one of {ALL_SOURCES}")
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, f"matrix-{name}-{seconds:g}s-{'audio' if audio else 'silent'}.mp4")
    if not os.path.exists(path):
        started = time.perf_counter()
        partial = f"{path}.partial"
        if audio:
            command = tone_command(matrix_source(workdir, name, seconds, False), seconds, partial)
        else:
            command = source_command(name, seconds, partial)
        subprocess.run(command, check=True)
        if name == "bframes_editlist" and not any(media_time > 0 for _, media_time in video_edit_list(partial)):
            raise RuntimeError(f"{partial}: no edit list with a start offset on the video track")
        os.replace(partial, path)
        print(f"generated {os.path.basename(path)} in {time.perf_counter() - started:.1f} s", flush=True)
    return path


def matrix_logo(workdir: str) -> str:
    """The issue's watermark image: a 192x96 translucent white RGBA PNG (rendered at opacity 0.8: WATERMARK)."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "logo-192x96.png")
    return make_watermark_png(path, w=LOGO_SIZE[0], h=LOGO_SIZE[1], rgba=(255, 255, 255, 220))


# --- the edit list, read from the file's boxes --------------------------------------------------------------

_CONTAINERS = {b"moov", b"trak", b"mdia", b"edts"}


def _boxes(data: bytes, start: int, end: int):
    """(type, payload start, payload end) of each ISO BMFF box in data[start:end]."""
    while start + 8 <= end:
        size, kind = struct.unpack(">I4s", data[start : start + 8])
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", data[start + 8 : start + 16])[0], 16
        elif size == 0:
            size = end - start
        if size < header:
            return
        yield kind, start + header, min(start + size, end)
        start += size


def _elst(data: bytes, start: int) -> list[tuple[int, int]]:
    version = data[start]
    (count,) = struct.unpack(">I", data[start + 4 : start + 8])
    entry = ">Qq" if version == 1 else ">Ii"
    width = struct.calcsize(entry) + 4  # + media_rate
    return [struct.unpack(entry, data[start + 8 + i * width : start + 8 + i * width + width - 4]) for i in range(count)]


def video_edit_list(path: str) -> list[tuple[int, int]]:
    """The video track's edit list entries (segment duration in the movie's time scale, media time in the
    track's; -1 is an empty edit), read from the mp4's moov/trak/edts/elst box; [] when there is none."""
    with open(path, "rb") as fh:
        data = fh.read()
    for kind, start, end in _boxes(data, 0, len(data)):
        if kind != b"moov":
            continue
        for trak_kind, t_start, t_end in _boxes(data, start, end):
            if trak_kind != b"trak":
                continue
            entries, handler = [], None
            for box, b_start, b_end in _boxes(data, t_start, t_end):
                if box == b"edts":
                    entries = [_elst(data, s) for k, s, _ in _boxes(data, b_start, b_end) if k == b"elst"]
                elif box == b"mdia":
                    handler = next(
                        (data[s + 8 : s + 12] for k, s, _ in _boxes(data, b_start, b_end) if k == b"hdlr"), None
                    )
            if handler == b"vide":
                return [e for found in entries for e in found]
    return []


def start_time(path: str, use_editlist: bool = True) -> str:
    """ffprobe's start_time of the video stream, with or without applying the edit list."""
    flags = [] if use_editlist else ["-ignore_editlist", "1"]
    command = ["ffprobe", "-v", "error", *flags, "-select_streams", "v:0", "-show_entries", "stream=start_time"]
    out = subprocess.run([*command, "-of", "csv=p=0", path], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--sources", default=",".join(SOURCES))
    parser.add_argument("--silent", action="store_true", help="without audio")
    parser.add_argument("--workdir", default="/tmp/vidforge-matrix")
    args = parser.parse_args()
    for name in args.sources.split(","):
        path = matrix_source(args.workdir, name, args.seconds, not args.silent)
        print(
            f"{name:18s} {os.path.getsize(path) / 2**20:7.1f} MiB  video elst {video_edit_list(path) or 'none'}  "
            f"start_time {start_time(path)} (edit list applied), {start_time(path, False)} (ignored)"
        )


if __name__ == "__main__":
    main()
