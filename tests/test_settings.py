"""The one settings object (`serve_app._config.Config`): every documented environment variable keeps its name,
meaning and default, and the wire's texts state the configured durations. Pure: no Ray, no server."""

from __future__ import annotations

import json

import pytest

from mcp_protocol.catalog import capability_summary, resource_templates, tool_definitions
from serve_app._config import Config
from tests.harness import REPO

# Every variable docs/operating.md and the architecture page document, with the field it sets, its default and a value.
DOCUMENTED = {
    "VIDFORGE_DATA_DIR": ("data_dir", ".vidforge", "/srv/vidforge"),
    "VIDFORGE_STATE_DIR": ("state_dir", None, "/srv/vidforge-state"),
    "VIDFORGE_STORAGE_URL": ("storage_url", None, "s3://media-bucket/vidforge"),
    "VIDFORGE_STATE_URL": ("state_url", None, "postgresql://vidforge:secret@db.internal:5432/vidforge"),
    "RAY_ADDRESS": ("ray_address", None, "10.0.0.1:6379"),
    "VIDFORGE_TOKENS_FILE": ("tokens_file", None, "/etc/vidforge/tokens.json"),
    "VIDFORGE_OAUTH_ISSUER": ("oauth_issuer", None, "https://issuer.example"),
    "VIDFORGE_PUBLIC_URL": ("public_url", None, "https://vf.example"),
    "VIDFORGE_OAUTH_SCOPES": ("oauth_scopes", "", "vidforge.render"),
    "VIDFORGE_TASK_TTL_MS": ("task_ttl_ms", 86_400_000, 60_000),
    "VIDFORGE_RESULT_RETENTION_S": ("result_retention_s", 604_800, 3600),
    "VIDFORGE_APPROVAL_TIMEOUT_S": ("approval_timeout_s", 1800.0, 4.5),
    "VIDFORGE_POLL_INTERVAL_MS": ("poll_interval_ms", 10_000, 500),
    "VIDFORGE_MAX_CONCURRENT_RENDERS": ("max_concurrent_renders", 4, 9),
    "VIDFORGE_MAX_ASSET_BYTES": ("max_asset_bytes", 2 * 1024**3, 1000),
    "VIDFORGE_MAX_IMAGE_PIXELS": ("max_image_pixels", 16_777_216, 100),
    "VIDFORGE_ASSET_RETENTION_S": ("asset_retention_s", 604_800, 3600),
    "VIDFORGE_MAX_ASSET_BYTES_PER_PRINCIPAL": ("max_asset_bytes_per_principal", 20 * 1024**3, 5000),
    "VIDFORGE_SWEEP_BATCH": ("sweep_batch", 500, 10),
    "VIDFORGE_REGISTRY_CACHE_SIZE": ("registry_cache_size", 10_000, 50),
    "VIDFORGE_MAX_SOURCE_DURATION_S": ("max_source_duration_s", 14_400.0, 60.0),
    "VIDFORGE_MAX_FRAME_PIXELS": ("max_frame_pixels", 8_847_360, 1000),
    "VIDFORGE_MAX_FRAME_RATE": ("max_frame_rate", 240.0, 30.0),
    "VIDFORGE_MAX_OUTPUT_FRAMES": ("max_output_frames", 864_000, 100),
    "VIDFORGE_PARSE_TIMEOUT_S": ("parse_timeout_s", 120.0, 5.0),
    "VIDFORGE_PARSE_MEMORY_BYTES": ("parse_memory_bytes", 1024**3, 1024),
    "VIDFORGE_TEST_PARSE_FAULT_PREFIX": ("parse_fault_prefix", "", "FAULT"),
    "VIDFORGE_RENDER_TIMEOUT_S": ("render_timeout_s", 21_600.0, 30.0),
    "VIDFORGE_MAX_MCP_BODY_BYTES": ("max_mcp_body_bytes", 1024 * 1024, 2048),
    "VIDFORGE_MAX_INLINE_RESOURCE_BYTES": ("max_inline_resource_bytes", 8 * 1024 * 1024, 1000),
    "VIDFORGE_SWEEP_INTERVAL_S": ("sweep_interval_s", 5.0, 0.5),
    "VIDFORGE_NAMESPACE": ("namespace", "vidforge", "vf-test"),
    "VIDFORGE_RENDER_WORKERS": ("render_workers", 0, 3),
    "VIDFORGE_SEGMENT_MAX_MEGAPIXELS": ("segment_max_megapixels", 2500, 100),
    "VIDFORGE_MIN_SEGMENT_S": ("min_segment_s", 5.0, 2.0),
    "VIDFORGE_AUTOSCALING_CONFIG": ("autoscaling_config", None, "/home/ray/ray_bootstrap_config.yaml"),
    "VIDFORGE_MAX_PRINCIPAL_CPUS": ("max_principal_cpus", 0, 16),
    "VIDFORGE_MAX_CLUSTER_CPUS": ("max_cluster_cpus", 0, 64),
    "VIDFORGE_GPU": ("gpu", "auto", "require"),
    "VIDFORGE_GPU_WAIT_S": ("gpu_wait_s", 120.0, 30.0),
    "VIDFORGE_SHIP_STORAGE_CREDENTIALS": ("ship_storage_credentials", False, True),
    "VIDFORGE_WARM_POOL": ("warm_pool", True, False),
    "VIDFORGE_REPLICAS": ("replicas", 1, 2),
    "VIDFORGE_MAX_ONGOING_REQUESTS": ("max_ongoing_requests", 256, 16),
    "VIDFORGE_MAX_QUEUED_REQUESTS": ("max_queued_requests", 256, 16),
    "VIDFORGE_BUSY_RETRY_AFTER_S": ("busy_retry_after_s", 5, 7),
    "VIDFORGE_MAX_ANONYMOUS_REQUESTS": ("max_anonymous_requests", 16, 2),
    "VIDFORGE_MAX_PRINCIPAL_REQUESTS": ("max_principal_requests", 128, 8),
    "VIDFORGE_HEADER_TIMEOUT_S": ("header_timeout_s", 5.0, 2.5),
    "VIDFORGE_BODY_TIMEOUT_S": ("body_timeout_s", 15.0, 4.0),
    "VIDFORGE_BODY_MIN_BYTES_PER_S": ("body_min_bytes_per_s", 500, 0),
    "VIDFORGE_MAX_LISTEN_STREAMS": ("max_listen_streams", 8, 1),
    "VIDFORGE_MAX_UPLOADS": ("max_uploads", 2, 1),
    "VIDFORGE_MAX_DOWNLOADS": ("max_downloads", 4, 1),
    "VIDFORGE_IMPORT_ALLOW_HOSTS": ("import_allow_hosts", "", "media.internal,10.8.0.0/16"),
    "VIDFORGE_IMPORT_MAX_REDIRECTS": ("import_max_redirects", 5, 2),
    "VIDFORGE_IMPORT_TIMEOUT_S": ("import_timeout_s", 300.0, 30.0),
    "VIDFORGE_MAX_IMPORTS": ("max_imports", 2, 1),
    "VIDFORGE_MAX_LIST_ITEMS": ("max_list_items", 100, 5),
    "VIDFORGE_QC": ("qc", True, False),
    "VIDFORGE_QC_FIDELITY": ("qc_fidelity", False, True),
    "VIDFORGE_QC_BLACK_MIN_S": ("qc_black_min_s", 0.5, 2.0),
    "VIDFORGE_QC_FROZEN_MIN_S": ("qc_frozen_min_s", 1.0, 3.0),
    "VIDFORGE_QC_SILENCE_MIN_S": ("qc_silence_min_s", 1.0, 2.5),
    "VIDFORGE_QC_SILENCE_DB": ("qc_silence_db", -50.0, -60.0),
    "VIDFORGE_QC_TRUE_PEAK_MAX_DBTP": ("qc_true_peak_max_dbtp", -1.0, 0.0),
    "VIDFORGE_QC_PSNR_WARN_DB": ("qc_psnr_warn_db", 30.0, 35.0),
    "VIDFORGE_QC_PSNR_FAIL_DB": ("qc_psnr_fail_db", 20.0, 25.0),
    "VIDFORGE_QC_FAIL_FRACTION": ("qc_fail_fraction", 0.5, 0.9),
    "VIDFORGE_INSPECT_ANSWER_MAX_S": ("inspect_answer_max_s", 60.0, 10.0),
    "VIDFORGE_INSPECT_WAIT_S": ("inspect_wait_s", 20.0, 2.0),
    "VIDFORGE_INSPECT_TIMEOUT_S": ("inspect_timeout_s", 900.0, 30.0),
    "VIDFORGE_MAX_INSPECTIONS": ("max_inspections", 2, 1),
    "VIDFORGE_WEBHOOK_ALLOW_HOSTS": ("webhook_allow_hosts", "", "hooks.internal,10.9.0.0/16"),
    "VIDFORGE_WEBHOOK_SECRETS_FILE": ("webhook_secrets_file", None, "/etc/vidforge/webhook-secrets.json"),
    "VIDFORGE_WEBHOOK_MAX_AGE_S": ("webhook_max_age_s", 86_400.0, 3600.0),
    "VIDFORGE_WEBHOOK_ATTEMPT_TIMEOUT_S": ("webhook_attempt_timeout_s", 10.0, 2.5),
    "VIDFORGE_WEBHOOK_MAX_PER_DESTINATION": ("webhook_max_per_destination", 4, 8),
    "VIDFORGE_MAX_LISTEN_TASK_IDS": ("max_listen_task_ids", 100, 3),
    "VIDFORGE_LISTEN_IDLE_S": ("listen_idle_s", 300.0, 2.0),
    "VIDFORGE_LEASE_TTL_S": ("lease_ttl_s", 30.0, 3.0),
    "VIDFORGE_RECORD_MIRROR_SIZE": ("record_mirror_size", 10_000, 0),
    "VIDFORGE_REGISTRY_TIMEOUT_S": ("registry_timeout_s", 30.0, 2.5),
    "VIDFORGE_GCS_GRACE_S": ("gcs_grace_s", 30.0, 5.0),
    "VIDFORGE_ALLOWED_ORIGINS": ("allowed_origins", "", "https://a.example"),
    "VIDFORGE_ALLOWED_HOSTS": ("allowed_hosts", "", "vf.internal"),
    "VIDFORGE_IDEMPOTENCY_TTL_S": ("idempotency_ttl_s", 86_400, 600),
    "VIDFORGE_REVIEW_KEY": ("review_key", None, "k" * 32),
    "VIDFORGE_REVIEW_LINK_TTL_S": ("review_link_ttl_s", 86_400.0, 3600.0),
    "VIDFORGE_REVIEW_FORM_MAX_BYTES": ("review_form_max_bytes", 32_768, 4096),
    "VIDFORGE_DIRECT_TRANSFERS": ("direct_transfers", True, False),
    "VIDFORGE_PRESIGNED_URL_TTL_S": ("presigned_url_ttl_s", 300, 60),
    "VIDFORGE_DIRECT_UPLOAD_TTL_S": ("direct_upload_ttl_s", 21_600, 3600),
    "VIDFORGE_METRICS": ("metrics", True, False),
    "VIDFORGE_METRICS_HOST": ("metrics_host", None, "10.0.0.5"),
    "VIDFORGE_METRICS_PORT": ("metrics_port", None, 9464),
    "VIDFORGE_METRICS_PRINCIPALS": ("metrics_principals", "none", "hashed"),
    "VIDFORGE_METRICS_PRINCIPAL_MAP": ("metrics_principal_map", None, "/etc/vidforge/metric-labels.json"),
    "VIDFORGE_METRICS_MAX_PRINCIPALS": ("metrics_max_principals", 20, 3),
    "VIDFORGE_METRICS_EXPORT_PORT": ("metrics_export_port", None, 9100),
    "VIDFORGE_LOG_FORMAT": ("log_format", None, "text"),
}


