"""Operator configuration: the architecture page's environment variables and CLI flags, one place."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


@dataclass(frozen=True)
class Config:
    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: str = ".vidforge"
    state_dir: str | None = None  # the registry's SQLite database, on the head node's own disk; None: data_dir
    storage_url: str | None = None  # media (assets, previews, videos): s3://BUCKET/PREFIX; None: under data_dir
    ray_address: str | None = None
    tokens_file: str | None = None
    oauth_issuer: str | None = None
    public_url: str | None = None  # None: http://HOST:PORT (see public_base_url)
    oauth_scopes: str = ""  # space-separated, as in VIDFORGE_OAUTH_SCOPES and RFC 6749 §3.3
    task_ttl_ms: int = 86_400_000
    result_retention_s: int = 604_800
    approval_timeout_s: float = 1800.0
    poll_interval_ms: int = 10_000
    max_concurrent_renders: int = 4
    max_asset_bytes: int = 2 * 1024**3
    max_image_pixels: int = 16_777_216  # 4096 x 4096: far beyond any watermark
    asset_retention_s: int = 604_800  # uploads are deleted this long after upload, unless a render still uses them
    max_asset_bytes_per_principal: int = 20 * 1024**3
    sweep_batch: int = 500  # most tasks (and assets) one sweep pass deletes: the registry answers in between
    max_source_duration_s: float = 14_400.0  # 4 h
    max_frame_pixels: int = 8_847_360  # 4096 x 2160 (DCI 4K, covers UHD)
    max_frame_rate: float = 240.0  # phone slow motion
    max_output_frames: int = 864_000  # 4 h at 60 fps
    parse_timeout_s: float = 120.0  # one isolated parse of uploaded media (serve_app.media_probe)
    parse_memory_bytes: int = 1024**3  # what one parse may allocate beyond its idle worker process
    parse_fault_prefix: str = ""  # test seam only (media_probe._test_fault): unset in production
    render_timeout_s: float = 21_600.0  # 6 h: one run of a render, approval wait included, then render_timeout
    max_mcp_body_bytes: int = 1024 * 1024
    max_inline_resource_bytes: int = 8 * 1024 * 1024
    sweep_interval_s: float = 5.0
    namespace: str = "vidforge"
    render_workers: int = 0  # 0: as many as the CPUs no other render's work is waiting for
    # Output pixels (frames x width x height, millions) one segment task encodes at most: bounds a segment
    # worker's and the mux's memory whatever the video's length. 2500: ~10 s of 4k30, 40 s of 1080p30.
    segment_max_megapixels: int = 2500
    # Ingress admission (issue 8): Serve's own bounds, per-principal caps held cluster-wide, Origin/Host checks.
    replicas: int = 1
    max_ongoing_requests: int = 256  # per replica
    max_queued_requests: int = 256  # waiting for a replica; beyond it Serve answers 503 + Retry-After
    busy_retry_after_s: int = 5  # Retry-After on every 429 / 503 refusal of the ingress
    max_listen_streams: int = 8  # open subscriptions/listen streams per principal
    max_uploads: int = 2  # POST /assets in progress per principal
    max_downloads: int = 4  # GET /artifacts in progress per principal
    max_listen_task_ids: int = 100  # taskIds in one subscriptions/listen
    listen_idle_s: float = 300.0  # a listen stream that has sent nothing for this long ends
    lease_ttl_s: float = 30.0  # a dead replica's slots are freed after this
    allowed_origins: str = ""  # comma-separated origins beside the server's own
    allowed_hosts: str = ""  # comma-separated Host names beside the server's own

    @classmethod
    def from_env(cls, **overrides) -> "Config":
        # Every default is the field's own, written once above.
        values = dict(
            data_dir=os.environ.get("VIDFORGE_DATA_DIR", cls.data_dir),
            state_dir=os.environ.get("VIDFORGE_STATE_DIR") or None,
            storage_url=os.environ.get("VIDFORGE_STORAGE_URL") or None,
            ray_address=os.environ.get("RAY_ADDRESS") or None,
            tokens_file=os.environ.get("VIDFORGE_TOKENS_FILE") or None,
            oauth_issuer=os.environ.get("VIDFORGE_OAUTH_ISSUER") or None,
            public_url=os.environ.get("VIDFORGE_PUBLIC_URL") or None,
            oauth_scopes=os.environ.get("VIDFORGE_OAUTH_SCOPES", cls.oauth_scopes),
            task_ttl_ms=_env_int("VIDFORGE_TASK_TTL_MS", cls.task_ttl_ms),
            result_retention_s=_env_int("VIDFORGE_RESULT_RETENTION_S", cls.result_retention_s),
            approval_timeout_s=_env_float("VIDFORGE_APPROVAL_TIMEOUT_S", cls.approval_timeout_s),
            poll_interval_ms=_env_int("VIDFORGE_POLL_INTERVAL_MS", cls.poll_interval_ms),
            max_concurrent_renders=_env_int("VIDFORGE_MAX_CONCURRENT_RENDERS", cls.max_concurrent_renders),
            max_asset_bytes=_env_int("VIDFORGE_MAX_ASSET_BYTES", cls.max_asset_bytes),
            max_image_pixels=_env_int("VIDFORGE_MAX_IMAGE_PIXELS", cls.max_image_pixels),
            asset_retention_s=_env_int("VIDFORGE_ASSET_RETENTION_S", cls.asset_retention_s),
            max_asset_bytes_per_principal=_env_int(
                "VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL", cls.max_asset_bytes_per_principal
            ),
            sweep_batch=_env_int("VIDFORGE_SWEEP_BATCH", cls.sweep_batch),
            max_source_duration_s=_env_float("VIDFORGE_MAX_SOURCE_DURATION_S", cls.max_source_duration_s),
            max_frame_pixels=_env_int("VIDFORGE_MAX_FRAME_PIXELS", cls.max_frame_pixels),
            max_frame_rate=_env_float("VIDFORGE_MAX_FRAME_RATE", cls.max_frame_rate),
            max_output_frames=_env_int("VIDFORGE_MAX_OUTPUT_FRAMES", cls.max_output_frames),
            parse_timeout_s=_env_float("VIDFORGE_PARSE_TIMEOUT_S", cls.parse_timeout_s),
            parse_memory_bytes=_env_int("VIDFORGE_PARSE_MEMORY_BYTES", cls.parse_memory_bytes),
            parse_fault_prefix=os.environ.get("VIDFORGE_TEST_PARSE_FAULT_PREFIX", cls.parse_fault_prefix),
            render_timeout_s=_env_float("VIDFORGE_RENDER_TIMEOUT_S", cls.render_timeout_s),
            max_mcp_body_bytes=_env_int("VIDFORGE_MAX_MCP_BODY_BYTES", cls.max_mcp_body_bytes),
            max_inline_resource_bytes=_env_int(
                "VIDFORGE_MAX_INLINE_RESOURCE_BYTES", cls.max_inline_resource_bytes
            ),
            sweep_interval_s=_env_float("VIDFORGE_SWEEP_INTERVAL_S", cls.sweep_interval_s),
            namespace=os.environ.get("VIDFORGE_NAMESPACE", cls.namespace),
            render_workers=_env_int("VIDFORGE_RENDER_WORKERS", cls.render_workers),
            segment_max_megapixels=_env_int("VIDFORGE_SEGMENT_MAX_MEGAPIXELS", cls.segment_max_megapixels),
            replicas=_env_int("VIDFORGE_REPLICAS", cls.replicas),
            max_ongoing_requests=_env_int("VIDFORGE_MAX_ONGOING_REQUESTS", cls.max_ongoing_requests),
            max_queued_requests=_env_int("VIDFORGE_MAX_QUEUED_REQUESTS", cls.max_queued_requests),
            busy_retry_after_s=_env_int("VIDFORGE_BUSY_RETRY_AFTER_S", cls.busy_retry_after_s),
            max_listen_streams=_env_int("VIDFORGE_MAX_LISTEN_STREAMS", cls.max_listen_streams),
            max_uploads=_env_int("VIDFORGE_MAX_UPLOADS", cls.max_uploads),
            max_downloads=_env_int("VIDFORGE_MAX_DOWNLOADS", cls.max_downloads),
            max_listen_task_ids=_env_int("VIDFORGE_MAX_LISTEN_TASK_IDS", cls.max_listen_task_ids),
            listen_idle_s=_env_float("VIDFORGE_LISTEN_IDLE_S", cls.listen_idle_s),
            lease_ttl_s=_env_float("VIDFORGE_LEASE_TTL_S", cls.lease_ttl_s),
            allowed_origins=os.environ.get("VIDFORGE_ALLOWED_ORIGINS", cls.allowed_origins),
            allowed_hosts=os.environ.get("VIDFORGE_ALLOWED_HOSTS", cls.allowed_hosts),
        )
        values.update({k: v for k, v in overrides.items() if v is not None})
        values["data_dir"] = str(Path(values["data_dir"]).resolve())
        values["state_dir"] = str(Path(values["state_dir"] or values["data_dir"]).resolve())
        return cls(**values)

    def registry_config(self) -> dict:
        return {
            "task_ttl_ms": self.task_ttl_ms,
            "result_retention_s": self.result_retention_s,
            "poll_interval_ms": self.poll_interval_ms,
            "max_concurrent_renders": self.max_concurrent_renders,
            "sweep_interval_s": self.sweep_interval_s,
            "sweep_batch": self.sweep_batch,
            "asset_retention_s": self.asset_retention_s,
        }

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: str) -> "Config":
        return cls(**json.loads(raw))

    @property
    def public_base_url(self) -> str:
        """Where clients reach this server: `VIDFORGE_PUBLIC_URL` behind a proxy, else the bind address."""
        if self.public_url:
            return self.public_url.rstrip("/")
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"

    @property
    def resource(self) -> str:
        """The OAuth resource identifier (RFC 8707, RFC 9728 §1.2): the MCP endpoint's public URL."""
        return f"{self.public_base_url}/mcp"

    @property
    def required_scopes(self) -> tuple[str, ...]:
        return tuple(self.oauth_scopes.split())
