"""Handle to the cluster's TaskRegistry actor, configured from the operator `Config`."""

from __future__ import annotations

from actors import get_or_create_registry
from serve_app.config import Config


def registry_handle(config: Config):
    return get_or_create_registry(config)
