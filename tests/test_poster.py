"""The poster of a finished video (serve_app.rendering._poster): the keyframe nearest a third of the way in, which
decodes alone, and the frame at a third where no keyframe is near or the container has no index to find one."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from serve_app.rendering._poster import POSTER_BOX, poster_jpeg
from tests.media import _pattern, make_clip

WIDTH, HEIGHT, FPS = 320, 180, 30


def shown_frame(jpeg: bytes, frame_count: int) -> int:
    """The index of the clip's frame the poster shows: the nearest of make_clip's patterns."""
    poster = np.asarray(Image.open(io.BytesIO(jpeg)).convert("RGB"), np.float32)
    errors = [np.mean((poster - _pattern(index, WIDTH, HEIGHT)) ** 2) for index in range(frame_count)]
    return int(np.argmin(errors))


def test_the_poster_is_the_keyframe_nearest_a_third_of_the_video(tmp_path):
    # 3 s at 30 fps, keyframes at frames 0, 25, 50 and 75: a third is frame 30, the nearest keyframe 25.
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=3.0, width=WIDTH, height=HEIGHT, fps=FPS, gop=25)
    jpeg = poster_jpeg(clip)
    assert Image.open(io.BytesIO(jpeg)).format == "JPEG"
    assert shown_frame(jpeg, 90) == 25


@pytest.mark.parametrize(
    ("container", "codec", "gop"),
    [("mp4", "libx264", 90), ("webm", "libvpx-vp9", 25)],
    ids=["no-keyframe-near", "no-index-before-a-seek"],
)
def test_without_a_keyframe_near_it_is_the_frame_at_a_third(tmp_path, container, codec, gop):
    # A single keyframe at the start (outside a sixth to a half of the video), or a WebM, whose index (its cues)
    # is only read by a seek.
    clip = make_clip(
        str(tmp_path / f"clip.{container}"),
        3.0,
        WIDTH,
        HEIGHT,
        FPS,
        audio=False,
        gop=gop,
        codec=codec,
        container=container,
    )
    assert shown_frame(poster_jpeg(clip), 90) == 30


def test_a_large_video_gets_a_poster_no_larger_than_the_box(tmp_path):
    # 1080p, six frames: the size is the point here (which frame is shown: the tests above).
    clip = make_clip(str(tmp_path / "big.mp4"), seconds=0.2, width=1920, height=1080, fps=FPS, audio=False, gop=10)
    assert Image.open(io.BytesIO(poster_jpeg(clip))).size == POSTER_BOX
