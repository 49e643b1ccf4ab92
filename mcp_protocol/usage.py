"""What a render used, as the wire says it: the figures metered in its own tasks (mcp_protocol.domain.Artifact's
`cpu_s` and `render_s`), under `usage` in `GET /renders/{render_id}` (and the listing) and in a webhook's
`render.completed` event."""

from __future__ import annotations

from mcp_protocol.domain import Succeeded, TaskRecord
from mcp_protocol.json_types import JSONObject


def usage_of(rec: TaskRecord) -> JSONObject | None:
    """`{"cpu_seconds", "render_seconds"}` of a finished render that was metered; None for any other (not finished,
    ended without a video, or finished before renders were metered)."""
    if not isinstance(rec.end, Succeeded):
        return None
    artifact = rec.end.artifact
    if artifact.cpu_s is None or artifact.render_s is None:
        return None
    return {"cpu_seconds": artifact.cpu_s, "render_seconds": artifact.render_s}
