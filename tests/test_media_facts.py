"""An asset's facts (serve_app.media._media_facts.MediaFacts): written with each fact once, and read from every
layout meta.json has held — today's, the one before it (a video's facts twice: at the top and in the probe record
under `source`), its older forms without the record or without the display facts, and none at all. In-process, on
a local media store: no Ray, no server."""

from __future__ import annotations

import json

import pytest

from render_kernels.limits import MediaLimits, OverLimit
from render_kernels.probe import probe
from render_kernels.source_info import AudioInfo, SourceInfo
from serve_app._config import Config
from serve_app.media._media_facts import AudioTrack, MediaFacts, Plan, VideoFacts
from serve_app.media.assets import Asset, AssetStore, new_asset_id
from serve_app.media.media_limits import check_stored_facts
from tests.media import make_clip, make_watermark_png

# The facts of a 1 s 160x90 clip with stereo AAC and of a 64x32 PNG, as the version before MediaFacts wrote them
# (copied from meta.json files it wrote): a video's size, rate, frame count, duration and codecs twice.
DUPLICATED_VIDEO = {
    "kind": "video",
    "width": 160,
    "height": 90,
    "fps": 10.0,
    "frame_count": 10,
    "duration_s": 1.0,
    "video_codec": "h264",
    "audio_codec": "aac",
    "source": {
        "duration_s": 1.0,
        "fps": 10.0,
        "frame_count": 10,
        "width": 160,
        "height": 90,
        "video_codec": "h264",
        "keyframe_times": [0.0],
        "audio": {"codec": "aac", "sample_rate": 48000, "channels": 2, "duration_s": 1.0},
        "start_time_s": 0.0,
        "keyframe_frames": [0],
        "pixel_format": "yuv420p",
        "rotation": 0,
        "hflip": False,
        "sample_aspect": [1, 1],
        "field_order": "progressive",
    },
}
DUPLICATED_IMAGE = {"kind": "image", "width": 64, "height": 32}
SUMMARY = {"duration_s": 1.0, "fps": 10.0, "frame_count": 10, "video_codec": "h264", "audio_codec": "aac"}
PLAN = Plan(
    start_time_s=0.0,
    keyframe_times=(0.0,),
    keyframe_frames=(0,),
    pixel_format="yuv420p",
    rotation=0,
    hflip=False,
    sample_aspect=(1, 1),
    field_order="progressive",
    audio=AudioTrack(sample_rate=48000, channels=2, duration_s=1.0),
)


@pytest.fixture
def store(tmp_path) -> AssetStore:
    return AssetStore(Config(data_dir=str(tmp_path / "data")))


def stored(store: AssetStore, kind: str, facts: object = None, keep_facts: bool = True) -> Asset:
    """An asset whose meta.json holds `facts` as given (left out without `keep_facts`), read back as the server
    reads it."""
    asset_id = new_asset_id()
    meta = {"asset_id": asset_id, "principal": "alice", "kind": kind, "size_bytes": 1, "filename": "f"}
    if keep_facts:
        meta["facts"] = facts
    store.media.put_bytes(f"assets/{asset_id}/meta.json", json.dumps({**meta, "created_at": 1.0}).encode())
    return store.resolve(f"vidforge://assets/{asset_id}", "alice", "source_asset_uri")


def meta_json(store: AssetStore, asset: Asset) -> dict:
    return json.loads(store.media.get_bytes(f"assets/{asset.asset_id}/meta.json"))


