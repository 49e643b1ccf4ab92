"""What an upload's parse found in its file — the asset's `facts` — as one typed model that holds each fact once.

Kept in the asset's meta.json (serve_app.media.assets) and read from there wherever facts are used: create checks
them against the limits in force (media_limits.check_stored_facts), an import answers with them (the import desk),
the review page sizes the watermark from them, and a render plans its segments from them (`source_info`) instead of
probing the file a second time.

The layout written (`model_dump(mode="json")`): `{"width", "height", "video"}`, `video` null for a still image, else
the video's summary (`duration_s`, `fps`, `frame_count`, `video_codec`, `audio_codec`) and `plan`, the rest of what
the probe found (render_kernels.SourceInfo). Older layouts are migrated when read, as the task stores migrate theirs
on open (`MediaFacts.stored`):

- facts kept before this model: `kind` and the summary at the top, and a video's probe record again under `source`
  (its width, height, rate, frame count, duration and codecs a second time). The summary is kept; the record
  becomes the `plan`, unless it lacks a fact a render needs today (the display matrix, pixel aspect and field
  order, kept since phones' portrait videos are rendered upright), or there is none (kept since renders plan from
  the upload's parse): then `plan` is None, and the render probes the file again.
- an asset stored before facts were kept has none (`Asset.facts` None): nothing to check, and the render probes.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, model_validator

from render_kernels.media_io import Media
from render_kernels.source_info import AudioInfo, SourceInfo


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AudioTrack(_Frozen):
    """The audio track a render uses (its codec is `VideoFacts.audio_codec`)."""

    sample_rate: int
    channels: int
    duration_s: float


class Plan(_Frozen):
    """What a render plans its segments from, beside the summary (render_kernels.SourceInfo's other facts)."""

    start_time_s: float
    keyframe_times: tuple[float, ...]
    keyframe_frames: tuple[int, ...]
    pixel_format: str
    rotation: int
    hflip: bool
    sample_aspect: tuple[int, int]
    field_order: str
    audio: AudioTrack | None


class VideoFacts(_Frozen):
    duration_s: float
    fps: float
    frame_count: int
    video_codec: str
    audio_codec: str | None  # None: no audio
    plan: Plan | None = None  # None: kept before all of today's facts were; the render probes the file again

    @model_validator(mode="after")
    def _one_audio(self) -> Self:
        if self.plan is not None and (self.plan.audio is None) != (self.audio_codec is None):
            raise ValueError("the plan's audio track and audio_codec disagree")
        return self


class MediaFacts(_Frozen):
    width: int
    height: int
    video: VideoFacts | None = None  # None: a still image

    @property
    def kind(self) -> Literal["video", "image"]:
        return "image" if self.video is None else "video"

    @classmethod
    def of_video(cls, info: SourceInfo) -> MediaFacts:
        """The facts of a probed video (all of it: a render plans from them without probing again)."""
        audio = info.audio
        return cls(
            width=info.width,
            height=info.height,
            video=VideoFacts(
                duration_s=info.duration_s,
                fps=info.fps,
                frame_count=info.frame_count,
                video_codec=info.video_codec,
                audio_codec=audio.codec if audio else None,
                plan=Plan(
                    start_time_s=info.start_time_s,
                    keyframe_times=info.keyframe_times,
                    keyframe_frames=info.keyframe_frames,
                    pixel_format=info.pixel_format,
                    rotation=info.rotation,
                    hflip=info.hflip,
                    sample_aspect=info.sample_aspect,
                    field_order=info.field_order,
                    audio=AudioTrack(
                        sample_rate=audio.sample_rate, channels=audio.channels, duration_s=audio.duration_s
                    )
                    if audio
                    else None,
                ),
            ),
        )

    @classmethod
    def of_image(cls, width: int, height: int) -> MediaFacts:
        return cls(width=width, height=height)

    def source_info(self, path: Media) -> SourceInfo | None:
        """The probe these facts hold, for the file at `path`; None for an image, and for a video whose plan was not
        kept (the render probes it)."""
        video = self.video
        plan = video.plan if video else None
        if video is None or plan is None:
            return None
        audio = plan.audio
        return SourceInfo(
            path=path,
            duration_s=video.duration_s,
            fps=video.fps,
            frame_count=video.frame_count,
            width=self.width,
            height=self.height,
            video_codec=video.video_codec,
            keyframe_times=plan.keyframe_times,
            audio=AudioInfo(video.audio_codec, audio.sample_rate, audio.channels, audio.duration_s)
            if audio and video.audio_codec
            else None,
            start_time_s=plan.start_time_s,
            keyframe_frames=plan.keyframe_frames,
            pixel_format=plan.pixel_format,
            rotation=plan.rotation,
            hflip=plan.hflip,
            sample_aspect=plan.sample_aspect,
            field_order=plan.field_order,
        )

    @classmethod
    def stored(cls, raw: object) -> MediaFacts | None:
        """Facts as meta.json holds them, in any layout (see the module docstring); None for none kept."""
        return None if raw is None else cls.model_validate(raw)

    @model_validator(mode="before")
    @classmethod
    def _migrated(cls, data: Any) -> Any:
        """The layout before this model (`kind` at the top, a video's facts twice) as today's."""
        if not isinstance(data, dict) or "kind" not in data:
            return data
        size = {"width": data["width"], "height": data["height"]}
        if data["kind"] != "video":
            return size
        summary = {key: data[key] for key in ("duration_s", "fps", "frame_count", "video_codec", "audio_codec")}
        return {**size, "video": {**summary, "plan": _plan_of(data.get("source"))}}


# Every fact a probe record of the older layout must hold to plan from (what SourceInfo holds, but where the file is).
_RECORD_FACTS = frozenset(f.name for f in fields(SourceInfo)) - {"path"}


def _plan_of(record: object) -> dict[str, Any] | None:
    """The plan in an older layout's probe record (`source`); None without one, or with one that lacks a fact."""
    if not isinstance(record, dict) or not _RECORD_FACTS <= record.keys():
        return None
    audio = record["audio"]
    track = None if audio is None else {key: audio[key] for key in AudioTrack.model_fields}
    return {**{key: record[key] for key in Plan.model_fields if key != "audio"}, "audio": track}
