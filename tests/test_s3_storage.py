"""The S3 media store (media_store._s3) against a real S3 REST server on loopback (moto's standalone server):
multipart writes, ranged reads (also under PyAV: a segment decodes from the ranges it needs), streamed
uploads that abort cleanly, listing and deletion. No Ray here."""

from __future__ import annotations

import asyncio
import os
import re
from dataclasses import replace

import pytest

from media_store import _s3 as s3_backend
from media_store._s3 import S3MediaStore
from media_store.opening import open_media_store
from render_kernels.plan import plan_segments
from render_kernels.probe import probe
from render_kernels.spec import RenderSpec
from render_kernels.video import encode_segment
from tests.media import make_clip

pytestmark = pytest.mark.slow  # a real S3 server process (moto)


@pytest.fixture(scope="module")
def store(s3_server):
    """The store as vidforge opens it: from the URL, with the AWS_* variables pointing at the server."""
    saved = {name: os.environ.get(name) for name in s3_server.env}
    os.environ.update(s3_server.env)
    s3_backend._bucket.cache_clear()  # clients are built from the environment, once per process
    yield open_media_store(f"s3://{s3_server.bucket}/unit", "/nonexistent-data-dir")
    for name, value in saved.items():
        os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)
    s3_backend._bucket.cache_clear()


def requests_for(s3_server, key: str) -> list[dict]:
    return [r for r in s3_server.recorded() if f"/{s3_server.bucket}/unit/{key}" in r["url"]]


def ranges_read(requests: list[dict]) -> list[tuple[int, int]]:
    spans = []
    for request in requests:
        if request["method"] == "GET" and "range" in request["headers"]:
            start, end = re.fullmatch(r"bytes=(\d+)-(\d+)", request["headers"]["range"]).groups()
            spans.append((int(start), int(end)))
    return spans


def test_a_large_file_goes_up_in_parts_and_comes_back_by_ranges(store, s3_server, tmp_path):
    assert isinstance(store, S3MediaStore) and not store.node_local
    data = os.urandom(s3_backend.PART_BYTES * 2 + 12345)
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    s3_server.record(True)
    try:
        with store.staged("big/file.bin") as staged:
            os.replace(source, staged)  # what the mux does: build the file in the staging folder, then hand it over
            assert store.put_file(staged, "big/file.bin", move=True) == len(data)
            assert not os.path.exists(staged)
        assert not os.path.exists(os.path.dirname(staged))  # the staging folder went with the block
        with store.media("big/file.bin").open() as file:
            file.seek(s3_backend.PART_BYTES + 100)
            middle = file.read(1000)
        requests = requests_for(s3_server, "big/file.bin")
    finally:
        s3_server.record(False)

    assert middle == data[s3_backend.PART_BYTES + 100 : s3_backend.PART_BYTES + 1100]
    assert s3_server.get("unit/big/file.bin") == data
    parts = [r for r in requests if r["method"] == "PUT" and "partNumber=" in r["url"]]
    assert [r for r in requests if r["method"] == "POST" and "?uploads" in r["url"]], "no multipart upload"
    assert len(parts) == 3 and max(r["body_bytes"] for r in parts) == s3_backend.PART_BYTES
    spans = ranges_read(requests)
    assert spans and all(end - start < s3_backend.READ_BUFFER_BYTES for start, end in spans)
    assert sum(end - start + 1 for start, end in spans) < len(data) / 4  # the reader fetched a window, not the file


def test_a_segment_decodes_from_the_byte_ranges_it_needs(store, s3_server, tmp_path, monkeypatch):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=9, width=320, height=180, gop=30, audio=False)
    size = os.path.getsize(clip)
    monkeypatch.setattr(s3_backend, "READ_BUFFER_BYTES", 32 * 1024)  # windows much smaller than this clip
    store.put_file(clip, "media/clip.mp4")
    source = store.media("media/clip.mp4")

    info = probe(source)
    local = probe(clip)
    assert replace(info, path=clip) == local
    last = plan_segments(info, 3, 3.0)[-1]  # three of 3 s: the last starts two thirds in
    spec = RenderSpec("mp4", "720p", video_encoder="libx264")
    s3_server.record(True)
    try:
        from_bucket = encode_segment(source, last, spec, info)
        requests = requests_for(s3_server, "media/clip.mp4")
    finally:
        s3_server.record(False)
    from_disk = encode_segment(clip, last, spec, local)

    assert from_bucket.frame_count == from_disk.frame_count == last.frame_count
    assert from_bucket.packets == from_disk.packets  # the same bytes, whichever way the source was read
    spans = ranges_read(requests)
    assert spans, "the source was not read by ranges"
    # The container is opened from its head and its index, then the demuxer seeks to the segment's keyframe
    # (two thirds in): the bytes of the frames in between are never fetched.
    skipped = (int(size * 0.3), int(size * 0.6))
    assert not [(start, end) for start, end in spans if start <= skipped[1] and end >= skipped[0]], (spans, size)


def test_listing_deleting_and_reading_back(store, s3_server):
    for key, data in {"l/a/1": b"one", "l/a/2": b"two!", "l/b/3": b"three", "l2/x": b"not under l/"}.items():
        store.put_bytes(key, data)
    assert {(o.key, o.size) for o in store.list("l/")} == {("l/a/1", 3), ("l/a/2", 4), ("l/b/3", 5)}
    assert store.get_bytes("l/a/2") == b"two!" and store.size("l/b/3") == 5
    assert store.size("l/none") is None
    with pytest.raises(FileNotFoundError):
        store.get_bytes("l/none")
    versions = {o.key: o.version for o in store.list("l/")}
    store.put_bytes("l/a/1", b"ONE")
    assert {o.key: o.version for o in store.list("l/")}["l/a/1"] != versions["l/a/1"]

    store.delete(["l/a/1", "l/never-was"])  # a missing key is no error
    assert [o.key for o in store.list("l/")] == ["l/a/2", "l/b/3"]
    store.delete_prefix("l/")
    assert store.list("l/") == [] and s3_server.object_keys("unit/l2/") == ["unit/l2/x"]


def test_a_streamed_write_stores_the_chunks_and_an_aborted_one_leaves_nothing(store, s3_server):
    chunk = os.urandom(3 * 1024 * 1024)

    async def chunks(count: int, fail: bool = False):
        for _ in range(count):
            yield chunk
            await asyncio.sleep(0)
        if fail:
            raise OverflowError("the upload passed its limit")

    assert asyncio.run(store.write_stream("up/whole", chunks(4))) == 4 * len(chunk)
    assert s3_server.get("unit/up/whole") == chunk * 4

    with pytest.raises(OverflowError):  # the caller's own exception, as it was raised
        asyncio.run(store.write_stream("up/cut", chunks(4, fail=True)))
    assert s3_server.object_keys("unit/up/") == ["unit/up/whole"]
    assert s3_server.open_multipart_uploads() == []  # the parts sent were aborted on the server

    async def read(start: int, end: int) -> bytes:
        return b"".join([part async for part in store.read_stream("up/whole", start, end)])

    assert asyncio.run(read(len(chunk) - 10, len(chunk) + 10)) == (chunk * 2)[len(chunk) - 10 : len(chunk) + 10]
