"""The cluster's TaskRegistry actor (through its typed client) and the media store, configured from the operator
`Config`."""

from __future__ import annotations

from actors.client import RegistryApi, open_registry
from media_store.base import MediaStore
from media_store.opening import open_media_store
from serve_app._config import Config
from serve_app.observability.registry_observer import RegistryMetrics
from serve_app.observability.storage import StorageErrorCounter


def media_store(config: Config) -> MediaStore:
    """Where assets, previews and videos live: VIDFORGE_STORAGE_URL, or the data dir itself (failures counted)."""
    return StorageErrorCounter(open_media_store(config.storage_url, config.data_dir))


def registry_client(config: Config) -> RegistryApi:
    """The cluster's TaskRegistry (created, with its metrics observer, unless it runs)."""
    return open_registry(config.registry_settings(), RegistryMetrics(config))
