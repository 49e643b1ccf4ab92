"""The settings the task registry runs by: what it keeps, for how long, and where.

The registry sits below the server, so it does not read the operator's `serve_app._config.Config`; the server
hands it this small frozen object instead (`Config.registry_settings()`), built from the one place where every
default is written. Plain values only: it crosses to the registry actor by pickle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

STATE_URL_SCHEMES = ("postgresql", "postgres")  # what VIDFORGE_STATE_URL may name (serve_app._config checks it)
# VIDFORGE_STATE_TIMEOUT_S and VIDFORGE_STATE_RETRY_MAX_S by default (serve_app._config reads these too).
DEFAULT_STATE_TIMEOUT_S = 5.0
DEFAULT_STATE_RETRY_MAX_S = 5.0


@dataclass(frozen=True)
class RegistrySettings:
    data_dir: str  # media under it when storage_url is None, and the state dir's fallback
    state_dir: str | None  # the SQLite database (the head node's own disk); None: data_dir
    # postgresql://…: the state in PostgreSQL; None: SQLite in state_dir. A secret (its password): out of the repr.
    state_url: str | None = field(repr=False)
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
    registry_cache_size: int  # finished task records kept in memory (most recently used); the rest are read by key
    # The most one call on the task state may take (connect, statement, commit): past it a hung database is treated
    # like one that is down. And the longest wait between two attempts to reach it again.
    state_timeout_s: float
    state_retry_max_s: float

    @property
    def state_location(self) -> str:
        """Where the state is, fit for a log line: the database URL without its user and password, or the dir."""
        if self.state_url is not None:
            return public_database_url(self.state_url)
        return self.state_dir or self.data_dir


def public_database_url(url: str) -> str:
    """``scheme://host:port[,host:port…]/db`` of a database URL: what an operator needs to tell which database (every
    host of a multi-host URL), and no secret (user, password and query parameters such as ``password=`` or
    ``sslkey=`` are left out)."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2] or "localhost"
    return f"{parts.scheme}://{hosts}{parts.path}"
