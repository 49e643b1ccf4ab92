"""A MediaStore that counts its failures (`vidforge_storage_errors_total`, by operation) and otherwise is the store.

Every media operation of the server goes through the store `serve_app._handles.media_store` opens, so wrapping it
there counts failures wherever they happen — an upload, a download, a preview write, a render's cleanup — without
each caller counting. A missing object (FileNotFoundError) is an answer, not a failure. Picklable like the store
it wraps: Ray tasks take it with their keys (they record nothing unless their process enabled metrics).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import AbstractContextManager

from media_store.base import DirectTransfers, MediaStore, StoredObject
from render_kernels.media_io import Media
from serve_app.observability.catalog import STORAGE_ERRORS


@contextlib.contextmanager
def _counted(operation: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError:
        raise
    except Exception:
        STORAGE_ERRORS.inc(operation=operation)
        raise


class StorageErrorCounter:
    """`store`, with each failed operation counted under the operation's name."""

    def __init__(self, store: MediaStore) -> None:
        self.store = store

    @property
    def node_local(self) -> bool:
        return self.store.node_local

    @property
    def description(self) -> str:
        return self.store.description

    @property
    def direct_transfers(self) -> DirectTransfers | None:
        """The store's presigned URLs: the bytes then go between the client and the bucket, outside this count."""
        return self.store.direct_transfers

    def media(self, key: str) -> Media:
        return self.store.media(key)

    def put_bytes(self, key: str, data: bytes) -> None:
        with _counted("put_bytes"):
            self.store.put_bytes(key, data)

    def put_file(self, path: str, key: str, *, move: bool = False) -> int:
        with _counted("put_file"):
            return self.store.put_file(path, key, move=move)

    def staged(self, key: str) -> AbstractContextManager[str]:
        return self.store.staged(key)

    def get_bytes(self, key: str) -> bytes:
        with _counted("get_bytes"):
            return self.store.get_bytes(key)

    def size(self, key: str) -> int | None:
        with _counted("size"):
            return self.store.size(key)

    def list(self, prefix: str, *, start_after: str | None = None, limit: int | None = None) -> list[StoredObject]:
        with _counted("list"):
            return self.store.list(prefix, start_after=start_after, limit=limit)

    def delete(self, keys: Iterable[str]) -> None:
        with _counted("delete"):
            self.store.delete(keys)

    def delete_prefix(self, prefix: str) -> None:
        with _counted("delete_prefix"):
            self.store.delete_prefix(prefix)

    async def write_stream(self, key: str, chunks: AsyncIterator[bytes]) -> int:
        """A failure of `chunks` (the client gone, an upload past its limit) is the caller's, not the store's."""
        caller_failed = False

        async def watched() -> AsyncIterator[bytes]:
            nonlocal caller_failed
            try:
                async for chunk in chunks:
                    yield chunk
            except BaseException:
                caller_failed = True
                raise

        try:
            return await self.store.write_stream(key, watched())
        except Exception:
            if not caller_failed:
                STORAGE_ERRORS.inc(operation="write_stream")
            raise

    async def read_stream(self, key: str, start: int, end: int) -> AsyncIterator[bytes]:
        with _counted("read_stream"):
            async for chunk in self.store.read_stream(key, start, end):
                yield chunk
