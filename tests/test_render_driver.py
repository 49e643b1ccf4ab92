"""The Ray render driver on a real local Ray: segment equivalence, worker death, cancel, reject, progress
(live, from inside the segment tasks)."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import av
import numpy as np
import pytest
import ray
from media import decode_all, make_clip, make_watermark_png, psnr_y

from mcp_protocol.domain import RenderRequest, TaskRecord
from mcp_protocol.progress import RenderProgress
from render_kernels.errors import UnsupportedMedia
from render_kernels.ladder import LadderSpec
from render_kernels.limits import MediaLimits, OverLimit
from render_kernels.media_io import Damaged
from render_kernels.plan import MIN_SEGMENT_S, plan_segments
from render_kernels.preview import render_preview
from render_kernels.probe import probe
from render_kernels.qc.findings import QcThresholds
from render_kernels.spec import RenderSpec, WatermarkSpec
from render_kernels.video import encode_segment
from serve_app._config import Config
from serve_app.media.assets import AssetStore
from serve_app.media.media_probe import parse_isolated
from serve_app.rendering import _approval_gate as approval_gate
from serve_app.rendering import _render_plan as render_plan
from serve_app.rendering import _render_tasks as render_tasks
from serve_app.rendering import _task_calls as task_calls
from serve_app.rendering._render_driver import RenderRun, run_render
from serve_app.rendering._render_job import RenderJob, RenderRejected
from serve_app.rendering._render_pool import RenderPool
from serve_app.rendering._render_tasks import FrameTally, SegmentTask

pytestmark = pytest.mark.ray

CPUS = 2
SECONDS = 6.0
FPS = 15  # a keyframe a second still (gop=FPS), at half the frames each of the module's renders encodes at 30
SEGMENT_S = 2.0  # the shortest segment here (VIDFORGE_MIN_SEGMENT_S): the 6 s clip cuts in three, as a long one would
# A RenderJob of this module: its 6 s clip cut in segments as a long source would be.
short_clip_job = functools.partial(RenderJob, min_segment_s=SEGMENT_S)
DEADLINE_S = 60.0  # generous: the machine running the tests may be loaded


class Hooks:
    """Records every callback; `approve` decides the preview (None: never answers)."""

    def __init__(self, approve: bool | None = True) -> None:
        self.approve = approve
        self.calls: list[tuple] = []
        self.previewed = asyncio.Event()
        self.progressed = asyncio.Event()

    async def progress(self, report: RenderProgress) -> None:
        self.calls.append(report)
        if report.phase == "rendering":
            self.progressed.set()

    async def preview_ready(self, preview_path: str) -> bool:
        self.calls.append(("preview", preview_path))
        self.previewed.set()
        if self.approve is None:
            await asyncio.Event().wait()
        return self.approve

    @property
    def progress_calls(self) -> list[RenderProgress]:
        return [c for c in self.calls if isinstance(c, RenderProgress)]


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
    return short_clip_job(source, spec, str(out_dir / "final.mp4"), str(out_dir / "preview.png"), workers=workers)


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
    boundaries = [s.start_frame for s in plan_segments(info, 3, SEGMENT_S)][1:]
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


def test_a_render_from_the_uploads_facts_needs_no_probe_and_makes_the_same_file(clean, media, tmp_path, monkeypatch):
    """With the facts the upload's parse found (`source_info`), no parser starts: the segments start at once, make
    the preview and the source's first frame as they pass them, and the files are the ones a render that probes
    first makes."""
    parses = []

    async def counted(*args):
        parses.append(args[1].__name__)
        return await parse_isolated(*args)

    monkeypatch.setattr(render_plan, "parse_isolated", counted)
    monkeypatch.setattr(approval_gate, "STILL_START_WAIT_S", DEADLINE_S)  # a loaded machine may start them late
    probed_job = clean[3][0]
    frame_path = str(tmp_path / "source-frame.png")
    job = replace(job_for(media, tmp_path), source_info=probe(media[0]), source_frame_path=frame_path)
    hooks = Hooks()
    run = RenderRun(job, hooks)
    asyncio.run(asyncio.wait_for(run.run(), DEADLINE_S * 3))
    assert "probe" not in run.stages and run.stages["preview"] > 0 and parses == []
    assert run.stills_from == "segments"  # they started at once, and the preview's frame is early in its segment
    unmarked = replace(job.spec, watermark=None)
    assert open(frame_path, "rb").read() == render_preview(media[0], job.source_info, unmarked, at=0.0)
    assert hooks.calls.count(("preview", job.preview_path)) == 1
    with open(job.out_path, "rb") as ours, open(probed_job.out_path, "rb") as probed:
        assert ours.read() == probed.read()
    with open(job.preview_path, "rb") as ours, open(probed_job.preview_path, "rb") as probed:
        assert ours.read() == probed.read()


def test_the_uploads_facts_are_held_to_the_limits_in_force(cluster, media, tmp_path):
    job = replace(job_for(media, tmp_path), source_info=probe(media[0]), limits=MediaLimits(max_duration_s=SECONDS - 1))
    with pytest.raises(OverLimit, match="over the 5 s limit"):
        render(job, Hooks())
    assert not os.path.exists(job.out_path) and not os.path.exists(job.preview_path)


def test_progress_is_monotonic_and_ends_at_total(clean):
    for job, stats, hooks in clean.values():
        assert [c for c in hooks.calls if not isinstance(c, RenderProgress)] == [("preview", job.preview_path)]
        reports = hooks.progress_calls
        assert reports[0] == RenderProgress("probing")
        done = [r.frames_done for r in reports]
        assert done == sorted(done)
        assert all(r.frames_total == stats.frame_count and r.source_fps == FPS for r in reports[1:])
        assert (reports[-1].phase, reports[-1].frames_done) == ("muxing", stats.frame_count)
        muxing = [r.phase for r in reports].index("muxing")  # then the mux's reports of the frames it has written
        assert {r.phase for r in reports[1:muxing]} == {"rendering"}
        assert {r.phase for r in reports[muxing:]} == {"muxing"}
        written = [r.frames_written for r in reports[muxing:]]
        assert written == sorted(written) and written[-1] <= stats.frame_count


def test_tally_keeps_each_segments_high_water_mark():
    tally = FrameTally()  # as the supervisor holds it, called directly
    tally.open("run", 3)
    tally.report_frames("run", 1, 30)
    tally.report_frames("run", 1, 12)  # the same segment retried from scratch: not added, not gone back
    tally.report_frames("run", 2, 5)
    tally.report_frames("other", 0, 7)  # a run that was never opened (or already closed): dropped
    assert tally.counts("run") == [0, 30, 5] and tally.counts("other") is None
    tally.close("run")
    tally.report_frames("run", 0, 9)  # a late report from an abandoned run's task
    assert tally.counts("run") is None and tally.runs == {}


def test_a_segment_reports_its_first_frame_at_once_then_once_an_interval(monkeypatch):
    """The first count goes out with the first frame (the render shows it is encoding), later ones at most every
    interval of the worker's clock, and the last frame's at once."""
    sent: list[int] = []
    now = [100.0]
    monkeypatch.setattr(render_tasks.time, "monotonic", lambda: now[0])
    tally = render_tasks.TallyRef(actor=None, run="r", mux_index=1, interval_s=0.25)
    on_frame = render_tasks.reporter(tally, 0, total=7)
    monkeypatch.setattr(render_tasks.TallyRef, "report", lambda self, index, frames: sent.append(frames))
    for frame in range(1, 5):
        on_frame(frame)
    now[0] += tally.interval_s
    on_frame(5)
    on_frame(6)
    on_frame(7)
    assert sent == [1, 5, 7]


def test_the_interval_is_half_the_poll_hint_within_bounds():
    assert render_tasks.progress_interval_s(500) == 0.25
    assert render_tasks.progress_interval_s(1_000) == 0.5
    assert render_tasks.progress_interval_s(100) == render_tasks.MIN_PROGRESS_INTERVAL_S
    assert render_tasks.progress_interval_s(10_000) == render_tasks.PROGRESS_INTERVAL_S == 1.0


def test_progress_moves_while_a_segment_is_encoding(cluster, media, tmp_path, monkeypatch):
    """One segment holds at its middle frame until the driver has passed a mid-segment count to the hooks, so
    the report can only have come from inside the running task, however fast or slow the machine is."""
    seen_mid = str(tmp_path / "driver-saw-a-mid-segment-count")

    def pauses_midway(task: SegmentTask):
        segment, tally = task.segment, task.tally
        forward = render_tasks.reporter(tally, segment.index, segment.frame_count)

        def on_frame(frames_done):
            forward(frames_done)
            if frames_done == segment.frame_count // 2:
                ray.get(tally.report(segment.index, frames_done))
                deadline = time.monotonic() + DEADLINE_S
                while not os.path.exists(seen_mid):
                    assert time.monotonic() < deadline, "the driver never reported a mid-segment count"
                    time.sleep(0.05)

        encoded = encode_segment(task.source, segment, task.spec, task.info, on_frame)
        return render_tasks.SegmentSummary.of(encoded), encoded

    class Watching(Hooks):
        async def progress(self, report: RenderProgress) -> None:
            await super().progress(report)
            if report.phase == "rendering" and 0 < report.frames_done < report.frames_total:
                open(seen_mid, "w").close()

    monkeypatch.setattr(
        task_calls, "segment_task", task_calls.RemoteTask(pauses_midway, num_returns=2, **task_calls.TASK_OPTIONS)
    )
    job = short_clip_job(media[0], RenderSpec("mp4", "720p"), str(tmp_path / "out" / "final.mp4"), workers=1)
    hooks = Watching()
    stats = render(job, hooks)
    mid = [r for r in hooks.progress_calls if r.phase == "rendering" and 0 < r.frames_done < stats.frame_count]
    assert mid, "no report between the first and the last frame"
    assert hooks.progress_calls[-1].frames_done == stats.frame_count


@pytest.mark.parametrize("fidelity", [True, False])
def test_the_quality_check_comes_back_with_the_render(cluster, media, tmp_path, fidelity):
    """With the check (as a server asks for it): its report on the run, one fidelity sample a second when asked for
    (VIDFORGE_QC_FIDELITY) and none otherwise, and its contact sheet stored; a clean clip passes."""
    sheet = tmp_path / "contact-sheet.jpg"
    job = replace(
        short_clip_job(media[0], RenderSpec("mp4", "720p"), str(tmp_path / "final.mp4"), workers=2),
        qc=QcThresholds(),
        contact_sheet_path=str(sheet),
        qc_fidelity=fidelity,
    )
    run = RenderRun(job, Hooks())
    asyncio.run(asyncio.wait_for(run.run(), DEADLINE_S * 3))
    assert run.qc is not None and run.qc.output_frames == run.qc.source_frames == SECONDS * FPS
    if fidelity:
        assert run.qc.fidelity is not None and run.qc.fidelity.frames_compared >= SECONDS
    else:
        assert run.qc.fidelity is None
    assert sheet.read_bytes()[:2] == b"\xff\xd8"  # a JPEG


@pytest.mark.parametrize("output_format", ["mp4", "webm"])
def test_a_ladder_is_cut_on_its_keyframes_and_stored_beside_the_file(cluster, media, tmp_path, output_format):
    """A job with a streaming ladder: its segments start on the ladder's keyframe grid, each encodes the rungs beside
    the file's picture, and the mux stores the stream under the job's prefix, its audio AAC whatever the file's."""
    ladder = LadderSpec(("720p", "360p"), segment_s=1.0)
    out = tmp_path / f"final.{output_format}"
    job = replace(
        short_clip_job(media[0], RenderSpec(output_format, "720p"), str(out), workers=3),
        ladder=ladder,
        stream_prefix=str(tmp_path / "stream"),
    )
    run = RenderRun(job, Hooks())
    stats = asyncio.run(asyncio.wait_for(run.run(), DEADLINE_S * 3))
    assert stats.frame_count == decode_all(str(out), keep="none").frame_count == SECONDS * FPS  # the file, as ever
    starts = np.cumsum([0] + [s.frame_count for s in run.segment_stats])[:-1]
    assert len(starts) == 3 and all(start % FPS == 0 for start in starts), starts  # a keyframe a second
    assert run.stream is not None and run.stream.directory == job.stream_prefix
    assert sorted(p.name for p in (tmp_path / "stream").iterdir()) == sorted(run.stream.files)
    for rendition in run.stream.renditions:
        with av.open(str(tmp_path / "stream" / rendition.playlist)) as played:
            if rendition.name == "audio":
                assert played.streams.audio[0].codec_context.name == "aac"
                continue
            assert len(list(played.decode(video=0))) == SECONDS * FPS
    assert [r.name for r in run.stream.renditions] == [*ladder.rungs, "audio"]