@pytest.fixture
def clean_env(monkeypatch):
    for name in DOCUMENTED:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_are_the_documented_ones(clean_env):
    config = Config()
    for name, (field, default, _) in DOCUMENTED.items():
        assert getattr(config, field) == default, name


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_each_variable_sets_its_field(clean_env, name):
    field, _, value = DOCUMENTED[name]
    clean_env.setenv(name, str(value))
    config = Config.from_env()
    expected = str((REPO / value).resolve()) if field == "data_dir" else value
    assert getattr(config, field) == expected


def test_an_empty_variable_means_the_default(clean_env):
    clean_env.setenv("VIDFORGE_TASK_TTL_MS", "")
    clean_env.setenv("VIDFORGE_TOKENS_FILE", "")
    config = Config()
    assert config.task_ttl_ms == 86_400_000 and config.tokens_file is None


def test_flags_win_over_the_environment_and_the_data_dir_is_absolute(clean_env, tmp_path):
    clean_env.setenv("VIDFORGE_DATA_DIR", "/elsewhere")
    clean_env.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    config = Config.from_env(data_dir=str(tmp_path / "data"), port=9000, host=None, ray_address=None)
    assert (config.data_dir, config.port, config.host) == (str(tmp_path / "data"), 9000, "127.0.0.1")
    assert config.ray_address == "10.0.0.1:6379"  # a flag not given leaves the environment's value
    assert config.state_dir == config.data_dir  # the registry's database stays in the data dir unless told


