"""The scheduler's order and the planner's memory cap, as pure functions (no Ray; the dispatch on a real Ray is
tests/test_render_driver.py::test_renders_share_the_cpus_fairly_and_plan_for_the_free_ones)."""

from __future__ import annotations

from collections import Counter

import pytest

from render_kernels.plan import plan_segments
from render_kernels.source_info import SourceInfo
from serve_app.rendering._autoscaling import (
    CPU_BUNDLE,
    AutoscalerView,
    DemandCaps,
    DemandPublisher,
    ElasticCluster,
    ResourceDemand,
    bundle,
)
from serve_app.rendering._scheduling import FairQueue, SegmentScheduler
from tests.harness import REPO


def drain(queue: FairQueue) -> list:
    return [queue.pop() for _ in range(len(queue))]


def test_principals_take_turns_and_each_principals_renders_go_in_arrival_order():
    queue: FairQueue[str] = FairQueue()
    for item in ("a1.0", "a1.1", "a1.2"):
        queue.push("alice", "a1", item)
    for item in ("a2.0", "a2.1"):
        queue.push("alice", "a2", item)
    queue.push("bob", "b1", "b1.0")
    queue.push("bob", "b1", "b1.1")
    queue.push("carol", "c1", "c1.0")
    assert len(queue) == 8
    assert drain(queue) == ["a1.0", "b1.0", "c1.0", "a1.1", "b1.1", "a1.2", "a2.0", "a2.1"]
    with pytest.raises(IndexError):
        queue.pop()


def test_a_principal_arriving_later_is_served_at_the_next_turn_not_after_the_queue():
    queue: FairQueue[str] = FairQueue()
    for i in range(5):
        queue.push("alice", "long", f"long.{i}")
    assert queue.pop() == "long.0"
    queue.push("bob", "short", "short.0")  # bob arrives while alice has four segments waiting
    queue.push("bob", "short", "short.1")
    assert drain(queue) == ["long.1", "short.0", "long.2", "short.1", "long.3", "long.4"]


def test_a_principal_whose_queue_emptied_goes_to_the_back_when_it_returns():
    queue: FairQueue[str] = FairQueue()
    queue.push("alice", "a1", "a1.0")
    queue.push("bob", "b1", "b1.0")
    queue.push("bob", "b1", "b1.1")
    assert queue.pop() == "a1.0"  # alice's lane is now empty and gone
    queue.push("carol", "c1", "c1.0")
    queue.push("alice", "a2", "a2.0")
    assert drain(queue) == ["b1.0", "c1.0", "a2.0", "b1.1"]


def test_removing_a_render_keeps_the_others_in_place():
    queue: FairQueue[str] = FairQueue()
    queue.push("alice", "a1", "a1.0")
    queue.push("alice", "a2", "a2.0")
    queue.push("alice", "a2", "a2.1")
    queue.push("bob", "b1", "b1.0")
    assert queue.remove("alice", "a2") == ["a2.0", "a2.1"]
    assert queue.remove("alice", "a2") == [] and queue.remove("nobody", "x") == []
    assert len(queue) == 2
    assert queue.remove("bob", "b1") == ["b1.0"]  # bob's lane goes with his only render
    queue.push("bob", "b2", "b2.0")
    assert drain(queue) == ["a1.0", "b2.0"]


def source(duration_s: float, fps: float, keyframe_every_s: float, width: int = 3840, height: int = 2160) -> SourceInfo:
    times = tuple(i * keyframe_every_s for i in range(int(duration_s / keyframe_every_s)))
    return SourceInfo(
        path="x.mp4",
        duration_s=duration_s,
        fps=fps,
        frame_count=round(duration_s * fps),
        width=width,
        height=height,
        video_codec="h264",
        keyframe_times=times,
        audio=None,
    )


@pytest.mark.parametrize("seconds", [30, 60, 120, 600])
def test_segments_hold_at_most_max_frames_however_long_the_video(seconds):
    info = source(seconds, 30.0, 1.0)
    segments = plan_segments(info, 1, max_frames=300)
    assert max(s.frame_count for s in segments) <= 300
    assert len(segments) == seconds // 10  # no more segments than the cap needs
    assert sum(s.frame_count for s in segments) == info.frame_count
    assert [s.start_frame for s in segments] == [sum(x.frame_count for x in segments[:i]) for i in range(len(segments))]


