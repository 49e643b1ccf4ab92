"""Each vidforge process's start: its logs and its metrics, as the settings say."""

from __future__ import annotations

from serve_app._config import Config
from serve_app.observability._reporter import start_reporting
from serve_app.observability.logs import configure_logging
from serve_app.observability.metric import enable_metrics


def observe_process(config: Config) -> None:
    """Log in `config.log_format`; record metrics, and report them to the exporter, unless VIDFORGE_METRICS is off.
    Call once, at the start of each vidforge process (the CLI's `serve`, an ingress replica, the supervisor, the
    registry)."""
    configure_logging(config.log_format)
    if config.metrics:
        enable_metrics(config.metrics_principals != "none", config.metrics_max_principals)
        start_reporting(config.namespace)