def test_json_round_trip_reads_no_environment(clean_env):
    config = Config(task_ttl_ms=1234, ray_address="10.0.0.1:6379")
    clean_env.setenv("VIDFORGE_TASK_TTL_MS", "999")
    assert Config.from_json(config.to_json()) == config


def test_with_the_defaults_the_catalog_reads_as_the_contract_prints_it(clean_env):
    """The catalog files hold `${...}` placeholders where the contract names a configurable duration; with the
    defaults, each reads as the contract prints it."""
    config = Config()
    render, status = tool_definitions(config)[:2]
    assert "If approval does not arrive within 30 minutes, the render ends" in render["description"]
    assert (
        "with the same key within 24h return" in render["inputSchema"]["properties"]["idempotency_key"]["description"]
    )
    assert render["_meta"]["com.vidforge/errors"][3]["description"] == (
        "No approval within 30 minutes; re-call to start a new render."
    )
    assert "(also after the task's 24h TTL: status stays readable for 7 days)" in status["description"]
    assert "(7 days after creation)" in status["outputSchema"]["properties"]["expires_at"]["description"]
    summary = capability_summary(config)
    assert summary["task_semantics"]["result_retention"].endswith("final.{ext} resource for 7 days")
    assert summary["negotiated_capabilities"]["fallbacks"]["approval_never_arrives"].startswith(
        "after 30 minutes awaiting approval the render ends"
    )
    catalog = {entry["code"]: entry["description"] for entry in summary["error_catalog"]}
    assert catalog["render_not_found"].endswith("or past its 7-day retention).")
    assert catalog["task_expired"] == (
        "tasks/* after the task's 24h ttlMs: -32602 with the envelope in error.data; the render stays reachable "
        "via vidforge_get_render_status for 7 days."
    )
    assert resource_templates(config)[0]["description"].startswith(
        "A finished render (mp4, webm or mov), retained 7 days. resources/read inlines"
    )


