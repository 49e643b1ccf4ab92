"""Small synthetic media for tests, generated with PyAV (no ffmpeg CLI, no fixtures on disk).

Shared by the whole test suite: keep every helper fast (tests run on a loaded 2-core machine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import av
import numpy as np

AUDIO_RATE = 48000
_AUDIO_CODEC = {"mp4": "aac", "mov": "aac", "mkv": "aac", "webm": "libopus"}
_FORMAT = {"mkv": "matroska"}


def _pattern(index: int, width: int, height: int) -> np.ndarray:
    """An RGB frame whose content moves every frame: diagonal gradient plus a sliding bright bar."""
    ys, xs = np.ogrid[:height, :width]
    rgb = np.empty((height, width, 3), np.uint8)
    rgb[..., 0] = (xs * 255 // max(width - 1, 1) + index * 3) % 256
    rgb[..., 1] = (ys * 255 // max(height - 1, 1)) % 256
    rgb[..., 2] = ((xs + ys + index * 4) // 2) % 256
    bar = (index * 7) % width
    rgb[:, bar : bar + max(width // 16, 2)] = 255
    return rgb


def make_clip(
    path: str,
    seconds: float = 3.0,
    width: int = 320,
    height: int = 180,
    fps: int = 30,
    audio: bool = True,
    gop: int = 30,
    vfr: bool = False,
    codec: str = "libx264",
    container: str = "mp4",
) -> str:
    """Write a small real clip: moving pattern, keyframe every `gop` frames, optional 440 Hz stereo tone.

    Odd dimensions are encoded as yuv444p (4:2:0 needs even sizes). `vfr=True` makes frame durations cycle
    through 0.5x, 1x and 1.5x of 1/fps (the average rate stays `fps`).
    """
    frame_count = round(seconds * fps)
    with av.open(path, "w", format=_FORMAT.get(container, container)) as out:
        # Ticks of 1/(2*fps): a CFR frame lasts 2 ticks, VFR frames last 1, 2 or 3 ticks.
        video = out.add_stream(codec, rate=fps, time_base=Fraction(1, 2 * fps))
        video.width, video.height = width, height
        video.pix_fmt = "yuv444p" if width % 2 or height % 2 else "yuv420p"
        video.codec_context.gop_size = gop
        if codec == "libx264":
            # Fixed keyframe interval (no scene cuts) so tests know where keyframes are.
            video.options = {"preset": "superfast", "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0"}
        elif codec == "libvpx-vp9":
            video.options = {"deadline": "realtime", "cpu-used": "8"}
        sound = None
        if audio:  # every stream must exist before the first packet is muxed
            sound = out.add_stream(_AUDIO_CODEC[container], rate=AUDIO_RATE)
            sound.layout = "stereo"
        pts = 0
        for index in range(frame_count):
            frame = av.VideoFrame.from_ndarray(_pattern(index, width, height), format="rgb24")
            frame.pts = pts
            frame.time_base = video.codec_context.time_base
            pts += (1, 2, 3)[index % 3] if vfr else 2
            out.mux(video.encode(frame))
        out.mux(video.encode(None))

        if sound is not None:
            size = sound.codec_context.frame_size or 1024
            total = int(seconds * AUDIO_RATE)
            for start in range(0, total, size):
                t = np.arange(start, min(start + size, total)) / AUDIO_RATE
                tone = (0.3 * np.sin(2 * math.pi * 440 * t)).astype(np.float32)
                frame = av.AudioFrame.from_ndarray(np.stack([tone, tone]), format="fltp", layout="stereo")
                frame.sample_rate = AUDIO_RATE
                frame.pts = start
                frame.time_base = Fraction(1, AUDIO_RATE)
                out.mux(sound.encode(frame))
            out.mux(sound.encode(None))
    return path


def make_watermark_png(path: str, w: int = 64, h: int = 32, rgba: tuple[int, int, int, int] = (255, 0, 0, 255)) -> str:
    """Write a solid-colour RGBA PNG with PyAV's png encoder."""
    pixels = np.empty((h, w, 4), np.uint8)
    pixels[...] = rgba
    encoder = av.CodecContext.create("png", "w")
    encoder.width, encoder.height, encoder.pix_fmt = w, h, "rgba"
    encoder.time_base = Fraction(1, 1)
    frame = av.VideoFrame.from_ndarray(pixels, format="rgba")
    data = b"".join(bytes(p) for p in encoder.encode(frame) + encoder.encode(None))
    with open(path, "wb") as f:
        f.write(data)
    return path


@dataclass
class Decoded:
    """Everything a test wants to know about a file after decoding it completely."""

    format_name: str
    video_codec: str
    width: int
    height: int
    frame_count: int
    times: list[float]  # presentation time of every frame, in order
    keyframes: list[bool]  # per frame: decoded as a key frame
    duration_s: float  # container duration
    audio_codec: str | None
    audio_samples: int
    frames: list[np.ndarray] = field(default_factory=list)  # per `keep`: Y planes or RGB arrays


def decode_all(path: str, keep: str = "y") -> Decoded:
    """Decode every video and audio frame of `path`; keep "y" (Y planes), "rgb" (rgb24 arrays) or "none"."""
    with av.open(path) as container:
        video = container.streams.video[0]
        audio = container.streams.audio[0] if container.streams.audio else None
        times: list[float] = []
        keyframes: list[bool] = []
        frames: list[np.ndarray] = []
        samples = 0
        for frame in container.decode(*[s for s in (video, audio) if s is not None]):
            if isinstance(frame, av.AudioFrame):
                samples += frame.samples
                continue
            times.append(float(frame.time))
            keyframes.append(frame.key_frame)
            if keep == "y":
                frames.append(frame.reformat(format="yuv420p").to_ndarray()[: frame.height].copy())
            elif keep == "rgb":
                frames.append(frame.to_ndarray(format="rgb24"))
        return Decoded(
            format_name=container.format.name,
            video_codec=video.codec_context.name,
            width=video.codec_context.width,
            height=video.codec_context.height,
            frame_count=len(times),
            times=times,
            keyframes=keyframes,
            duration_s=(container.duration or 0) / av.time_base,
            audio_codec=audio.codec_context.name if audio else None,
            audio_samples=samples,
            frames=frames,
        )


def psnr_y(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB between two same-sized 8-bit luma planes (inf when identical)."""
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def decode_frame(path: str, index: int, pixel_format: str = "rgb24") -> np.ndarray:
    """The `index`-th video frame of `path` (presentation order) as an array in `pixel_format`."""
    with av.open(path) as container:
        for n, frame in enumerate(container.decode(video=0)):
            if n == index:
                return frame.to_ndarray(format=pixel_format)
    raise IndexError(f"{path} has only {n + 1} frames")
