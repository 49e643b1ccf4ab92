"""vidforge on a multi-node Ray cluster on one machine (issue 10 item 2): three `ray start` nodes with token
auth — a head that takes no render work and two one-CPU worker nodes, each with its own temp dir — and
`vidforge serve --ray-address` joining them, its media in an S3 bucket (a real S3 server on loopback), so the
nodes share no files. A render's segment tasks run on both worker nodes and the output is exact; a worker node
lost mid-render costs nothing but time: its segment runs again on the other node and the render completes,
exact, with every task accounted for.

Where each task ran is read from Ray's state API (every attempt of every task, with its node), never from
vidforge itself. The tests run in file order: the second one ends with one worker node left, the third
replaces `vidforge serve` with the Serve config file (deploy/serve.yaml) deployed by `serve deploy`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
import yaml

from render_kernels.encoders import choose_video_encoder
from render_kernels.mux import mux_segments
from render_kernels.plan import plan_segments
from render_kernels.probe import probe
from render_kernels.spec import RenderSpec
from render_kernels.video import encode_segment
from serve_app.rendering._render_tasks import encode_segment_parts
from tests.cluster import LocalCluster
from tests.harness import REPO, START_TIMEOUT_S, TERMINAL, ServerProcess, Wire, free_port, poll_task, upload, wait_until
from tests.media import decode_all, make_clip, psnr_y

pytestmark = pytest.mark.ray

SECONDS = 10.0  # two segments of 5 s (keyframe every second), long enough to catch one in flight
FPS = 30
WORKERS = ("worker1", "worker2")
SEGMENT_TASK = encode_segment_parts.__name__
IN_FLIGHT_TIMEOUT_S = 120
PREFIX = "cluster"  # of the media in the bucket


@pytest.fixture(scope="module")
def cluster(s3_server):
    # Short, outside pytest's tmp tree: Ray puts unix sockets under each node's temp dir (108-byte path limit).
    root = Path(tempfile.mkdtemp(prefix="vfc-", dir="/tmp"))
    local = LocalCluster(root, node_env=s3_server.env)  # every node reaches the bucket, as cluster.yaml's do
    try:
        yield local.start(worker_cpus=(1, 1))
    finally:
        local.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server(cluster, s3_server, tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    env = {
        **cluster.env,
        "RAY_ADDRESS": cluster.address,
        "VIDFORGE_STATE_DIR": str(root / "state"),
        "VIDFORGE_STORAGE_URL": f"s3://{s3_server.bucket}/{PREFIX}",
    }
    process = ServerProcess(root / "data", env=env)
    try:
        yield process.start()
    finally:
        process.stop()


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """The source, and the same render made in one segment, in this process (the kernels need no Ray)."""
    root = tmp_path_factory.mktemp("cluster-media")
    source = make_clip(str(root / "source.mp4"), seconds=SECONDS, fps=FPS, gop=FPS)
    info = probe(source)
    assert len(plan_segments(info, len(WORKERS))) == 2, "the source must split into one segment per worker"
    spec = RenderSpec("mp4", "720p", video_encoder=choose_video_encoder("mp4"))
    whole = plan_segments(info, 1)
    encoded = encode_segment(source, whole[0], spec, info)
    reference = mux_segments([encoded], None, "mp4", str(root / "one.mp4"), info.fps)
    return source, decode_all(reference.path)


def segment_attempts(cluster: LocalCluster, seen: set[str]) -> dict[str, list[tuple[str | None, str]]]:
    """(node, state) of every attempt of every segment task the cluster ran, by task, except the tasks in
    `seen` (earlier renders)."""
    runs: dict[str, list[tuple[str | None, str]]] = {}
    for attempt in cluster.state("tasks", func_or_class_name=SEGMENT_TASK):
        if attempt["task_id"] not in seen:
            runs.setdefault(attempt["task_id"], []).append((cluster.node_name(attempt["node_id"]), attempt["state"]))
    return runs


def finished_segments(cluster: LocalCluster, seen: set[str]) -> dict[str, list[tuple[str | None, str]]]:
    """`segment_attempts` once the state API shows every segment finished: it hears of task events in batches,
    so a render can complete before the last of them arrive."""

    def settled():
        runs = segment_attempts(cluster, seen)
        return runs if len(runs) == 2 and all(any(s == "FINISHED" for _, s in r) for r in runs.values()) else None

    return wait_until(settled, 60, interval=0.5, message="the state API to show both segments finished")


def render(server: ServerProcess, source: str) -> tuple[Wire, str]:
    wire = Wire(server.url, tasks=True)
    args = {"source_asset_uri": upload(server, source), "output_format": "mp4", "resolution": "720p"}
    return wire, wire.tool("vidforge_render_video", args)["taskId"]


def check_output(server: ServerProcess, s3_server, task_id: str, reference, tmp_path: Path) -> None:
    """The video is in the bucket; as any client downloads it, it has every frame and matches the one-segment
    render."""
    # A redirect to the bucket (direct transfers), which a client follows.
    response = httpx.get(f"{server.base}/artifacts/{task_id}/final.mp4", follow_redirects=True, timeout=120)
    assert response.status_code == 200, response.text
    assert response.content == s3_server.get(f"{PREFIX}/artifacts/{task_id}/final.mp4")
    (tmp_path / "final.mp4").write_bytes(response.content)
    output = decode_all(str(tmp_path / "final.mp4"))
    assert output.frame_count == reference.frame_count == round(SECONDS * FPS)
    assert (output.width, output.height) == (1280, 720)
    scores = [psnr_y(a, b) for a, b in zip(output.frames, reference.frames, strict=True)]
    assert min(scores) >= 40, f"worst frame {scores.index(min(scores))}: {min(scores):.1f} dB"


def test_segments_run_on_both_worker_nodes_and_the_output_is_exact(cluster, server, s3_server, media, tmp_path):
    source, reference = media
    seen = set(segment_attempts(cluster, set()))
    started = time.monotonic()
    wire, task_id = render(server, source)
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    elapsed = time.monotonic() - started
    assert done["status"] == "completed" and done["result"]["isError"] is False, done

    runs = finished_segments(cluster, seen)
    ran_on = sorted(str(node) for attempts in runs.values() for node, _ in attempts)
    assert ran_on == list(WORKERS), runs  # one segment on each worker, none on the head, each ran once
    check_output(server, s3_server, task_id, reference, tmp_path)
    assets = [key for key in s3_server.object_keys(f"{PREFIX}/assets/") if key.endswith("/meta.json")]
    assert assets, "no asset in the bucket"
    assert not [p for p in server.data_dir.rglob("*") if p.is_file()], "media on the server's disk"
    print(
        f"\ncluster render: 3 nodes (head + {len(WORKERS)} x 1 CPU), segments on {ran_on}, "
        f"{SECONDS:g} s 320x180 source -> 720p in {elapsed:.1f} s (upload to completed)"
    )


def test_serve_without_ray_address_runs_its_own_ray_beside_a_running_cluster(cluster, tmp_path):
    """RAY_ADDRESS unset means an embedded Ray (README, `--ray-address` help). Ray's own `ray.init()` with no
    address joins the last cluster `ray start` made on this host instead (the address it wrote to
    $RAY_TMPDIR/ray/ray_current_cluster), so a `vidforge serve` started beside one deployed itself into that
    cluster (seen when two test runs shared a machine). Here the file names this module's cluster. Nothing renders
    on it, and it is stopped once it has said which Ray it is on (the line it prints when `ray.init` returns)."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="vfr-", dir="/tmp"))  # short: Ray's unix sockets go under it
    alone = ServerProcess(tmp_path / "data", env={"RAY_TMPDIR": str(ray_tmp)})

    def ray_named() -> list[str]:
        assert alone.proc is not None and alone.proc.poll() is None, alone.log_path.read_text()[-4000:]
        return [line for line in alone.log_path.read_text().splitlines() if "vidforge: Ray cluster at" in line]

    try:
        (ray_tmp / "ray").mkdir()
        (ray_tmp / "ray" / "ray_current_cluster").write_text(cluster.address)
        alone.start(wait=False)
        joined = wait_until(ray_named, START_TIMEOUT_S, interval=0.1, message="the server to say which Ray it is on")
    finally:
        alone.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert len(joined) == 1 and not joined[0].endswith(cluster.address), joined