def test_the_layout_written_holds_each_fact_once(store, tmp_path):
    video = store.add_file(make_clip(str(tmp_path / "clip.mp4"), seconds=1, fps=10, width=160, height=90), "alice")
    image = store.add_file(make_watermark_png(str(tmp_path / "wm.png"), 64, 32), "alice")
    facts = meta_json(store, video)["facts"]
    assert facts == {"width": 160, "height": 90, "video": {**SUMMARY, "plan": json.loads(PLAN.model_dump_json())}}
    assert meta_json(store, image)["facts"] == {"width": 64, "height": 32, "video": None}
    assert meta_json(store, video)["kind"] == "video" and meta_json(store, image)["kind"] == "image"
    # Read back: the model it was written from, and the whole probe for planning.
    again = store.resolve(video.uri, "alice", "source_asset_uri")
    assert again.facts == video.facts == MediaFacts(width=160, height=90, video=VideoFacts(**SUMMARY, plan=PLAN))
    assert store.source_info(again) == probe(store.media_of(video))
    assert store.resolve(image.uri, "alice", "source_asset_uri").facts == MediaFacts(width=64, height=32)
    assert store.source_info(image) is None


def test_the_duplicated_layout_loads_into_the_model(store):
    video = stored(store, "video", DUPLICATED_VIDEO)
    assert video.facts == MediaFacts(width=160, height=90, video=VideoFacts(**SUMMARY, plan=PLAN))
    info = store.source_info(video)
    assert info is not None and info.audio == AudioInfo("aac", 48000, 2, 1.0) and info.keyframes() == [(0, 0.0)]
    assert (info.width, info.height, info.fps, info.frame_count, info.rotation) == (160, 90, 10.0, 10, 0)
    assert stored(store, "image", DUPLICATED_IMAGE).facts == MediaFacts(width=64, height=32)


@pytest.mark.parametrize(
    "older",
    [
        {k: v for k, v in DUPLICATED_VIDEO.items() if k != "source"},  # kept before renders planned from them
        {  # kept before the display matrix, pixel aspect and field order were: a phone video would render sideways
            **DUPLICATED_VIDEO,
            "source": {
                k: v
                for k, v in DUPLICATED_VIDEO["source"].items()
                if k not in ("rotation", "hflip", "sample_aspect", "field_order")
            },
        },
    ],
    ids=["without the probe record", "without the display facts"],
)
def test_older_facts_load_without_a_plan_and_the_render_probes_again(store, older):
    video = stored(store, "video", older)
    assert video.facts == MediaFacts(width=160, height=90, video=VideoFacts(**SUMMARY, plan=None))
    assert store.source_info(video) is None
    check_stored_facts(MediaLimits(max_frames=10), video.facts)  # the limits still hold them to the summary
    with pytest.raises(OverLimit, match="10 frames, over the 9-frame limit"):
        check_stored_facts(MediaLimits(max_frames=9), video.facts)


def test_an_asset_stored_before_facts_were_kept_has_none(store):
    video = stored(store, "video", keep_facts=False)
    assert video.facts is None and store.source_info(video) is None
    check_stored_facts(MediaLimits(max_frames=1), video.facts)  # nothing to check: the render's probe does


def test_every_probe_fact_survives_the_written_layout():
    """What a render plans from comes back exactly, the display facts of a phone's anamorphic mirror included."""
    info = SourceInfo(
        path="a.mp4",
        duration_s=2.0,
        fps=10.0,
        frame_count=20,
        width=240,
        height=160,
        video_codec="h264",
        keyframe_times=(0.0, 1.0),
        audio=AudioInfo("opus", 48000, 1, 1.96),
        start_time_s=0.04,
        keyframe_frames=(0, 10),
        pixel_format="yuv420p10le",
        rotation=270,
        hflip=True,
        sample_aspect=(32, 27),
        field_order="bff",
    )
    written = json.loads(MediaFacts.of_video(info).model_dump_json())  # as meta.json holds it
    assert MediaFacts.stored(written).source_info("a.mp4") == info
    silent = SourceInfo(**{**vars(info), "audio": None})
    assert MediaFacts.stored(json.loads(MediaFacts.of_video(silent).model_dump_json())).source_info("a.mp4") == silent


def test_a_plan_that_disagrees_with_the_summary_on_audio_is_refused():
    with pytest.raises(ValueError, match="audio"):
        VideoFacts(**{**SUMMARY, "audio_codec": None}, plan=PLAN)
