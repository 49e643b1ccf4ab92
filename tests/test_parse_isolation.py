"""The isolated parse (serve_app.media.media_probe.parse_isolated) in this process, without Ray: each parse runs in a
process of its own, forked from the fork server, and its crash, hang, memory bomb or bug ends only that parse, as
the refusal the upload answers with. tests/test_media_limits.py shows the same through a live server's uploads."""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import replace

import pytest

from render_kernels.errors import UnsupportedMedia
from render_kernels.limits import MediaLimits, OverLimit
from render_kernels.probe import probe
from serve_app.media.media_probe import ParseBounds, inspect_media, parse_isolated
from tests.media import make_clip

pytestmark = pytest.mark.anyio

FAULT = "TEST-FAULT:"
BOUNDS = ParseBounds(timeout_s=60.0, memory_bytes=256 * 1024**2, fault_prefix=FAULT)
PLAIN = replace(BOUNDS, fault_prefix="")  # no test seam: the kernels below read no file


def process_id(path: str) -> int:
    """A kernel that answers which process ran it."""
    return os.getpid()


def allocate(path: str, size: int) -> int:
    """A kernel that asks for `size` bytes at once (a decoder's runaway allocation)."""
    return len(bytearray(size))


def say_then_hang(path: str) -> None:
    """A kernel that writes its process id to `path`, then blocks for good."""
    with open(path, "w") as said:
        said.write(str(os.getpid()))
    threading.Event().wait()


def broken(path: str) -> None:
    """A kernel with a bug that hostile input reaches."""
    raise KeyError("no such box")


def faulty(tmp_path, what: bytes) -> str:
    path = tmp_path / what.decode()
    path.write_bytes(FAULT.encode() + what)
    return str(path)


async def test_a_parse_answers_what_the_kernel_found_from_another_process(tmp_path):
    clip = make_clip(str(tmp_path / "clip.mp4"), seconds=1.0)
    assert await parse_isolated(BOUNDS, inspect_media, clip, MediaLimits()) == probe(clip)
    first, second = [await parse_isolated(PLAIN, process_id, clip) for _ in range(2)]
    assert os.getpid() not in (first, second) and first != second  # a process of its own, each time


async def test_a_deadline_past_what_an_alarm_holds_still_parses(tmp_path):
    """The parse's own alarm (for an asker that died) is capped where alarm(2) stops: a VIDFORGE_PARSE_TIMEOUT_S of
    years is no deadline, not a parser that dies at its start."""
    bounds = replace(PLAIN, timeout_s=1e12)
    assert await parse_isolated(bounds, process_id, str(tmp_path)) != os.getpid()


async def test_a_crash_is_unsupported_media_and_the_next_parse_works(tmp_path):
    with pytest.raises(UnsupportedMedia, match="^the media parser crashed reading this file$") as crash:
        await parse_isolated(BOUNDS, inspect_media, faulty(tmp_path, b"abort"), MediaLimits())
    assert not isinstance(crash.value, OverLimit)
    assert await parse_isolated(PLAIN, process_id, str(tmp_path)) != os.getpid()


async def test_a_hang_is_cut_at_the_deadline(tmp_path):
    bounds = replace(BOUNDS, timeout_s=1.0)
    with pytest.raises(OverLimit, match=r"^reading the file took longer than 1 s$") as hang:
        await parse_isolated(bounds, inspect_media, faulty(tmp_path, b"hang"), MediaLimits())
    assert hang.value.limit == "parse_timeout_s"


async def test_a_parse_past_its_memory_is_over_the_limit_and_one_within_it_is_not(tmp_path):
    with pytest.raises(OverLimit, match=rf"needed more than {BOUNDS.memory_bytes} bytes of memory$") as bomb:
        await parse_isolated(PLAIN, allocate, str(tmp_path), 2 * BOUNDS.memory_bytes)
    assert bomb.value.limit == "parse_memory_bytes"
    assert await parse_isolated(PLAIN, allocate, str(tmp_path), BOUNDS.memory_bytes // 2) == BOUNDS.memory_bytes // 2


async def test_a_kernel_bug_is_unsupported_media_not_a_server_error(tmp_path):
    with pytest.raises(UnsupportedMedia, match="^the media parser failed reading this file$"):
        await parse_isolated(PLAIN, broken, str(tmp_path))


async def test_cancelling_the_caller_kills_the_parse(tmp_path):
    said = tmp_path / "pid"
    parse = asyncio.ensure_future(parse_isolated(PLAIN, say_then_hang, str(said)))
    while not said.exists() or not said.read_text():
        await asyncio.sleep(0.05)
    pid = int(said.read_text())
    parse.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parse
    assert not os.path.exists(f"/proc/{pid}")  # killed and reaped
