"""The last step of a render: its segments and audio muxed into the file, which is stored with its poster.

The mux runs in a Ray task rather than in a thread: a task can be force-cancelled mid-write, where a thread would have
to be waited for; and a crash in libav takes down a worker, not the supervisor actor. It writes into a private
staging folder (`MediaStore.staged`), then hands the file to the store: a rename beside `out_path` on a local store
(the task is then pinned to this node, whose disk that is), a multipart upload from wherever it ran on a bucket.
Sources are read where the tasks run: a local path on a local store, a ranged reader of the object on a bucket
(render_kernels.MediaSource).

The mux asks Ray for no CPU: on a local store it is pinned to the driver's node, which in a cluster is the head,
started with no CPUs so that segment work goes to the workers only. It is still the render's final task in the
scheduler, whose own count of busy CPUs keeps the slot the render's last segment (or audio) freed until the mux ends:
a finished render does not wait behind other renders' queued segments, and no other segment is started onto that CPU
while the mux copies packets beside it (on one node, Ray then reuses the idle worker that slot's segment left, rather
than starting one more).
"""

from __future__ import annotations

import asyncio

from render_kernels.audio import EncodedAudio
from serve_app.rendering._frame_progress import FrameProgress
from serve_app.rendering._render_pool import RunQueue
from serve_app.rendering._render_tasks import MuxTask, StoredVideo, TaskRef
from serve_app.rendering._task_calls import RenderTasks


async def mux_and_store(
    task: MuxTask, audio: TaskRef[EncodedAudio | None], queue: RunQueue, tasks: RenderTasks, progress: FrameProgress
) -> StoredVideo:
    """Run the mux `task` with `audio`, the render's final task in its pool's scheduler, reporting the frames it has
    written meanwhile; what it stored."""
    dispatched = await queue.schedule(lambda: [tasks.mux(task, audio)], final=True, bundle=())
    watching = asyncio.ensure_future(progress.watch_mux())
    try:
        return await dispatched.refs[0]
    finally:
        watching.cancel()
