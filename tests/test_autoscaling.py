"""The elastic cluster (issue 20), on Ray's own autoscaler: a head that takes no render work and worker types of min 0
(tests/autoscaling_cluster.py, Ray's fake multi-node provider: each node it starts is a real raylet on this machine).

The render driver runs in this process against that cluster, as tests/test_render_driver.py runs it (no HTTP), with
the media in a bucket (a real S3 server on loopback). The head, and so every node the autoscaler starts, has no AWS_*
and no VIDFORGE_* variable: the bucket's location and credentials reach the workers only with the job
(VIDFORGE_SHIP_STORAGE_CREDENTIALS, serve_app.launch._job_env).

- a batch of renders makes CPU nodes appear (Ray's node table), its segments run on them, the outputs have every
  frame, the standing request is withdrawn once the queue drains, and the nodes are removed (idle 6 s);
- one tenant's flood of renders asks the autoscaler for no more than its cap (the demand the scheduler computed, and
  the request the autoscaler reads from the GCS);
- under VIDFORGE_GPU=require a render starts the GPU node type (a declared `GPU`, no device): its codecs are chosen
  there (NVENC and NVDEC do not open: libx264, software decoding) and its segments run there, on the node's CPU;
- a supervisor that starts withdraws the request a dead one left standing.

Waits are on conditions with generous deadlines; the figures printed are what this machine measured.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from ray._private import ray_constants
from ray.autoscaler.sdk import request_resources
from ray.experimental.internal_kv import _internal_kv_get

from mcp_protocol.progress import RenderProgress
from media_store._s3 import S3MediaStore
from render_kernels.probe import probe
from render_kernels.spec import RenderSpec
from serve_app._config import Config
from serve_app.launch._job_env import job_runtime_env
from serve_app.rendering._autoscaling import ElasticCluster, ResourceDemand
from serve_app.rendering._render_driver import RenderRun
from serve_app.rendering._render_job import RenderJob
from serve_app.rendering._render_pool import RenderPool
from serve_app.rendering._scheduling import SegmentScheduler
from tests.autoscaling_cluster import HEAD_IP, FakeAutoscalingCluster, cpu_worker, gpu_worker
from tests.harness import wait_until
from tests.media import decode_all, make_clip

pytestmark = [pytest.mark.ray, pytest.mark.solo]

SECONDS = 4.0  # two segments of 2 s (a keyframe every second)
SEGMENT_S = 2.0  # the shortest segment here (VIDFORGE_MIN_SEGMENT_S), so that the clip is cut in two
FPS = 15
CPU_NODES = 2
NODE_DEADLINE_S = 120  # generous: a loaded 2-core machine starts a raylet in seconds, but not always
RENDER_DEADLINE_S = 240
PREFIX = "autoscale"


class Hooks:
    """Records the progress reports (their placement notes); approves nothing (no watermark here)."""

    def __init__(self) -> None:
        self.reports: list[RenderProgress] = []

    async def progress(self, report: RenderProgress) -> None:
        self.reports.append(report)

    async def preview_ready(self, preview_path: str) -> bool:
        raise AssertionError("no watermark, no preview")


@pytest.fixture(scope="module")
def bucket_env(s3_server) -> Iterator[dict[str, str]]:
    """This process reaches the bucket (it uploads the sources, reads the outputs) with the server's variables."""
    saved = {name: os.environ.get(name) for name in s3_server.env}
    os.environ.update(s3_server.env)
    yield s3_server.env
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="module")
def cluster(bucket_env) -> Iterator[FakeAutoscalingCluster]:
    # Short, outside pytest's tmp tree: Ray puts unix sockets under the temp dir (108-byte path limit).
    root = Path(tempfile.mkdtemp(prefix="vfa-", dir="/tmp"))
    workers = {"cpu": cpu_worker(cpus=1, max_workers=CPU_NODES), "gpu": gpu_worker(cpus=1, max_workers=1)}
    fake = FakeAutoscalingCluster(root, workers, idle_timeout_minutes=0.1)
    config = Config(storage_url="s3://x/y", ship_storage_credentials=True)
    try:
        fake.start()
        ray.init(
            address=fake.address,
            _node_ip_address=HEAD_IP,  # the head's raylet: worker nodes are scaled away
            namespace=f"test-autoscaling-{uuid.uuid4().hex}",
            runtime_env=job_runtime_env(config, bucket_env),  # what a `vidforge serve` job ships to every worker
            log_to_driver=False,
        )
        yield fake
    finally:
        ray.shutdown()
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def media(cluster, s3_server, tmp_path_factory) -> S3MediaStore:
    """The bucket, with the source in it."""
    store = S3MediaStore(f"s3://{s3_server.bucket}/{PREFIX}")
    clip = make_clip(str(tmp_path_factory.mktemp("autoscale") / "source.mp4"), seconds=SECONDS, fps=FPS, gop=FPS)
    store.put_file(clip, "source.mp4")
    return store


