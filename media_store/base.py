"""The one interface every piece of vidforge reads and writes media through (assets, previews, artifacts).

Keys are `/`-separated paths (`assets/<id>/blob`, `artifacts/<render_id>/final.mp4`); what lives under which
key is decided by media_store.assets and media_store.artifacts, never by a backend. Every write is atomic per
key: a reader sees the whole object or none, also after a crash. Backends: media_store.local (a directory,
the default) and media_store._s3 (an S3-compatible bucket).

A bucket can also move bytes without the server in between (`MediaStore.direct_transfers`): presigned URLs a client
downloads an object from, or uploads one to in parts, itself. A local directory has no such door: the server serves
its bytes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from render_kernels.media_io import Media


@dataclass(frozen=True)
class PresignedUpload:
    """A multipart upload a client sends straight to the store: the store's `upload_id`, and each part's presigned
    URL (`part_urls[n]` takes part n + 1, `part_bytes` each but the last, as one HTTP PUT)."""

    upload_id: str
    part_bytes: int
    part_urls: list[str]


class InvalidUpload(ValueError):
    """The parts of a direct upload do not make an object (none sent, or ones the store will not assemble)."""


class DirectTransfers(Protocol):
    """Presigned URLs of a store's objects: the bytes go between the client and the store, not through the server.
    Each URL works for `lifetime_s` seconds and for nothing but its one object and method."""

    def download_url(self, key: str, lifetime_s: int, mime: str, attachment: str | None = None) -> str:
        """A GET URL of the object, answered with `mime` as its Content-Type and, with `attachment` (a file name),
        as a download under that name. Range requests work on it."""

    def start_upload(self, key: str, size_bytes: int, lifetime_s: int) -> PresignedUpload:
        """Open a multipart upload of about `size_bytes` bytes to `key`; nothing appears under `key` until
        `complete_upload`."""

    def complete_upload(self, key: str, upload_id: str) -> None:
        """Assemble the parts sent so far into the object at `key`. FileNotFoundError when no such upload is open
        (never opened, completed or aborted already); InvalidUpload when its parts do not make an object."""

    def abort_upload(self, key: str, upload_id: str) -> None:
        """Drop the upload and the parts sent; an upload no longer open is skipped."""


@dataclass(frozen=True)
class StoredObject:
    key: str
    size: int
    version: str  # changes whenever the object is written again: a reader may cache what it parsed of it


class MediaStore(Protocol):
    """Picklable: Ray tasks take the store with the keys they read or write, and open it where they run."""

    @property
    def node_local(self) -> bool:
        """True when keys are files on one node's disk: a task that reads or writes them must run on it."""

    @property
    def description(self) -> str:
        """Where the media lives, for the operator's log (no credentials)."""

    @property
    def direct_transfers(self) -> DirectTransfers | None:
        """Presigned URLs of this store's objects; None when the server must move the bytes itself."""

    def media(self, key: str) -> Media:
        """What the render kernels read for `key`: a local path, or a source fetching only the ranges read."""

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store `data` under `key`, atomically."""

    def put_file(self, path: str, key: str, *, move: bool = False) -> int:
        """Store the local file at `path` under `key`, streamed (never whole in memory) and atomically; with
        `move` the file is given away (a local store may rename it). Returns the stored size."""

    def staged(self, key: str) -> AbstractContextManager[str]:
        """A local path, in a private folder removed on exit, where a writer builds the file bound for `key`
        (then `put_file(path, key, move=True)`): beside its place on a local store, so the move is a rename."""

    def get_bytes(self, key: str) -> bytes:
        """The whole object; FileNotFoundError when there is none."""

    def size(self, key: str) -> int | None:
        """The object's size, or None when there is none."""

    def list(self, prefix: str, *, start_after: str | None = None, limit: int | None = None) -> list[StoredObject]:
        """Every object under `prefix` (a folder: it ends in `/`), at any depth, in key order (by code point); with
        `start_after`, only those whose key sorts after it; with `limit`, the first `limit` of them: a page of a
        walk that goes on from its last key."""

    def delete(self, keys: Iterable[str]) -> None:
        """Delete these objects; keys without one are skipped."""

    def delete_prefix(self, prefix: str) -> None:
        """Delete everything under `prefix` (a folder: it ends in `/`)."""

    async def write_stream(self, key: str, chunks: AsyncIterator[bytes]) -> int:
        """Store the chunks under `key` as they arrive (never all in memory); returns the size. An exception
        from `chunks` aborts the write, leaves nothing under `key`, and is raised as it is."""

    def read_stream(self, key: str, start: int, end: int) -> AsyncIterator[bytes]:
        """Bytes `start` to `end` (exclusive, `start < end <= size`) of the object, as they arrive."""
