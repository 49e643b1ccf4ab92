"""Opening the media store that VIDFORGE_STORAGE_URL names, and telling the store's own failures from a request's."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError
from obstore.exceptions import BaseError as BucketError

from media_store._s3 import S3MediaStore
from media_store.base import MediaStore
from media_store.local import LocalMediaStore


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
