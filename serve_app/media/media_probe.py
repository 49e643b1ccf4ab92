"""Parsing untrusted media in isolation: a process of its own, a memory limit and a deadline per parse.

libav is a large C library, and what it parses here is whatever a tenant uploaded. A crash, a runaway
allocation or a hang inside it must end that one upload with a clear error and nothing else, so no parse of
uploaded bytes runs in a shared process such as the Serve ingress. `parse_isolated` runs a kernel that takes
media (inspect_media at upload; probe and render_preview for an asset stored without the upload's facts — with
them, the render's own tasks decode the vetted file, see serve_app.rendering._render_driver) in a fresh process of
its own (serve_app.media._parser_process), ended with the parse, that first caps its own memory. The parse runs on
the node of the process that asks for it (a local file is there); an object in a bucket is read by the parser
itself, fetching only the ranges it decodes:

- process: a fresh Python, started one parse ahead as the asking process's spare, so the parse's own time is all an
  upload waits for (its start-up, 0.4 CPU-s, is over by then), and nothing of the asker (a Ray worker's threads and
  connections) is in it (docs/decisions/015-parses-in-spare-processes.md).
- memory: RLIMIT_DATA at what the fresh process already uses plus VIDFORGE_PARSE_MEMORY_BYTES. DATA rather than AS:
  every decoder thread reserves a 64 MiB malloc arena, so the address space says little about what a parse
  allocates; private writable memory (heap, mmap'd buffers, thread stacks) is what a bomb consumes. Past it,
  libav's allocations fail with ENOMEM and numpy's with MemoryError — both end the parse as `media_limit_exceeded`.
- time: VIDFORGE_PARSE_TIMEOUT_S from the moment the parse is handed over; past it the process is killed, whatever
  it is blocked in. A parse whose asker died first ends itself a little later (an alarm set at its start).
- crash: the process dies alone, with no retry (the same bytes would crash it again), and the parse ends as
  `unsupported_codec`; the raw error goes to the log only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import resource
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from render_kernels.errors import UnsupportedMedia
from render_kernels.images import image_size, probe_image
from render_kernels.limits import MediaLimits, OverLimit
from render_kernels.media_io import Damaged, Media, open_binary
from render_kernels.probe import probe
from render_kernels.source_info import SourceInfo

if TYPE_CHECKING:  # not at run time: every parser process imports this module, and the settings model (pydantic)
    # would add its import to each one's start
    from serve_app._config import Config

logger = logging.getLogger(__name__)

ORPHAN_GRACE_S = 30  # past its deadline, how long a parse whose asker died lives on before its alarm ends it
PARSER_COMMAND = (sys.executable, "-m", "serve_app.media._parser_process")


def inspect_media(path: Media, limits: MediaLimits) -> SourceInfo | tuple[int, int]:
    """What an upload is: a video's probe, or a still image's (width, height); the asset keeps them as its facts
    (serve_app.media._media_facts.MediaFacts, made where the parse was asked for: no pydantic in a parser).

    A still image is recognised and sized from its header first (Pillow reads no pixel) and held to its limit
    before any decoder runs: a few-MB PNG can declare 16k x 16k pixels, and decoding it costs a gigabyte.
    """
    size = image_size(path)
    if size is None:
        return _probe_video(path, limits)
    limits.check_image_size(*size)
    return probe_image(path)


def _probe_video(path: Media, limits: MediaLimits) -> SourceInfo:
    """The probe of what is not a still image. A head that is surely no media (text, a form, a PDF, ...) is refused
    as what it is, before libav reads it; a head of no known format that libav cannot read either is said to be
    that, beside libav's "truncated or corrupt" (content_sniff)."""
    # Here, not at the top: every parser process imports this module, which imports nothing else of the server.
    from serve_app.media.content_sniff import HEAD_BYTES, sniff

    with open_binary(path) as file:
        head = file.read(HEAD_BYTES)
    sniffed = sniff(head) if head else None
    if sniffed is not None and not sniffed.media:
        raise UnsupportedMedia(sniffed.refusal())
    try:
        return probe(path, limits)
    except UnsupportedMedia as exc:
        if sniffed is None or sniffed.description is not None or not isinstance(exc.__cause__, Damaged):
            raise
        raise UnsupportedMedia(f"no video or image format recognised in the file's first bytes; {exc.reason}") from exc


@dataclass(frozen=True)
class ParseBounds:
    """The limits one isolated parse runs under (VIDFORGE_PARSE_TIMEOUT_S, VIDFORGE_PARSE_MEMORY_BYTES)."""

    timeout_s: float
    memory_bytes: int
    fault_prefix: str = ""  # the test seam; see apply_test_fault

    @classmethod
    def of(cls, config: Config) -> ParseBounds:
        return cls(config.parse_timeout_s, config.parse_memory_bytes, config.parse_fault_prefix)


