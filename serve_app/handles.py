"""Handle to the cluster's TaskRegistry actor and the media store, configured from the operator `Config`."""

from __future__ import annotations

from actors import get_or_create_registry
from media_store import MediaStore, open_media_store
from serve_app.config import Config
from serve_app.observability.registry_observer import RegistryMetrics
from serve_app.observability.storage import StorageErrorCounter


def media_store(config: Config) -> MediaStore:
    """Where assets, previews and videos live: VIDFORGE_STORAGE_URL, or the data dir itself (failures counted)."""
    return StorageErrorCounter(open_media_store(config.storage_url, config.data_dir))


def registry_handle(config: Config):
    return get_or_create_registry(config.registry_settings(), RegistryMetrics(config))