def test_a_render_that_fails_after_its_stream_was_stored_leaves_neither(cluster, media, tmp_path, monkeypatch):
    """The stream is stored before the file; a run that fails after that (here its mux, once both are stored)
    removes both, as it removes the file."""

    def fails_once_stored(task: render_tasks.MuxTask, audio):
        render_tasks.mux_stored_segments(task, audio)
        raise RuntimeError("the mux failed after storing")

    failing = task_calls.RemoteTask(fails_once_stored, **{**task_calls.TASK_OPTIONS, "num_cpus": 0, "max_retries": 0})
    monkeypatch.setattr(task_calls, "_mux_task", failing)
    job = replace(
        short_clip_job(media[0], RenderSpec("mp4", "720p"), str(tmp_path / "final.mp4"), workers=2),
        ladder=LadderSpec(("360p",), segment_s=1.0),
        stream_prefix=str(tmp_path / "stream"),
    )
    with pytest.raises(RuntimeError, match="after storing"):
        render(job, Hooks())
    assert not (tmp_path / "final.mp4").exists()
    assert not (tmp_path / "stream").exists()


@pytest.mark.parametrize(("workers", "threads"), [(2, 1), (1, 2)])
def test_segments_encode_with_the_threads_their_plan_leaves_them(
    cluster, media, tmp_path, monkeypatch, workers, threads
):
    """As many segments as CPUs: one encoder thread each (a second only costs CPU); one segment on two CPUs: two
    threads. Fixed in the spec every segment (and a retry of it) gets, so the bytes do not depend on the node."""

    def records_threads(task: SegmentTask):
        Path(tmp_path, f"threads-{task.segment.index}").write_text(str(task.spec.segment_threads))
        return render_tasks.encode_segment_parts(task)

    monkeypatch.setattr(
        task_calls, "segment_task", task_calls.RemoteTask(records_threads, num_returns=2, **task_calls.TASK_OPTIONS)
    )
    job = short_clip_job(media[0], RenderSpec("mp4", "720p"), str(tmp_path / "final.mp4"), workers=workers)
    run = RenderRun(job, Hooks())
    asyncio.run(asyncio.wait_for(run.run(), DEADLINE_S * 3))
    assert [int(Path(tmp_path, f"threads-{s.index}").read_text()) for s in run.segment_stats] == [threads] * workers
    assert probe(job.out_path).frame_count == SECONDS * FPS
    assert "plan" in run.stages


