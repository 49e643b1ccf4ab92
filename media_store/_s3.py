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

Direct transfers (`S3DirectTransfers`): presigned GET URLs for downloads and presigned multipart uploads, through
botocore, since obstore signs neither response headers nor the parts of an upload. The URLs name the endpoint the
server uses (AWS_ENDPOINT_URL, else AWS's own), so clients must be able to reach it.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import os
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import obstore
from botocore.exceptions import ClientError
from obstore.store import S3Store

from media_store.base import InvalidUpload, PresignedUpload, StoredObject

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer
    from obstore._obstore import ReadableFile

READ_BUFFER_BYTES = 2 * 1024 * 1024  # one ranged GET of a reader; a seek outside it starts another
PART_BYTES = 8 * 1024 * 1024  # multipart upload part (S3: at least 5 MiB but the last)
UPLOAD_CONCURRENCY = 4  # parts in flight per upload
STREAM_CHUNK_BYTES = 1024 * 1024  # what a ranged download hands on at a time
MAX_PARTS = 10_000  # S3's most parts in one multipart upload
# What S3 answers when a multipart upload's parts do not make an object: too small (all but the last must be 5 MiB
# or more), a part listed that is not there, or in the wrong order.
UNASSEMBLED = frozenset({"EntityTooSmall", "InvalidPart", "InvalidPartOrder"})


@functools.cache
def _bucket(url: str) -> S3Store:
    """One client per store URL and process (it holds a connection pool)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    return S3Store.from_url(url, client_options={"allow_http": endpoint.startswith("http://")})


@functools.cache
def _signer() -> Any:
    """One botocore S3 client per process, configured from the same variables as obstore (botocore has no types).
    Imported here: a render's Ray workers open the store too, and never sign (botocore's client is ~0.15 CPU-s)."""
    import botocore.session
    from botocore.config import Config as BotoConfig

    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    # Path-style addressing where an endpoint is given, as obstore does: a bucket's own host name need not resolve.
    style = {"addressing_style": "path"} if endpoint else {}
    config = BotoConfig(signature_version="s3v4", s3=style)
    return botocore.session.get_session().create_client("s3", region_name=region, endpoint_url=endpoint, config=config)


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
    def direct_transfers(self) -> S3DirectTransfers:
        return S3DirectTransfers(self.url)

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

    def list(self, prefix: str, *, start_after: str | None = None, limit: int | None = None) -> list[StoredObject]:
        # S3 lists in key order, a page (at most 1000 keys) per request: only the pages up to `limit` are asked for.
        found = (
            StoredObject(meta["path"], meta["size"], meta["e_tag"] or meta["last_modified"].isoformat())
            for batch in obstore.list(self.bucket, prefix, offset=start_after, chunk_size=min(limit or 1000, 1000))
            for meta in batch
        )
        return list(itertools.islice(found, limit))

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
class S3DirectTransfers:
    """media_store.base.DirectTransfers on the bucket of `url` (s3://BUCKET/PREFIX): keys are the store's own."""

    url: str

    @property
    def _bucket_and_prefix(self) -> tuple[str, str]:
        bucket, _, prefix = self.url.removeprefix("s3://").partition("/")
        return bucket, prefix

    def _object(self, key: str) -> dict[str, str]:
        bucket, prefix = self._bucket_and_prefix
        return {"Bucket": bucket, "Key": f"{prefix}/{key}" if prefix else key}

    def download_url(self, key: str, lifetime_s: int, mime: str, attachment: str | None = None) -> str:
        params = {**self._object(key), "ResponseContentType": mime}
        if attachment is not None:
            params["ResponseContentDisposition"] = f'attachment; filename="{attachment}"'
        return str(_signer().generate_presigned_url("get_object", Params=params, ExpiresIn=lifetime_s))

    def start_upload(self, key: str, size_bytes: int, lifetime_s: int) -> PresignedUpload:
        # Parts of PART_BYTES, larger only where S3's part count would run out; a part size in whole MiB.
        mib = 1024 * 1024
        part_bytes = max(PART_BYTES, -(-size_bytes // MAX_PARTS // mib) * mib)
        count = max(1, -(-size_bytes // part_bytes))
        upload_id = _signer().create_multipart_upload(**self._object(key))["UploadId"]
        urls = [
            _signer().generate_presigned_url(
                "upload_part",
                Params={**self._object(key), "UploadId": upload_id, "PartNumber": number},
                ExpiresIn=lifetime_s,
            )
            for number in range(1, count + 1)
        ]
        return PresignedUpload(upload_id, part_bytes, urls)

    def complete_upload(self, key: str, upload_id: str) -> None:
        target = {**self._object(key), "UploadId": upload_id}
        try:
            pages = _signer().get_paginator("list_parts").paginate(**target)
            parts = [
                {"ETag": part["ETag"], "PartNumber": part["PartNumber"]}
                for page in pages
                for part in page.get("Parts", [])
            ]
            if not parts:
                raise InvalidUpload("no part of the upload was sent")
            _signer().complete_multipart_upload(**target, MultipartUpload={"Parts": parts})
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "NoSuchUpload":
                raise FileNotFoundError(f"no open upload {upload_id} to {key}") from None
            if code in UNASSEMBLED:
                raise InvalidUpload(exc.response["Error"].get("Message", code)) from None
            raise

    def abort_upload(self, key: str, upload_id: str) -> None:
        try:
            _signer().abort_multipart_upload(**self._object(key), UploadId=upload_id)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "NoSuchUpload":
                raise


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

    def __init__(self, reader: ReadableFile) -> None:
        super().__init__()
        self._reader = reader

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer)
        data = self._reader.read(view.nbytes)
        view[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._reader.seek(offset, whence)

    def tell(self) -> int:
        return self._reader.tell()
