"""vidforge's media (assets, watermark previews, rendered videos): one interface, two backends.

    VIDFORGE_STORAGE_URL unset   -> LocalMediaStore(<data_dir>): files under the data dir, as one node sees them
    VIDFORGE_STORAGE_URL=s3://B/P -> S3MediaStore: objects in bucket B under prefix P; no shared filesystem

The registry's own state (SQLite) is not media: it stays on the head node's disk (VIDFORGE_STATE_DIR).
Layout and deletion rules live in media_store.assets, media_store.artifacts and media_store.hygiene; the
backends only store bytes under keys. Importable from every room but mcp_protocol (which stays free of
storage and Ray); it imports nothing of vidforge but render_kernels' `Media` type.
"""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError
from obstore.exceptions import BaseError as BucketError

from media_store.base import DirectTransfers, InvalidUpload, MediaStore, PresignedUpload, StoredObject
from media_store.local import LocalMediaStore
from media_store.s3 import S3MediaStore

__all__ = [
    "DirectTransfers",
    "InvalidUpload",
    "LocalMediaStore",
    "MediaStore",
    "PresignedUpload",
    "S3MediaStore",
    "StorageUrlError",
    "StoredObject",
    "is_storage_fault",
    "open_media_store",
]


class StorageUrlError(ValueError):
    pass


def open_media_store(storage_url: str | None, data_dir: str) -> MediaStore:
    """The store VIDFORGE_STORAGE_URL names; the data dir itself when it is unset."""
    if not storage_url:
        return LocalMediaStore(data_dir)
    if storage_url.startswith("s3://") and storage_url[len("s3://") :].split("/")[0]:
        return S3MediaStore(storage_url.rstrip("/"))
    raise StorageUrlError(f"VIDFORGE_STORAGE_URL must be s3://BUCKET[/PREFIX], not {storage_url!r}")


def is_storage_fault(exc: BaseException) -> bool:
    """Whether `exc` is the media store failing rather than the request: the bucket clients' errors (endpoint out of
    reach, credentials refused or missing, bucket gone; obstore's, and botocore's for direct transfers) and I/O
    errors. A server answers these as temporary."""
    return isinstance(exc, (OSError, BucketError, BotoCoreError, ClientError))
