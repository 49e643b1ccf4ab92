"""A server does not outlive its Ray (issue 32 item 5, issue 33 item 3): with its raylet or its GCS killed,
`vidforge serve` says in one line what died and exits 3, its port free; until it has, `/healthz` says 503. A
TaskRegistry that does not answer makes `tasks/get` answer the contract's temporary error, not hang. A port that
another program holds when the ingress binds is the same one line as the check before Ray starts. No test renders:
every start here, the in-process one too, is without the warm pool (as a ServerProcess starts by default)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path

import httpx
import pytest
import ray
from ray import serve

from serve_app._config import Config
from serve_app.launch._port_check import PortUnavailable
from serve_app.launch._startup import check_settings, start_backend
from serve_app.launch.deployment import deploy
from tests.cluster import LocalCluster
from tests.harness import ServerProcess, Wire, session_processes, wait_until

pytestmark = pytest.mark.ray

EXIT_DEADLINE_S = 60  # the server checks its Ray twice a second; generous on a loaded machine
STOP_LINE = "vidforge serve exits with status 3: start it again"


def system_process(server: ServerProcess, executable: str) -> int:
    """The pid of the server's Ray process that runs `executable` (`raylet`, `gcs_server`)."""
    (pid,) = [pid for pid, cmdline in server.processes() if cmdline.split(" ", 1)[0].endswith(f"/{executable}")]
    return pid


def actor_process(server: ServerProcess, actor_class: str) -> int:
    (pid,) = [pid for pid, title in server.processes() if title.startswith(f"ray::{actor_class}")]
    return pid


def port_free(port: int) -> bool:
    """Nothing listens on the port: a listener could be opened there (past the closed connections' TIME_WAIT)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
        except OSError:
            return False
        return True


def healthz(server: ServerProcess) -> int | None:
    try:
        return httpx.get(f"{server.base}/healthz", timeout=10).status_code
    except httpx.HTTPError:
        return None


def assert_stopped_saying(server: ServerProcess, what: str) -> None:
    """Exit 3, the one line naming `what`, and the port free: each waited for."""
    code = wait_until(
        lambda: server.proc.poll() is not None and server.proc.returncode,
        EXIT_DEADLINE_S,
        message="vidforge serve to exit",
    )
    assert code == 3, server.log_path.read_text()[-4000:]
    lines = [line for line in server.log_path.read_text().splitlines() if STOP_LINE in line]
    assert len(lines) == 1, lines
    assert what in lines[0], lines[0]
    wait_until(lambda: port_free(server.port), EXIT_DEADLINE_S, message=f"port {server.port} to be free")


def test_a_killed_raylet_ends_the_server_with_one_line_and_frees_its_port(tmp_path):
    # A registry read would wait this long: the poll below is answered at once, or not by this bound.
    server = ServerProcess(tmp_path / "data", env={"VIDFORGE_REGISTRY_TIMEOUT_S": "600"}).start()
    try:
        assert healthz(server) == 200
        raylet = system_process(server, "raylet")
        # Held still while the raylet dies, so what its replica answers meanwhile can be seen.
        os.kill(server.proc.pid, signal.SIGSTOP)
        os.kill(raylet, signal.SIGKILL)
        wait_until(lambda: healthz(server) == 503, EXIT_DEADLINE_S, message="/healthz to turn unhealthy")
        wire = Wire(server.url, tasks=True)  # meanwhile a poll is answered, with the temporary error
        try:
            data = wire.task("tasks/get", "task_0123456789abcdef")["error"]["data"]
        finally:
            wire.close()
        assert data["machine_code"] == "internal_error" and data["temporary"] is True, data
        assert "raylet" in data["details"]["reason"], data
        os.kill(server.proc.pid, signal.SIGCONT)
        assert_stopped_saying(server, f"Ray's raylet (pid {raylet}) of this node died (killed by SIGKILL)")
    finally:
        server.kill()


def test_a_hung_registry_is_a_temporary_error_and_a_killed_gcs_ends_the_server(tmp_path):
    server = ServerProcess(tmp_path / "data", env={"VIDFORGE_REGISTRY_TIMEOUT_S": "2"}).start()
    wire = Wire(server.url, tasks=True)
    try:
        registry = actor_process(server, "TaskRegistry")
        os.kill(registry, signal.SIGSTOP)  # alive to Ray, answering nothing: a hung actor or a lost node
        try:
            body = wire.task("tasks/get", "task_0123456789abcdef")
        finally:
            os.kill(registry, signal.SIGCONT)
        data = body["error"]["data"]
        assert data["machine_code"] == "internal_error" and data["temporary"] is True, body
        assert "VIDFORGE_REGISTRY_TIMEOUT_S" in data["details"]["reason"], body

        gcs = system_process(server, "gcs_server")
        os.kill(gcs, signal.SIGKILL)
        assert_stopped_saying(server, f"Ray's GCS server (pid {gcs}) died (killed by SIGKILL)")
    finally:
        wire.close()
        server.kill()


def test_a_joined_clusters_raylet_dying_ends_the_server_saying_it_had_joined(tmp_path):
    """`--ray-address`: the cluster is not the server's, but the raylet it joined through dying ends it the same way
    (a supervisor starts it again, and it joins again)."""
    # Short, outside pytest's tmp tree: Ray puts unix sockets under each node's temp dir (108-byte path limit).
    root = Path(tempfile.mkdtemp(prefix="vff-", dir="/tmp"))
    cluster = LocalCluster(root)
    server = ServerProcess(tmp_path / "data", env={**cluster.env, "RAY_ADDRESS": cluster.address})
    try:
        cluster.start(worker_cpus=())
        server.start()
        (raylet,) = [
            pid
            for pid, cmdline in session_processes(cluster.nodes["head"].proc.pid)
            if cmdline.split(" ", 1)[0].endswith("/raylet")
        ]
        os.kill(raylet, signal.SIGKILL)
        assert_stopped_saying(server, f"Ray's raylet (pid {raylet}) of this node of the Ray cluster at ")
    finally:
        server.kill()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_a_port_taken_once_ray_has_started_is_the_same_one_line(tmp_path, monkeypatch):
    """The check before Ray starts cannot see a port taken after it: the ingress replicas' bind fails, and
    `deploy` answers it as that check does."""
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("VIDFORGE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("VIDFORGE_WARM_POOL", "false")  # nothing renders here (as a ServerProcess starts)
    # One replica that fails to bind is the failure (Serve tries three before it calls the deployment failed, each
    # binding the same taken port): the Serve controller, started by the Ray started below, reads this.
    monkeypatch.setenv("RAY_SERVE_MAX_PER_REPLICA_RETRY_COUNT", "1")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        config = Config.from_env(port=port)
        ray.init(namespace=config.namespace, include_dashboard=False, log_to_driver=False)
        try:
            start_backend(config, check_settings(config))
            with pytest.raises(PortUnavailable) as refused:
                deploy(config)
        finally:
            serve.shutdown()
            ray.shutdown()
    assert str(refused.value).startswith(f"127.0.0.1:{port} is already in use by another program")
    assert "make serve PORT=N" in str(refused.value)