def test_segment_worker_death_is_retried_to_identical_bytes(clean, media, tmp_path, monkeypatch):
    marker = str(tmp_path / "died-once")

    def dies_midway_on_first_attempt(task: SegmentTask):
        segment = task.segment
        if segment.index == 1 and not os.path.exists(marker):

            def die_at_half(frames_done):
                if frames_done == segment.frame_count // 2:
                    ray.get(task.tally.report(segment.index, frames_done))  # these frames surely counted
                    open(marker, "w").close()
                    os._exit(1)  # the worker process dies: Ray's max_retries, not an exception retry

            encode_segment(task.source, segment, task.spec, task.info, die_at_half)
        return render_tasks.encode_segment_parts(task)

    faulty = task_calls.RemoteTask(dies_midway_on_first_attempt, num_returns=2, **task_calls.TASK_OPTIONS)
    monkeypatch.setattr(task_calls, "segment_task", faulty)
    job = job_for(media, tmp_path / "out")
    hooks = Hooks()
    stats = render(job, hooks)

    assert os.path.exists(marker), "the segment task never died"
    with open(job.out_path, "rb") as retried, open(clean[3][0].out_path, "rb") as first:
        assert retried.read() == first.read()
    done = [r.frames_done for r in hooks.progress_calls]
    assert done == sorted(done) and max(done) == stats.frame_count  # the retried half is not counted twice


