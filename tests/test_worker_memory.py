"""A render worker hands back what a render took: after a render task, a large block the process frees goes back to
the system rather than staying in glibc's heaps (serve_app.rendering._render_tasks.bound_heap; docs/performance.md,
"Memory after renders").

What is checked is glibc's behaviour, not a timing or a resident size: with its default, dynamic mmap threshold, a
freed 8 MiB block raises the threshold, so the next 8 MiB block comes from the heap (where it stays once freed); with
the threshold fixed, it is a mapping of its own again, unmapped on free. Where libc is not glibc (no `mallinfo2`),
there is nothing to check.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import subprocess
import sys
import textwrap
import uuid

import pytest
import ray

from render_kernels.plan import plan_segments
from render_kernels.probe import probe
from render_kernels.spec import RenderSpec
from serve_app.rendering import _render_tasks as render_tasks
from serve_app.rendering._render_tasks import FrameTally, SegmentTask, TallyRef
from tests.harness import REPO
from tests.media import make_clip

BLOCK = 8 * 1024 * 1024  # a 4k picture is 13 MiB, a 1080p one 3 MiB: within glibc's 32 MiB dynamic range


# Run where it is to be checked (a fresh interpreter, a Ray worker): prints or returns whether, in that process, a
# BLOCK freed once and asked for again is a mapping of its own (`mallinfo2`'s hblkhd counts the bytes of those): what
# the dynamic threshold stops, and bound_heap restores.
CHECK = textwrap.dedent(
    f"""
    import ctypes, ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]

    def a_freed_block_is_mapped_again():
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        libc.mallinfo2.restype = MallInfo2
        libc.free(libc.malloc({BLOCK}))  # a dynamic threshold rises to this block's size here
        before = libc.mallinfo2().hblkhd
        block = libc.malloc({BLOCK})
        try:
            return libc.mallinfo2().hblkhd - before >= {BLOCK}
        finally:
            libc.free(block)
    """
)


glibc_only = pytest.mark.skipif(
    not hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallinfo2"), reason="glibc 2.33 or later only"
)


@glibc_only
@pytest.mark.parametrize("bounded", [False, True])
def test_bound_heap_keeps_freed_blocks_out_of_the_heaps(bounded):
    """The check means something: in a fresh interpreter the block comes from the heap the second time, unless
    bound_heap ran first."""
    code = CHECK + (
        "from serve_app.rendering._render_tasks import bound_heap\nassert bound_heap()\n" if bounded else ""
    )
    code += "print(a_freed_block_is_mapped_again())\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert out.strip() == str(bounded)


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=1, include_dashboard=False, namespace=f"test-worker-memory-{uuid.uuid4().hex}")
    yield
    ray.shutdown()


@glibc_only
@pytest.mark.ray
def test_a_segment_task_leaves_its_worker_handing_freed_frames_back(cluster, tmp_path):
    """The segment task's body as a render runs it in a pooled worker, then the check in that same process."""

    @ray.remote(num_cpus=1, max_retries=0)
    def segment_then_check(source: str, tally: TallyRef) -> tuple[int, bool]:
        info = probe(source)
        segment = plan_segments(info, 1)[0]
        summary, _ = render_tasks.encode_segment_parts(
            SegmentTask(source, segment, RenderSpec("mp4", "720p"), info, tally)
        )
        namespace: dict = {}
        exec(CHECK, namespace)
        return summary.frame_count, namespace["a_freed_block_is_mapped_again"]()

    source = make_clip(str(tmp_path / "source.mp4"), seconds=1.0, fps=10, audio=False)
    tally_actor = ray.remote(num_cpus=0)(FrameTally).remote()
    ray.get(tally_actor.open.remote("run", 2))
    frames, mapped = ray.get(segment_then_check.remote(source, TallyRef(tally_actor, "run", 1, 1.0)), timeout=120)
    assert frames == 10
    assert mapped, "a worker that ran a segment keeps freed frame-sized blocks in its heaps"
