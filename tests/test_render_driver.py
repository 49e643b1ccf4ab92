"""The Ray render driver on a real local Ray: segment equivalence, worker death, cancel, reject, progress."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest
import ray
from media import decode_all, make_clip, make_watermark_png, psnr_y

from render_kernels import RenderSpec, UnsupportedMedia, WatermarkSpec, plan_segments, probe
from serve_app import render_driver
from serve_app.render_driver import RenderJob, RenderRejected, run_render

pytestmark = pytest.mark.ray

CPUS = 2
SECONDS = 6.0
FPS = 30
DEADLINE_S = 60.0  # generous: the machine running the tests may be loaded


class Hooks:
    """Records every callback; `approve` decides the preview (None: never answers)."""

    def __init__(self, approve: bool | None = True) -> None:
        self.approve = approve
        self.calls: list[tuple] = []
        self.previewed = asyncio.Event()
        self.progressed = asyncio.Event()

    async def progress(self, frames_done: int, frames_total: int, phase: str) -> None:
        self.calls.append((frames_done, frames_total, phase))
        self.progressed.set()

    async def preview_ready(self, preview_path: str) -> bool:
        self.calls.append(("preview", preview_path))
        self.previewed.set()
        if self.approve is None:
            await asyncio.Event().wait()
        return self.approve

    @property
    def progress_calls(self) -> list[tuple]:
        return [c for c in self.calls if c[0] != "preview"]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=CPUS, include_dashboard=False, namespace=f"test-render-driver-{uuid.uuid4().hex}")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    root = tmp_path_factory.mktemp("driver-media")
    source = make_clip(str(root / "source.mp4"), seconds=SECONDS, fps=FPS, gop=FPS, audio=True)
    logo = make_watermark_png(str(root / "logo.png"), rgba=(255, 255, 0, 200))
    return source, logo


def job_for(media, out_dir, workers: int = 3) -> RenderJob:
    source, logo = media
    spec = RenderSpec("mp4", "720p", WatermarkSpec(logo, position="bottom_right", opacity=0.6))
    return RenderJob(source, spec, str(out_dir / "final.mp4"), str(out_dir / "preview.png"), workers=workers)


def render(job: RenderJob, hooks: Hooks):
    return asyncio.run(asyncio.wait_for(run_render(job, hooks), DEADLINE_S * 3))


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def all_cpus_free() -> bool:
    return ray.available_resources().get("CPU", 0) == CPUS


@pytest.fixture(scope="module")
def clean(cluster, media, tmp_path_factory):
    """One clean multi-segment render (3 segments) and its single-segment twin, with their hooks."""
    out = {}
    for workers in (3, 1):
        hooks = Hooks()
        job = job_for(media, tmp_path_factory.mktemp(f"clean-{workers}"), workers)
        out[workers] = (job, render(job, hooks), hooks)
    return out


def test_multi_segment_render_matches_single_segment(clean, media):
    info = probe(media[0])
    boundaries = [s.start_frame for s in plan_segments(info, 3)][1:]
    assert len(boundaries) == 2, "the clip must split into 3 segments for this test to mean anything"
    (multi_job, multi_stats, _), (single_job, _, _) = clean[3], clean[1]
    multi, single = decode_all(multi_job.out_path), decode_all(single_job.out_path)

    assert multi.frame_count == single.frame_count == info.frame_count == multi_stats.frame_count
    assert (multi.width, multi.height) == (1280, 720)
    assert abs(multi.duration_s - single.duration_s) <= 1 / FPS
    assert abs(multi_stats.duration_s - info.duration_s) <= 1 / FPS
    assert multi.audio_codec == "aac" and multi.audio_samples > 0
    scores = [psnr_y(a, b) for a, b in zip(multi.frames, single.frames)]
    assert sum(scores) / len(scores) >= 40
    for frame in boundaries:  # the last frame of one segment and the first of the next
        assert min(scores[frame - 1], scores[frame]) >= 40, f"segment boundary at frame {frame}"


def test_progress_is_monotonic_and_ends_at_total(clean):
    for job, stats, hooks in clean.values():
        assert [c for c in hooks.calls if c[0] == "preview"] == [("preview", job.preview_path)]
        calls = hooks.progress_calls
        done = [c[0] for c in calls]
        assert done == sorted(done)
        assert all(total == stats.frame_count for _, total, _ in calls)
        assert calls[-1] == (stats.frame_count, stats.frame_count, "muxing")
        assert {phase for *_, phase in calls[:-1]} == {"rendering"}


def test_segment_worker_death_is_retried_to_identical_bytes(clean, media, tmp_path, monkeypatch):
    marker = str(tmp_path / "died-once")

    def dies_on_first_attempt(source_path, segment, spec, info):
        if segment.index == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies: Ray's max_retries, not an exception retry
        return render_driver.encode_segment_parts(source_path, segment, spec, info)

    faulty = ray.remote(num_returns=2, **render_driver.TASK_OPTIONS)(dies_on_first_attempt)
    monkeypatch.setattr(render_driver, "segment_task", faulty)
    job = job_for(media, tmp_path / "out")
    render(job, Hooks())

    assert os.path.exists(marker), "the segment task never died"
    with open(job.out_path, "rb") as retried, open(clean[3][0].out_path, "rb") as first:
        assert retried.read() == first.read()


def test_cancel_mid_render_stops_tasks_and_leaves_no_output(cluster, media, tmp_path):
    job = job_for(media, tmp_path / "out")
    hooks = Hooks(approve=None)  # the approval never comes, so the render is surely still running

    async def scenario() -> float:
        task = asyncio.ensure_future(run_render(job, hooks))
        await asyncio.wait_for(hooks.previewed.wait(), DEADLINE_S)
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, DEADLINE_S)
        return time.monotonic() - started

    assert asyncio.run(scenario()) < render_driver.CANCEL_WAIT_S + 20  # bounded, however long approval takes
    assert os.listdir(tmp_path / "out") == ["preview.png"]  # no output, no staging leftovers
    wait_until(all_cpus_free, "the cancelled segment tasks to release their CPUs")


def test_cancel_while_encoding_without_watermark(cluster, media, tmp_path):
    job = RenderJob(media[0], RenderSpec("mp4", "720p"), str(tmp_path / "out" / "final.mp4"), workers=3)
    hooks = Hooks()

    async def scenario() -> None:
        task = asyncio.ensure_future(run_render(job, hooks))
        await asyncio.wait_for(hooks.progressed.wait(), DEADLINE_S)  # frame 0: the segments are being sent
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, DEADLINE_S)

    asyncio.run(scenario())
    assert not os.path.exists(job.out_path)
    wait_until(all_cpus_free, "the cancelled segment tasks to release their CPUs")


def test_rejected_preview_raises_and_keeps_only_the_preview(cluster, media, tmp_path):
    job = job_for(media, tmp_path / "out")
    with pytest.raises(RenderRejected):
        render(job, Hooks(approve=False))
    assert os.listdir(tmp_path / "out") == ["preview.png"]
    assert open(job.preview_path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    wait_until(all_cpus_free, "the speculative segment tasks to be cancelled")


def test_unsupported_media_propagates_unchanged(cluster, media, tmp_path):
    not_a_video = tmp_path / "notes.mp4"
    not_a_video.write_text("just text\n" * 100)
    with pytest.raises(UnsupportedMedia) as probed:  # raised by probe, on the driver's side
        render(RenderJob(str(not_a_video), RenderSpec("mp4", "720p"), str(tmp_path / "a.mp4")), Hooks())
    assert type(probed.value) is UnsupportedMedia

    spec = RenderSpec("mp4", "720p", WatermarkSpec(str(not_a_video)))  # fails inside the Ray tasks
    with pytest.raises(UnsupportedMedia) as in_task:
        render(RenderJob(media[0], spec, str(tmp_path / "b.mp4"), str(tmp_path / "b.png")), Hooks())
    assert type(in_task.value) is UnsupportedMedia and in_task.value.reason
    assert not os.path.exists(tmp_path / "b.mp4")
