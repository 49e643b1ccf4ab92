"""Every metric vidforge exports: name, kind, help, labels and buckets, in one place.

Names follow Prometheus' conventions (base units, `_total` on counters, `_seconds`), and are the names vidforge's
endpoint serves (serve_app/observability/exporter.py). Labels are bounded: states, outcomes, codes, formats,
resolutions, limits, operations and methods are fixed sets; a principal is `all` unless the operator opts into the
per-tenant breakdown, and then a hashed or mapped label, `other` past VIDFORGE_METRICS_MAX_PRINCIPALS
(serve_app/observability/aggregate.py). deploy/grafana/vidforge.json charts them; tests/test_observability.py checks
that its every expression names one of these.
"""

from __future__ import annotations

from serve_app.observability.metric import Metric

# Upper bounds, seconds: a render takes seconds to hours (an approval wait included); a request milliseconds.
RENDER_SECONDS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600)
QUEUE_SECONDS = (0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 1800)
REQUEST_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
FRAMES_PER_SECOND = (5, 10, 25, 50, 100, 200, 400, 800, 1600)

# The TaskRegistry's (serve_app/observability/registry_observer.py).
RENDERS = Metric(
    "vidforge_renders",
    "gauge",
    "Renders the registry holds, by task status (terminal ones until retention).",
    ("state",),
)
STATE_AVAILABLE = Metric(
    "vidforge_state_available",
    "gauge",
    "1 while the task state (SQLite or PostgreSQL) answers, 0 while it is out of reach (down, hung, full).",
)
STATE_OUTAGES = Metric(
    "vidforge_state_outages_total", "counter", "Times the task state went out of reach (each outage counts once)."
)
RENDERS_CREATED = Metric(
    "vidforge_renders_created_total", "counter", "Renders accepted (idempotent replays excluded).", ("principal",)
)
RENDERS_ENDED = Metric(
    "vidforge_renders_ended_total",
    "counter",
    "Renders that reached a terminal status, by outcome and error code (code none: succeeded or cancelled).",
    ("outcome", "code"),
)
QUEUE_DEPTH = Metric(
    "vidforge_queue_depth",
    "gauge",
    "Renders accepted and not finished (working or awaiting approval), by principal: what the render quota counts.",
    ("principal",),
)
APPROVALS_WAITING = Metric("vidforge_approvals_waiting", "gauge", "Watermark previews awaiting a decision.")
APPROVAL_OLDEST_WAIT = Metric(
    "vidforge_approval_oldest_wait_seconds",
    "gauge",
    "How long the oldest watermark preview awaiting a decision has waited (0: none waits).",
)

# The RenderSupervisor's (serve_app/rendering/).
QUEUED_SEGMENTS = Metric(
    "vidforge_queued_segments",
    "gauge",
    "CPU tasks (video segments, and an audio encode) waiting for a CPU in the fair scheduler, by principal.",
    ("principal",),
)
RENDER_DURATION = Metric(
    "vidforge_render_duration_seconds",
    "histogram",
    "Wall seconds of a successful render's run, from its start to its file (the approval wait included).",
    ("resolution", "format"),
    RENDER_SECONDS,
)
RENDER_QUEUE = Metric(
    "vidforge_render_queue_seconds",
    "histogram",
    "Seconds a successful render's first CPU task waited in the fair scheduler.",
    ("resolution", "format"),
    QUEUE_SECONDS,
)
ENCODE_SPEED = Metric(
    "vidforge_render_encode_frames_per_second",
    "histogram",
    "A successful render's encode speed: its frames over the wall seconds of its segment stage.",
    ("resolution", "format"),
    FRAMES_PER_SECOND,
)
ENCODED_FRAMES = Metric(
    "vidforge_encoded_frames_total",
    "counter",
    "Frames encoded by successful renders, by principal (rate(): the cluster's output frames per second).",
    ("principal",),
)
SEGMENT_RETRIES = Metric(
    "vidforge_segment_retries_total", "counter", "Segment tasks run again (Ray retries a task whose worker died)."
)
WORKER_LOSSES = Metric(
    "vidforge_worker_losses_total",
    "counter",
    "Render tasks whose worker process died under them (each was retried), by task kind.",
    ("task",),
)

# The ingress replicas' (serve_app/ingress/).
REFUSALS = Metric(
    "vidforge_refusals_total",
    "counter",
    "Requests refused at a limit: quota (renders, stored bytes), body_size (/mcp body, upload), media (a source past"
    " a VIDFORGE_MAX_* limit), origin (Origin/Host), concurrency (per-principal caps and shares), busy (replica full),"
    " anonymous (the share of requests without credentials), header_timeout / body_timeout (408: a client too slow).",
    ("limit",),
)
REQUEST_DURATION = Metric(
    "vidforge_request_duration_seconds",
    "histogram",
    "Seconds an /mcp request spent in the app (after the replica's admission queue), by JSON-RPC method from its"
    " Mcp-Method header (2025-era requests, which send none: legacy).",
    ("method",),
    REQUEST_SECONDS,
)

# Every process that touches media (serve_app/observability/storage.py).
STORAGE_ERRORS = Metric(
    "vidforge_storage_errors_total",
    "counter",
    "Media store operations that failed (a missing object is not a failure), by operation.",
    ("operation",),
)

# The webhook dispatcher's (serve_app/webhooks/_dispatcher.py).
WEBHOOK_ATTEMPT_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
WEBHOOK_DELIVERIES = Metric(
    "vidforge_webhook_deliveries_total",
    "counter",
    "Webhook delivery attempts by outcome: delivered (2xx), retried (timeout, connection error, 408, 429, 5xx), "
    "gave_up (refused for good, or older than VIDFORGE_WEBHOOK_MAX_AGE_S).",
    ("outcome",),
)
WEBHOOK_OUTBOX_DEPTH = Metric("vidforge_webhook_outbox_depth", "gauge", "Webhook events not yet delivered.")
WEBHOOK_OLDEST_UNDELIVERED = Metric(
    "vidforge_webhook_oldest_undelivered_seconds",
    "gauge",
    "Age of the oldest webhook event not yet delivered (0: none).",
)
WEBHOOK_ATTEMPT_SECONDS = Metric(
    "vidforge_webhook_attempt_seconds",
    "histogram",
    "Time one webhook attempt took.",
    (),
    WEBHOOK_ATTEMPT_SECONDS_BUCKETS,
)

ALL_METRICS = (
    RENDERS,
    STATE_AVAILABLE,
    STATE_OUTAGES,
    RENDERS_CREATED,
    RENDERS_ENDED,
    QUEUE_DEPTH,
    APPROVALS_WAITING,
    APPROVAL_OLDEST_WAIT,
    QUEUED_SEGMENTS,
    RENDER_DURATION,
    RENDER_QUEUE,
    ENCODE_SPEED,
    ENCODED_FRAMES,
    SEGMENT_RETRIES,
    WORKER_LOSSES,
    REFUSALS,
    REQUEST_DURATION,
    STORAGE_ERRORS,
    WEBHOOK_DELIVERIES,
    WEBHOOK_OUTBOX_DEPTH,
    WEBHOOK_OLDEST_UNDELIVERED,
    WEBHOOK_ATTEMPT_SECONDS,
)
