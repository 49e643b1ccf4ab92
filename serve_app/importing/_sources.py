"""What an import's URL names, decided before anything is fetched.

- `WebSource`: an https:// link (http:// for a host the operator lists), fetched through the guard
  (serve_app.importing._web_fetch).
- `BucketSource`: s3://BUCKET/KEY in the bucket the server keeps its media in (VIDFORGE_STORAGE_URL), read with the
  server's own credentials. Only there, and never an object of the store's own folders (`assets/`, `artifacts/`
  under its prefix): those hold every principal's files, which an import must not copy into another's.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

import anyio

from media_store.artifacts import ARTIFACTS
from media_store.assets import ASSETS
from media_store.opening import open_media_store
from serve_app.importing._failures import ImportRefused
from serve_app.importing._web_fetch import label_of, web_target
from serve_app.media.assets import AssetTooLarge
from serve_app.outbound.address_guard import AddressGuard

S3 = "s3://"


@dataclass(frozen=True)
class WebSource:
    url: str
    host: str  # as the status message names it

    @property
    def label(self) -> str:
        return label_of(self.url)


@dataclass(frozen=True)
class BucketSource:
    bucket: str
    key: str

    @property
    def host(self) -> str:
        return f"{S3}{self.bucket}"

    @property
    def label(self) -> str:
        return self.key.rsplit("/", 1)[-1] or "import"


ImportSource = WebSource | BucketSource


def source_of(url: str, storage_url: str | None, guard: AddressGuard) -> ImportSource:
    """The source `url` names, or ImportRefused saying why it names none vidforge imports from."""
    if url.startswith(S3):
        return _bucket_source(url, storage_url)
    return WebSource(url, web_target(url, guard).raw_host.decode("ascii"))


def _bucket_source(url: str, storage_url: str | None) -> BucketSource:
    bucket, _, key = url[len(S3) :].partition("/")  # an S3 key is taken literally: no percent-decoding
    if not storage_url or not storage_url.startswith(S3):
        raise ImportRefused(
            "s3:// links are importable only when the server keeps its media in S3 (VIDFORGE_STORAGE_URL)"
        )
    own_bucket, _, prefix = storage_url[len(S3) :].rstrip("/").partition("/")
    if bucket != own_bucket:
        raise ImportRefused(f"s3:// links are importable from the server's own bucket only ({S3}{own_bucket}/…)")
    if not key or key.endswith("/"):
        raise ImportRefused("the s3:// link names no object")
    store_folders = tuple(f"{prefix}/{folder}/" if prefix else f"{folder}/" for folder in (ASSETS, ARTIFACTS))
    if key.startswith(store_folders):
        raise ImportRefused("the s3:// link names one of vidforge's own files; import from elsewhere in the bucket")
    return BucketSource(bucket, key)


async def bucket_chunks(source: BucketSource, data_dir: str, max_bytes: int) -> AsyncGenerator[bytes, None]:
    """The object's bytes, read with the server's bucket credentials. Raises ImportRefused for a missing object,
    AssetTooLarge for one past the limit (before any byte is read)."""
    bucket = open_media_store(f"{S3}{source.bucket}", data_dir)
    size = await anyio.to_thread.run_sync(bucket.size, source.key)
    if size is None:
        raise ImportRefused(f"there is no object at {S3}{source.bucket}/{source.key}")
    if size > max_bytes:
        raise AssetTooLarge("the object is past the limit")
    async for chunk in bucket.read_stream(source.key, 0, size):
        yield chunk