def test_worker_node_lost_mid_render_completes_on_the_other(cluster, server, s3_server, media, tmp_path):
    source, reference = media
    seen = set(segment_attempts(cluster, set()))
    started = time.monotonic()
    wire, task_id = render(server, source)

    def encoding_on_worker2() -> bool:
        return ("worker2", "RUNNING") in [run for runs in segment_attempts(cluster, seen).values() for run in runs]

    wait_until(encoding_on_worker2, IN_FLIGHT_TIMEOUT_S, interval=0.2, message="a segment running on worker2")
    cluster.nodes["worker2"].kill()
    killed_at = time.monotonic()
    status = wire.task("tasks/get", task_id)["result"]
    assert status["status"] == "working", status  # the render was in flight when its node went

    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is False, done
    completed_at = time.monotonic()
    runs = finished_segments(cluster, seen)
    # A segment was on the lost node, and every segment finished on the node that is left: that one ran again
    # there (its attempt on worker2 was cut short, or its output was lost with the node's object store).
    assert any(node == "worker2" for attempts in runs.values() for node, _ in attempts), runs
    assert all(("worker1", "FINISHED") in attempts for attempts in runs.values()), runs
    check_output(server, s3_server, task_id, reference, tmp_path)
    print(
        f"\nnode loss: worker2 killed {killed_at - started:.1f} s into the render, which completed on worker1 "
        f"{completed_at - killed_at:.1f} s later; segment attempts {list(runs.values())}"
    )