@dataclass(frozen=True)
class ParseRequest:
    """One parse, as a parser process reads it: `fn(path, *args)` under `bounds`."""

    fn: Callable[..., Any]
    path: Media
    args: tuple[Any, ...]
    bounds: ParseBounds


@dataclass(frozen=True)
class ParseAnswer:
    """What a parse sends back: the kernel's value, or what it raised (`memory`: it ran out of its budget)."""

    value: Any = None
    raised: BaseException | None = None
    memory: bool = False


def cap_memory(budget_bytes: int) -> None:
    """Let this process allocate at most `budget_bytes` more private memory (see the module docstring). The hard
    limit is lowered too, so nothing in the parse can lift it."""
    with open("/proc/self/status", encoding="ascii") as status:
        used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
    resource.setrlimit(resource.RLIMIT_DATA, (used + budget_bytes, used + budget_bytes))


def apply_test_fault(path: Media, prefix: bytes) -> None:
    """Test seam (VIDFORGE_TEST_PARSE_FAULT_PREFIX, unset in production): a file starting with the prefix and
    then `abort` crashes this parser process, with `hang` blocks it for good — a libav crash and a libav hang
    on chosen bytes, while every other file on the same server parses normally."""
    with open_binary(path) as head:
        start = head.read(len(prefix) + 5)
    if start.startswith(prefix + b"abort"):
        os.abort()
    if start.startswith(prefix + b"hang"):
        threading.Event().wait()


class _Spare:
    """The asking process's next parser process, started when the last one was taken (or on the first parse)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: subprocess.Popen[bytes] | None = None

    def take(self) -> subprocess.Popen[bytes]:
        with self._lock:
            taken = self._next if self._next is not None and self._next.poll() is None else _start_parser()
            self._next = _start_parser()
            return taken


def _start_parser() -> subprocess.Popen[bytes]:
    # The asker's import path, as it stands: the parser imports the kernels (and unpickles `fn`) from the same places.
    # One BLAS thread: a parse does no linear algebra, and numpy's start-up with a pool of them costs a third more.
    path = os.pathsep.join(entry for entry in sys.path if entry)
    env = {**os.environ, "PYTHONPATH": path, "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.Popen(PARSER_COMMAND, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)


_SPARE = _Spare()


def _hand_over(parser: subprocess.Popen[bytes], request: bytes) -> None:
    assert parser.stdin is not None, "piped"
    with contextlib.suppress(BrokenPipeError):  # it died before the parse: read as a crash
        try:
            parser.stdin.write(request)
        finally:
            parser.stdin.close()


async def _read_to_end(parser: subprocess.Popen[bytes]) -> bytes:
    """Everything the parser writes to its stdout, once it closes it (when it ends)."""
    assert parser.stdout is not None, "piped"
    fd = parser.stdout.fileno()
    os.set_blocking(fd, False)
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    ended: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                if not ended.done():
                    ended.set_result(None)
                return
            chunks.append(chunk)

    loop.add_reader(fd, readable)
    try:
        await ended
    finally:
        loop.remove_reader(fd)
    return b"".join(chunks)


async def parse_isolated(bounds: ParseBounds, fn: Callable[..., Any], path: Media, *args: Any) -> Any:
    """`fn(path, *args)` in a parser process of its own; its value, or UnsupportedMedia (OverLimit past the memory
    or time limit) saying why not. `fn` is a kernel (or `inspect_media`) and must raise nothing else for bad
    media; any other failure is logged here and answered as unusable media, never as a server error.
    Cancelling the caller kills the parser."""
    parser = _SPARE.take()
    try:
        # From a thread: a spare still importing reads it only then, and a request past the pipe's buffer would wait.
        await asyncio.to_thread(_hand_over, parser, pickle.dumps(ParseRequest(fn, path, args, bounds)))
        try:
            said = await asyncio.wait_for(_read_to_end(parser), bounds.timeout_s)
        except TimeoutError:
            raise OverLimit("parse_timeout_s", f"reading the file took longer than {bounds.timeout_s:g} s") from None
    finally:
        parser.kill()  # nothing if it has ended
        await asyncio.to_thread(parser.wait)
        if parser.stdout is not None:
            parser.stdout.close()
    if not said:
        logger.warning("media parser process died on %s (exit %s)", path, parser.returncode)
        raise UnsupportedMedia("the media parser crashed reading this file")
    answer: ParseAnswer = pickle.loads(said)
    if answer.memory:
        raise OverLimit(
            "parse_memory_bytes", f"reading the file needed more than {bounds.memory_bytes} bytes of memory"
        )
    if isinstance(answer.raised, UnsupportedMedia):
        raise answer.raised
    if answer.raised is not None:  # a kernel bug on hostile input is still this file's refusal
        logger.error("media parser failed on %s", path, exc_info=answer.raised)
        raise UnsupportedMedia("the media parser failed reading this file")
    return answer.value