@pytest.mark.anyio
async def test_cancel_mid_render_stops_tasks_and_leaves_no_output(cluster, media, tmp_path):
    job = job_for(media, tmp_path / "out")
    hooks = Hooks(approve=None)  # the approval never comes, so the render is surely still running
    task = asyncio.ensure_future(run_render(job, hooks))
    await asyncio.wait_for(hooks.previewed.wait(), DEADLINE_S)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, DEADLINE_S)
    assert time.monotonic() - started < task_calls.CANCEL_WAIT_S + 20  # bounded, however long approval takes
    assert os.listdir(tmp_path / "out") == ["preview.png"]  # no output, no staging leftovers
    wait_until(all_cpus_free, "the cancelled segment tasks to release their CPUs")


@pytest.mark.anyio
async def test_cancel_while_encoding_without_watermark(cluster, media, tmp_path):
    job = short_clip_job(media[0], RenderSpec("mp4", "720p"), str(tmp_path / "out" / "final.mp4"), workers=3)
    hooks = Hooks()
    task = asyncio.ensure_future(run_render(job, hooks))
    await asyncio.wait_for(hooks.progressed.wait(), DEADLINE_S)  # frame 0: the segments are being sent
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, DEADLINE_S)
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
    # The kernel's own class (its "cannot open" kind, Damaged), not Ray's wrapper around it.
    assert type(in_task.value) is Damaged and in_task.value.reason
    assert not os.path.exists(tmp_path / "b.mp4")


