"""Parsing untrusted media in isolation: a process of its own, a memory limit and a deadline per parse.

libav is a large C library, and what it parses here is whatever a tenant uploaded. A crash, a runaway
allocation or a hang inside it must end that one upload with a clear error and nothing else, so no parse of
uploaded bytes runs in a shared process such as the Serve ingress. `parse_isolated` runs a kernel that takes
media (inspect_media at upload; probe and render_preview for an asset stored without the upload's facts — with
them, the render's own tasks decode the vetted file, see serve_app.rendering._render_driver) in a fresh single-use Ray
actor — one worker process, killed when the parse ends — that first caps its own memory. A local file is parsed
on this node; an object in a bucket is read by the parser itself, wherever it runs, fetching only the ranges it
decodes:

- memory: RLIMIT_DATA at what the idle worker already uses plus VIDFORGE_PARSE_MEMORY_BYTES (Ray does not
  enforce `memory=`). DATA rather than AS: a Ray worker maps the whole object store and every decoder thread
  reserves a 64 MiB malloc arena, so its address space says little about what a parse allocates; private
  writable memory (heap, mmap'd buffers, thread stacks) is what a bomb consumes. Past it, libav's allocations
  fail with ENOMEM and numpy's with MemoryError — both end the parse as `media_limit_exceeded`.
- time: VIDFORGE_PARSE_TIMEOUT_S from the moment the parse starts (the worker's start-up is not counted); past
  it the actor is killed, whatever it is blocked in.
- crash: the worker dies alone (`max_restarts=0`, no retry: the same bytes would crash it again) and the
  parse ends as `unsupported_codec`; the raw error goes to the log only.

The actors ask for no CPU: a parse is short and bounded by its deadline, and an upload must not queue behind
renders that hold every core (the per-principal upload cap bounds how many run at once).
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from render_kernels.errors import UnsupportedMedia
from render_kernels.images import image_size, probe_image
from render_kernels.limits import MediaLimits, OverLimit
from render_kernels.media_io import Damaged, Media, open_binary
from render_kernels.probe import probe
from render_kernels.source_info import SourceInfo

if TYPE_CHECKING:  # not at run time: every parser is a fresh worker that imports this module, and the settings
    # model (pydantic) would add 75 ms of CPU to each one's start
    from serve_app._config import Config

logger = logging.getLogger(__name__)


def inspect_media(path: Media, limits: MediaLimits) -> SourceInfo | tuple[int, int]:
    """What an upload is: a video's probe, or a still image's (width, height); the asset keeps them as its facts
    (serve_app.media._media_facts.MediaFacts, made where the parse was asked for: no pydantic in a parser worker).

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
    # Here, not at the top: every parser worker imports this module, which imports nothing else of the server.
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


def _cap_memory(budget_bytes: int) -> None:
    """Let this process allocate at most `budget_bytes` more private memory (see the module docstring)."""
    with open("/proc/self/status", encoding="ascii") as status:
        used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:"))
    resource.setrlimit(resource.RLIMIT_DATA, (used + budget_bytes, used + budget_bytes))


class MediaParser:
    """One parse in one process. The hard limit is lowered too, so nothing in the parse can lift it."""

    def __init__(self, memory_bytes: int, fault_prefix: str) -> None:
        _cap_memory(memory_bytes)
        self.fault_prefix = fault_prefix.encode()

    def ready(self) -> bool:
        """Answers once the process has started and capped its memory (the parse's deadline starts after)."""
        return True

    def run(self, fn: Callable[..., Any], path: Media, *args: Any) -> Any:
        if self.fault_prefix:
            _test_fault(path, self.fault_prefix)
        return fn(path, *args)


def _test_fault(path: Media, prefix: bytes) -> None:
    """Test seam (VIDFORGE_TEST_PARSE_FAULT_PREFIX, unset in production): a file starting with the prefix and
    then `abort` crashes this parser process, with `hang` blocks it for good — a libav crash and a libav hang
    on chosen bytes, while every other file on the same server parses normally."""
    with open_binary(path) as head:
        start = head.read(len(prefix) + 5)
    if start.startswith(prefix + b"abort"):
        os.abort()
    if start.startswith(prefix + b"hang"):
        threading.Event().wait()


_parser_actor = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(MediaParser)


@dataclass(frozen=True)
class ParseBounds:
    """The limits one isolated parse runs under (VIDFORGE_PARSE_TIMEOUT_S, VIDFORGE_PARSE_MEMORY_BYTES)."""

    timeout_s: float
    memory_bytes: int
    fault_prefix: str = ""  # the test seam; see _test_fault

    @classmethod
    def of(cls, config: Config) -> ParseBounds:
        return cls(config.parse_timeout_s, config.parse_memory_bytes, config.parse_fault_prefix)


async def parse_isolated(bounds: ParseBounds, fn: Callable[..., Any], path: Media, *args: Any) -> Any:
    """`fn(path, *args)` in a MediaParser of its own; its value, or UnsupportedMedia (OverLimit past the memory
    or time limit) saying why not. `fn` is a kernel (or `inspect_media`) and must raise nothing else for bad
    media; any other failure is logged here and answered as unusable media, never as a server error.
    Cancelling the caller kills the parser."""
    # Here, not at the top: every parser worker imports this module, and the actors package (the typed calls) would
    # add about a second of CPU to each one's start. The processes that start a parse have it loaded.
    from actors.actor_calls import ActorUnavailable
    from serve_app.media._parser_client import PARSER, ParserClient

    if isinstance(path, str):  # a local file: it is on this node
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        handle = _parser_actor.options(scheduling_strategy=here).remote(bounds.memory_bytes, bounds.fault_prefix)
    else:
        handle = _parser_actor.remote(bounds.memory_bytes, bounds.fault_prefix)
    parser = ParserClient(handle, PARSER)
    try:
        await parser.ready()
        return await asyncio.wait_for(parser.run(fn, path, *args), bounds.timeout_s)
    except TimeoutError:
        raise OverLimit("parse_timeout_s", f"reading the file took longer than {bounds.timeout_s:g} s") from None
    except MemoryError as exc:
        raise OverLimit(
            "parse_memory_bytes", f"reading the file needed more than {bounds.memory_bytes} bytes of memory"
        ) from exc
    except UnsupportedMedia:
        raise
    except ActorUnavailable as exc:
        logger.warning("media parser process died on %s", path, exc_info=exc)
        raise UnsupportedMedia("the media parser crashed reading this file") from exc
    except Exception as exc:  # noqa: BLE001 - a kernel bug on hostile input is still this file's refusal
        logger.error("media parser failed on %s", path, exc_info=exc)
        raise UnsupportedMedia("the media parser failed reading this file") from exc
    finally:
        ray.kill(handle)
