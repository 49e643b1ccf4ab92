"""Starting vidforge's metrics endpoint (serve_app/observability/exporter.py) with the principal labels the settings
ask for (VIDFORGE_METRICS_PRINCIPALS), on the head, from the launch step: `vidforge serve`, or a Serve config's
builder.

`hashed` labels are keyed with a key derived from the review-link key (VIDFORGE_REVIEW_KEY, or the one generated
into the state dir: serve_app/launch/_review_key.py), so a principal keeps its label across restarts, no one without
the key can tell which principal a label is, and the review key itself never reaches the exporter. `mapped` labels
come from the operator's JSON file {principal: label}, read here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Annotated

from pydantic import StringConstraints, TypeAdapter, ValidationError

from serve_app._config import Config
from serve_app.launch._port_check import listen_error
from serve_app.launch._review_key import with_review_key
from serve_app.observability.aggregate import PrincipalLabels
from serve_app.observability.exporter import MetricsUnavailable, metrics_unavailable, start_exporter

LABEL_KEY_PURPOSE = b"vidforge metrics principal labels"  # what the review key is stretched for, and only this

_MAP = TypeAdapter(dict[str, Annotated[str, StringConstraints(min_length=1, max_length=64)]])


class MetricsSettingsError(ValueError):
    """The principal map cannot be used; the message says which file and why."""


METRICS_ERRORS = (MetricsSettingsError, MetricsUnavailable)


def principal_labels(config: Config) -> PrincipalLabels:
    if config.metrics_principals == "hashed":
        review_key = with_review_key(config).review_key
        assert review_key is not None, "with_review_key returns a config with its key"
        return PrincipalLabels("hashed", key=hmac.new(review_key.encode(), LABEL_KEY_PURPOSE, hashlib.sha256).digest())
    if config.metrics_principals == "mapped":
        assert config.metrics_principal_map is not None, "the settings refuse `mapped` without a map"
        return PrincipalLabels("mapped", mapping=load_principal_map(config.metrics_principal_map))
    return PrincipalLabels()


def load_principal_map(path: str) -> dict[str, str]:
    """The operator's {principal: label} (labels of 1 to 64 characters); MetricsSettingsError when unusable."""
    try:
        return _MAP.validate_python(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError) as err:
        reason = err.errors()[0]["msg"] if isinstance(err, ValidationError) else str(err)
        raise MetricsSettingsError(
            f"VIDFORGE_METRICS_PRINCIPAL_MAP {path}: not a JSON object of principal to label (1-64 characters):"
            f" {reason}"
        ) from None


def check_metrics_port(config: Config) -> None:
    """MetricsUnavailable, before a Ray of this server's own starts (a second, not the start's dozen), when the
    endpoint's port is set and cannot be listened on now. The endpoint binds it again when it starts: another
    program may take it in between."""
    if not config.metrics or config.metrics_port is None:
        return
    host = config.metrics_host or config.host
    if (err := listen_error(host, config.metrics_port)) is not None:
        raise metrics_unavailable(host, config.metrics_port, err)


def start_metrics_endpoint(config: Config) -> str | None:
    """The endpoint's URL once it listens (None with VIDFORGE_METRICS off); one of METRICS_ERRORS, which says why,
    when the map is unusable or it cannot listen."""
    if not config.metrics:
        return None
    return start_exporter(config, principal_labels(config))
