"""Media in a local directory (the default: `<data_dir>/assets`, `<data_dir>/artifacts`).

Every file gets its name by a rename of a complete, synced temporary beside it (`.tmp-*`), so a crash leaves
only names that say what they are (media_store.hygiene removes them at start) and a power loss cannot leave a
named file empty. Deleting the last file of a folder removes the folder too (down to the top-level ones), so
an asset's or render's folder exists exactly while it holds something. Files are 0600 and folders 0700
(media_store.private_files): the media is its tenants', and only the server's processes serve it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

import anyio

from media_store.base import StoredObject
from media_store.private_files import make_private, make_private_dirs

TMP_PREFIX = ".tmp-"
READ_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class LocalMediaStore:
    root: str

    @property
    def node_local(self) -> bool:
        return True

    @property
    def description(self) -> str:
        return f"local directory {self.root}"

    @property
    def direct_transfers(self) -> None:
        return None  # a directory has no door of its own: the server serves its bytes

    def path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def media(self, key: str) -> str:
        return self.path(key)

    def put_bytes(self, key: str, data: bytes) -> None:
        with self._replacing(key) as tmp, open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())

    def put_file(self, path: str, key: str, *, move: bool = False) -> int:
        if move and os.path.dirname(os.path.dirname(path)) == os.path.dirname(self.path(key)):
            _sync(path)  # staged beside its place: a rename, after the data is on disk
            make_private(path)  # its writer (an encoder) opened it as any file; its private folder hid it so far
            os.replace(path, self.path(key))
            return os.path.getsize(self.path(key))
        with self._replacing(key) as tmp:
            shutil.copyfile(path, tmp)
            _sync(tmp)
        if move:
            os.unlink(path)
        return os.path.getsize(self.path(key))

    @contextlib.contextmanager
    def staged(self, key: str) -> Iterator[str]:
        target = self.path(key)
        make_private_dirs(os.path.dirname(target))
        folder = tempfile.mkdtemp(prefix=TMP_PREFIX, dir=os.path.dirname(target))
        try:
            yield os.path.join(folder, os.path.basename(target))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def get_bytes(self, key: str) -> bytes:
        with open(self.path(key), "rb") as file:
            return file.read()

    def size(self, key: str) -> int | None:
        try:
            return os.path.getsize(self.path(key))
        except FileNotFoundError:
            return None

    def list(self, prefix: str, *, start_after: str | None = None, limit: int | None = None) -> list[StoredObject]:
        return list(itertools.islice(self._walk(prefix, start_after), limit))

    def _walk(self, folder: str, start_after: str | None) -> Iterator[StoredObject]:
        """The objects under `folder` (a key ending in `/`) in key order, skipping every folder whose keys all sort
        at or before `start_after` without reading it."""
        try:
            entries = list(os.scandir(self.path(folder)))
        except (FileNotFoundError, NotADirectoryError):  # none, or deleted while listed
            return
        # A folder's keys go on with "/": ordered by that, the walk is in key order.
        for entry in sorted(entries, key=lambda entry: entry.name + "/" if entry.is_dir() else entry.name):
            key = folder + entry.name
            if entry.is_dir():
                below = key + "/"
                if start_after is None or below > start_after or start_after.startswith(below):
                    yield from self._walk(below, start_after)
            elif start_after is None or key > start_after:
                with contextlib.suppress(FileNotFoundError):  # deleted while listed
                    stat = entry.stat()
                    yield StoredObject(key, stat.st_size, f"{stat.st_mtime_ns}:{stat.st_size}")

    def delete(self, keys: Iterable[str]) -> None:
        for key in keys:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(key))
            self._prune(os.path.dirname(self.path(key)))

    def delete_prefix(self, prefix: str) -> None:
        folder = self.path(prefix)
        shutil.rmtree(folder, ignore_errors=True)
        self._prune(os.path.dirname(os.path.normpath(folder)))

    async def write_stream(self, key: str, chunks: AsyncIterator[bytes]) -> int:
        size = 0
        tmp = await anyio.to_thread.run_sync(self._temp_beside, key)
        try:
            async with await anyio.open_file(tmp, "wb") as out:
                async for chunk in chunks:
                    await out.write(chunk)
                    size += len(chunk)
            await anyio.to_thread.run_sync(self._commit, tmp, key)
        except BaseException:
            await anyio.to_thread.run_sync(self._discard, tmp)
            raise
        return size

    async def read_stream(self, key: str, start: int, end: int) -> AsyncIterator[bytes]:
        async with await anyio.open_file(self.path(key), "rb") as file:
            await file.seek(start)
            while start < end:
                chunk = await file.read(min(READ_CHUNK_BYTES, end - start))
                if not chunk:
                    return
                start += len(chunk)
                yield chunk

    @contextlib.contextmanager
    def _replacing(self, key: str) -> Iterator[str]:
        """A temporary beside `key` for the caller to fill; renamed to `key` when the block ends normally."""
        tmp = self._temp_beside(key)
        try:
            yield tmp
            os.replace(tmp, self.path(key))
        except BaseException:
            self._discard(tmp)
            raise

    def _temp_beside(self, key: str) -> str:
        folder = os.path.dirname(self.path(key))
        make_private_dirs(folder)
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=folder)
        os.close(fd)
        return tmp

    def _commit(self, tmp: str, key: str) -> None:
        _sync(tmp)
        os.replace(tmp, self.path(key))

    def _discard(self, tmp: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        self._prune(os.path.dirname(tmp))

    def _prune(self, folder: str) -> None:
        """Remove `folder` and its parents while empty, keeping the root and its top-level folders."""
        root = os.path.normpath(self.root)
        folder = os.path.normpath(folder)
        while os.path.dirname(folder) != root and folder.startswith(root + os.sep):
            try:
                os.rmdir(folder)
            except OSError:  # not empty (or already gone, or a mount point): stop here
                return
            folder = os.path.dirname(folder)


def _sync(path: str) -> None:
    """Flush a file's data to the disk before it gets its name, so a power loss cannot leave it empty."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())
