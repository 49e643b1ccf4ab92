"""The settings the task registry runs by: what it keeps, for how long, and where.

The registry sits below the server, so it does not read the operator's `serve_app.config.Config`; the server
hands it this small frozen object instead (`Config.registry_settings()`), built from the one place where every
default is written. Plain values only: it crosses to the registry actor by pickle.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RegistrySettings:
    data_dir: str  # media under it when storage_url is None, and the state dir's fallback
    state_dir: str | None  # the SQLite database (the head node's own disk); None: data_dir
    storage_url: str | None  # the media store the sweep deletes from: s3://BUCKET/PREFIX, or None for data_dir
    namespace: str  # Ray namespace the registry and the render supervisor are named in
    max_concurrent_renders: int  # per principal: render_quota_exceeded beyond it
    task_ttl_ms: int  # tasks/* answer task_expired after it
    poll_interval_ms: int  # the pollIntervalMs tasks advertise (lengthened while awaiting approval)
    idempotency_ttl_s: int  # an idempotency_key names its render this long
    result_retention_s: int  # terminal tasks, their results and files are kept this long
    asset_retention_s: int  # uploads are deleted this long after upload, unless a render still uses them
    sweep_interval_s: float  # between housekeeping passes
    sweep_batch: int  # most tasks (and assets) one sweep pass deletes