def test_the_cap_adds_segments_only_where_the_width_leaves_them_too_long():
    info = source(60, 30.0, 1.0)
    assert len(plan_segments(info, 8, max_frames=300)) == 8  # already under the cap
    assert len(plan_segments(info, 2, max_frames=300)) == 6
    assert len(plan_segments(info, 2)) == 2


def test_the_minimum_segment_length_wins_over_the_cap():
    info = source(10, 240.0, 1.0)  # 2400 frames; a cap of 100 would mean 0.4 s segments
    segments = plan_segments(info, 1, min_segment_s=2.0, max_frames=100)
    assert len(segments) == 5 and all(s.frame_count >= 2.0 * info.fps for s in segments)


def test_sparse_keyframes_keep_segments_under_the_cap():
    sparse = source(60, 30.0, 30.0)  # keyframes at 0 and 30 s only: cuts fall between them, read from the last
    segments = plan_segments(sparse, 1, max_frames=300)
    assert max(s.frame_count for s in segments) <= 300 and sum(s.frame_count for s in segments) == 1800
    assert {s.keyframe_s for s in segments} == {0.0, 30.0}


GPU_BUNDLE = bundle({"CPU": 1, "GPU": 0.5})


def wanted(**tasks: int) -> dict:
    return {principal: Counter({CPU_BUNDLE: count}) for principal, count in tasks.items()}


def test_one_principals_flood_asks_for_no_more_than_its_cap():
    demand = ResourceDemand.of(wanted(alice=20), DemandCaps(principal_cpus=4, cluster_cpus=64))
    assert demand.bundles == (CPU_BUNDLE,) * 4 and demand.cpus == 4
    assert demand.request() == [{"CPU": 1.0}] * 4  # as request_resources(bundles=...) takes it


def test_the_cluster_cap_is_shared_in_turn_not_taken_by_whoever_queued_most():
    demand = ResourceDemand.of(wanted(alice=20, bob=2, carol=1), DemandCaps(principal_cpus=0, cluster_cpus=8))
    assert demand.cpus == 8  # alice gets what bob and carol leave: 5, bob 2, carol 1
    uncapped = ResourceDemand.of(wanted(alice=3, bob=2), DemandCaps(principal_cpus=0, cluster_cpus=64))
    assert uncapped.cpus == 5
    assert ResourceDemand.of({}, DemandCaps(0, 64)) == ResourceDemand()  # drained: the request withdrawn ([])


def test_gpu_shares_travel_in_the_bundles_and_count_their_cpu():
    demand = ResourceDemand.of({"alice": Counter({GPU_BUNDLE: 3})}, DemandCaps(principal_cpus=2, cluster_cpus=64))
    assert demand.request() == [{"CPU": 1.0, "GPU": 0.5}] * 2


def test_the_shipped_cluster_config_is_read_as_the_autoscaler_reads_it():
    view = AutoscalerView.from_cluster_config(str(REPO / "cluster.yaml"))
    assert {t.name for t in view.node_types} == {"cpu_worker", "gpu_worker"}  # the head is not a worker type
    assert view.offers_gpu
    assert view.max_cpus == 8 * 16  # max_workers 8 of the 16-CPU types, whichever come


def test_a_render_is_planned_for_the_cpus_the_cluster_can_grow_to_within_the_caps():
    view = AutoscalerView.from_cluster_config(str(REPO / "cluster.yaml"))
    fixed = SegmentScheduler(capacity=lambda: 2)
    assert fixed.plan_width("alice") == 2 == fixed.free_cpus()  # a fixed cluster: the CPUs up now
    elastic = SegmentScheduler(capacity=lambda: 2, elastic=ElasticCluster(view, DemandCaps(0, 24), DemandPublisher()))
    assert elastic.plan_width("alice") == 24
    capped = SegmentScheduler(capacity=lambda: 2, elastic=ElasticCluster(view, DemandCaps(6, 24), DemandPublisher()))
    assert capped.plan_width("alice") == 6
    assert ElasticCluster.of(None, 0, 0) is None  # no autoscaling config: a fixed cluster, no demand
    assert ElasticCluster.of(str(REPO / "cluster.yaml"), 4, 0).caps == DemandCaps(4, 128)
    assert ElasticCluster.of(str(REPO / "cluster.yaml"), 0, 1000).caps.cluster_cpus == 128  # never past the max