def hold_segments_until_the_gate(monkeypatch, tmp_path) -> tuple[Path, Path]:
    """(gate, held): every segment that starts before the file `gate` exists marks itself in the folder `held` and
    waits for it, so the renders planned meanwhile queue behind those segments whatever the machine's speed."""
    gate = tmp_path / "gate-open"
    held = tmp_path / "held"
    held.mkdir()

    def waits_for_the_gate(task: SegmentTask):
        if not gate.exists():
            (held / str(task.segment.index)).touch()
            deadline = time.monotonic() + DEADLINE_S
            while not gate.exists():
                assert time.monotonic() < deadline, "the gate never opened"
                time.sleep(0.05)
        return render_tasks.encode_segment_parts(task)

    monkeypatch.setattr(
        task_calls, "segment_task", task_calls.RemoteTask(waits_for_the_gate, num_returns=2, **task_calls.TASK_OPTIONS)
    )
    return gate, held


@pytest.mark.anyio
async def test_renders_share_the_cpus_fairly_and_each_is_cut_for_the_whole_cluster(
    cluster, media, tmp_path, monkeypatch
):
    """Four renders on one pool (2 CPUs). The first one's two segments hold both CPUs until every other render is
    queued, so the start order that follows is the scheduler's alone, whatever the machine's speed: principal
    a's renders in arrival order, principal b's render served in turn between them rather than after them. Every
    render is cut in two, one segment per CPU, busy or not (the queue gives out the turns): the last render of a
    batch then takes both CPUs. Each gets one encoder thread (every CPU has a segment), so all make the same frames."""
    gate, held = hold_segments_until_the_gate(monkeypatch, tmp_path)
    pool = RenderPool()

    class Queued(Hooks):
        """Its `queued` event fires at the first rendering report, right after which the render's tasks are
        queued (the driver does not yield in between)."""

        def __init__(self) -> None:
            super().__init__()
            self.queued = asyncio.Event()

        async def progress(self, report: RenderProgress) -> None:
            await super().progress(report)
            if report.phase == "rendering":
                self.queued.set()

    def run_for(name: str, principal: str) -> RenderRun:
        job = short_clip_job(
            media[0], RenderSpec("mp4", "720p"), str(tmp_path / name / "final.mp4"), principal=principal
        )
        return RenderRun(job, Queued(), pool)

    runs = {"a1": run_for("a1", "a"), "a2": run_for("a2", "a"), "a3": run_for("a3", "a"), "b1": run_for("b1", "b")}
    try:
        tasks = [asyncio.ensure_future(runs["a1"].run())]
        deadline = time.monotonic() + DEADLINE_S
        while len(os.listdir(held)) < 2:  # both CPUs held by a1's segments (its audio rides with the first)
            assert time.monotonic() < deadline, "the first render's segments never started"
            await asyncio.sleep(0.05)
        for name in ("a2", "a3", "b1"):
            tasks.append(asyncio.ensure_future(runs[name].run()))
            await asyncio.wait_for(runs[name].hooks.queued.wait(), DEADLINE_S)
        gate.touch()
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE_S * 3)
    finally:
        pool.close()
    # Start order of the audio and segment tasks (the muxes take their renders' own CPUs in between): a1, planned
    # on an idle pool, starts its audio beside its first segment, on that CPU (one start), then its second; the
    # others, planned while work waits, queue their audio first. Then principals a and b alternate, a's renders
    # first come first, until only a's last render is left: its three tasks run back to back.
    started = sorted({(order, name) for name, run in runs.items() for order in run.start_order})
    assert [name for _, name in started] == ["a1", "a1", "a2", "b1", "a2", "b1", "a2", "b1", "a3", "a3", "a3"]
    assert all(run.audio_stats for run in runs.values())  # every render's audio ran
    assert {name: len(run.segment_stats) for name, run in runs.items()} == {"a1": 2, "a2": 2, "a3": 2, "b1": 2}

    info = probe(media[0])
    idle, busy = decode_all(runs["a1"].job.out_path), decode_all(runs["b1"].job.out_path)
    assert idle.frame_count == busy.frame_count == info.frame_count
    assert all(np.array_equal(a, b) for a, b in zip(idle.frames, busy.frames))  # planned alone or in a queue
    wait_until(all_cpus_free, "every task of the four renders to release its CPU")