def elastic_pool(cluster: FakeAutoscalingCluster, max_principal_cpus: int = 0) -> RenderPool:
    config_path = cluster.root / "autoscaling.json"
    return RenderPool(SegmentScheduler(elastic=ElasticCluster.of(str(config_path), max_principal_cpus, 0)))


def job(media: S3MediaStore, principal: str, gpu: str = "off") -> RenderJob:
    info = probe(media.media("source.mp4"))
    out = f"out/{uuid.uuid4().hex}.mp4"
    return RenderJob(
        media.media("source.mp4"),
        RenderSpec("mp4", "720p"),
        out,
        media=media,
        principal=principal,
        source_info=info,
        gpu=gpu,
        gpu_wait_s=0,
        min_segment_s=SEGMENT_S,
    )


def workers_up(resource: str = "CPU") -> list[dict]:
    return [n for n in ray.nodes() if n["Alive"] and n["Resources"].get(resource, 0) > 0]


def wait_for_no_gpu_node(cluster: FakeAutoscalingCluster) -> None:
    """Until no GPU node is up; on a timeout, with what the autoscaler decided and what it was asked for."""
    try:
        wait_until(lambda: not workers_up("GPU"), NODE_DEADLINE_S, interval=0.5, message="no GPU node up")
    except AssertionError as timeout:
        nodes = [(n["NodeID"][-8:], n["Resources"]) for n in ray.nodes() if n["Alive"]]
        raise AssertionError(
            f"{timeout}; standing request {standing_request()}; nodes up {nodes}; the autoscaler's log ends:\n"
            f"{cluster.monitor_log()[-6000:]}"
        ) from None


def standing_request() -> list[dict]:
    """The request the v1 autoscaler reads from the GCS (`request_resources` writes it there)."""
    raw = _internal_kv_get(ray_constants.AUTOSCALER_RESOURCE_REQUEST_CHANNEL)
    return json.loads(raw) if raw else []


def frames_of(media: S3MediaStore, key: str, tmp_path: Path) -> int:
    local = tmp_path / key.replace("/", "_")
    local.write_bytes(media.get_bytes(key))
    return decode_all(str(local), keep="none").frame_count


def placement_of(run: RenderRun) -> str:
    """The last placement note the render reported (its status message's, through the registry)."""
    hooks = run.hooks
    assert isinstance(hooks, Hooks)
    return [report.placement for report in hooks.reports if report.placement][-1]


async def render_all(runs: list[RenderRun]) -> list:
    return await asyncio.wait_for(asyncio.gather(*(run.run() for run in runs)), RENDER_DEADLINE_S)


async def withdrawn(pool: RenderPool) -> None:
    """Until the pool's standing request is withdrawn. The scheduler's tick withdraws it within a second of the
    queue draining, on the loop the renders ran on: leaving that loop at once (as `asyncio.run` does when its
    coroutine returns) would cancel the tick and leave the last demand standing, and the autoscaler keeps the
    nodes a standing request needs, idle or not (a GPU node among them, which the next test waits to see go)."""
    elastic = pool.scheduler.elastic
    assert elastic is not None
    deadline = time.monotonic() + NODE_DEADLINE_S
    while elastic.publisher.published != ResourceDemand() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)


async def render_and_drain(pool: RenderPool, runs: list[RenderRun]) -> list:
    """`runs` rendered, and the standing request then withdrawn."""
    done = await render_all(runs)
    await withdrawn(pool)
    return done


def test_a_batch_scales_out_runs_on_the_new_nodes_and_scales_back_in(cluster, media, tmp_path):
    assert not workers_up(), "every worker type starts at 0 nodes"
    pool = elastic_pool(cluster)
    jobs = [job(media, principal) for principal in ("alice", "alice", "bob", "bob")]
    runs = [RenderRun(j, Hooks(), pool) for j in jobs]
    samples: list[tuple[float, int, float]] = []  # (s since the batch, CPU nodes up, CPUs requested)

    async def batch() -> list:
        rendering = asyncio.ensure_future(render_and_drain(pool, runs))
        while not rendering.done():
            samples.append((time.monotonic() - started, len(workers_up()), pool.scheduler.demand().cpus))
            await asyncio.sleep(0.5)
        return await rendering

    started = time.monotonic()
    try:
        results = asyncio.run(batch())
    finally:
        pool.close()
    finished = time.monotonic() - started

    # Nodes appeared for the queue (none was up), each render has every frame, and its segments ran on them.
    first_node_s = next(t for t, up, _ in samples if up)
    assert max(up for _, up, _ in samples) >= 2, samples
    assert max(cpus for _, _, cpus in samples) >= 2, samples  # the queue was asked for, beyond the first node
    head = next(n["NodeID"] for n in ray.nodes() if n["Resources"].get("node:__internal_head__"))
    for run, result in zip(runs, results, strict=True):
        assert frames_of(media, result.path, tmp_path) == round(SECONDS * FPS)
        nodes = {s.node for s in run.segment_stats}
        assert nodes and head not in nodes, "no render work on the head"
        assert placement_of(run).startswith("Placement: CPU nodes; segments finished: ")
    ran_on = {s.node for run in runs for s in run.segment_stats}

    # Drained: the standing request is withdrawn, and the idle nodes are removed.
    assert pool.scheduler.elastic.publisher.published == ResourceDemand()
    assert standing_request() == []
    drained = time.monotonic()
    wait_until(lambda: not workers_up(), NODE_DEADLINE_S, interval=0.5, message="the idle worker nodes to go")
    removed_s = time.monotonic() - drained
    print(
        f"\nautoscale: 4 renders, first CPU node up {first_node_s:.1f} s after the batch, up to "
        f"{max(up for _, up, _ in samples)} nodes, segments on {len(ran_on)} nodes, batch done in {finished:.1f} s; "
        f"last node removed {removed_s:.1f} s after the queue drained (idle_timeout 6 s)"
    )


