"""What the watch page says about a finished video: the facts a person looks for before pressing play or download,
in words (its size, length, format and frame size, and until when it is kept)."""

from __future__ import annotations

from dataclasses import dataclass

from mcp_protocol.domain import Artifact, TaskRecord
from serve_app.ingress.review.pages import Moment
from serve_app.ingress.review.view import duration_text

SIZE_UNITS = ("bytes", "KB", "MB", "GB", "TB")


def size_text(size_bytes: int) -> str:
    """E.g. "12.4 MB" (decimal units, as a file manager shows them); the exact count is on the page beside it."""
    size, unit = float(size_bytes), 0
    while size >= 1000 and unit < len(SIZE_UNITS) - 1:
        size, unit = size / 1000, unit + 1
    return f"{size_bytes} bytes" if unit == 0 else f"{size:.1f} {SIZE_UNITS[unit]}"


@dataclass(frozen=True)
class WatchView:
    """The page's facts, as the template shows them."""

    task_id: str
    size: str
    size_bytes: int
    duration: str
    output_format: str
    resolution: str
    watermarked: bool
    kept_until: Moment
    filename: str  # what the download is saved as

    @classmethod
    def of(cls, rec: TaskRecord, artifact: Artifact, retention_s: int) -> WatchView:
        request = rec.request
        resolution: str = request.resolution
        if artifact.width and artifact.height:
            resolution = f"{resolution} ({artifact.width} × {artifact.height} pixels)"
        return cls(
            task_id=rec.task_id,
            size=size_text(artifact.size_bytes),
            size_bytes=artifact.size_bytes,
            duration=duration_text(artifact.duration_s),
            output_format=artifact.ext.upper(),
            resolution=resolution,
            watermarked=request.watermark is not None,
            kept_until=Moment.of_ms(artifact.finished_at_ms + retention_s * 1000),
            filename=f"final.{artifact.ext}",
        )
