"""Media in an S3-compatible bucket (`VIDFORGE_STORAGE_URL=s3://BUCKET/PREFIX`), through obstore.

No node needs a shared filesystem: the kernels read an object through a seekable file that fetches only the
byte ranges the demuxer asks for (ranged GETs of READ_BUFFER_BYTES), finished files are sent as multipart
uploads of PART_BYTES parts read from the local file (at most PART_BYTES x UPLOAD_CONCURRENCY in memory), and
uploads over HTTP go into the bucket as they arrive. A put is atomic: a multipart upload becomes visible only
when it completes, and an aborted one is aborted on the server (configure the bucket's lifecycle rule for
incomplete multipart uploads to catch those a killed process never aborted).

Credentials, region and endpoint come from the standard AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION
and AWS_ENDPOINT_URL variables (or an instance role), read in each process that opens the store: every node
of the cluster needs them. The store is described by its URL alone, so what travels to Ray tasks holds no
secret.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

import obstore
from obstore.store import S3Store

from media_store.base import StoredObject

READ_BUFFER_BYTES = 2 * 1024 * 1024  # one ranged GET of a reader; a seek outside it starts another
PART_BYTES = 8 * 1024 * 1024  # multipart upload part (S3: at least 5 MiB but the last)
UPLOAD_CONCURRENCY = 4  # parts in flight per upload
STREAM_CHUNK_BYTES = 1024 * 1024  # what a ranged download hands on at a time


@functools.cache
def _bucket(url: str) -> S3Store:
    """One client per store URL and process (it holds a connection pool)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    return S3Store.from_url(url, client_options={"allow_http": endpoint.startswith("http://")})


@dataclass(frozen=True)
class S3MediaStore:
    url: str  # s3://BUCKET/PREFIX

    @property
    def node_local(self) -> bool:
        return False

    @property
    def description(self) -> str:
        return f"bucket {self.url}"

    @property
    def bucket(self) -> S3Store:
        """This process's client for the bucket."""
        return _bucket(self.url)

    def media(self, key: str) -> S3Media:
        return S3Media(self, key)

    def put_bytes(self, key: str, data: bytes) -> None:
        obstore.put(self.bucket, key, data)

    def put_file(self, path: str, key: str, *, move: bool = False) -> int:
        size = os.path.getsize(path)
        obstore.put(self.bucket, key, Path(path), chunk_size=PART_BYTES, max_concurrency=UPLOAD_CONCURRENCY)
        if move:
            os.unlink(path)
        return size

    @contextlib.contextmanager
    def staged(self, key: str) -> Iterator[str]:
        with tempfile.TemporaryDirectory(prefix="vidforge-") as folder:  # this node's own disk
            yield os.path.join(folder, key.rsplit("/", 1)[-1])

    def get_bytes(self, key: str) -> bytes:
        with self.missing_only_if_the_bucket_answers(key):
            return bytes(obstore.get(self.bucket, key).bytes())

    def size(self, key: str) -> int | None:
        try:
            with self.missing_only_if_the_bucket_answers(key):
                return obstore.head(self.bucket, key)["size"]
        except FileNotFoundError:
            return None

    @contextlib.contextmanager
    def missing_only_if_the_bucket_answers(self, key: str) -> Iterator[None]:
        """S3 answers 404 both for a key that is not there and for a bucket that is gone (and a HEAD has no body to
        say which), so a FileNotFoundError passes on only once the bucket answers a listing; a bucket that is gone
        raises the listing's error instead, a store fault, so that a missing bucket is not read as a missing file
        (an asset as `source_not_found`, the readiness probe as ready)."""
        try:
            yield
        except FileNotFoundError:
            next(iter(obstore.list(self.bucket, key, chunk_size=1)), None)
            raise

    def list(self, prefix: str) -> list[StoredObject]:
        return [
            StoredObject(meta["path"], meta["size"], meta["e_tag"] or meta["last_modified"].isoformat())
            for batch in obstore.list(self.bucket, prefix)
            for meta in batch
        ]

    def delete(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        if keys:
            obstore.delete(self.bucket, keys)  # S3 deletes missing keys without complaint

    def delete_prefix(self, prefix: str) -> None:
        self.delete(found.key for found in self.list(prefix))

    async def write_stream(self, key: str, chunks: AsyncIterator[bytes]) -> int:
        size = 0

        async def counted() -> AsyncIterator[bytes]:
            nonlocal size
            async for chunk in chunks:
                size += len(chunk)
                yield chunk

        await obstore.put_async(self.bucket, key, counted(), chunk_size=PART_BYTES, max_concurrency=UPLOAD_CONCURRENCY)
        return size

    async def read_stream(self, key: str, start: int, end: int) -> AsyncIterator[bytes]:
        result = await obstore.get_async(self.bucket, key, options={"range": (start, end)})
        async for chunk in result.stream(min_chunk_size=STREAM_CHUNK_BYTES):
            yield bytes(chunk)


@dataclass(frozen=True)
class S3Media:
    """An object as the render kernels read it (render_kernels.MediaSource): picklable, opened where it is read."""

    store: S3MediaStore
    key: str

    @contextlib.contextmanager
    def open(self) -> Iterator[BinaryIO]:
        with self.store.missing_only_if_the_bucket_answers(self.key):
            reader = obstore.open_reader(self.store.bucket, self.key, buffer_size=READ_BUFFER_BYTES)
        with _RangedReader(reader) as file:
            yield cast(BinaryIO, file)  # a raw binary file: what PyAV and Pillow read through (typing has no such type)


class _RangedReader(io.RawIOBase):
    """obstore's ranged reader as a standard raw file: libav and Pillow want `bytes` from `read`."""

    def __init__(self, reader) -> None:
        super().__init__()
        self._reader = reader

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._reader.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._reader.seek(offset, whence)

    def tell(self) -> int:
        return self._reader.tell()