def test_serve_config_deploys_vidforge_on_the_cluster(cluster, server, s3_server, tmp_path):
    """deploy/serve.yaml as `serve deploy` takes it, only its site values changed (port, paths, bucket, tokens
    file, and a namespace of its own, so that its builder starts a registry and a supervisor of its own): the
    application comes up on the cluster, behind its tokens, and renders."""
    server.stop()  # one Serve per cluster: the one `vidforge serve` started goes first
    config = yaml.safe_load((REPO / "deploy" / "serve.yaml").read_text())
    port = free_port()
    config["applications"][0]["args"]["port"] = port
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tok-deployed": "ops"}))
    config["applications"][0]["runtime_env"]["env_vars"].update(
        VIDFORGE_STORAGE_URL=f"s3://{s3_server.bucket}/deployed",
        VIDFORGE_STATE_DIR=str(tmp_path / "state"),
        VIDFORGE_DATA_DIR=str(tmp_path / "data"),
        VIDFORGE_TOKENS_FILE=str(tokens),
        VIDFORGE_NAMESPACE="deployed",
    )
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(config))
    deployed = subprocess.run(
        [
            str(Path(sys.executable).with_name("serve")),
            "deploy",
            str(tmp_path / "serve.yaml"),
            "-a",
            f"http://127.0.0.1:{cluster.dashboard_port}",
        ],
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert deployed.returncode == 0, deployed.stderr[-4000:]

    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer tok-deployed"}

    def healthy() -> bool:
        try:
            return httpx.get(f"{base}/healthz", headers=auth, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(healthy, 180, interval=1.0, message="the deployed application to answer")
    assert httpx.get(f"{base}/healthz", timeout=5).status_code == 401  # 0.0.0.0: credentials required

    clip = make_clip(str(tmp_path / "short.mp4"), seconds=3.0)
    wire = Wire(f"{base}/mcp", token="tok-deployed", tasks=True)
    source = upload(SimpleNamespace(base=base), clip, token="tok-deployed")
    args = {"source_asset_uri": source, "output_format": "mp4", "resolution": "720p"}
    task_id = wire.tool("vidforge_render_video", args)["taskId"]
    done = poll_task(wire, task_id, lambda t: t["status"] in TERMINAL)
    assert done["status"] == "completed" and done["result"]["isError"] is False, done
    assert f"deployed/artifacts/{task_id}/final.mp4" in s3_server.object_keys("deployed/")
