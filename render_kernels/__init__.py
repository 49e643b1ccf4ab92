"""vidforge render kernels: pure PyAV/numpy functions that Ray tasks call (no Ray, no HTTP here).

probe (+ render_preview for the approval gate: read_source) -> plan_segments -> encode_segment x N (parallel)
+ encode_audio -> mux_segments. Everything passed between steps is a plain picklable value; raw frames never
leave the function that decoded them.
"""

from .audio import AudioStats, EncodedAudio, encode_audio
from .decoders import choose_video_decoder
from .encoders import choose_video_encoder, segment_threads
from .errors import UnsupportedMedia
from .images import image_size, probe_image
from .media_io import Media, MediaSource
from .mux import MuxStats, mux_segments
from .plan import Segment, plan_segments
from .preview import PREVIEW, SOURCE_FRAME, Still, plan_stills, render_preview
from .probe import probe
from .reading import SourceReading, read_source
from .source_info import AudioInfo, SourceInfo
from .spec import RenderSpec, WatermarkSpec
from .video import EncodedSegment, SegmentStats, encode_segment

__all__ = [
    "AudioInfo",
    "AudioStats",
    "EncodedAudio",
    "EncodedSegment",
    "Media",
    "MediaSource",
    "MuxStats",
    "PREVIEW",
    "SOURCE_FRAME",
    "RenderSpec",
    "Segment",
    "SegmentStats",
    "SourceInfo",
    "SourceReading",
    "Still",
    "UnsupportedMedia",
    "WatermarkSpec",
    "choose_video_decoder",
    "choose_video_encoder",
    "segment_threads",
    "encode_audio",
    "encode_segment",
    "image_size",
    "mux_segments",
    "plan_segments",
    "plan_stills",
    "probe",
    "probe_image",
    "read_source",
    "render_preview",
]
