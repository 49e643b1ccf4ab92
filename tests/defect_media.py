"""Sources with known defects at known times, for quality control tests: black picture, a frozen picture, silence,
a loud clipping tone, or none of them (the clean control). Generated with PyAV like tests/media.py, small and fast.

Every defect is a (start_s, end_s) stretch of the clip, at whole frames (start_s * fps) for the picture:

- black: the frames in the stretch are black (RGB 0).
- frozen: the frames in the stretch show the stretch's first frame again (a still picture where the rest moves).
- silent: the audio is digital silence.
- clipping: the tone is driven to twice full scale and clipped flat at +-1.0 (its true peak is over 0 dBTP).

Outside them the picture moves every frame (tests/media.py's shown_picture: a bar slides along) and no two frames
are alike (a binary counter of the frame number along the bottom), and the audio is a 440 Hz stereo tone of peak
0.3 (-10.5 dBFS). The video is lossless H.264, so that a frozen stretch decodes to the
same picture on every frame whatever its keyframes (a lossy encoder's keyframe inside it would move the picture
by more than freezedetect's noise tolerance); keyframes every `gop` frames.
"""

from __future__ import annotations

import math
from fractions import Fraction

import av
import numpy as np

from tests.media import AUDIO_RATE, shown_picture

Stretch = tuple[float, float]
TONE_HZ = 440.0
TONE_LEVEL = 0.3  # the clean tone's peak: -10.5 dBFS, true peak well under -1 dBTP
COUNTER_BITS = 16
CLIPPING_GAIN = 2.0  # the clipping tone: the clean tone's shape at this much more than full scale, clipped


def make_defect_clip(
    path: str,
    seconds: float = 6.0,
    fps: int = 30,
    width: int = 320,
    height: int = 180,
    black: Stretch | None = None,
    frozen: Stretch | None = None,
    silent: Stretch | None = None,
    clipping: Stretch | None = None,
    audio: bool = True,
    gop: int = 30,
) -> str:
    """Write an mp4 (H.264 lossless + AAC stereo 48 kHz) of `seconds` at `fps` with the given defects; none given:
    the clean control. `audio=False`: video only."""
    frame_count = round(seconds * fps)
    with av.open(path, "w") as out:
        video = out.add_stream("libx264", rate=fps, time_base=Fraction(1, fps))
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.options = {"preset": "superfast", "qp": "0", "x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0"}
        sound = out.add_stream("aac", rate=AUDIO_RATE) if audio else None
        if sound is not None:
            sound.layout = "stereo"
        for index in range(frame_count):
            frame = av.VideoFrame.from_ndarray(_picture(index, fps, width, height, black, frozen), format="rgb24")
            frame.pts, frame.time_base = index, Fraction(1, fps)
            out.mux(video.encode(frame))
        out.mux(video.encode(None))
        if sound is not None:
            _write_audio(out, sound, seconds, silent, clipping)
    return path


def make_audio_only(path: str, seconds: float = 2.0) -> str:
    """An m4a with the clean tone and no video stream."""
    with av.open(path, "w", format="mp4") as out:
        sound = out.add_stream("aac", rate=AUDIO_RATE)
        sound.layout = "stereo"
        _write_audio(out, sound, seconds, None, None)
    return path


def tone(seconds: float, silent: Stretch | None = None, clipping: Stretch | None = None) -> np.ndarray:
    """The clip's audio before encoding: (2, samples) float32 at AUDIO_RATE."""
    t = np.arange(int(seconds * AUDIO_RATE)) / AUDIO_RATE
    mono = TONE_LEVEL * np.sin(2 * math.pi * TONE_HZ * t)
    if clipping is not None:
        loud = _span(clipping, AUDIO_RATE)
        mono[loud] = np.clip(mono[loud] * CLIPPING_GAIN / TONE_LEVEL, -1.0, 1.0)
    if silent is not None:
        mono[_span(silent, AUDIO_RATE)] = 0.0
    return np.stack([mono, mono]).astype(np.float32)


def _picture(
    index: int, fps: int, width: int, height: int, black: Stretch | None, frozen: Stretch | None
) -> np.ndarray:
    if black is not None and index in range(*_frames(black, fps)):
        return np.zeros((height, width, 3), np.uint8)
    if frozen is not None and index in range(*_frames(frozen, fps)):
        index = _frames(frozen, fps)[0]
    rgb = shown_picture(index, width, height)
    # The sliding bar comes back to where it was (every 45 frames at 320 px): a counter makes every frame its own,
    # so a frozen stretch ends on the first frame after it, whatever its length.
    size = width // COUNTER_BITS, max(2, height // 8)
    for bit in range(COUNTER_BITS):
        if index >> bit & 1:
            rgb[-size[1] :, bit * size[0] : (bit + 1) * size[0]] = 255
    return rgb


def _frames(stretch: Stretch, rate: float) -> tuple[int, int]:
    return round(stretch[0] * rate), round(stretch[1] * rate)


def _span(stretch: Stretch, rate: float) -> slice:
    return slice(*_frames(stretch, rate))


def _write_audio(
    out: av.container.OutputContainer,
    sound: av.AudioStream,
    seconds: float,
    silent: Stretch | None,
    clipping: Stretch | None,
) -> None:
    samples = tone(seconds, silent, clipping)
    size = sound.codec_context.frame_size or 1024
    for start in range(0, samples.shape[1], size):
        frame = av.AudioFrame.from_ndarray(
            np.ascontiguousarray(samples[:, start : start + size]), format="fltp", layout="stereo"
        )
        frame.sample_rate, frame.pts, frame.time_base = AUDIO_RATE, start, Fraction(1, AUDIO_RATE)
        out.mux(sound.encode(frame))
    out.mux(sound.encode(None))