@pytest.mark.anyio
async def test_a_render_queued_behind_others_has_its_preview_made_by_a_task_meanwhile(
    cluster, media, tmp_path, monkeypatch
):
    """A render whose segments wait in the queue (another render holds both CPUs until its preview is out) does not
    keep its reviewer waiting for its turn: past STILL_START_WAIT_S a picture task makes the preview and the
    source's first frame, the same pictures the segments would have."""
    gate, held = hold_segments_until_the_gate(monkeypatch, tmp_path)
    monkeypatch.setattr(approval_gate, "STILL_START_WAIT_S", 0.5)
    pool = RenderPool()
    info = probe(media[0])
    first = short_clip_job(media[0], RenderSpec("mp4", "720p"), str(tmp_path / "first" / "final.mp4"), workers=2)
    frame_path = str(tmp_path / "source-frame.png")
    queued = replace(job_for(media, tmp_path, workers=2), source_info=info, source_frame_path=frame_path)
    run = RenderRun(queued, Hooks(), pool)

    try:
        tasks = [asyncio.ensure_future(RenderRun(first, Hooks(), pool).run())]
        deadline = time.monotonic() + DEADLINE_S
        while len(os.listdir(held)) < 2:
            assert time.monotonic() < deadline, "the first render's segments never started"
            await asyncio.sleep(0.05)
        tasks.append(asyncio.ensure_future(run.run()))
        await asyncio.wait_for(run.hooks.previewed.wait(), DEADLINE_S)  # while the CPUs are still held
        gate.touch()
        await asyncio.wait_for(asyncio.gather(*tasks), DEADLINE_S * 3)
    finally:
        pool.close()
    assert run.stills_from == "task"
    assert open(queued.preview_path, "rb").read() == render_preview(media[0], info, queued.spec)
    unmarked = replace(queued.spec, watermark=None)
    assert open(frame_path, "rb").read() == render_preview(media[0], info, unmarked, at=0.0)
    assert probe(queued.out_path).frame_count == info.frame_count
    wait_until(all_cpus_free, "every task of both renders to release its CPU")


def test_worker_side_modules_import_none_of_the_server():
    """What a fresh render or parser worker imports to run its task: the task bodies and the parser, never the MCP
    layer, the settings model or the rest of serve_app (each would add its import time to every worker's start)."""
    code = (
        "import sys, serve_app.rendering._render_tasks, serve_app.media.media_probe; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('serve_app', 'mcp', 'mcp_protocol', 'actors', 'starlette', 'pydantic_settings'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    packages = ["serve_app", "serve_app.media", "serve_app.rendering"]  # their __init__ files define nothing
    assert loaded == sorted([*packages, "serve_app.media.media_probe", "serve_app.rendering._render_tasks"])


def test_every_render_job_is_cut_no_finer_than_the_server_says(media, tmp_path):
    """VIDFORGE_MIN_SEGMENT_S reaches the job a task's render runs (and so its plan); unset, MIN_SEGMENT_S."""
    config = Config(data_dir=str(tmp_path / "data"), min_segment_s=SEGMENT_S)
    assets = AssetStore(config)
    request = {"source_asset_uri": assets.add_file(media[0], "alice").uri, "output_format": "mp4", "resolution": "720p"}
    rec = TaskRecord(
        task_id="task_m",
        principal="alice",
        request=RenderRequest.model_validate(request),
        status="working",
        status_message="Queued.",
        created_at_ms=0,
        last_updated_at_ms=0,
        ttl_ms=86_400_000,
        poll_interval_ms=1000,
    )
    assert RenderJob.of_record(rec, config, assets).min_segment_s == SEGMENT_S
    default = Config(data_dir=config.data_dir)
    assert RenderJob.of_record(rec, default, assets).min_segment_s == MIN_SEGMENT_S == 5.0
