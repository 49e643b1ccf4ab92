"""One read of a source before it is rendered: its facts, and the watermark preview when there is one.

Both parse the tenant's file, so the driver runs them in an isolated parser process (serve_app.media.media_probe);
together, because starting that process costs more CPU than both parses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .limits import NO_LIMITS, MediaLimits
from .media_io import Media
from .preview import render_preview
from .probe import probe
from .source_info import SourceInfo
from .spec import RenderSpec


@dataclass(frozen=True)
class SourceReading:
    """The source's facts, the preview PNG (None without a watermark), and the seconds each took."""

    info: SourceInfo
    preview_png: bytes | None
    probe_s: float
    preview_s: float


def read_source(source_path: Media, limits: MediaLimits = NO_LIMITS, spec: RenderSpec | None = None) -> SourceReading:
    """Probe the source (held to `limits`), then render the preview when `spec` has a watermark."""
    started = time.perf_counter()
    info = probe(source_path, limits)
    probed = time.perf_counter()
    png = render_preview(source_path, info, spec) if spec is not None and spec.watermark is not None else None
    return SourceReading(info, png, probed - started, time.perf_counter() - probed)
