"""Operator limits on what a source may cost, and the one contract error for media vidforge will not use.

The same refusal answers at upload (`POST /assets`, `vidforge assets add`) and at create (`vidforge_render_video`,
from the facts stored with the asset: limits may have been lowered since), so an agent sees one shape wherever it
meets the problem. Every refusal names the setting and the value.
"""

from __future__ import annotations

from mcp_protocol import errors
from mcp_protocol.envelope import VidforgeError
from render_kernels.errors import UnsupportedMedia
from render_kernels.limits import MediaLimits, OverLimit
from serve_app._config import Config
from serve_app.media._media_facts import MediaFacts
from serve_app.observability.catalog import REFUSALS

# The operator's name for each limit an OverLimit can name (MediaLimits fields, then the parse's own limits).
SETTINGS = {
    "max_duration_s": "VIDFORGE_MAX_SOURCE_DURATION_S",
    "max_frame_pixels": "VIDFORGE_MAX_FRAME_PIXELS",
    "max_frame_rate": "VIDFORGE_MAX_FRAME_RATE",
    "max_frames": "VIDFORGE_MAX_OUTPUT_FRAMES",
    "max_image_pixels": "VIDFORGE_MAX_IMAGE_PIXELS",
    "parse_timeout_s": "VIDFORGE_PARSE_TIMEOUT_S",
    "parse_memory_bytes": "VIDFORGE_PARSE_MEMORY_BYTES",
}


def media_limits(config: Config) -> MediaLimits:
    return MediaLimits(
        max_duration_s=config.max_source_duration_s,
        max_frame_pixels=config.max_frame_pixels,
        max_frame_rate=config.max_frame_rate,
        max_frames=config.max_output_frames,
        max_image_pixels=config.max_image_pixels,
    )


def refusal_reason(exc: UnsupportedMedia) -> str:
    """The kernel's reason, plus the setting an operator would change for a limit."""
    return f"{exc.reason} ({SETTINGS[exc.limit]})" if isinstance(exc, OverLimit) else exc.reason


def media_refusal(field: str, exc: UnsupportedMedia) -> VidforgeError:
    """The contract error for media that cannot be used: `media_limit_exceeded` past a limit (counted as a
    refusal), else `unsupported_codec`. Both are properties of the file (`temporary: false`). The exception itself
    (its cause, a worker's traceback) is the caller's to log (`VidforgeError.report(cause=exc)` where the error
    answers a request), never the client's to see."""
    if isinstance(exc, OverLimit):
        REFUSALS.inc(limit="media")
        return errors.media_limit_exceeded(field, refusal_reason(exc))
    return errors.unsupported_codec(field, exc.reason)


def check_stored_facts(limits: MediaLimits, facts: MediaFacts | None) -> None:
    """The limits now in force, on an asset's stored facts (serve_app.media._media_facts): an operator may have
    lowered them since the upload. Raises OverLimit. An asset stored before facts were kept has none to check."""
    if facts is None:
        return
    if (video := facts.video) is not None:
        limits.check_video(facts.width, facts.height, video.fps, video.frame_count, video.duration_s)
    else:
        limits.check_image_size(facts.width, facts.height)
