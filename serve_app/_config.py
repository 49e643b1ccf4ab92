"""Operator configuration: one settings object, read from the environment (`VIDFORGE_<FIELD>`) and CLI flags.

Every default is written once, here. pydantic-settings reads `VIDFORGE_` + the upper-cased field name (an empty
variable counts as unset), except the two whose documented names differ: `RAY_ADDRESS` and the test seam
`VIDFORGE_TEST_PARSE_FAULT_PREFIX`. The wire states durations (the approval window, result retention, the task
TTL, the idempotency window) from these values, so the capability summary never promises what the server does
not do. The object is frozen and crosses to Ray actors as JSON (`to_json`/`from_json`), which reads no environment.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from actors.settings import DEFAULT_STATE_RETRY_MAX_S, DEFAULT_STATE_TIMEOUT_S, STATE_URL_SCHEMES, RegistrySettings
from render_kernels.plan import MIN_SEGMENT_S
from render_kernels.qc.findings import QcThresholds

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
QC_DEFAULTS = QcThresholds()  # the quality check's documented thresholds, written once in the kernel


class Config(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="VIDFORGE_",
        env_ignore_empty=True,
        frozen=True,
        populate_by_name=True,
        extra="forbid",
        hide_input_in_errors=True,  # a refused VIDFORGE_STATE_URL or VIDFORGE_REVIEW_KEY is a secret: never echoed
    )

    host: str = "127.0.0.1"
    port: int = 8000
    data_dir: str = ".vidforge"
    state_dir: str | None = None  # the registry's SQLite database, on the head node's own disk; None: data_dir
    storage_url: str | None = None  # media (assets, previews, videos): s3://BUCKET/PREFIX; None: under data_dir
    # The registry's state in PostgreSQL (postgresql://USER:PASSWORD@HOST:PORT/DB, a secret: out of repr and logs);
    # None: SQLite in state_dir (actors/open_store.py).
    state_url: str | None = Field(default=None, repr=False)
    ray_address: str | None = Field(default=None, validation_alias="RAY_ADDRESS")
    tokens_file: str | None = None
    oauth_issuer: str | None = None
    public_url: str | None = None  # None: http://HOST:PORT (see public_base_url)
    oauth_scopes: str = ""  # space-separated, as in VIDFORGE_OAUTH_SCOPES and RFC 6749 §3.3
    task_ttl_ms: int = 86_400_000  # 24 h: tasks/* answer task_expired after it
    result_retention_s: int = 604_800  # 7 days: results, status and the video stay reachable this long
    idempotency_ttl_s: int = 86_400  # 24 h: an idempotency_key names its render this long
    approval_timeout_s: float = 1800.0  # 30 minutes
    poll_interval_ms: int = 10_000
    max_concurrent_renders: int = 4
    max_asset_bytes: int = 2 * 1024**3
    max_image_pixels: int = 16_777_216  # 4096 x 4096: far beyond any watermark
    asset_retention_s: int = 604_800  # uploads are deleted this long after upload, unless a render still uses them
    max_asset_bytes_per_principal: int = 20 * 1024**3
    sweep_batch: int = 500  # most tasks (and assets) one sweep pass deletes: the registry answers in between
    registry_cache_size: int = Field(default=10_000, ge=0)  # finished records the registry keeps in memory
    max_source_duration_s: float = 14_400.0  # 4 h
    max_frame_pixels: int = 8_847_360  # 4096 x 2160 (DCI 4K, covers UHD)
    max_frame_rate: float = 240.0  # phone slow motion
    max_output_frames: int = 864_000  # 4 h at 60 fps
    parse_timeout_s: float = 120.0  # one isolated parse of uploaded media (serve_app.media.media_probe)
    parse_memory_bytes: int = 1024**3  # what one parse may allocate beyond what its fresh process holds
    # Test seam only (media_probe.apply_test_fault): unset in production.
    parse_fault_prefix: str = Field(default="", validation_alias="VIDFORGE_TEST_PARSE_FAULT_PREFIX")
    render_timeout_s: float = 21_600.0  # 6 h: one run of a render, approval wait included, then render_timeout
    max_mcp_body_bytes: int = 1024 * 1024
    max_inline_resource_bytes: int = 8 * 1024 * 1024
    sweep_interval_s: float = 5.0
    namespace: str = "vidforge"
    render_workers: int = 0  # 0: one per CPU of the cluster (scheduling.SegmentScheduler.plan_width)
    # Output pixels (frames x width x height, millions) one segment task encodes at most: bounds a segment
    # worker's and the mux's memory whatever the video's length. 2500: ~10 s of 4k30, 40 s of 1080p30.
    segment_max_megapixels: int = 2500
    # The shortest segment a render is cut into, unless its source is shorter (render_kernels.plan.MIN_SEGMENT_S):
    # each seam costs bytes at equal quality, so lower it only to spread short clips over more CPUs.
    min_segment_s: float = Field(default=MIN_SEGMENT_S, gt=0)
    # The elastic cluster (serve_app/rendering/_autoscaling.py, docs/scaling-and-storage.md). The Ray autoscaler's
    # cluster config, as the head's autoscaler runs from it (`ray up`: ~/ray_bootstrap_config.yaml): with it, queued
    # renders are demand the autoscaler is told of and the plan counts the CPUs its node types can add; None: a fixed
    # cluster, no demand is issued (as on a single node).
    autoscaling_config: str | None = None
    max_principal_cpus: int = Field(default=0, ge=0)  # CPUs one principal's work may ask for; 0: no cap of its own
    max_cluster_cpus: int = Field(default=0, ge=0)  # CPUs all demand together may ask for; 0: the autoscaler's own max
    # Segments on GPU nodes: auto (where one is up, or the autoscaler can start one within gpu_wait_s), off, or require
    # (a render's segments run on GPU nodes only, waiting for one as long as the render may run).
    gpu: Literal["auto", "off", "require"] = "auto"
    gpu_wait_s: float = Field(default=120.0, ge=0)  # with gpu=auto: how long a render waits for a GPU node to start
    # Whether the AWS credentials of the process that runs `vidforge serve` travel to every Ray worker with the job
    # (Ray's runtime_env: stored in the cluster's GCS); False: each node uses its own (instance role, node environment).
    ship_storage_credentials: bool = False
    # Render worker processes started with the kernels loaded before the first render and kept so while idle (one per
    # CPU of each node, four more on the supervisor's: serve_app/rendering/_warm_pool.py); False: started per render.
    warm_pool: bool = True
    # Ingress admission (issue 8): each replica's own request bounds (serve_app/ingress/_request_slots.py), per-principal
    # caps held cluster-wide, Origin/Host checks.
    replicas: int = 1
    max_ongoing_requests: int = 256  # per replica
    max_queued_requests: int = 256  # per replica, waiting for a slot; beyond it 503 + Retry-After
    busy_retry_after_s: int = 5  # Retry-After on every 429 / 503 refusal of the ingress
    # Shares of a replica's request slots (issue 32): requests with no valid credential or review link together, and
    # each principal's (or review link's) own; past its share a caller is refused at once.
    max_anonymous_requests: int = Field(default=16, ge=0)  # never the replica's last slot
    max_principal_requests: int = Field(default=128, gt=0)
    # Deadlines at the door (serve_app/ingress/_deadlines.py), answered 408: a request's headers must arrive within
    # header_timeout_s of its first byte (a new connection's, of its opening); its body may stall at most body_timeout_s
    # between two reads and must average body_min_bytes_per_s after that first grace (0: no rate rule).
    header_timeout_s: float = Field(default=5.0, gt=0)
    body_timeout_s: float = Field(default=15.0, gt=0)
    body_min_bytes_per_s: int = Field(default=500, ge=0)
    max_listen_streams: int = 8  # open subscriptions/listen streams per principal
    max_uploads: int = 2  # POST /assets in progress per principal
    max_downloads: int = 4  # GET /artifacts in progress per principal
    # Imports by URL (vidforge_import_asset, serve_app/importing/): hosts and CIDRs allowed past the address guard
    # (comma-separated; a listed host may also be fetched over plain http), the redirects one import follows, the
    # time its transfer may take, and the imports one principal may have in progress at once.
    import_allow_hosts: str = ""
    import_max_redirects: int = Field(default=5, ge=0)
    import_timeout_s: float = Field(default=300.0, gt=0)
    max_imports: int = Field(default=2, gt=0)
    # The quality check of every render (render_kernels.qc): measured in the render's own tasks, its report and
    # contact sheet delivered with the video; off, a render carries neither. What a verdict is judged by:
    qc: bool = True
    # Fidelity (PSNR-Y and SSIM of a frame a second against what the encoder was given) is almost all of the check's
    # cost: each segment decodes its own output's reference frames, ~16 % more render time (docs/decisions/012). Off by
    # default, so that a render stays at the ffmpeg CLI's speed; true: the report's `fidelity` is measured.
    qc_fidelity: bool = False
    qc_black_min_s: float = Field(default=QC_DEFAULTS.black_min_s, gt=0)
    qc_frozen_min_s: float = Field(default=QC_DEFAULTS.frozen_min_s, gt=0)
    qc_silence_min_s: float = Field(default=QC_DEFAULTS.silence_min_s, gt=0)
    qc_silence_db: float = Field(default=QC_DEFAULTS.silence_db, lt=0)
    qc_true_peak_max_dbtp: float = QC_DEFAULTS.true_peak_max_dbtp
    qc_psnr_warn_db: float = Field(default=QC_DEFAULTS.psnr_warn_db, gt=0)
    qc_psnr_fail_db: float = Field(default=QC_DEFAULTS.psnr_fail_db, gt=0)
    qc_fail_fraction: float = Field(default=QC_DEFAULTS.fail_fraction, gt=0, le=1)
    # Inspections (vidforge_inspect_video, serve_app/inspecting/): videos up to inspect_answer_max_s long are answered
    # in the call even with the tasks extension; a call waits at most inspect_wait_s for its result before it answers
    # with the task (or `accepted`, without the extension); an inspection is stopped after inspect_timeout_s; one
    # principal may have max_inspections running at once.
    inspect_answer_max_s: float = Field(default=60.0, ge=0)
    inspect_wait_s: float = Field(default=20.0, gt=0)
    inspect_timeout_s: float = Field(default=900.0, gt=0)
    max_inspections: int = Field(default=2, gt=0)
    max_list_items: int = Field(default=100, gt=0)  # most items one page of GET /assets or GET /renders holds
    # Webhooks (serve_app/webhooks/, docs/webhooks.md): hosts and CIDRs a notify_url may reach although not public;
    # the JSON file of each principal's signing secrets (and default endpoint), re-read when it changes (None: one
    # secret per principal derived from the review-link key); how long an event is retried; one attempt's time
    # limit; the attempts in flight at once to one destination (scheme, host and port).
    webhook_allow_hosts: str = ""
    webhook_secrets_file: str | None = None
    webhook_max_age_s: float = Field(default=86_400.0, gt=0)  # 24 h
    webhook_attempt_timeout_s: float = Field(default=10.0, gt=0)
    webhook_max_per_destination: int = Field(default=4, gt=0)
    max_listen_task_ids: int = 100  # taskIds in one subscriptions/listen
    listen_idle_s: float = 300.0  # a listen stream that has sent nothing for this long ends
    lease_ttl_s: float = 30.0  # a dead replica's slots are freed after this
    # Task records each replica mirrors for tasks/get, kept fresh by the registry's change feed; 0: no mirror.
    record_mirror_size: int = Field(default=10_000, ge=0)
    # How long a replica waits for the TaskRegistry to answer a read (tasks/get, the status tool) before it answers
    # the contract's temporary error instead (a registry hung, or its node lost: Ray would wait for good).
    registry_timeout_s: float = Field(default=30.0, gt=0)  # past a registry restart on a loaded node
    # The task state's bounds (actors/postgres_store.py, actors/_store_opener.py): the most one connect, statement or
    # commit may take before the database counts as down, and the longest wait between attempts to reach it again.
    state_timeout_s: float = Field(default=DEFAULT_STATE_TIMEOUT_S, ge=1)
    state_retry_max_s: float = Field(default=DEFAULT_STATE_RETRY_MAX_S, gt=0)
    # `vidforge serve --ray-address`: how long the joined cluster's GCS may refuse connections before vidforge serve
    # exits 3 (serve_app/launch/_ray_watch.py); a GCS with fault tolerance restarts within it.
    gcs_grace_s: float = Field(default=30.0, gt=0)
    allowed_origins: str = ""  # comma-separated origins beside the server's own
    allowed_hosts: str = ""  # comma-separated Host names beside the server's own
    # The watermark review page (serve_app/ingress/review/): the key that signs its links (None: generated once into
    # the state dir at launch, serve_app/launch/_review_key.py), how long a link works from the moment the approval is
    # asked (at least the approval window), and the largest decision form it reads.
    review_key: str | None = Field(default=None, min_length=32, repr=False)
    review_link_ttl_s: float = 86_400.0  # 24 h
    # Room for a note at its bound (2000 characters, mcp_protocol.text_limits) in 4-byte characters, which a browser
    # sends percent-encoded as 12 bytes each, beside the capability and the decision.
    review_form_max_bytes: int = Field(default=32_768, gt=0)
    # Direct transfers with a bucket (VIDFORGE_STORAGE_URL; serve_app/ingress/_http_files.py): a download (GET /artifacts,
    # the watch page's video) is answered with a redirect to a presigned URL of the object that works for
    # presigned_url_ttl_s, and an upload may go to the bucket in parts (POST /assets/uploads) whose presigned URLs work
    # for direct_upload_ttl_s; off: every byte goes through the ingress, as with media on the data dir. S3 signs URLs
    # for at most 7 days.
    direct_transfers: bool = True
    presigned_url_ttl_s: int = Field(default=300, gt=0, le=604_800)
    direct_upload_ttl_s: int = Field(default=21_600, gt=0, le=604_800)
    # Observability (serve_app/observability/, docs/operating.md). vidforge's metrics (`vidforge_*`) are
    # served by one endpoint on the head, http://METRICS_HOST:METRICS_PORT/metrics (None: the API's host; a free port,
    # printed at start); off: vidforge records none.
    metrics: bool = True
    metrics_host: str | None = None
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    # The per-tenant breakdown: none (every series `principal="all"`), hashed (a short keyed hash of each principal,
    # keyed from the review-link key), or mapped (the operator's names from METRICS_PRINCIPAL_MAP, a JSON object
    # {principal: label}, read only then; unmapped ones `other`). With it, the first METRICS_MAX_PRINCIPALS
    # principals each process labels are told apart; the rest are `other`.
    metrics_principals: Literal["none", "hashed", "mapped"] = "none"
    metrics_principal_map: str | None = None
    metrics_max_principals: int = Field(default=20, ge=0)
    # The embedded Ray node's own Prometheus endpoint port (Ray's metrics only; `vidforge serve` without
    # --ray-address); None: a free port Ray picks. A joined cluster's nodes have theirs from `ray start
    # --metrics-export-port`. Ray listens on every interface there, whatever the settings (docs/operating.md).
    metrics_export_port: int | None = Field(default=None, ge=1, le=65535)
    # One JSON object per log line, or plain text; None: text when `vidforge serve`'s stderr is a terminal, else
    # json. Resolved once at launch (`from_env`) and handed to every process with the settings.
    log_format: Literal["json", "text"] | None = None

    @field_validator("state_url")
    @classmethod
    def _state_url_is_postgresql(cls, url: str | None) -> str | None:
        """Only PostgreSQL holds the state beside SQLite; the refusal names the scheme, never the URL (a secret)."""
        if url is not None and urlsplit(url).scheme not in STATE_URL_SCHEMES:
            raise ValueError("VIDFORGE_STATE_URL must be a postgresql:// (or postgres://) URL")
        return url

    @model_validator(mode="after")
    def _links_outlive_the_approval_window(self) -> Config:
        """A review link must work for as long as the approval it decides can still be given."""
        if self.review_link_ttl_s < self.approval_timeout_s:
            raise ValueError(
                f"VIDFORGE_REVIEW_LINK_TTL_S ({self.review_link_ttl_s:g}) must be at least VIDFORGE_APPROVAL_TIMEOUT_S"
                f" ({self.approval_timeout_s:g}): a review link has to work until the approval times out"
            )
        return self

    @model_validator(mode="after")
    def _mapped_labels_have_a_map(self) -> Config:
        """`mapped` shows each principal as the map names it: without a map there is nothing to show."""
        if self.metrics_principals == "mapped" and not self.metrics_principal_map:
            raise ValueError(
                "VIDFORGE_METRICS_PRINCIPALS=mapped needs VIDFORGE_METRICS_PRINCIPAL_MAP, a JSON file {principal: label}"
            )
        return self

    @classmethod
    def from_env(cls, **overrides: Any) -> Config:
        """The environment's settings, with the CLI flags that were given (None: not given) on top, the data
        and state dirs made absolute (Ray actors run elsewhere), and the log format decided (Ray's workers never
        write to a terminal: the launching process decides for all)."""
        config = cls(**{name: value for name, value in overrides.items() if value is not None})
        data_dir = Path(config.data_dir).resolve()
        state_dir = Path(config.state_dir).resolve() if config.state_dir else data_dir
        log_format = config.log_format or ("text" if sys.stderr.isatty() else "json")
        return config.model_copy(
            update={"data_dir": str(data_dir), "state_dir": str(state_dir), "log_format": log_format}
        )

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, raw: str) -> Config:
        return cls.model_validate_json(raw)

    def qc_thresholds(self) -> QcThresholds:
        """What the quality check's verdicts are judged by (VIDFORGE_QC_*)."""
        return QcThresholds(
            black_min_s=self.qc_black_min_s,
            frozen_min_s=self.qc_frozen_min_s,
            silence_min_s=self.qc_silence_min_s,
            silence_db=self.qc_silence_db,
            true_peak_max_dbtp=self.qc_true_peak_max_dbtp,
            psnr_warn_db=self.qc_psnr_warn_db,
            psnr_fail_db=self.qc_psnr_fail_db,
            fail_fraction=self.qc_fail_fraction,
        )

    def registry_settings(self) -> RegistrySettings:
        """The part of these settings the task registry runs by (it does not import this module)."""
        return RegistrySettings(**self.model_dump(include={f.name for f in fields(RegistrySettings)}))

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