def test_one_tenants_flood_asks_for_no_more_than_its_cap(cluster, media):
    cap = 2
    pool = elastic_pool(cluster, max_principal_cpus=cap)
    runs = [RenderRun(job(media, "flood"), Hooks(), pool) for _ in range(20)]
    seen: list[tuple[float, int]] = []

    async def flood() -> None:
        rendering = [asyncio.ensure_future(run.run()) for run in runs]
        deadline = time.monotonic() + NODE_DEADLINE_S
        while len(seen) < 10 and time.monotonic() < deadline:  # ten samples once the queue holds the flood
            await asyncio.sleep(0.5)
            if pool.scheduler.demand().bundles:
                seen.append((pool.scheduler.demand().cpus, len(standing_request())))
        for task in rendering:
            task.cancel()
        await asyncio.gather(*rendering, return_exceptions=True)
        await withdrawn(pool)

    try:
        asyncio.run(flood())
    finally:
        pool.close()
    assert len(seen) == 10, seen
    assert all(cpus <= cap and requested <= cap for cpus, requested in seen), seen
    assert max(cpus for cpus, _ in seen) == cap  # asked for: exactly its cap, not 20 renders' worth
    assert standing_request() == []  # cancelled: withdrawn
    print(f"\nflood: 20 renders of one principal, cap {cap}: (scheduler CPUs, requested bundles) {seen}")


def test_auto_runs_on_cpu_nodes_when_no_gpu_node_comes_within_the_wait(cluster, media, tmp_path):
    """VIDFORGE_GPU=auto on a cluster whose autoscaler offers a GPU node type but has none up: a render the GPU path
    would serve waits VIDFORGE_GPU_WAIT_S (0 here) for one, then runs on CPU nodes and says so."""
    wait_for_no_gpu_node(cluster)
    pool = elastic_pool(cluster)
    run = RenderRun(job(media, "dave", gpu="auto"), Hooks(), pool)
    try:
        result = asyncio.run(render_and_drain(pool, [run]))[0]
    finally:
        pool.close()
    assert frames_of(media, result.path, tmp_path) == round(SECONDS * FPS)
    assert standing_request() == []
    # Software codecs, chosen without a GPU node (the segments may still use a GPU node's CPUs if one starts).
    assert placement_of(run).startswith("Placement: CPU nodes (no GPU node started within VIDFORGE_GPU_WAIT_S, 0 s)")


def test_a_render_that_requires_a_gpu_starts_the_gpu_node_type(cluster, media, tmp_path):
    wait_for_no_gpu_node(cluster)
    pool = elastic_pool(cluster)
    run = RenderRun(job(media, "carol", gpu="require"), Hooks(), pool)
    started = time.monotonic()
    try:
        result = asyncio.run(render_and_drain(pool, [run]))[0]
    finally:
        pool.close()
    gpu_nodes = {n["NodeID"] for n in ray.nodes() if n["Resources"].get("GPU", 0) > 0}  # alive or since removed
    assert gpu_nodes, "a GPU node was started"
    assert frames_of(media, result.path, tmp_path) == round(SECONDS * FPS)
    assert standing_request() == []
    # The segments ran on the GPU node; the codecs were chosen there, and with no device behind the declared GPU
    # neither NVENC nor NVDEC opened: the node's CPU encoded (libx264) and decoded.
    assert {s.node for s in run.segment_stats} <= gpu_nodes
    placement = placement_of(run)
    assert placement.startswith("Placement: GPU nodes (encoder libx264, software decoding); segments finished: ")
    print(f"\ngpu: render done {time.monotonic() - started:.1f} s after it asked; {placement}")


def test_a_supervisor_that_starts_withdraws_the_request_a_dead_one_left_standing(cluster):
    """A supervisor that died mid-batch (a crash, a redeploy) left its demand standing; the autoscaler would keep
    that many nodes up forever. Its successor's scheduler starts by withdrawing it: its own queue is empty until a
    render resumes, and a resumed render asks again."""
    request_resources(bundles=[{"CPU": 1.0}] * CPU_NODES)
    assert standing_request() == [{"CPU": 1.0}] * CPU_NODES
    pool = elastic_pool(cluster)
    try:
        assert standing_request() == []
        assert pool.scheduler.elastic.publisher.published == ResourceDemand()
    finally:
        pool.close()
