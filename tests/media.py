"""Small synthetic media for tests, generated with PyAV (no ffmpeg CLI, no fixtures on disk).

Shared by the whole test suite: keep every helper fast (tests run on a loaded 2-core machine).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

AUDIO_RATE = 48000
_AUDIO_CODEC = {"mp4": "aac", "mov": "aac", "mkv": "aac", "webm": "libopus"}
_FORMAT = {"mkv": "matroska"}


@functools.lru_cache(maxsize=8)
def _gradients(width: int, height: int) -> np.ndarray:
    """Frame 0's planes: red across, green down, blue along the diagonal (read-only, shared by every frame)."""
    ys, xs = np.ogrid[:height, :width]
    planes = np.empty((3, height, width), np.uint8)
    planes[0] = (xs * 255 // max(width - 1, 1)) % 256
    planes[1] = (ys * 255 // max(height - 1, 1)) % 256
    planes[2] = ((xs + ys) // 2) % 256
    planes.flags.writeable = False
    return planes


def _pattern(index: int, width: int, height: int) -> np.ndarray:
    """An RGB frame whose content moves every frame: diagonal gradient plus a sliding bright bar.

    Frame `index` is frame 0's planes with red moved by 3 * index and blue by 2 * index, modulo 256: added in uint8,
    which wraps, a plane at a time (computing each frame's gradients anew took 12 ms a 720p frame, this 3)."""
    planes = _gradients(width, height)
    rgb = np.empty((height, width, 3), np.uint8)
    np.add(planes[0], np.uint8(index * 3 % 256), out=rgb[..., 0])
    rgb[..., 1] = planes[1]
    np.add(planes[2], np.uint8(index * 2 % 256), out=rgb[..., 2])
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


# --- real-world media: how phones, cameras and broadcast store pictures -----------------------------------
#
# Every frame of these sources shows a red MARKER block in the top-left corner of the picture AS A PLAYER
# SHOWS IT; the stored (coded) picture is turned, mirrored and squeezed the opposite way, so a render that
# ignores the display matrix or the sample aspect ratio puts the marker elsewhere or misshapes the frame.

MARKER_RGB = (255, 0, 0)
MARKER_FRACTION = 4  # the marker covers the top-left 1/4 x 1/4 of the shown picture
BACKGROUND = 48


@dataclass(frozen=True)
class AudioTrack:
    """One audio track of a generated source: on channel i a sine of tone_hz * (1 + i / 4), peak `level`."""

    layout: str = "stereo"
    rate: int = AUDIO_RATE
    tone_hz: float = 440.0
    default: bool = False  # the track's default disposition (what players pick)
    level: float = 0.2

    def channel_tones(self) -> list[float]:
        return [self.tone_hz * (1 + i / 4) for i in range(av.AudioLayout(self.layout).nb_channels)]


def shown_picture(index: int, width: int, height: int) -> np.ndarray:
    """What a player should show at frame `index`: a dark picture, the red marker top-left, and a green bar
    sliding along the bottom half (so frames differ)."""
    rgb = np.full((height, width, 3), BACKGROUND, np.uint8)
    rgb[: max(height // MARKER_FRACTION, 2), : max(width // MARKER_FRACTION, 2)] = MARKER_RGB
    bar = (index * 7) % max(width - 4, 1)
    rgb[height // 2 :, bar : bar + max(width // 16, 2), 1] = 200
    return rgb


def coded_picture(shown: np.ndarray, rotation: int, hflip: bool, coded_width: int) -> np.ndarray:
    """The stored picture that a player turns into `shown`: it applies the display matrix (turn `rotation`
    degrees clockwise, then mirror when `hflip`) and stretches to the sample aspect ratio; here each is undone,
    in reverse order, with the columns resampled (nearest) to `coded_width`."""
    turned = shown[:, ::-1] if hflip else shown
    upright_coded = np.rot90(turned, k=rotation // 90)  # numpy's positive turns are counter-clockwise
    columns = np.arange(coded_width) * upright_coded.shape[1] // coded_width
    return np.ascontiguousarray(upright_coded[:, columns])


def make_shown_clip(
    path: str,
    width: int = 320,
    height: int = 180,
    rotation: int = 0,
    hflip: bool = False,
    sample_aspect: tuple[int, int] = (1, 1),
    pix_fmt: str = "yuv420p",
    interlaced: bool = False,
    audio: tuple[AudioTrack, ...] = (AudioTrack(),),
    seconds: float = 2.0,
    fps: int = 10,
    gop: int = 10,
    codec: str = "libx264",
    container: str = "mp4",
    vfr: bool = False,
    start_s: float = 0.0,
    hdr10: bool = False,
) -> str:
    """Write a clip whose stored frames are width x height with the given display matrix (`rotation` clockwise
    then `hflip`), sample aspect ratio, pixel format and interlacing, plus the `audio` tracks: H.264 in mp4 by
    default, or another `codec` and `container` as cameras and editors write them.

    Every frame, as shown, has the red marker top-left (shown_picture). Keyframes every `gop` frames. `vfr`: frame
    durations cycle through 0.5, 1 and 1.5 of 1/fps (a phone's variable rate; the average stays `fps`);
    `start_s`: the first frame's timestamp (a camera's running clock); `hdr10`: HEVC flagged BT.2020 PQ.
    """
    shown_w = round(width * sample_aspect[0] / sample_aspect[1])
    shown_w, shown_h = (height, shown_w) if rotation in (90, 270) else (shown_w, height)
    with av.open(path, "w", format=_FORMAT.get(container, container)) as out:
        # A variable rate in ticks of 1/(2*fps): frames last 1, 2 and 3 ticks in turn. Else a tick is a frame (AVI
        # counts its frames in ticks).
        ticks = 2 if vfr else 1
        video = out.add_stream(codec, rate=fps, time_base=Fraction(1, ticks * fps))
        video.width, video.height, video.pix_fmt = width, height, pix_fmt
        video.codec_context.sample_aspect_ratio = Fraction(*sample_aspect)
        video.codec_context.gop_size = gop
        if rotation or hflip:
            video.set_display_rotation(-rotation, hflip=hflip)  # PyAV's degrees are counter-clockwise
        video.options = _encoder_options(codec, gop, interlaced, hdr10)
        if interlaced:  # interlaced coding, top field first: frames are flagged interlaced
            video.codec_context.flags |= av.codec.context.Flags.interlaced_dct | av.codec.context.Flags.interlaced_me
        if hdr10:
            ctx = video.codec_context
            ctx.color_primaries, ctx.color_trc, ctx.colorspace = 9, 16, 9  # BT.2020, SMPTE 2084 (PQ), BT.2020 NCL
        sounds = [_add_audio_track(out, track, container) for track in audio]
        pts = round(start_s * ticks * fps)
        for index in range(round(seconds * fps)):
            coded = coded_picture(shown_picture(index, shown_w, shown_h), rotation, hflip, width)
            frame = av.VideoFrame.from_ndarray(coded, format="rgb24")
            frame.pts, frame.time_base = pts, video.codec_context.time_base
            pts += (1, 2, 3)[index % 3] if vfr else 1
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        for sound, track in zip(sounds, audio):
            _write_tones(out, sound, track, seconds)
    return path


def _encoder_options(codec: str, gop: int, interlaced: bool, hdr10: bool) -> dict[str, str]:
    """Fast settings with keyframes exactly every `gop` frames (tests know where segments may start)."""
    if codec == "libx264":
        return {
            "preset": "superfast",
            "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0" + (":tff=1" if interlaced else ""),
        }
    if codec == "libx265":
        hdr = ":hdr10=1:colorprim=bt2020:transfer=smpte2084:colormatrix=bt2020nc" if hdr10 else ""
        return {"preset": "ultrafast", "x265-params": f"keyint={gop}:min-keyint={gop}:scenecut=0:log-level=error{hdr}"}
    if codec == "libvpx-vp9":
        return {"deadline": "realtime", "cpu-used": "8"}
    return {}  # intra-only (ProRes, MJPEG) or fixed GOP (MPEG-2: gop_size)


# The audio codec each container is made with (what cameras and editors put there).
_CONTAINER_AUDIO = {"mp4": "aac", "mov": "pcm_s16le", "webm": "libopus", "avi": "mp2", "mpegts": "mp2", "mkv": "aac"}


def _add_audio_track(out: av.container.OutputContainer, track: AudioTrack, container: str) -> av.AudioStream:
    sound = out.add_stream(_CONTAINER_AUDIO[container], rate=track.rate)
    sound.layout = track.layout
    # mp4 keeps one "enabled" track per kind: the first marked default, else the first; demuxers read that back.
    sound.disposition = av.stream.Disposition.default if track.default else av.stream.Disposition(0)
    return sound


def _write_tones(out: av.container.OutputContainer, sound: av.AudioStream, track: AudioTrack, seconds: float) -> None:
    size = sound.codec_context.frame_size or 1024
    total = int(seconds * track.rate)
    tones = np.array(track.channel_tones())[:, None]
    to_encoder = av.AudioResampler(format=sound.codec_context.format.name, layout=track.layout, rate=track.rate)
    for start in range(0, total, size):
        t = np.arange(start, min(start + size, total)) / track.rate
        samples = (track.level * np.sin(2 * math.pi * tones * t)).astype(np.float32)
        frame = av.AudioFrame.from_ndarray(samples, format="fltp", layout=track.layout)
        frame.sample_rate, frame.pts, frame.time_base = track.rate, start, Fraction(1, track.rate)
        for converted in to_encoder.resample(frame):  # the codec's own sample format (s16 for PCM and MP2)
            out.mux(sound.encode(converted))
    out.mux(sound.encode(None))


def make_truncated(path: str, source: str, keep: int = 60_000) -> str:
    """The first `keep` bytes of `source`: an upload cut short."""
    with open(source, "rb") as whole, open(path, "wb") as cut:
        cut.write(whole.read(keep))
    return path


def make_empty(path: str) -> str:
    """A zero-byte file."""
    open(path, "wb").close()
    return path


# The real-world corpus: name -> make_shown_clip arguments. Small (<= 320 px, 2 s at 10 fps) for a loaded CI.
REAL_WORLD_CORPUS: dict[str, dict] = {
    # What phones, cameras and editors write besides H.264 in mp4. (Every H.264 and HEVC mp4 here has B-frames, so
    # the muxer writes an edit list for their delay; the clock-offset one starts 10 s into its timeline as well.)
    "phone_vfr": {"width": 320, "height": 180, "vfr": True},
    "camera_clock_offset_10s": {"width": 320, "height": 180, "start_s": 10.0},
    "hdr10_hevc": {"width": 320, "height": 180, "codec": "libx265", "pix_fmt": "yuv420p10le", "hdr10": True},
    "vp9_opus_webm": {"width": 320, "height": 180, "codec": "libvpx-vp9", "container": "webm"},
    "prores_mov": {"width": 320, "height": 180, "codec": "prores_ks", "pix_fmt": "yuv422p10le", "container": "mov"},
    "mjpeg_avi": {"width": 320, "height": 180, "codec": "mjpeg", "pix_fmt": "yuvj420p", "container": "avi"},
    "mpeg2_ts": {"width": 320, "height": 180, "codec": "mpeg2video", "container": "mpegts"},
    "phone_portrait_90": {"width": 320, "height": 180, "rotation": 90},  # a phone held upright
    "upside_down_180": {"width": 320, "height": 180, "rotation": 180},
    "portrait_270": {"width": 320, "height": 180, "rotation": 270},
    "mirrored_selfie": {"width": 320, "height": 180, "hflip": True},
    "mirrored_portrait_90": {"width": 320, "height": 180, "rotation": 90, "hflip": True},
    "ntsc_dvd_32_27": {"width": 240, "height": 160, "sample_aspect": (32, 27)},  # 720x480 16:9 anamorphic
    "pal_dv_16_15": {"width": 180, "height": 144, "sample_aspect": (16, 15)},  # 720x576 4:3
    "hdv_4_3": {"width": 240, "height": 180, "sample_aspect": (4, 3)},  # 1440x1080 shown 1920x1080
    "anamorphic_portrait_90": {"width": 240, "height": 160, "sample_aspect": (32, 27), "rotation": 90},
    "vertical_9_16": {"width": 180, "height": 320},  # a small vertical video (stored upright)
    "vertical_360x640": {"width": 360, "height": 640},  # the issue's own: it came out 404x720 at 720p
    "square_480": {"width": 480, "height": 480},
    "square_1_1": {"width": 240, "height": 240},
    "interlaced_tff": {"width": 320, "height": 180, "interlaced": True},
    "ten_bit": {"width": 320, "height": 180, "pix_fmt": "yuv420p10le"},
    "chroma_422": {"width": 320, "height": 180, "pix_fmt": "yuv422p"},
    # Loud: front, centre and surround summed as swresample's standard matrix has it would pass full scale.
    "surround_5_1": {"width": 320, "height": 180, "audio": (AudioTrack("5.1", 48000, 300.0, level=0.45),)},
    "second_track_default": {
        "width": 320,
        "height": 180,
        "audio": (AudioTrack("mono", 44100, 300.0), AudioTrack("stereo", 48000, 1000.0, default=True)),
    },
}


# The displayed size of each corpus source rendered at 720p: the short side is 720.
SHOWN_720P = {
    "phone_portrait_90": (720, 1280),
    "upside_down_180": (1280, 720),
    "portrait_270": (720, 1280),
    "mirrored_selfie": (1280, 720),
    "mirrored_portrait_90": (720, 1280),
    "ntsc_dvd_32_27": (1280, 720),  # 240x160 shown 284.4x160: 16:9
    "pal_dv_16_15": (960, 720),  # 180x144 shown 192x144: 4:3
    "hdv_4_3": (1280, 720),
    "anamorphic_portrait_90": (720, 1280),
    "vertical_9_16": (720, 1280),
    "vertical_360x640": (720, 1280),
    "square_480": (720, 720),
    "square_1_1": (720, 720),
    "interlaced_tff": (1280, 720),
    "ten_bit": (1280, 720),
    "chroma_422": (1280, 720),
    "surround_5_1": (1280, 720),
    "second_track_default": (1280, 720),
    "phone_vfr": (1280, 720),
    "camera_clock_offset_10s": (1280, 720),
    "hdr10_hevc": (1280, 720),
    "vp9_opus_webm": (1280, 720),
    "prores_mov": (1280, 720),
    "mjpeg_avi": (1280, 720),
    "mpeg2_ts": (1280, 720),
}


def make_corpus_source(directory: Path, name: str) -> str:
    """The corpus source `name`, written into `directory` under the extension its container is known by."""
    container = REAL_WORLD_CORPUS[name].get("container", "mp4")
    extension = {"mpegts": "ts", "matroska": "mkv"}.get(container, container)
    return make_shown_clip(str(directory / f"{name}.{extension}"), **REAL_WORLD_CORPUS[name])


def decode_audio(path: str) -> tuple[int, np.ndarray]:
    """(sample rate, samples as channels x samples) of the first audio track of `path` (planar, as AAC gives)."""
    with av.open(path) as container:
        stream = container.streams.audio[0]
        chunks = [frame.to_ndarray() for frame in container.decode(stream)]  # AAC decodes to planar float
        return stream.codec_context.sample_rate, np.concatenate(chunks, axis=1)


def dominant_hz(samples: np.ndarray, rate: int) -> float:
    """The strongest frequency in a channel's samples."""
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


def marker_corner(picture: np.ndarray) -> str | None:
    """Which corner of an RGB picture holds the red marker ("top_left", ...), or None: the corner whose block
    (1/8 x 1/8 of the picture, inside the 1/4 x 1/4 marker when it is there) is red."""
    height, width = picture.shape[:2]
    h, w = max(height // 8, 1), max(width // 8, 1)
    blocks = {
        "top_left": picture[:h, :w],
        "top_right": picture[:h, -w:],
        "bottom_left": picture[-h:, :w],
        "bottom_right": picture[-h:, -w:],
    }
    red = [name for name, block in blocks.items() if _is_marker(block.reshape(-1, 3).mean(axis=0))]
    return red[0] if len(red) == 1 else None


def _is_marker(rgb: np.ndarray) -> bool:
    return bool(rgb[0] > 180 and rgb[1] < 90 and rgb[2] < 90)