def test_the_wire_states_the_configured_durations(clean_env):
    config = Config(approval_timeout_s=90, result_retention_s=2 * 86_400, task_ttl_ms=7_200_000, idempotency_ttl_s=600)
    text = json.dumps([tool_definitions(config), capability_summary(config), resource_templates(config)])
    for default in ("30 minutes", "7 days", "7-day", "24h"):
        assert default not in text
    for configured in ("1.5 minutes", "2 days", "2-day retention", "2h ttlMs", "within 10min return"):
        assert configured in text
    assert "${" not in text


def test_the_gpu_policy_is_one_of_three(clean_env):
    clean_env.setenv("VIDFORGE_GPU", "always")
    with pytest.raises(ValueError, match="auto"):
        Config()


def test_only_the_bucket_location_travels_with_the_job_unless_credentials_are_shipped(clean_env):
    from serve_app.launch._job_env import job_runtime_env

    environ = {"AWS_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s", "HOME": "/root"}
    assert job_runtime_env(Config(), environ) is None  # media on the data dir: nothing travels (a single node)
    bucket = Config(storage_url="s3://media/vf")
    assert job_runtime_env(bucket, environ) == {"env_vars": {"AWS_REGION": "us-west-2"}}
    shipped = Config(storage_url="s3://media/vf", ship_storage_credentials=True)
    assert job_runtime_env(shipped, environ) == {
        "env_vars": {"AWS_REGION": "us-west-2", "AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "s"}
    }


@pytest.mark.parametrize(("value", "enabled"), [("off", False), ("on", True), ("0", False)])
def test_metrics_turn_off_with_off(clean_env, value, enabled):
    clean_env.setenv("VIDFORGE_METRICS", value)
    assert Config().metrics is enabled


def test_the_log_format_follows_the_terminal_unless_set(clean_env):
    clean_env.setattr("sys.stderr.isatty", lambda: True)
    assert Config.from_env().log_format == "text"
    clean_env.setattr("sys.stderr.isatty", lambda: False)
    assert Config.from_env().log_format == "json"  # Ray's workers and every server under a supervisor
    clean_env.setenv("VIDFORGE_LOG_FORMAT", "text")
    assert Config.from_env().log_format == "text"
    clean_env.setenv("VIDFORGE_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="json"):
        Config()


def test_the_state_url_is_postgresql_reaches_the_registry_and_is_never_shown(clean_env):
    url = "postgresql://vidforge:s3cret-pw@db.internal:5432/vidforge?sslmode=require"
    clean_env.setenv("VIDFORGE_STATE_URL", url)
    config = Config.from_env()
    settings = config.registry_settings()
    assert settings.state_url == url and Config.from_json(config.to_json()).state_url == url  # to the actors
    assert settings.state_location == "postgresql://db.internal:5432/vidforge"  # what logs and prints show
    failover = "postgresql://vidforge:s3cret-pw@db-a:5432,db-b:5433/vidforge?target_session_attrs=read-write"
    assert Config(state_url=failover).registry_settings().state_location == "postgresql://db-a:5432,db-b:5433/vidforge"
    assert "s3cret-pw" not in repr(config) + repr(settings) + str(config)
    assert Config(state_url="postgres://db/vf").state_url == "postgres://db/vf"
    for wrong in ("mysql://root:s3cret-pw@db/vf", "db.internal:5432", "sqlite:///state.db"):
        with pytest.raises(ValueError, match="must be a postgresql:// \\(or postgres://\\) URL") as refused:
            Config(state_url=wrong)
        assert "s3cret-pw" not in str(refused.value)
    clean_env.delenv("VIDFORGE_STATE_URL")
    sqlite = Config.from_env()
    assert sqlite.registry_settings().state_location == sqlite.state_dir  # no URL: SQLite in the state dir
